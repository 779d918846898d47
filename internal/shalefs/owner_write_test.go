package shalefs

import (
	"context"
	"errors"
	"fmt"
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
