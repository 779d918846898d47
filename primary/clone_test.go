package primary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Clones (docs/rfcs/0010-checkpoints-and-clones.md, steps 16-18).

// The test: a clone serves its checkpoint with under 1 % of the
// parent's bytes copied (the clone's whole directory, once serving, is
// under 1 % of the parent's), and writes on either side are invisible to
// the other.
func TestCloneIsolatedAndCheap(t *testing.T) {
	storetest.ForEachBackend(t, testCloneIsolatedAndCheap)
}

func testCloneIsolatedAndCheap(t *testing.T, be storetest.Location) {
	const n = 10000
	pdb, cdb := be.NewURL(t), be.NewURL(t)
	p, _ := parentWithCheckpoint(t, pdb, n)
	parentBytes, _ := storeBytes(t, openStore(t, pdb))

	c, err := startClone(t, cdb, pdb, "c1", "clone-1")
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the clone", c.kv, n, "p1")
	rep := c.srv.Cloned()
	cloneBytes, keys := storeBytes(t, openStore(t, cdb))
	t.Logf("parent %d bytes; clone shares %d tables (%d bytes), copied %d bytes (%d through this process); the clone's directory holds %d bytes",
		parentBytes, rep.Tables, rep.TableBytes, rep.CopiedBytes, rep.Streamed, cloneBytes)
	if rep.Tables == 0 || rep.CopiedObjects != 1 {
		t.Fatalf("bootstrap report %+v: want shared tables and one object copied (the MANIFEST)", rep)
	}
	if rep.CopiedBytes*100 >= rep.TableBytes || cloneBytes*100 >= parentBytes {
		t.Fatalf("the clone copied %d bytes and holds %d: not under 1%% of the parent's %d (%d in the tables it shares)", rep.CopiedBytes, cloneBytes, parentBytes, rep.TableBytes)
	}
	if be.MinIO != nil && rep.Streamed != 0 {
		t.Fatalf("%d bytes streamed: the MANIFEST copy within one endpoint is server-side", rep.Streamed)
	}
	for k := range keys {
		if name, _, ok := layout.ParseObjectKey(k); ok && layout.KindOf(name) == layout.KindTable {
			t.Fatalf("the clone's directory holds a table (%s) before writing anything", k)
		}
	}

	// Writes on either side are invisible to the other.
	writeKeys(t, p.kv, n, func(i int) string { return value("p2", i) })
	writeKeys(t, c.kv, n/2, func(i int) string { return value("c2", i) })
	if _, err := c.kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the parent", p.kv, n, "p2")
	got := scanAll(t, c.kv)
	for i := 0; i < n; i++ {
		want := value("p1", i)
		if i < n/2 {
			want = value("c2", i)
		}
		if k := fmt.Sprintf("k%05d", i); got[k] != want {
			t.Fatalf("the clone: %s = %.20q, want %.20q", k, got[k], want)
		}
	}
	// A takeover of the clone (epoch 2) reads its origin tables again.
	c.stop()
	c2, err := startOwnerWith(t, cdb, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, c2.kv); len(got) != n || got["k09999"] != value("p1", 9999) || got["k00000"] != value("c2", 0) {
		t.Fatalf("the clone after a takeover: %d keys", len(got))
	}
}

// The parent's trash loop keeps a pinned table after the checkpoint that
// named it is deleted and RocksDB compacted it away; once the pin is
// gone, the next pass removes it.
func TestPinRacesCheckpointDelete(t *testing.T) {
	storetest.ForEachBackend(t, testPinRacesCheckpointDelete)
}

