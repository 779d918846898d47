package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func openFS(t *testing.T, store objstore.Store, epoch uint64, cache string) *Owner {
	t.Helper()
	f, err := Open(context.Background(), Config{Store: store, CacheDir: cache, Epoch: epoch, Lease: 200 * time.Millisecond, DeleteGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

func openDB(t *testing.T, f *Owner, cache string) *engine.DB {
	t.Helper()
	o := engine.DefaultOptions()
	o.FileSystem = f
	d, err := engine.Open(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Test 1 of the issue: write, close, reopen from a new empty cache: every
// write present (synced ones and, after a clean close, the rest), on
// file:// and on MinIO.
func TestWriteCloseReopenFromEmptyCache(t *testing.T) {
	storetest.ForEachBackend(t, testWriteCloseReopen)
}

func testWriteCloseReopen(t *testing.T, loc storetest.Location) {
	store, err := objstore.Open(loc.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cache1 := filepath.Join(t.TempDir(), "cache1")
	f1 := openFS(t, store, 1, cache1)
	d := openDB(t, f1, cache1)
	for i := 0; i < 2000; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(fmt.Sprintf("v%d", i)), i%10 == 0); err != nil {
			t.Fatal(err)
		}
		if i == 1000 {
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.Close()
	f1.Stop()

	cache2 := filepath.Join(t.TempDir(), "cache2")
	f2 := openFS(t, store, 2, cache2)
	d2 := openDB(t, f2, cache2)
	defer d2.Close()
	for i := 0; i < 2000; i++ {
		v, ok, err := d2.Get([]byte(fmt.Sprintf("k%05d", i)))
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%05d after reopen: %q %v %v", i, v, ok, err)
		}
	}
}

// Deleted files stay in the store for the grace period, then go; seals
// stay longer (deleting one reopens its slot to a stale owner).
func TestDeferredDelete(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Epoch 1 writes a WAL and closes; epoch 2 seals it, recovers, flushes
	// and deletes it: its data segments must outlive the grace period and
	// its seal must outlive the deletion.
	c1 := filepath.Join(t.TempDir(), "c1")
	f1 := openFS(t, store, 1, c1)
	d1 := openDB(t, f1, c1)
	for i := 0; i < 100; i++ {
		d1.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v"), true)
	}
	d1.Close()
	f1.Stop()

	c2 := filepath.Join(t.TempDir(), "c2")
	// When the WAL was trashed and when its segments were deleted, from
	// the deleting owner's requests: the grace is checked exactly, however
	// late a loaded machine runs the trash loop.
	const grace = 300 * time.Millisecond
	var trashedAt, deletedAt atomic.Int64
	observe := func(r Request) {
		if r.FileType != "wal" || r.Err != nil {
			return
		}
		now := time.Now().UnixNano()
		switch {
		case r.Op == "put" && r.Activity == "trash":
			trashedAt.CompareAndSwap(0, now-int64(r.Duration))
		case r.Op == "delete":
			deletedAt.CompareAndSwap(0, now)
		}
	}
	f2, err := Open(ctx, Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 50 * time.Millisecond, DeleteGrace: grace, Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()
	d2 := openDB(t, f2, c2)
	defer d2.Close()
	if err := d2.Flush(); err != nil {
		t.Fatal(err)
	}
	count := func(prefix string) (data, seals int) {
		store.List(ctx, prefix, func(o objstore.ObjectInfo) error {
			if o.Size == 0 {
				seals++
			} else {
				data++
			}
			return nil
		})
		return
	}
	var trashed []string
	store.List(ctx, layout.TrashPrefix, func(o objstore.ObjectInfo) error { trashed = append(trashed, o.Key); return nil })
	if len(trashed) == 0 {
		t.Fatal("recovery deleted nothing; the test needs an obsolete WAL")
	}
	var walPrefix string
	for _, k := range trashed {
		if name, e, _ := layout.ParseTrashKey(k); layout.KindOf(name) == layout.KindLog && e == 1 && FileType(name) == "wal" {
			walPrefix = layout.LogVersionPrefix(name, e)
		}
	}
	// A condition, not a time: the grace is 300ms, but a loaded 2-core
	// machine may run the trash loop late.
	deadline := time.Now().Add(time.Minute)
	for {
		// The seal stays while the writer could still acknowledge a write
		// (3×AckFresh, 30s here: TestZombieWriteAfterSealDeleted...).
		data, seals := count(walPrefix)
		if data == 0 {
			if seals != 1 {
				t.Fatalf("the seal of %s was deleted with its data", walPrefix)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d data segments a minute after a 300ms grace", walPrefix, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if kept := time.Duration(deletedAt.Load() - trashedAt.Load()); trashedAt.Load() == 0 || kept < grace {
		t.Fatalf("the WAL was deleted %v after it was trashed, before its %v grace", kept, grace)
	}
	for i := 0; i < 100; i++ {
		if _, ok, _ := d2.Get([]byte(fmt.Sprintf("k%03d", i))); !ok {
			t.Fatalf("k%03d lost", i)
		}
	}
}

func dirTableBytes(t *testing.T, dir string) (n int64) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if layout.KindOf(e.Name()) == layout.KindTable {
			fi, err := e.Info()
			if err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// With a cache budget far below the data, tables are read from the store
// range by range and the cache directory stays within the budget.
func TestBoundedCacheReadsRemotely(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(t.TempDir(), "c1")
	f1 := openFS(t, store, 1, c1)
	d1 := openDB(t, f1, c1)
	val := strings.Repeat("x", 1000)
	for i := 0; i < 4000; i++ {
		d1.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(fmt.Sprintf("%s%d", val, i)), false)
		if i%1000 == 999 {
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d1.Close()
	f1.Stop()

	const budget = 64 << 10
	var gets, getBytes atomic.Int64
	c2 := filepath.Join(t.TempDir(), "c2")
	f2, err := Open(ctx, Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 50 * time.Millisecond, CacheBytes: budget,
		Observe: func(r Request) {
			if r.Op == "get" && r.FileType == "sst" {
				gets.Add(1)
				getBytes.Add(r.Bytes)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()
	d2 := openDB(t, f2, c2)
	defer d2.Close()
	f2.Serving()
	for i := 0; i < 4000; i += 7 {
		v, ok, err := d2.Get([]byte(fmt.Sprintf("k%05d", i)))
		if err != nil || !ok || string(v) != fmt.Sprintf("%s%d", val, i) {
			t.Fatalf("k%05d: %v %v", i, ok, err)
		}
	}
	if n := dirTableBytes(t, c2); n > budget {
		t.Fatalf("cache holds %d bytes of tables, budget %d", n, budget)
	}
	if gets.Load() == 0 {
		t.Fatal("no ranged reads from the store")
	}
	s, _ := d2.Stats()
	t.Logf("%d tables (%d bytes) read with %d ranged GETs (%d bytes); cache %d bytes", s.SSTFiles, s.LiveSSTBytes, gets.Load(), getBytes.Load(), dirTableBytes(t, c2))

	// A compaction reads every table from the store and writes a new one
	// that the budget cannot hold: it is uploaded and evicted.
	if err := d2.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4000; i += 13 {
		if v, ok, _ := d2.Get([]byte(fmt.Sprintf("k%05d", i))); !ok || string(v) != fmt.Sprintf("%s%d", val, i) {
			t.Fatalf("k%05d after compaction: %v", i, ok)
		}
	}
	if n := dirTableBytes(t, c2); n > budget {
		t.Fatalf("after compaction the cache holds %d bytes of tables, budget %d", n, budget)
	}
}

// A stale owner that appends to its WAL as fast as it can while a new
// owner lists and seals it: the seal still lands, the writer stops at it,
// and every segment the writer got acknowledged is in the sealed log.
func TestSealRacesFastWriter(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		put := func(key string, data []byte) error {
			_, err := store.Put(ctx, key, strings.NewReader(string(data)), int64(len(data)), objstore.PutOptions{IfNoneMatch: true})
			return err
		}
		// Epoch 1 owns a database whose WAL already has many segments.
		if err := put(layout.EpochKey(1), []byte(`{"epoch":1}`)); err != nil {
			t.Fatal(err)
		}
		const wal = "000009.log"
		seq := uint64(0)
		for ; seq < 300; seq++ {
			if err := put(layout.SegmentKey(wal, 1, seq+1), []byte(fmt.Sprint(seq+1))); err != nil {
				t.Fatal(err)
			}
		}
		var acked atomic.Uint64
		acked.Store(seq)
		stopped := make(chan error, 1)
		go func() {
			for s := seq + 1; ; s++ {
				if err := put(layout.SegmentKey(wal, 1, s), []byte(fmt.Sprint(s))); err != nil {
					stopped <- err
					return
				}
				acked.Store(s)
			}
		}()
		// The takeover starts while the writer is appending.
		for running := time.Now().Add(time.Minute); acked.Load() < seq+10; {
			if time.Now().After(running) {
				t.Fatal("the stale writer appended fewer than 10 segments in a minute")
			}
			time.Sleep(time.Millisecond)
		}
		f, err := Open(ctx, Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "c"), Epoch: 2, Lease: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
		select {
		case err := <-stopped:
			if !errors.Is(err, objstore.ErrPreconditionFailed) {
				t.Fatalf("writer stopped with %v, want a failed condition", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stale writer is still appending 10s after the new owner opened")
		}
		st := f.files[wal]
		if st == nil {
			t.Fatal("the WAL is not in the new owner's listing")
		}
		if got := uint64(len(st.segments)); got != acked.Load() {
			t.Fatalf("sealed log has %d segments, the writer had %d acknowledged", got, acked.Load())
		}
		t.Logf("%s: writer got %d segments acknowledged (300 before the takeover); all in the sealed log", loc.Name, acked.Load())
	})
}
