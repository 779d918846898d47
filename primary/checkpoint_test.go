package primary

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/secondary"
)

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md).

// checkpointServer is `shale secondary --checkpoint name`.
type checkpointServer struct {
	srv  *secondary.Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
}

func openCheckpoint(t *testing.T, db, name string) (*checkpointServer, error) {
	t.Helper()
	s, err := secondary.Start(secondary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "checkpoint"), ReaderTTL: 2 * time.Second}, Checkpoint: name})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := &checkpointServer{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(c.stop)
	return c, nil
}

func (c *checkpointServer) stop() {
	if c.srv != nil {
		c.srv.Stop(time.Second)
		c.conn.Close()
		c.srv = nil
	}
}

// scanAll returns every pair the server holds.
func scanAll(t *testing.T, kv kvv1.KVClient) map[string]string {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			out[string(p.Key)] = string(p.Value)
		}
	}
}

func writeKeys(t *testing.T, kv kvv1.KVClient, n int, value func(i int) string) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		var ms []*kvv1.Mutation
		for j := i; j < min(n, i+1000); j++ {
			if v := value(j); v != "" {
				ms = append(ms, mutPut(fmt.Sprintf("k%05d", j), v))
			} else {
				ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte(fmt.Sprintf("k%05d", j))}}})
			}
		}
		if _, err := kv.Write(context.Background(), &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkpointRecord reads a checkpoint's record from the store.
func checkpointRecord(t *testing.T, store objstore.Store, id string) layout.CheckpointRecord {
	t.Helper()
	r, _, err := store.Get(context.Background(), layout.CheckpointRecordKey(id), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	rec, err := layout.ParseCheckpointRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// tableState lists, for each table version a record names, whether its
// object is in the store and whether it is trashed.
func tableState(t *testing.T, store objstore.Store, rec layout.CheckpointRecord) (present, trashed map[string]bool) {
	t.Helper()
	keys := map[string]bool{}
	if err := store.List(context.Background(), "", func(o objstore.ObjectInfo) error { keys[o.Key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	present, trashed = map[string]bool{}, map[string]bool{}
	for _, f := range rec.Files {
		k := layout.ObjectKey(f.Name, f.Epoch)
		present[k] = keys[k]
		trashed[k] = keys[layout.TrashKey(f.Name, f.Epoch)]
	}
	return present, trashed
}

// waitUntil polls cond until it holds (conditions, not sleeps: the trash
// loop runs on its own timer).
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openStore(t *testing.T, db string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The test: 10,000 synced keys; c1; every key overwritten and
// deleted, compacted, past the trash grace: a server at c1 returns the
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
	if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	rec := checkpointRecord(t, store, c1.Id)
	// RocksDB deleted c1's tables, and the trash loop has had passes past
	// the grace: every other trashed table is gone, c1's stay.
	waitUntil(t, "the trash loop emptied every table c1 does not name", 30*time.Second, func() bool {
		named := map[string]bool{}
		for _, f := range rec.Files {
			named[layout.TrashKey(f.Name, f.Epoch)] = true
		}
		left := false
		store.List(ctx, layout.TrashPrefix, func(o objstore.ObjectInfo) error {
			if name, _, ok := layout.ParseTrashKey(o.Key); ok && layout.KindOf(name) == layout.KindTable && !named[o.Key] {
				left = true
			}
			return nil
		})
		return !left
	})
	present, trashed := tableState(t, store, rec)
	nTrashed := 0
	for k := range present {
		if !present[k] {
			t.Fatalf("%s, named by c1, was deleted", k)
		}
		if trashed[k] {
			nTrashed++
		}
	}
	if nTrashed == 0 {
		t.Fatal("no table of c1 was trashed: the test did not rewrite them")
	}
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
	present, _ = tableState(t, store, rec)
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
	waitUntil(t, "C's trash loop deleted B's trashed tables", 30*time.Second, func() bool {
		named := map[string]bool{}
		for _, f := range rec.Files {
			named[layout.TrashKey(f.Name, f.Epoch)] = true
		}
		left := false
		store.List(ctx, layout.TrashPrefix, func(o objstore.ObjectInfo) error {
			if name, _, ok := layout.ParseTrashKey(o.Key); ok && layout.KindOf(name) == layout.KindTable && !named[o.Key] {
				left = true
			}
			return nil
		})
		return !left
	})
	present, _ := tableState(t, store, rec)
	for k, ok := range present {
		if !ok {
			t.Fatalf("%s, named by the checkpoint, was deleted after the takeovers", k)
		}
	}
	cs, err := openCheckpoint(t, db, "before")
	if err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, cs.kv); len(got) != 2000 {
		t.Fatalf("the server at the checkpoint holds %d keys, want 2000", len(got))
	}
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
