package shalefs

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

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
