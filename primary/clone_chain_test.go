package primary

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// A clone of a clone (docs/rfcs/0010-checkpoints-and-clones.md, step 19).

// chainValue is what the grandchild C2 reads of key i: the middle clone
// C1 overwrote the first third before its checkpoint, the rest is P's.
func chainValue(i, n int) string {
	if i < n/3 {
		return value("c1", i)
	}
	return value("p1", i)
}

// P, its clone C1 (writes a third of the keys, then checkpoint cc), and
// C2, a clone of cc: C2 reads P's keys through C1's origin and C1's own;
// writes on any of the three are invisible to the other two; C2 pins its
// tables in C1 and in P (RFC 0010 step 19), and both trash loops keep
// them through rewrites and compactions; C1 detaching (its full
// compaction releases its own pin in P) leaves C2 whole; deleting C2
// (its reclaim releases the pins its _shale/origin names) lets both
// trash loops remove what only C2 held.
func TestCloneOfClone(t *testing.T) {
	storetest.ForEachBackend(t, testCloneOfClone)
}

func testCloneOfClone(t *testing.T, be storetest.Location) {
	const n = 3000
	ctx := context.Background()
	pdb, c1db, c2db := be.NewURL(t), be.NewURL(t), be.NewURL(t)
	pstore, c1store, c2store := openStore(t, pdb), openStore(t, c1db), openStore(t, c2db)
	// P's checkpoint has two tables: keys below n/2 and the rest.
	p, err := startOwnerWith(t, pdb, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	for _, half := range [][2]int{{0, n / 2}, {n / 2, n}} {
		writeRange(t, p.kv, half[0], half[1], func(i int) string { return value("p1", i) })
		flush(t, p.kv)
	}
	if _, err := p.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	c1, err := startClone(t, c1db, pdb, "c1", "clone-1")
	if err != nil {
		t.Fatal(err)
	}
	// C1 rewrites a third of the keys and compacts the lower half, so
	// its checkpoint names one of P's tables, not both: the other is
	// C1's alone to pin.
	writeKeys(t, c1.kv, n/3, func(i int) string { return value("c1", i) })
	flush(t, c1.kv)
	if _, err := c1.kv.Compact(ctx, &kvv1.CompactRequest{End: []byte(fmt.Sprintf("k%05d", n/2-1))}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "cc"}); err != nil {
		t.Fatal(err)
	}
	c2, err := startClone(t, c2db, c1db, "cc", "clone-2")
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, c2.kv)
	if len(got) != n {
		t.Fatalf("the clone of the clone holds %d keys, want %d", len(got), n)
	}
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("k%05d", i); got[k] != chainValue(i, n) {
			t.Fatalf("the clone of the clone: %s = %.20q, want %.20q", k, got[k], chainValue(i, n))
		}
	}
	if rep := c2.srv.Cloned(); rep.Tables == 0 || rep.CopiedObjects != 1 || len(rep.Pins) != 2 {
		t.Fatalf("bootstrap report %+v: want shared tables, one object copied (the MANIFEST), a pin in C1 and one in P", rep)
	}

	// Its pins: in C1 (C1's own tables) and in P (P's tables, read
	// through C1's origin record), each naming only that directory's.
	pinP, ok := readPin(t, pstore, "clone-2")
	if !ok {
		t.Fatal("no pin of the clone of the clone in P")
	}
	pinC1, ok := readPin(t, c1store, "clone-2")
	if !ok {
		t.Fatal("no pin of the clone of the clone in C1")
	}
	if len(pinP.Files) == 0 || len(pinC1.Files) == 0 {
		t.Fatalf("pins name %d tables in P and %d in C1: want P's and C1's tables both", len(pinP.Files), len(pinC1.Files))
	}
	for _, f := range pinP.Files {
		if f.Epoch == 0 {
			t.Fatalf("the pin in P names %s of epoch 0: P's own tables have its epochs", f.Name)
		}
	}
	for _, f := range pinC1.Files {
		if f.Epoch == 0 {
			t.Fatalf("the pin in C1 names %s of epoch 0, an origin table of C1: it must pin it in P", f.Name)
		}
	}
	pinC1inP, ok := readPin(t, pstore, "clone-1")
	if !ok {
		t.Fatal("no pin of C1 in P")
	}

	// Writes on any side are invisible to the other two.
	writeKeys(t, p.kv, n, func(i int) string { return value("p2", i) })
	writeKeys(t, c1.kv, n, func(i int) string { return value("c1b", i) })
	writeKeys(t, c2.kv, n/2, func(i int) string { return value("c2", i) })
	checkKeys(t, "P", p.kv, n, "p2")
	checkKeys(t, "C1", c1.kv, n, "c1b")
	got = scanAll(t, c2.kv)
	for i := 0; i < n; i++ {
		want := chainValue(i, n)
		if i < n/2 {
			want = value("c2", i)
		}
		if k := fmt.Sprintf("k%05d", i); got[k] != want {
			t.Fatalf("the clone of the clone after writes everywhere: %s = %.20q, want %.20q", k, got[k], want)
		}
	}

	// P and C1 drop their checkpoints and compact everything: their trash
	// loops keep what C2's pins name. C1's compaction leaves no origin
	// table live, so C1 detaches: its own pin in P goes.
	for _, o := range []struct {
		who string
		kv  kvv1.KVClient
		ck  string
	}{{"P", p.kv, "c1"}, {"C1", c1.kv, "cc"}} {
		if _, err := o.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: o.ck}); err != nil {
			t.Fatalf("%s: %v", o.who, err)
		}
		if _, err := o.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatalf("%s: %v", o.who, err)
		}
		if _, err := o.kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
			t.Fatalf("%s: %v", o.who, err)
		}
	}
	waitUntil(t, "C1 detached (released its pin in P)", 60*time.Second, func() bool {
		_, ok := readPin(t, pstore, "clone-1")
		return !ok
	})
	if _, err := c1store.Stat(ctx, layout.DetachedKey); err != nil {
		t.Fatalf("%s in C1: %v", layout.DetachedKey, err)
	}
	waitTrashKeeps(t, pstore, "P's trash loop removed every table C2's pin does not name", versions(pinP))
	waitTrashKeeps(t, c1store, "C1's trash loop removed every table C2's pin does not name", versions(pinC1))
	nTrashed := 0
	for who, s := range map[string]struct {
		store objstore.Store
		pin   layout.PinRecord
	}{"P": {pstore, pinP}, "C1": {c1store, pinC1}} {
		present, trashed := pinnedState(t, s.store, s.pin)
		for k, ok := range present {
			if !ok {
				t.Fatalf("%s of %s, pinned by the clone of the clone, was deleted", k, who)
			}
			if trashed[k] {
				nTrashed++
			}
		}
	}
	if nTrashed == 0 {
		t.Fatal("no pinned table was trashed: the test did not rewrite them")
	}
	// What only C1 pinned in P is gone (C2's pin alone holds the rest).
	present, _ := pinnedState(t, pstore, pinC1inP)
	onlyC1 := 0
	for _, f := range pinC1inP.Files {
		if !versions(pinP)[f] {
			onlyC1++
			if present[layout.ObjectKey(f.Name, f.Epoch)] {
				t.Fatalf("%s of P, pinned only by the detached C1, is still there", layout.ObjectKey(f.Name, f.Epoch))
			}
		}
	}
	t.Logf("C2 pins %d tables in P and %d in C1; C1 pinned %d in P, %d of them only C1's", len(pinP.Files), len(pinC1.Files), len(pinC1inP.Files), onlyC1)
	if onlyC1 == 0 {
		t.Fatal("C1 pinned no table of P that C2 does not: the test did not compact one away in C1 before its checkpoint")
	}

	// C2, taken over with an empty cache, reads every key from the
	// trashed tables of P and C1; P and C1 are whole.
	c2.stop()
	c2b, err := startOwnerWith(t, c2db, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	got = scanAll(t, c2b.kv)
	for i := 0; i < n; i++ {
		want := chainValue(i, n)
		if i < n/2 {
			want = value("c2", i)
		}
		if k := fmt.Sprintf("k%05d", i); got[k] != want {
			t.Fatalf("the clone of the clone after its origins compacted: %s = %.20q, want %.20q", k, got[k], want)
		}
	}
	c2b.stop()

	// C2 deleted: its reclaim releases the pins its _shale/origin names
	// (operator/reclaim_dir.go, releaseClonePins), in C1 and in P; both
	// trash loops then remove what only C2 held.
	orec, err := layout.ParseOriginRecord(getObject(t, c2store, layout.OriginKey))
	if err != nil {
		t.Fatal(err)
	}
	released := map[string]bool{}
	for _, o := range orec.Origins {
		if err := openStore(t, o.URL).Delete(ctx, o.Pin); err != nil {
			t.Fatal(err)
		}
		released[o.URL] = true
	}
	if !released[pdb] || !released[c1db] || len(released) != 2 {
		t.Fatalf("C2's %s names origins %v: want C1 (%s) and P (%s)", layout.OriginKey, released, c1db, pdb)
	}
	for who, s := range map[string]struct {
		store objstore.Store
		pin   layout.PinRecord
	}{"P": {pstore, pinP}, "C1": {c1store, pinC1}} {
		waitUntil(t, who+"'s trash loop removed the tables only C2 held", 60*time.Second, func() bool {
			present, trashed := pinnedState(t, s.store, s.pin)
			for k, tr := range trashed {
				if tr && present[k] {
					return false
				}
			}
			return true
		})
	}
	checkKeys(t, "P", p.kv, n, "p2")
	checkKeys(t, "C1", c1.kv, n, "c1b")
}

