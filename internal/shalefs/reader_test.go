package shalefs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func openSecondary(t *testing.T, r *Reader, cache string) *engine.DB {
	t.Helper()
	o := engine.DefaultOptions()
	o.FileSystem = r
	o.SecondaryDir = filepath.Join(filepath.Dir(cache), filepath.Base(cache)+"-secondary")
	d, err := engine.Open(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// catchUp refreshes the reader and the secondary until every key of want
// reads back with its value (or the deadline passes).
func catchUp(t *testing.T, r *Reader, d *engine.DB, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := r.Refresh(context.Background())
		if err == nil {
			err = d.TryCatchUp()
		}
		if err == nil {
			r.CaughtUp()
		}
		missing := ""
		if err == nil {
			for k, v := range want {
				got, ok, gerr := d.Get([]byte(k))
				if gerr != nil || !ok || string(got) != v {
					missing = fmt.Sprintf("%s: %q %v %v", k, got, ok, gerr)
					break
				}
			}
		}
		if err == nil && missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary did not catch up in a minute: %v %s", err, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A secondary on a reader follows a primary's synced writes, flushes,
// compactions and folded logs, from an empty cache directory.
func TestReaderFollowsPrimary(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		c1 := filepath.Join(t.TempDir(), "primary")
		f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer f1.Stop()
		d1 := openDB(t, f1, c1)
		defer d1.Close()
		want := map[string]string{}
		put := func(from, to int) {
			for i := from; i < to; i++ {
				k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
				if err := d1.Put([]byte(k), []byte(v), true); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
		}
		put(0, 100)
		if err := d1.Flush(); err != nil {
			t.Fatal(err)
		}
		put(100, 150)

		c2 := filepath.Join(t.TempDir(), "secondary")
		r, err := OpenReader(ctx, Config{Store: store, CacheDir: c2})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		d2 := openSecondary(t, r, c2)
		catchUp(t, r, d2, want)

		// More synced writes (folded as they go), a flush and a compaction.
		put(150, 300)
		catchUp(t, r, d2, want)
		if err := d1.Flush(); err != nil {
			t.Fatal(err)
		}
		put(300, 320)
		if err := d1.Compact(nil, nil); err != nil {
			t.Fatal(err)
		}
		put(320, 340)
		catchUp(t, r, d2, want)

		if err := r.Create("000999.sst"); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("create on a reader: %v, want ErrReadOnly", err)
		}
	})
}

// The primary compacts away tables a secondary still reads (from the store:
// its cache holds none): while the secondary's lease names them they stay,
// and reads keep working; once the secondary caught up and its lease moved
// on, they go. A secondary that cannot renew its lease refuses reads.
func TestReaderLeaseProtectsFiles(t *testing.T) {
	storetest.ForEachBackend(t, testReaderLeaseProtectsFiles)
}

func testReaderLeaseProtectsFiles(t *testing.T, loc storetest.Location) {
	store, err := objstore.Open(loc.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var trashPasses atomic.Int64
	c1 := filepath.Join(t.TempDir(), "primary")
	f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, DeleteGrace: 50 * time.Millisecond,
		Observe: func(r Request) {
			if r.Op == "list" && r.Activity == "trash" {
				trashPasses.Add(1) // a pass with due files, consulting the leases
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Stop()
	d1 := openDB(t, f1, c1)
	defer d1.Close()
	want := map[string]string{}
	for i := 0; i < 300; i++ {
		// Overlapping tables, so the compaction rewrites them.
		k, v := fmt.Sprintf("k%04d", i%100), fmt.Sprintf("v%d", i)
		d1.Put([]byte(k), []byte(v), false)
		want[k] = v
		if i%100 == 99 {
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := map[string]bool{}
	for _, n := range f1.List() {
		if layout.KindOf(n) == layout.KindTable {
			old[n] = true
		}
	}

	c2 := filepath.Join(t.TempDir(), "secondary")
	r, err := OpenReader(ctx, Config{Store: store, CacheDir: c2, CacheBytes: 1, ReaderTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	d2 := openSecondary(t, r, c2)
	catchUp(t, r, d2, want)

	// The primary compacts: the old tables are trashed and due at once.
	if err := d1.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range f1.List() {
		if old[n] {
			t.Fatalf("the compaction kept %s; the test needs it rewritten", n)
		}
	}
	// Wait for three trash passes that began after the tables were due.
	due := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(due) {
		time.Sleep(10 * time.Millisecond)
	}
	for start := trashPasses.Load(); trashPasses.Load() < start+3; {
		time.Sleep(10 * time.Millisecond)
		if err := r.publishLease(ctx); err != nil { // the reader stays alive
			t.Fatal(err)
		}
	}
	for n := range old {
		if _, err := store.Stat(ctx, layout.ObjectKey(n, 1)); err != nil {
			t.Fatalf("%s was deleted while the secondary's lease named it: %v", n, err)
		}
	}
	for k, v := range want {
		got, ok, err := d2.Get([]byte(k))
		if err != nil || !ok || string(got) != v {
			t.Fatalf("%s on the secondary, not caught up: %q %v %v", k, got, ok, err)
		}
	}

	// The secondary catches up and lets go of the old tables.
	catchUp(t, r, d2, want)
	deadline := time.Now().Add(time.Minute)
	for {
		left := 0
		for n := range old {
			if _, err := store.Stat(ctx, layout.ObjectKey(n, 1)); err == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d compacted tables still in the store a minute after the secondary moved on", left)
		}
		r.Refresh(ctx) // renews the lease, which drops retired tables after the TTL
		time.Sleep(20 * time.Millisecond)
	}

	// Without renewals, the lease runs out and the secondary stops reading.
	for r.readerLeaseFresh() {
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.ReadAllowed(); err == nil {
		t.Fatal("a secondary whose lease expired allowed a read")
	}
	catchUp(t, r, d2, want)
	if err := r.ReadAllowed(); err != nil {
		t.Fatalf("after catching up again: %v", err)
	}

	// The primary compacts again and the secondary neither catches up nor
	// renews (paused): once its lease expires the old tables go, and it
	// refuses reads instead of reading deleted files.
	for i := 0; i < 200; i++ {
		k, v := fmt.Sprintf("k%04d", i%100), fmt.Sprintf("w%d", i)
		d1.Put([]byte(k), []byte(v), false)
		want[k] = v
		if i%100 == 99 {
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	catchUp(t, r, d2, want)
	old = map[string]bool{}
	for _, n := range f1.List() {
		if layout.KindOf(n) == layout.KindTable {
			old[n] = true
		}
	}
	if err := d1.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for left := len(old); left > 0; {
		left = 0
		for n := range old {
			if _, err := store.Stat(ctx, layout.ObjectKey(n, 1)); err == nil {
				left++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d compacted tables still in the store a minute after the secondary stopped renewing its lease", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.ReadAllowed(); err == nil {
		t.Fatal("the primary deleted the tables of a paused secondary, which still allows reads")
	}
	// A refresh renews the lease, but RocksDB's version may still use the
	// deleted tables until it catches up: still no reads.
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.ReadAllowed(); err == nil {
		t.Fatal("a secondary whose lease lapsed allows reads before RocksDB caught up")
	}
	catchUp(t, r, d2, want)
	if err := r.ReadAllowed(); err != nil {
		t.Fatalf("after the paused secondary caught up: %v", err)
	}
}
