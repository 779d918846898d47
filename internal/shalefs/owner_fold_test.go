package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// versionObjects counts one log version's objects: data segments, folds
// and seals.
func versionObjects(t *testing.T, store objstore.Store, name string, epoch uint64) (data, folds, seals int) {
	t.Helper()
	err := store.List(context.Background(), layout.LogVersionPrefix(name, epoch), func(o objstore.ObjectInfo) error {
		_, _, first, last, ok := layout.ParseSegmentKey(o.Key)
		switch {
		case !ok:
		case last > first:
			folds++
		case o.Size == 0:
			seals++
		default:
			data++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return
}

// A WAL of many synced writes is folded while it is written, so its
// object count stays bounded; an owner that stops without closing its log
// cleanly is taken over, and the new owner reads every synced write back
// from the folds and the remaining segments.
func TestFoldedWALRecoversAtTakeover(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const fold, writes = 16, 600
		c1 := filepath.Join(t.TempDir(), "c1")
		f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: fold})
		if err != nil {
			t.Fatal(err)
		}
		d1 := openDB(t, f1, c1)
		for i := 0; i < writes; i++ {
			if err := d1.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("v%d", i)), true); err != nil {
				t.Fatal(err)
			}
		}
		var wal string
		for _, n := range f1.List() {
			if FileType(n) == "wal" {
				wal = n
			}
		}
		// Stop waits for the folds in flight; RocksDB is left open, as if
		// the process had died (nothing closes the log).
		f1.Stop()
		data, folds, seals := versionObjects(t, store, wal, 1)
		t.Logf("%s: %d writes stored as %d segments and %d folds", wal, writes, data, folds)
		// seg 1 stays, fewer than a fold's worth (plus what arrived while
		// the last fold ran) are left unfolded.
		if folds == 0 || data > 2*fold+1 || data+folds > writes/(fold/2) {
			t.Fatalf("%s holds %d segments and %d folds after %d synced writes with folds of %d segments", wal, data, folds, writes, fold)
		}
		if seals != 0 {
			t.Fatalf("%d seals before any takeover", seals)
		}

		c2 := filepath.Join(t.TempDir(), "c2")
		f2 := openFS(t, store, 2, c2)
		// Stopped after d2 closes (defers run last first): its loops
		// (folds, deletes of kept segments) must not outlive the test's
		// directory.
		defer f2.Stop()
		d2 := openDB(t, f2, c2)
		defer d2.Close()
		for i := 0; i < writes; i++ {
			v, ok, err := d2.Get([]byte(fmt.Sprintf("k%04d", i)))
			if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
				t.Fatalf("k%04d after the takeover: %q %v %v", i, v, ok, err)
			}
		}
	})
}

// A new owner lists a stale owner's log, then the stale owner folds it and
// deletes the folded segments before the new owner reads them: the read
// lists the version again and gets the same bytes. If the log really lost
// data, the read fails; it never returns a shorter log.
func TestReadLogAfterConcurrentFold(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		put := func(key string, data []byte) {
			t.Helper()
			if _, err := store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
		}
		put(layout.EpochKey(1), []byte(`{"epoch":1}`))
		const wal, n = "000007.log", 40
		var all []byte
		for s := uint64(1); s <= n; s++ {
			b := []byte(fmt.Sprintf("segment %d;", s))
			put(layout.SegmentKey(wal, 1, s), b)
			all = append(all, b...)
		}
		c := filepath.Join(t.TempDir(), "c")
		if err := os.MkdirAll(c, 0o755); err != nil {
			t.Fatal(err)
		}
		f := openFS(t, store, 2, c)
		if got := len(f.files[wal].segments); got != n {
			t.Fatalf("the new owner listed %d segments, want %d", got, n)
		}
		// The stale owner folds 1..n and deletes 2..n.
		put(layout.FoldKey(wal, 1, 1, n), all)
		var keys []string
		for s := uint64(2); s <= n; s++ {
			keys = append(keys, layout.SegmentKey(wal, 1, s))
		}
		if err := store.DeleteMany(ctx, keys); err != nil {
			t.Fatal(err)
		}
		if err := f.Fetch(wal, "open"); err != nil {
			t.Fatalf("fetch after a concurrent fold: %v", err)
		}
		got, err := os.ReadFile(filepath.Join(c, wal))
		if err != nil || !bytes.Equal(got, all) {
			t.Fatalf("log read after a concurrent fold: %q %v, want %q", got, err, all)
		}
		// Now the fold is lost too: the read must fail, not come back short.
		if err := store.Delete(ctx, layout.FoldKey(wal, 1, 1, n)); err != nil {
			t.Fatal(err)
		}
		if err := f.Fetch(wal, "open"); err == nil {
			t.Fatal("a log whose segments and fold are gone was read without an error")
		}
	})
}