// The checkpoint a clone bootstraps from expires, or is deleted, at each
// step of shalefs.Bootstrap (RFC 0010, "GC racing a pin" and "Checkpoint
// expiry racing a clone open"): a store hook holds the bootstrap before
// its pin in the parent is written, after it is stored (before the
// verify), or after the verify (before CURRENT), while the checkpoint
// goes and the parent's trash loop runs. The parent rewrites and compacts
// every key meanwhile, so only the checkpoint (then the pin) keeps its
// tables. Before the verify the clone must refuse ("deleted or expired")
// and leave no pin; after it, it serves every key and the parent's trash
// keeps every pinned table past the expiry.
func TestExpiryRacesCloneOpen(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		for _, step := range []string{"before-pins", "between-pins-and-verify", "after-verify"} {
			for _, how := range []string{"expired", "deleted"} {
				t.Run(step+"/"+how, func(t *testing.T) { testExpiryRacesCloneOpen(t, be, step, how) })
			}
		}
	})
}

func testExpiryRacesCloneOpen(t *testing.T, be storetest.Location, step, how string) {
	const n = 2000
	// Long enough for the bootstrap to reach its hold, short for the test.
	const ttl = 4 * time.Second
	ctx := context.Background()
	pdb, cdb := be.NewURL(t), be.NewURL(t)
	pstore := openStore(t, pdb)
	p, err := startOwnerWith(t, pdb, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, p.kv, n, func(i int) string { return value("p1", i) })
	req := &kvv1.CheckpointRequest{Name: "c1"}
	if how == "expired" {
		req.Expires = timestamppb.New(time.Now().Add(ttl))
	}
	cr, err := p.kv.Checkpoint(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	rec := checkpointRecord(t, pstore, cr.Checkpoint.Id)
	named := map[layout.VersionRef]bool{}
	for _, f := range rec.Files {
		if layout.KindOf(f.Name) == layout.KindTable {
			named[layout.VersionRef{Name: f.Name, Epoch: f.Epoch}] = true
		}
	}
	rewrite := func(gen string) {
		t.Helper()
		writeKeys(t, p.kv, n, func(i int) string { return value(gen, i) })
		flushAndCompact(t, p.kv)
	}
	h := newHold()
	h.armed.Store(true)
	pin := layout.PinKey("clone-x")
	praw, craw := openStore(t, pdb), openStore(t, cdb)
	parent := &storetest.Hooked{Store: praw,
		BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
			if step == "before-pins" && key == pin {
				h.stop()
			}
			return nil
		},
		AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
			if step == "between-pins-and-verify" && key == pin && err == nil {
				h.stop()
			}
			return err
		}}
	clone := &storetest.Hooked{Store: craw,
		BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
			if step == "after-verify" && key == layout.CurrentKey {
				h.stop()
			}
			return nil
		}}
	done := make(chan error, 1)
	go func() {
		_, err := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: clone, Parent: pdb, Checkpoint: "c1", CloneID: "clone-x",
			OpenOrigin: func(url string) (objstore.Store, error) {
				if url == pdb {
					return parent, nil
				}
				return objstore.Open(url)
			}})
		done <- err
	}()
	select {
	case <-h.reached:
	case err := <-done:
		t.Fatalf("the bootstrap ended before %s: %v", step, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting until the bootstrap is %s", step)
	}

	// While it is held (so the expiry cannot overtake the bootstrap's
	// read of the catalog, whatever the load), the parent rewrites and
	// compacts every key: only the checkpoint keeps its tables.
	rewrite("p2")
	waitUntil(t, "the parent trashed every table of the checkpoint", 30*time.Second, func() bool {
		present, trashed := tableState(t, pstore, rec)
		for k, tr := range trashed {
			// Trashed, or deleted already (expired meanwhile).
			if named[layout.VersionRef{Name: layout.FileOfKey(k), Epoch: epochOfKey(t, k)}] && present[k] && !tr {
				return false
			}
		}
		return true
	})

	// The checkpoint goes, and the parent's trash loop runs on.
	if how == "deleted" {
		if _, err := p.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: "c1"}); err != nil {
			t.Fatal(err)
		}
	} else {
		waitUntil(t, "the parent's trash loop expired c1", 30*time.Second, func() bool {
			_, ok := storeListNames(t, pdb)["c1"]
			return !ok
		})
	}
	if step == "before-pins" {
		// Nothing holds its tables: the loop deletes them.
		waitUntil(t, "the parent's trash loop deleted the checkpoint's tables", 30*time.Second, func() bool {
			present, _ := tableState(t, pstore, rec)
			for k, ok := range present {
				if ok && named[layout.VersionRef{Name: layout.FileOfKey(k), Epoch: epochOfKey(t, k)}] {
					return false
				}
			}
			return true
		})
	} else {
		// The pin holds them: a later rewrite's trashed tables go, the
		// pinned ones stay.
		rewrite("p3")
		waitTrashKeeps(t, pstore, "the parent's trash loop deleted every trashed table the pin does not name", named)
		present, _ := tableState(t, pstore, rec)
		for k, ok := range present {
			if !ok && named[layout.VersionRef{Name: layout.FileOfKey(k), Epoch: epochOfKey(t, k)}] {
				t.Fatalf("%s, pinned by the clone, was deleted after the checkpoint %s", k, how)
			}
		}
	}
	close(h.release)
	err = <-done

	if step != "after-verify" {
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), "deleted or expired") {
			t.Fatalf("the bootstrap, its checkpoint %s %s: %v; want a refusal saying it was deleted or expired", how, step, err)
		}
		if _, err := pstore.Stat(ctx, pin); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("the refused bootstrap left its pin %s in the parent (%v)", pin, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("the bootstrap, its checkpoint %s after the verify: %v", how, err)
	}
	c, err := startClone(t, cdb, pdb, "c1", "clone-x")
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the clone", c.kv, n, "p1")
	present, _ := tableState(t, pstore, rec)
	for k, ok := range present {
		if !ok && named[layout.VersionRef{Name: layout.FileOfKey(k), Epoch: epochOfKey(t, k)}] {
			t.Fatalf("%s, pinned by the clone, was deleted", k)
		}
	}
	checkKeys(t, "the parent", p.kv, n, "p3")
}
