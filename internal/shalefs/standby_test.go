package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// RFC 0012, "Release lands, old process keeps running": an owner that
// released the database still has RocksDB open and its loops running (a
// zombie). Its successor waits no lease (the release says so), so the
// zombie must serve no read from the moment it began releasing; and a
// write it makes all the same is stopped by the successor's seal.
func TestZombieAfterReleaseServesNothing(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		cache1 := filepath.Join(t.TempDir(), "cache1")
		// A lease of an hour: without the release the successor would wait
		// an hour, and the zombie's lease stays fresh throughout the test.
		f1, err := Open(ctx, Config{Store: store, CacheDir: cache1, Epoch: 1, Lease: time.Hour, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, DeleteGrace: time.Hour})
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
		if err := f1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cache2 := filepath.Join(t.TempDir(), "cache2")
		f2 := openFS(t, store, 2, cache2)
		if w := f2.LeaseWaited(); w != 0 {
			t.Fatalf("the successor waited %s: it should find the release and wait no lease", w)
		}
		// The zombie's lease is fresh, yet it serves no read.
		if err := f1.ReadAllowed(); !errors.Is(err, ErrReleased) {
			t.Fatalf("read on the released owner: %v, want ErrReleased", err)
		}
		if err := f1.Create("000777.sst"); !errors.Is(err, ErrReleased) {
			t.Fatalf("new file on the released owner: %v, want ErrReleased", err)
		}
		// Break the owner's own protection: the store's still stops a
		// write (the successor sealed the zombie's WAL).
		f1.released.Store(false)
		if err := d1.Put([]byte("zombie"), []byte("v"), true); err == nil {
			t.Fatal("the zombie acknowledged a synced write after its successor opened")
		}
		d2 := openDB(t, f2, cache2)
		defer d2.Close()
		for i := 0; i < 100; i++ {
			if _, ok, err := d2.Get([]byte(fmt.Sprintf("k%03d", i))); err != nil || !ok {
				t.Fatalf("k%03d, acknowledged before the release, missing in the successor: %v %v", i, ok, err)
			}
		}
		if _, ok, _ := d2.Get([]byte("zombie")); ok {
			t.Fatal("the zombie's refused write is visible in the successor")
		}
	})
}

// Warm fills a standby's cache with the live tables while the owner still
// serves; the takeover on that directory keeps the copies that still
// match the store and drops one that does not.
func TestWarmFillsCache(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		cache1 := filepath.Join(t.TempDir(), "cache1")
		f1 := openFS(t, store, 1, cache1)
		d1 := openDB(t, f1, cache1)
		for round := 0; round < 3; round++ {
			for i := 0; i < 200; i++ {
				if err := d1.Put([]byte(fmt.Sprintf("k%d-%03d", round, i)), []byte(strings.Repeat("v", 100)), false); err != nil {
					t.Fatal(err)
				}
			}
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		var tables []string
		listAll := func() []objstore.ObjectInfo {
			var out []objstore.ObjectInfo
			if err := store.List(ctx, "", func(o objstore.ObjectInfo) error { out = append(out, o); return nil }); err != nil {
				t.Fatal(err)
			}
			return out
		}
		objs := listAll()
		for _, o := range objs {
			if name, _, ok := layout.ParseObjectKey(o.Key); ok && layout.KindOf(name) == layout.KindTable {
				tables = append(tables, name)
			}
		}
		if len(tables) < 3 {
			t.Fatalf("want at least 3 tables in the store, found %v", tables)
		}

		cache2 := filepath.Join(t.TempDir(), "cache2")
		rep, err := Warm(ctx, Config{Store: store, CacheDir: cache2})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("warm: %+v", rep)
		if rep.Tables != len(tables) {
			t.Fatalf("warm downloaded %d tables, want %d (%v)", rep.Tables, len(tables), tables)
		}
		for _, n := range tables {
			if _, err := os.Stat(filepath.Join(cache2, n)); err != nil {
				t.Fatalf("table %s not in the warmed cache: %v", n, err)
			}
		}
		// Nothing was written by the standby.
		before := map[string]bool{}
		for _, o := range objs {
			before[o.Key] = true
		}
		for _, o := range listAll() {
			// The owner still runs: its WAL may grow; tables it did not write.
			if name, _, ok := layout.ParseObjectKey(o.Key); ok && layout.KindOf(name) == layout.KindTable && !before[o.Key] {
				t.Errorf("a table appeared during warm: %s", o.Key)
			}
		}
		// A copy that no longer matches the store must not be used.
		bad := filepath.Join(cache2, tables[0])
		if err := os.WriteFile(bad, []byte("not the table"), 0o644); err != nil {
			t.Fatal(err)
		}
		d1.Close()
		f1.Stop()
		if err := f1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		f2 := openFS(t, store, 2, cache2)
		if w := f2.LeaseWaited(); w != 0 {
			t.Fatalf("the successor waited %s after a release", w)
		}
		for _, n := range tables[1:] {
			if _, err := os.Stat(filepath.Join(cache2, n)); err != nil {
				t.Errorf("the takeover dropped the warmed table %s: %v", n, err)
			}
		}
		d2 := openDB(t, f2, cache2)
		defer d2.Close()
		for round := 0; round < 3; round++ {
			for i := 0; i < 200; i++ {
				if v, ok, err := d2.Get([]byte(fmt.Sprintf("k%d-%03d", round, i))); err != nil || !ok || len(v) != 100 {
					t.Fatalf("k%d-%03d after the takeover on a warmed cache: %d bytes, %v %v", round, i, len(v), ok, err)
				}
			}
		}
	})
}

// RFC 0003 step 4a: B claims while A still serves (a Pod deletion starts
// the successor before the old primary has stopped); A's release, landing
// during B's wait, ends it. Without the release B waits the lease out.
func TestReleaseDuringWaitEndsIt(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const lease = time.Minute
		a, err := Open(ctx, Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "a"), Epoch: 1, Lease: lease, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, DeleteGrace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Stop()
		type opened struct {
			f   *Owner
			err error
		}
		done := make(chan opened, 1)
		go func() {
			f, err := Open(ctx, Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "b"), Epoch: 2, Lease: lease, DeleteGrace: time.Hour})
			done <- opened{f, err}
		}()
		// B is waiting once its claim is raised in the owner record.
		waitFor(t, func() bool {
			b, ok := getObject(t, store, layout.OwnerKey)
			r, err := layout.ParseOwnerEpochRecord([]byte(b))
			return ok && err == nil && r.Epoch == 2
		})
		select {
		case o := <-done:
			t.Fatalf("B opened before A released, over A's unexpired lease: %v", o.err)
		default:
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		o := <-done
		if o.err != nil {
			t.Fatal(o.err)
		}
		defer o.f.Stop()
		if w := o.f.LeaseWaited(); w >= lease {
			t.Fatalf("B waited %s, the whole lease, though A released during the wait", w)
		}
		if err := a.ReadAllowed(); !errors.Is(err, ErrReleased) {
			t.Fatalf("read on A after its release: %v, want ErrReleased", err)
		}
	})
}

// waitFor polls cond until it holds (the test's deadline bounds it).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		time.Sleep(20 * time.Millisecond)
	}
}
