package shalefs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// An idle owner (RocksDB open, no reads, no writes) costs one GET of the
// owner record per IdleConfirmEvery and nothing else, counted on the
// store's side; a read after the quiet period confirms on the spot with
// one GET.
func TestIdleOwnerRequests(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		raw, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		store := storetest.NewCounting(raw)
		const lease, idle = 200 * time.Millisecond, 500 * time.Millisecond
		c := filepath.Join(t.TempDir(), "c")
		f, err := Open(context.Background(), Config{Store: store, CacheDir: c, Epoch: 1, Lease: lease, IdleConfirmEvery: idle, DeleteGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
		d := openDB(t, f, c)
		defer d.Close()
		f.Serving()
		for i := 0; i < 10; i++ {
			if err := d.Put([]byte(fmt.Sprint(i)), []byte("v"), true); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}

		// The idle window: measured, not slept through blindly — it ends
		// when the window has passed.
		const window = 3 * time.Second
		from := store.Total()
		start := time.Now()
		for time.Since(start) < window {
			time.Sleep(50 * time.Millisecond)
		}
		reqs := store.Requests(from)
		allowed := int(window/idle) + 1
		for _, r := range reqs {
			if r != "get "+layout.OwnerKey {
				t.Errorf("idle owner sent %q", r)
			}
		}
		if len(reqs) > allowed {
			t.Errorf("idle owner sent %d requests in %v, at most %d allowed (one GET per %v)", len(reqs), window, allowed, idle)
		}
		t.Logf("%s: idle for %v: %d requests (%s)", loc.Name, window, len(reqs), strings.Join(reqs, ", "))

		// A read after the quiet period: the lease expired, one GET renews it.
		for f.leaseFresh() {
			time.Sleep(10 * time.Millisecond)
		}
		from = store.Total()
		if err := f.ReadAllowed(); err != nil {
			t.Fatal(err)
		}
		// One GET of its own (the idle loop's may coincide with it).
		reqs = store.Requests(from)
		if len(reqs) == 0 || len(reqs) > 2 {
			t.Fatalf("a read after the lease expired sent %v, want one GET of %s", reqs, layout.OwnerKey)
		}
		for _, r := range reqs {
			if r != "get "+layout.OwnerKey {
				t.Fatalf("a read after the lease expired sent %v, want one GET of %s", reqs, layout.OwnerKey)
			}
		}
	})
}

// A zombie that was idle (no reads, no writes, no background
// confirmation) for longer than its lease serves no read after the new
// owner's first write.
func TestIdleZombieServesNoRead(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		a := openWith(t, Config{Store: store, Epoch: 1, Lease: 100 * time.Millisecond, IdleConfirmEvery: time.Hour})
		for a.leaseFresh() {
			time.Sleep(10 * time.Millisecond)
		}
		b := openWith(t, Config{Store: store, Epoch: 2, Lease: 100 * time.Millisecond})
		const wal = "000005.log"
		if err := b.Create(wal); err != nil {
			t.Fatal(err)
		}
		appendLocal(t, b, wal, []byte("first write"))
		if err := b.Sync(wal, 11, "wal"); err != nil {
			t.Fatal(err)
		}
		if err := a.ReadAllowed(); err == nil || a.FenceError() == nil {
			t.Fatalf("the idle zombie allowed a read after the new owner's first write (err %v)", err)
		}
	})
}