func testPinRacesCheckpointDelete(t *testing.T, be storetest.Location) {
	const n = 3000
	ctx := context.Background()
	pdb, cdb := be.NewURL(t), be.NewURL(t)
	pstore := openStore(t, pdb)
	p, c, rec := cloneThenRewrite(t, pdb, cdb, n)
	// Past the grace, the trash loop removed every trashed table but the
	// pinned ones.
	waitTrashKeeps(t, pstore, "the parent's trash loop emptied every table the pin does not name", fileVersions(rec))
	if checkKept(t, pstore, rec, true, "pinned by the clone") == 0 {
		t.Fatal("no pinned table was trashed: the test did not rewrite them")
	}
	_, trashed := tableState(t, pstore, rec)
	// The clone reads every key from the parent's trashed tables (a fresh
	// cache: a takeover fetches them again).
	c.stop()
	c2, err := startOwnerWith(t, cdb, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the clone", c2.kv, n, "p1")
	c2.stop()

	// The pin gone (the clone deleted), the next pass removes them.
	if err := pstore.Delete(ctx, layout.PinKey("clone-1")); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, pstore, "the parent's trash loop removed the tables only the pin held", trashed)
	checkKeys(t, "the parent", p.kv, n, "p2")
}

// Two clones of one parent bootstrap at once: two ids, two pins, each
// reads the checkpoint and writes only its own directory.
func TestTwoClonesOfOneParent(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		const n = 2000
		pdb := be.NewURL(t)
		p, _ := parentWithCheckpoint(t, pdb, n)
		dbs := []string{be.NewURL(t), be.NewURL(t)}
		clones := make([]*owner, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range clones {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				clones[i], errs[i] = startClone(t, dbs[i], pdb, "c1", fmt.Sprintf("clone-%d", i))
			}(i)
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		writeKeys(t, clones[0].kv, n, func(i int) string { return value("a", i) })
		writeKeys(t, clones[1].kv, n, func(i int) string { return value("b", i) })
		checkKeys(t, "clone 0", clones[0].kv, n, "a")
		checkKeys(t, "clone 1", clones[1].kv, n, "b")
		checkKeys(t, "the parent", p.kv, n, "p1")
		_, keys := storeBytes(t, openStore(t, pdb))
		for i := range clones {
			if _, ok := keys[layout.PinKey(fmt.Sprintf("clone-%d", i))]; !ok {
				t.Fatalf("no pin of clone %d in the parent", i)
			}
		}
	})
}

// A directory holding another clone's origin record is refused, naming
// both, and nothing is written (no pin in the parent); so is a directory
// holding anything else.
func TestBootstrapRefusesForeignOrigin(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		ctx := context.Background()
		pdb, cdb := be.NewURL(t), be.NewURL(t)
		parentWithCheckpoint(t, pdb, 100)
		cstore, pstore := openStore(t, cdb), openStore(t, pdb)
		if _, err := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: cstore, Parent: pdb, Checkpoint: "c1", CloneID: "clone-a"}); err != nil {
			t.Fatal(err)
		}
		// A retry of the same bootstrap is done already.
		if rep, err := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: cstore, Parent: pdb, Checkpoint: "c1", CloneID: "clone-a"}); err != nil || !rep.Done {
			t.Fatalf("retry: %+v, %v", rep, err)
		}
		_, before := storeBytes(t, cstore)
		_, err := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: cstore, Parent: pdb, Checkpoint: "c1", CloneID: "clone-b"})
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !errors.Is(err, layout.ErrForeignOrigin) ||
			!strings.Contains(err.Error(), `"clone-a"`) || !strings.Contains(err.Error(), `"clone-b"`) {
			t.Fatalf("a second clone in the directory: %v, want a refusal naming both", err)
		}
		if _, after := storeBytes(t, cstore); len(after) != len(before) {
			t.Fatalf("the refused bootstrap wrote in the clone's directory: %d keys, was %d", len(after), len(before))
		}
		if _, err := pstore.Stat(ctx, layout.PinKey("clone-b")); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("the refused bootstrap pinned in the parent: %v", err)
		}
		// A directory holding another database is refused too.
		other := be.NewURL(t)
		parentWithCheckpoint(t, other, 10)
		_, err = shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: openStore(t, other), Parent: pdb, Checkpoint: "c1", CloneID: "clone-c"})
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("a database's directory: %v", err)
		}
		// And a checkpoint the parent does not have.
		_, err = shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: openStore(t, be.NewURL(t)), Parent: pdb, Checkpoint: "nope", CloneID: "clone-d"})
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), "not in the catalog") {
			t.Fatalf("a missing checkpoint: %v", err)
		}
		// And a checkpoint whose record changed in the parent's store
		// after it was created (it would name other tables): refused,
		// nothing pinned.
		var recordKey string
		if err := pstore.List(ctx, "_shale/checkpoints/", func(o objstore.ObjectInfo) error {
			if strings.HasSuffix(o.Key, "/record") {
				recordKey = o.Key
			}
			return nil
		}); err != nil || recordKey == "" {
			t.Fatalf("no checkpoint record in the parent (%v)", err)
		}
		rc, _, err := pstore.Get(ctx, recordKey, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		changed := bytes.Replace(raw, []byte(`"sequence":`), []byte(`"sequence":1`), 1)
		if bytes.Equal(changed, raw) {
			t.Fatalf("record %s has no sequence field: %s", recordKey, raw)
		}
		if _, err := pstore.Put(ctx, recordKey, bytes.NewReader(changed), int64(len(changed)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: openStore(t, be.NewURL(t)), Parent: pdb, Checkpoint: "c1", CloneID: "clone-e"})
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), "does not match the parent's catalog") {
			t.Fatalf("a changed checkpoint record: %v, want a refusal", err)
		}
		if _, err := pstore.Stat(ctx, layout.PinKey("clone-e")); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("the refused bootstrap pinned in the parent: %v", err)
		}
	})
}

