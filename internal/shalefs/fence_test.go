package shalefs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TestFenceStopsABlindOwner (RFC 0014): Fence while an owner serves that
// confirms nothing in the background. Once Fence returns, the owner
// acknowledges no synced write (the store's seal refuses it) and serves no
// read (its lease ran out during the fence's wait); the fence's epoch is
// released, so the next owner waits no lease and has every write
// acknowledged before, and not the refused one.
func TestFenceStopsABlindOwner(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		cache1 := filepath.Join(t.TempDir(), "cache1")
		f1, err := Open(ctx, Config{Store: store, CacheDir: cache1, Epoch: 1, Lease: 500 * time.Millisecond,
			ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: time.Hour, DeleteGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer f1.Stop()
		d1 := openDB(t, f1, cache1)
		defer d1.Close()
		for i := 0; i < 100; i++ {
			if err := d1.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v"), true); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := Fence(ctx, Config{Store: store, Existing: true, Lease: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Epoch != 2 || rep.LeaseWaited == 0 {
			t.Errorf("fence: %+v, want epoch 2 after a lease wait", rep)
		}
		if _, err := store.Stat(ctx, layout.ReleasedKey(2)); err != nil {
			t.Errorf("the fence's release: %v", err)
		}
		if err := d1.Put([]byte("zombie"), []byte("v"), true); err == nil {
			t.Fatal("the fenced owner acknowledged a synced write")
		}
		if err := f1.ReadAllowed(); err == nil {
			t.Fatal("the fenced owner may still serve reads after the fence returned")
		} else if !errors.As(err, new(*ErrFenced)) {
			t.Logf("read refused: %v", err)
		}
		cache3 := filepath.Join(t.TempDir(), "cache3")
		f3 := openFS(t, store, 3, cache3)
		if w := f3.LeaseWaited(); w != 0 {
			t.Errorf("the next owner waited %s after a fence that released", w)
		}
		d3 := openDB(t, f3, cache3)
		defer d3.Close()
		for i := 0; i < 100; i++ {
			if _, ok, err := d3.Get([]byte(fmt.Sprintf("k%03d", i))); err != nil || !ok {
				t.Fatalf("k%03d, acknowledged before the fence, missing: %v %v", i, ok, err)
			}
		}
		if _, ok, _ := d3.Get([]byte("zombie")); ok {
			t.Fatal("the write refused after the fence is visible")
		}
	})
}
