package primary

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md).

// The test: 10,000 synced keys; c1; every key overwritten and
// originals; after deleting c1 the next pass removes what only c1 held.
func TestCheckpointKeepsStateThroughRewrites(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointKeepsStateThroughRewrites)
}

func testCheckpointKeepsStateThroughRewrites(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	store := openStore(t, db)
	ctx := context.Background()
	a, err := startOwnerWith(t, db, shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	writeKeys(t, a.kv, n, func(i int) string { return fmt.Sprintf("v1-%05d", i) })
	r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	c1 := r.Checkpoint
	if c1.Sequence < n || c1.Tables == 0 || c1.Epoch != a.srv.Epoch() {
		t.Fatalf("checkpoint %+v: want sequence >= %d, tables, epoch %d", c1, n, a.srv.Epoch())
	}
	if _, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "c1"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second c1: %v, want ALREADY_EXISTS", err)
	}
	writeKeys(t, a.kv, n, func(i int) string { return fmt.Sprintf("v2-%05d", i) })
	writeKeys(t, a.kv, n, func(int) string { return "" })
	flushAndCompact(t, a.kv)
	rec := checkpointRecord(t, store, c1.Id)
	// RocksDB deleted c1's tables, and the trash loop has had passes past
	// the grace: every other trashed table is gone, c1's stay.
	waitTrashKeeps(t, store, "the trash loop emptied every table c1 does not name", fileVersions(rec))
	if checkKept(t, store, rec, false, "named by c1") == 0 {
		t.Fatal("no table of c1 was trashed: the test did not rewrite them")
	}
	_, trashed := tableState(t, store, rec)
	if got := scanAll(t, a.kv); len(got) != 0 {
		t.Fatalf("the primary still holds %d keys after deleting them all", len(got))
	}

	cs, err := openCheckpoint(t, db, "c1")
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, cs.kv)
	if len(got) != n {
		t.Fatalf("the server at c1 holds %d keys, want %d", len(got), n)
	}
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("k%05d", i); got[k] != fmt.Sprintf("v1-%05d", i) {
			t.Fatalf("c1: %s = %q, want v1-%05d", k, got[k], i)
		}
	}
	st, err := cs.kv.Status(ctx, &kvv1.StatusRequest{})
	if err != nil || st.LatestSequence != c1.Sequence {
		t.Fatalf("checkpoint server status: sequence %v (%v), want %d", st.GetLatestSequence(), err, c1.Sequence)
	}
	lr, err := cs.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
	if err != nil || len(lr.Checkpoints) != 1 || lr.Checkpoints[0].Id != c1.Id {
		t.Fatalf("list on the checkpoint server: %v, %v", lr, err)
	}
	if _, err := cs.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: "c1"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("delete on a secondary: %v, want FAILED_PRECONDITION", err)
	}
	cs.stop() // its lease would keep the tables

	if _, err := a.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: "c1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v, want NOT_FOUND", err)
	}
	if lr, err := a.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{}); err != nil || len(lr.Checkpoints) != 0 {
		t.Fatalf("list after delete: %v, %v", lr, err)
	}
	waitUntil(t, "the trash loop removed what only c1 held", 30*time.Second, func() bool {
		present, _ := tableState(t, store, rec)
		for k, trashedK := range trashed {
			if trashedK && present[k] {
				return false
			}
		}
		return true
	})
	present, _ := tableState(t, store, rec)
	for k := range present {
		if !trashed[k] && !present[k] {
			t.Fatalf("%s, still live, was deleted", k)
		}
	}
}

// A checkpoint created before a takeover is in every later owner's
// catalog, and its tables outlive their trash passes.
func TestCheckpointSurvivesTakeover(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointSurvivesTakeover)
}