// A takeover finds the tables in one listing of the store's top level: its
// listings grow with the number of log names (each flush starts a WAL),
// not with the number of tables.
func TestTakeoverListingsDoNotGrowWithTables(t *testing.T) {
	lists := func(tables int) int64 {
		store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		c1 := filepath.Join(t.TempDir(), "c1")
		f1 := openFS(t, store, 1, c1)
		o := openDB(t, f1, c1)
		for i := 0; i < tables; i++ {
			o.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v"), false)
			if err := o.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		o.Close()
		f1.Stop()
		objects := 0 // tables in the store, live or trashed (compactions ran)
		store.ListDir(context.Background(), "", func(o objstore.ObjectInfo) error {
			if name, _, ok := layout.ParseObjectKey(o.Key); ok && layout.KindOf(name) == layout.KindTable {
				objects++
			}
			return nil
		})
		if objects < tables {
			t.Fatalf("%d table objects in the store, want at least %d", objects, tables)
		}
		var n atomic.Int64
		f2, err := Open(context.Background(), Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "c2"), Epoch: 2, Lease: 50 * time.Millisecond,
			Observe: func(r Request) {
				if r.Op == "list" {
					n.Add(1)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		f2.Stop()
		logNames := 0
		store.ListDir(context.Background(), "", func(o objstore.ObjectInfo) error {
			if name, dir := strings.CutSuffix(o.Key, "/"); dir && layout.KindOf(name) == layout.KindLog {
				logNames++
			}
			return nil
		})
		return n.Load() - int64(logNames)
	}
	few, many := lists(2), lists(3)
	if few != many {
		t.Fatalf("a takeover listed the store %d times (beyond one per log name) with 2 tables and %d times with 3", few, many)
	}
	if most := lists(20); most != few {
		t.Fatalf("a takeover listed the store %d times (beyond one per log name) with 2 tables and %d times with 20", few, most)
	}
}

// The trash loop deletes a folded log's folds as well as its segments.
func TestDeferredDeleteOfFoldedLog(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(t.TempDir(), "c1")
	f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: 8})
	if err != nil {
		t.Fatal(err)
	}
	d1 := openDB(t, f1, c1)
	for i := 0; i < 100; i++ {
		d1.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v"), true)
	}
	d1.Close()
	f1.Stop()
	var wal string
	store.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
		if n := strings.TrimSuffix(o.Key, "/"); FileType(n) == "wal" {
			wal = n
		}
		return nil
	})
	if _, folds, _ := versionObjects(t, store, wal, 1); folds == 0 {
		t.Fatalf("%s was not folded", wal)
	}

	c2 := filepath.Join(t.TempDir(), "c2")
	f2, err := Open(ctx, Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 50 * time.Millisecond, DeleteGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()
	d2 := openDB(t, f2, c2)
	defer d2.Close()
	if err := d2.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		data, folds, seals := versionObjects(t, store, wal, 1)
		if data == 0 && folds == 0 {
			if seals != 1 {
				t.Fatalf("%s has %d seals after its deletion, want 1", wal, seals)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d segments and %d folds a minute after a 100ms grace", wal, data, folds)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 100; i++ {
		if _, ok, _ := d2.Get([]byte(fmt.Sprintf("k%03d", i))); !ok {
			t.Fatalf("k%03d lost", i)
		}
	}
}

// Issue 22, item 0: a new owner's seal, sent from a listing taken before a
// fold, lands in a slot the fold's clean-up freed. The old owner had used
// that slot and goes on appending (and acknowledging) after it. The seal
// must not end the log there: the new owner seals after everything the
// writer stored, and its database holds every acknowledged write. (Before
// the fix the log ended at the seal and only segment 1 was recovered.)
func TestSealInSlotAFoldFreed(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const wal, fold = "000024.log", 4
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, FoldSegments: fold})
		if err := a.Create(wal); err != nil {
			t.Fatal(err)
		}
		w := &logWriter{t: t, f: a, name: wal}
		write := w.write
		for i := 1; i < fold; i++ { // slots 1..3
			if err := write(i); err != nil {
				t.Fatal(err)
			}
		}

		// B lists slots 1..3; its seal for slot 4 is held before it is sent.
		held, release := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		hooked := &storetest.Hooked{Store: store, BeforePut: func(key string, size int64, _ objstore.PutOptions) error {
			if size == 0 && strings.HasPrefix(key, layout.LogVersionPrefix(wal, 1)) && once.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
			return nil
		}}
		type opened struct {
			f   *Owner
			err error
		}
		bc := make(chan opened, 1)
		go func() {
			f, err := Open(ctx, Config{Store: hooked, Epoch: 2, CacheDir: filepath.Join(t.TempDir(), "b"), Lease: 100 * time.Millisecond, DeleteGrace: time.Hour})
			bc <- opened{f, err}
		}()
		<-held

		// A, blind to B, writes slot 4: the fold of 1..4 runs and frees
		// slots 2..4. Then it goes on (slots 5, 6), acknowledged.
		if err := write(fold); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, ferr := store.Stat(ctx, layout.FoldKey(wal, 1, 1, fold))
			_, serr := store.Stat(ctx, layout.SegmentKey(wal, 1, fold))
			if ferr == nil && errors.Is(serr, objstore.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the fold of slots 1..%d did not land and free slot %d: %v, %v", fold, fold, ferr, serr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i := fold + 1; i <= fold+2; i++ {
			if err := write(i); err != nil {
				t.Fatal(err)
			}
		}

		close(release) // B's seal lands in slot 4, freed by the fold
		b := <-bc
		if b.err != nil {
			t.Fatal(b.err)
		}
		t.Cleanup(b.f.Stop)
		if _, err := store.Stat(ctx, layout.SegmentKey(wal, 1, fold)); err != nil {
			t.Fatalf("the test needs B's seal in slot %d: %v", fold, err)
		}
		if err := b.f.Fetch(wal, "open"); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.f.cfg.CacheDir, wal))
		if err != nil || !bytes.Equal(got, w.acked) {
			t.Fatalf("B recovered %q (%v); A acknowledged %q", got, err, w.acked)
		}

		// A's next append meets B's real seal: fenced, nothing stored.
		err = write(fold + 3)
		if err == nil || !definitelyNotStored(err) {
			t.Fatalf("A's write after B's takeover: %v; want fenced", err)
		}
		// A reader, and a third owner, read the same log.
		c := openWith(t, Config{Store: store, Epoch: 3})
		if err := c.Fetch(wal, "open"); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(c.cfg.CacheDir, wal)); !bytes.Equal(got, w.acked) {
			t.Fatalf("C recovered %q; A acknowledged %q", got, w.acked)
		}
	})
}