// Detach (RFC 0010 step 18): once the clone compacted every origin table
// away and their markers are past the grace, its trash pass releases its
// pins; the parent's next pass then deletes what only the pin held, and
// the clone (taken over, with an empty cache) still reads every key.
func TestCloneDetachesWhenOriginCompactedAway(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		const n = 3000
		ctx := context.Background()
		pdb, cdb := be.NewURL(t), be.NewURL(t)
		pstore, cstore := openStore(t, pdb), openStore(t, cdb)
		// The parent drops the checkpoint and rewrites everything: its
		// trash keeps the checkpoint's tables for the pin alone.
		p, c, rec := cloneThenRewrite(t, pdb, cdb, n)
		waitUntil(t, "the parent trashed the tables the pin holds", 30*time.Second, func() bool {
			_, trashed := tableState(t, pstore, rec)
			for _, tr := range trashed {
				if tr {
					return true
				}
			}
			return false
		})
		if _, err := pstore.Stat(ctx, layout.PinKey("clone-1")); err != nil {
			t.Fatalf("the pin before the clone compacts: %v", err)
		}

		// The clone rewrites every key and compacts: no origin table is
		// live any more.
		writeKeys(t, c.kv, n, func(i int) string { return value("c2", i) })
		flushAndCompact(t, c.kv)
		waitUntil(t, "the clone released its pin in the parent", 30*time.Second, func() bool {
			_, err := pstore.Stat(ctx, layout.PinKey("clone-1"))
			return errors.Is(err, objstore.ErrNotFound)
		})
		if _, err := cstore.Stat(ctx, layout.DetachedKey); err != nil {
			t.Fatalf("%s in the clone: %v", layout.DetachedKey, err)
		}
		waitUntil(t, "the parent's trash loop removed the tables only the pin held", 30*time.Second, func() bool {
			present, trashed := tableState(t, pstore, rec)
			for k, tr := range trashed {
				if tr && present[k] {
					return false
				}
			}
			return true
		})
		// Nothing of the clone depends on its parent any more.
		checkKeys(t, "the parent", p.kv, n, "p2")
		c.stop()
		c2, err := startOwnerWith(t, cdb, cloneStorage)
		if err != nil {
			t.Fatal(err)
		}
		checkKeys(t, "the detached clone after a takeover", c2.kv, n, "c2")
		for k := range listAll(t, cstore) {
			if name, epoch, ok := layout.ParseTrashKey(k); ok && epoch == 0 && layout.KindOf(name) == layout.KindTable {
				t.Errorf("a marker of an origin table is left after the detach: %s", k)
			}
		}
	})
}