func testCheckpointSurvivesTakeover(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	ctx := context.Background()
	cfg := func(e uint64) shalefs.Config {
		return shalefs.Config{Epoch: e, Lease: 100 * time.Millisecond, DeleteGrace: 200 * time.Millisecond}
	}
	a, err := startOwnerWith(t, db, cfg(1))
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, a.kv, 2000, func(i int) string { return "a" })
	if _, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "before", RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	a.srv.fs.Stop() // A dies without releasing (its loops stop; nothing more reaches the store)
	b, err := startOwnerWith(t, db, cfg(2))
	if err != nil {
		t.Fatal(err)
	}
	a.stop()
	for _, o := range []*owner{b} {
		lr, err := o.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
		if err != nil || len(lr.Checkpoints) != 1 || lr.Checkpoints[0].Name != "before" || lr.Checkpoints[0].Epoch != 1 {
			t.Fatalf("B lists %v (%v), want A's checkpoint", lr, err)
		}
	}
	// A retry of A's create, sent to B, answers the same checkpoint.
	if r, err := b.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "before", RequestId: "r1"}); err != nil || r.Checkpoint.Epoch != 1 {
		t.Fatalf("retry on B: %v, %v", r, err)
	}
	writeKeys(t, b.kv, 2000, func(int) string { return "" })
	b.kv.Flush(ctx, &kvv1.FlushRequest{})
	b.kv.Compact(ctx, &kvv1.CompactRequest{})
	b.stop()
	c, err := startOwnerWith(t, db, cfg(3))
	if err != nil {
		t.Fatal(err)
	}
	lr, err := c.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
	if err != nil || len(lr.Checkpoints) != 1 {
		t.Fatalf("C lists %v (%v)", lr, err)
	}
	c.kv.Compact(ctx, &kvv1.CompactRequest{})
	store := openStore(t, db)
	rec := checkpointRecord(t, store, lr.Checkpoints[0].Id)
	// C's trash loop runs past the grace (its own marker for B's catalog
	// version goes), and keeps the checkpoint's tables.
	waitTrashKeeps(t, store, "C's trash loop deleted B's trashed tables", fileVersions(rec))
	checkKept(t, store, rec, false, "named by the checkpoint, after the takeovers")
	checkServes(t, db, "before", 2000)
}

// A deposed owner's create fails FAILED_PRECONDITION, with and without
// data in its memtable, is never listed, and its record is swept.
func TestZombieCheckpointFenced(t *testing.T) {
	storetest.ForEachBackend(t, testZombieCheckpointFenced)
}

func testZombieCheckpointFenced(t *testing.T, be storetest.Location) {
	for _, memtable := range []bool{false, true} {
		t.Run(fmt.Sprintf("memtable=%v", memtable), func(t *testing.T) {
			db := be.NewURL(t)
			ctx := context.Background()
			a, err := startOwnerWith(t, db, blindOwner(1))
			if err != nil {
				t.Fatal(err)
			}
			writeKeys(t, a.kv, 100, func(int) string { return "a" })
			if !memtable {
				if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
					t.Fatal(err)
				}
			}
			b := mustOwner(t, db, 2)
			if err := a.srv.fs.FenceError(); err != nil {
				t.Fatalf("A noticed the fence without writing (%v)", err)
			}
			_, err = a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "zombie"})
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("deposed owner's checkpoint: %v, want FAILED_PRECONDITION", err)
			}
			for _, o := range []*owner{b} {
				if lr, err := o.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{}); err != nil || len(lr.Checkpoints) != 0 {
					t.Fatalf("B lists %v (%v)", lr, err)
				}
			}
			b.stop()
			c := mustOwner(t, db, 3)
			if lr, err := c.kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{}); err != nil || len(lr.Checkpoints) != 0 {
				t.Fatalf("C lists %v (%v)", lr, err)
			}
			if keys := storeKeys(t, db); strings.Contains(keys, layout.CheckpointsPrefix) {
				t.Fatalf("the deposed owner's checkpoint files were not swept:\n%s", keys)
			}
			if got, err := shalefs.ReadCheckpoints(ctx, openStore(t, db)); err != nil || len(got) != 0 {
				t.Fatalf("list --db: %v, %v", got, err)
			}
		})
	}
}

// Writers running through the create: the server at the checkpoint holds
// exactly the writes with a sequence number up to S.
func TestCheckpointExactSequence(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointExactSequence)
}

func testCheckpointExactSequence(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	ctx := context.Background()
	a := mustOwner(t, db, 1)
	type write struct {
		key string
		seq uint64
	}
	var mu sync.Mutex
	var writes []write
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-%06d", w, i)
				r, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte("x"), Sync: i%3 == 0})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				writes = append(writes, write{k, r.Sequence})
				mu.Unlock()
			}
		}()
	}
	waitUntil(t, "writers wrote", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(writes) > 200 })
	r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "busy"})
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	waitUntil(t, "writers wrote after the checkpoint", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return writes[len(writes)-1].seq > r.Checkpoint.Sequence+50
	})
	close(stop)
	wg.Wait()
	cs, err := openCheckpoint(t, db, "busy")
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, cs.kv)
	want := 0
	for _, w := range writes {
		_, in := got[w.key]
		if before := w.seq <= r.Checkpoint.Sequence; before != in {
			t.Fatalf("write %s (sequence %d) in the checkpoint at %d: %v", w.key, w.seq, r.Checkpoint.Sequence, in)
		}
		if w.seq <= r.Checkpoint.Sequence {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("checkpoint holds %d keys, want %d", len(got), want)
	}
}