// The gap below a seal (found by the log-protocol model,
// docs/rfcs/0001-log-protocol-model.md): B's stride loses slots 2, 3 and
// 5 to A's data and wins slot 9; A's fold of 1..6 frees slots 2..6 just
// before; B's fill then wins slot 6 (void: the fold covers it) and took
// that for the end of the log, leaving slots 7 and 8 empty below the seal
// in slot 9. A, blind, stored slot 7 and acknowledged it; B never had it.
// Now B fills the slots between the log's end and its seal.
func TestFillStoppedByVoidSealLeavesNoGap(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const wal, fold = "000026.log", 6
		// A's fold is held before it is stored, so that B's stride meets
		// A's segments, and released before B's seal in slot 9.
		foldHeld, foldRelease := make(chan struct{}), make(chan struct{})
		aStore := &storetest.Hooked{Store: store, BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
			if key == layout.FoldKey(wal, 1, 1, fold) {
				close(foldHeld)
				<-foldRelease
			}
			return nil
		}}
		a := openWith(t, Config{Store: aStore, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: time.Hour, FoldSegments: fold})
		if err := a.Create(wal); err != nil {
			t.Fatal(err)
		}
		w := &logWriter{t: t, f: a, name: wal}
		write := w.write
		if err := write(1); err != nil {
			t.Fatal(err)
		}

		// B lists slot 1; its seals for slots 2 and 9 are held.
		held2, release2 := make(chan struct{}), make(chan struct{})
		held9, release9 := make(chan struct{}), make(chan struct{})
		bStore := &storetest.Hooked{Store: store, BeforePut: func(key string, size int64, _ objstore.PutOptions) error {
			switch {
			case size != 0:
			case key == layout.SegmentKey(wal, 1, 2):
				close(held2)
				<-release2
			case key == layout.SegmentKey(wal, 1, 9):
				close(held9)
				<-release9
			}
			return nil
		}}
		type opened struct {
			f   *Owner
			err error
		}
		bc := make(chan opened, 1)
		go func() {
			f, err := Open(ctx, Config{Store: bStore, Epoch: 2, CacheDir: filepath.Join(t.TempDir(), "b"), Lease: 100 * time.Millisecond, DeleteGrace: time.Hour})
			bc <- opened{f, err}
		}()
		<-held2
		for i := 2; i <= fold; i++ { // acknowledged; the fold of 1..6 starts and is held
			if err := write(i); err != nil {
				t.Fatal(err)
			}
		}
		<-foldHeld
		close(release2) // B loses slots 2, 3 and 5 to A's segments; its seal for 9 is held
		<-held9
		close(foldRelease) // the fold lands and frees slots 2..6
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := store.Stat(ctx, layout.SegmentKey(wal, 1, fold)); errors.Is(err, objstore.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the fold did not free slot %d", fold)
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(release9) // B wins 9, then slot 6, freed by the fold
		b := <-bc
		if b.err != nil {
			t.Fatal(b.err)
		}
		t.Cleanup(b.f.Stop)
		if _, err := store.Stat(ctx, layout.SegmentKey(wal, 1, fold)); err != nil {
			t.Fatalf("the test needs B's seal in slot %d: %v", fold, err)
		}

		// A's next write goes to slot 7: stored and acknowledged only if
		// nothing sealed it.
		werr := write(fold + 1)
		if err := b.f.Fetch(wal, "open"); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b.f.cfg.CacheDir, wal))
		if err != nil || !bytes.Equal(got, w.acked) {
			t.Fatalf("B recovered %q (%v); A acknowledged %q (its write to slot %d: %v)", got, err, w.acked, fold+1, werr)
		}
		if werr == nil || !definitelyNotStored(werr) {
			t.Fatalf("A's write after B's takeover: %v; want fenced", werr)
		}
	})
}

// logWriter appends "write i;" records to a log of f and syncs each, as a
// primary's synced write does, keeping the bytes that were acknowledged.
type logWriter struct {
	t     *testing.T
	f     *Owner
	name  string
	acked []byte
}

func (w *logWriter) write(i int) error {
	b := []byte(fmt.Sprintf("write %d;", i))
	err := w.f.Sync(w.name, appendLocal(w.t, w.f, w.name, b), "wal")
	if err == nil {
		w.acked = append(w.acked, b...)
	}
	return err
}

// With the archive on (Config.KeepFolded), a fold's segments stay until
// the archive has them (RFC 0005 step 2a), within the bounds: at most
// KeepFoldedSegments per log (the oldest kept fold's segments go first)
// and KeepFoldedFor. A takeover over kept segments reads every write, and
// no write waits for the archive.
func TestKeepFoldedSegmentsForTheArchive(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const fold, keep, writes = 16, 48, 200
		var archived atomic.Uint64 // the archive has slots up to this
		asked := map[bool]int{}
		var askedMu = make(chan struct{}, 1)
		c1 := filepath.Join(t.TempDir(), "c1")
		f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: fold,
			KeepFoldedSegments: keep, KeepFoldedFor: time.Hour,
			KeepFolded: func(name string, epoch, through uint64) bool {
				askedMu <- struct{}{}
				asked[epoch == 1]++
				<-askedMu
				return through > archived.Load()
			}})
		if err != nil {
			t.Fatal(err)
		}
		d1 := openDB(t, f1, c1)
		for i := 0; i < writes; i++ {
			if err := d1.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("v%d", i)), true); err != nil {
				t.Fatal(err)
			}
		}
		var wal string
		for _, n := range f1.List() {
			if FileType(n) == "wal" {
				wal = n
			}
		}
		waitCond(t, "the folds of the WAL", func() bool { _, folds, _ := versionObjects(t, store, wal, 1); return folds >= writes/fold-1 })
		data, folds, _ := versionObjects(t, store, wal, 1)
		t.Logf("%s with the archive behind: %d segments and %d folds after %d synced writes (folds of %d, at most %d kept)", wal, data, folds, writes, fold, keep)
		// Kept: more than the unfolded tail; bounded: at most keep more.
		if data <= 2*fold+1 || data > keep+2*fold+1 {
			t.Fatalf("%s holds %d segments with the archive behind: want between %d and %d", wal, data, 2*fold+2, keep+2*fold+1)
		}
		// The archive catches up: the kept segments go.
		archived.Store(1 << 62)
		waitCond(t, "the kept segments deleted", func() bool {
			data, _, _ := versionObjects(t, store, wal, 1)
			return f1.KeptFolds() == 0 && data <= 2*fold+1
		})
		if asked[false] > 0 || asked[true] == 0 {
			t.Fatalf("KeepFolded asked about epoch 1 %d times, about others %d times", asked[true], asked[false])
		}

		// A new owner, whose archive never catches up: its segments go
		// after KeepFoldedFor; it reads every write over the kept ones.
		f1.Stop()
		c2 := filepath.Join(t.TempDir(), "c2")
		f2, err := Open(ctx, Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 100 * time.Millisecond, FoldSegments: fold,
			KeepFoldedFor: 2 * time.Second, KeepFolded: func(string, uint64, uint64) bool { return true }})
		if err != nil {
			t.Fatal(err)
		}
		// Stopped after d2 closes (defers run last first): its loops
		// (folds, deletes of kept segments) must not outlive the test's
		// directory.
		defer f2.Stop()
		d2 := openDB(t, f2, c2)
		defer d2.Close()
		for i := 0; i < writes; i++ {
			v, ok, err := d2.Get([]byte(fmt.Sprintf("k%04d", i)))
			if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
				t.Fatalf("k%04d after the takeover: %q %v %v", i, v, ok, err)
			}
		}
		for i := writes; i < writes+2*fold; i++ {
			if err := d2.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("v%d", i)), true); err != nil {
				t.Fatal(err)
			}
		}
		waitCond(t, "a fold of the new owner kept", func() bool { return f2.KeptFolds() > 0 })
		waitCond(t, "the kept segments deleted after KeepFoldedFor", func() bool { return f2.KeptFolds() == 0 })
	})
}

// waitCond polls cond until it holds (up to a minute).
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
