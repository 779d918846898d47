package primary

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/secondary"
)

// Helpers shared by the checkpoint and clone tests (checkpoint_test.go,
// checkpoint_race_test.go, clone_test.go, clone_chain_test.go): servers,
// keys and values, what the store holds, and waiting for a condition.

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
	rec, err := layout.ParseCheckpointRecord(getObject(t, store, layout.CheckpointRecordKey(id)))
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

// hold stops the requests a test picks: the first caller signals
// reached and waits for release. Later callers pass.
type hold struct {
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func newHold() *hold { return &hold{reached: make(chan struct{}), release: make(chan struct{})} }

func (h *hold) stop() {
	if h.armed.CompareAndSwap(true, false) {
		close(h.reached)
		<-h.release
	}
}

func (h *hold) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.reached:
	case <-time.After(60 * time.Second):
		t.Fatalf("timed out waiting until %s", what)
	}
}

// outage is a store failure the FileSystem retries (a reset connection).
type outage struct{ what string }

func (e outage) Error() string { return e.what + " (test outage)" }

func (e outage) Retryable() bool { return true }

// catalogEntryKey: a put of an entry (segment 2 on) of epoch's catalog
// version.
func catalogEntryKey(key string, epoch uint64) bool {
	name, e, first, _, ok := layout.ParseSegmentKey(key)
	return ok && name == layout.CatalogLog && e == epoch && first >= 2
}

func listNames(t *testing.T, kv kvv1.KVClient) map[string]string {
	t.Helper()
	lr, err := kv.ListCheckpoints(context.Background(), &kvv1.ListCheckpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range lr.Checkpoints {
		out[c.Name] = c.Id
	}
	return out
}

// storeListNames is `checkpoint list --db`.
func storeListNames(t *testing.T, db string) map[string]string {
	t.Helper()
	got, err := shalefs.ReadCheckpoints(context.Background(), openStore(t, db))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range got {
		out[c.Name] = c.ID
	}
	return out
}

func checkpointDirs(t *testing.T, db string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(storeKeys(t, db), "\n") {
		if strings.HasPrefix(l, layout.CheckpointsPrefix) {
			out = append(out, l)
		}
	}
	return out
}

// raceCfg is an owner whose trash loop runs and deletes past 200ms.
func raceCfg(e uint64) shalefs.Config {
	return shalefs.Config{Epoch: e, Lease: 100 * time.Millisecond, DeleteGrace: 200 * time.Millisecond}
}

func keysWritten(n int, v string) map[string]string {
	out := map[string]string{}
	for i := 0; i < n; i++ {
		out[fmt.Sprintf("k%05d", i)] = v
	}
	return out
}

var cloneStorage = shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: 200 * time.Millisecond}

// startClone starts the first primary of a clone of checkpoint of parent
// (`shale primary --clone-from parent --clone-checkpoint checkpoint
// --clone-id id`).
func startClone(t *testing.T, db, parent, checkpoint, id string) (*owner, error) {
	t.Helper()
	sc := cloneStorage
	sc.CacheDir = filepath.Join(t.TempDir(), "cache")
	s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc,
		Clone: &CloneConfig{From: parent, Checkpoint: checkpoint, ID: id}})
	if err != nil {
		return nil, err
	}
	return dialOwner(t, s), nil
}

// storeBytes sums the sizes of every object under a store.
func storeBytes(t *testing.T, s objstore.Store) (n int64, keys map[string]int64) {
	t.Helper()
	keys = map[string]int64{}
	if err := s.List(context.Background(), "", func(o objstore.ObjectInfo) error {
		n += o.Size
		keys[o.Key] = o.Size
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n, keys
}

// value is a key's value of one generation: 200 bytes that do not
// compress much, so tables hold most of a database's bytes.
func value(gen string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", gen, i)))
	return fmt.Sprintf("%s-%05d-%s", gen, i, strings.Repeat(hex.EncodeToString(h[:]), 3))
}

func checkKeys(t *testing.T, who string, kv kvv1.KVClient, n int, gen string) {
	t.Helper()
	got := scanAll(t, kv)
	if len(got) != n {
		t.Fatalf("%s holds %d keys, want %d", who, len(got), n)
	}
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("k%05d", i); got[k] != value(gen, i) {
			t.Fatalf("%s: %s = %.20q, want %.20q", who, k, got[k], value(gen, i))
		}
	}
}

// parentWithCheckpoint starts a parent, writes n keys of generation "p1",
// flushes, and takes checkpoint c1.
func parentWithCheckpoint(t *testing.T, db string, n int) (*owner, *kvv1.CheckpointInfo) {
	t.Helper()
	p, err := startOwnerWith(t, db, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, p.kv, n, func(i int) string { return value("p1", i) })
	r, err := p.kv.Checkpoint(context.Background(), &kvv1.CheckpointRequest{Name: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	return p, r.Checkpoint
}

func listAll(t *testing.T, s objstore.Store) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	if err := s.List(context.Background(), "", func(o objstore.ObjectInfo) error { keys[o.Key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// readPin reads clone id's pin in store (ok false: none).
func readPin(t *testing.T, store objstore.Store, id string) (layout.PinRecord, bool) {
	t.Helper()
	r, _, err := store.Get(context.Background(), layout.PinKey(id), 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return layout.PinRecord{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	p, err := layout.ParsePin(layout.PinKey(id), b)
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// pinnedState is, for each version a pin names, whether its object is in
// the store and whether it is trashed.
func pinnedState(t *testing.T, store objstore.Store, p layout.PinRecord) (present, trashed map[string]bool) {
	t.Helper()
	keys := listAll(t, store)
	present, trashed = map[string]bool{}, map[string]bool{}
	for _, f := range p.Files {
		k := layout.ObjectKey(f.Name, f.Epoch)
		present[k] = keys[k]
		trashed[k] = keys[layout.TrashKey(f.Name, f.Epoch)]
	}
	return present, trashed
}

// trashHoldsOnly reports whether every trashed table left in store is a
// version keep names (its trash loop deleted the rest). Markers of epoch 0
// (a clone's origin tables, which its loop never deletes) are left out.
func trashHoldsOnly(t *testing.T, store objstore.Store, keep map[layout.VersionRef]bool) bool {
	t.Helper()
	only := true
	if err := store.List(context.Background(), layout.TrashPrefix, func(o objstore.ObjectInfo) error {
		if name, epoch, ok := layout.ParseTrashKey(o.Key); ok && epoch > 0 && layout.KindOf(name) == layout.KindTable && !keep[layout.VersionRef{Name: name, Epoch: epoch}] {
			only = false
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return only
}

func versions(ps ...layout.PinRecord) map[layout.VersionRef]bool {
	out := map[layout.VersionRef]bool{}
	for _, p := range ps {
		for _, f := range p.Files {
			out[f] = true
		}
	}
	return out
}

// writeRange writes keys [from, to) in batches of 1,000, synced.
func writeRange(t *testing.T, kv kvv1.KVClient, from, to int, value func(i int) string) {
	t.Helper()
	for i := from; i < to; i += 1000 {
		var ms []*kvv1.Mutation
		for j := i; j < min(to, i+1000); j++ {
			ms = append(ms, mutPut(fmt.Sprintf("k%05d", j), value(j)))
		}
		if _, err := kv.Write(context.Background(), &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func epochOfKey(t *testing.T, key string) uint64 {
	t.Helper()
	_, e, ok := layout.ParseObjectKey(key)
	if !ok {
		t.Fatalf("%s is not an object key", key)
	}
	return e
}

// fileVersions is the set of versions a checkpoint's record names.
func fileVersions(rec layout.CheckpointRecord) map[layout.VersionRef]bool {
	out := map[layout.VersionRef]bool{}
	for _, f := range rec.Files {
		out[layout.VersionRef{Name: f.Name, Epoch: f.Epoch}] = true
	}
	return out
}

// waitTrashKeeps waits until the trash loop of store's owner deleted
// every trashed table but the versions keep names (conditions, not
// sleeps: the loop runs on its own timer).
func waitTrashKeeps(t *testing.T, store objstore.Store, what string, keep map[layout.VersionRef]bool) {
	t.Helper()
	waitUntil(t, what, 30*time.Second, func() bool { return trashHoldsOnly(t, store, keep) })
}

// checkKept fails if an object of a version rec names (only its tables
// with tablesOnly) is gone from store, saying why it should be there;
// it returns how many of them are trashed.
func checkKept(t *testing.T, store objstore.Store, rec layout.CheckpointRecord, tablesOnly bool, why string) (trashed int) {
	t.Helper()
	present, tr := tableState(t, store, rec)
	for k := range present {
		if tablesOnly && layout.KindOf(layout.FileOfKey(k)) != layout.KindTable {
			continue
		}
		if !present[k] {
			t.Fatalf("%s, %s, was deleted", k, why)
		}
		if tr[k] {
			trashed++
		}
	}
	return trashed
}

// checkServes opens a server at checkpoint name of db and checks it
// holds n keys.
func checkServes(t *testing.T, db, name string, n int) {
	t.Helper()
	cs, err := openCheckpoint(t, db, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, cs.kv); len(got) != n {
		t.Fatalf("the server at checkpoint %s holds %d keys, want %d", name, len(got), n)
	}
}

// flush flushes the memtable.
func flush(t *testing.T, kv kvv1.KVClient) {
	t.Helper()
	if _, err := kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
}

// flushAndCompact flushes the memtable and compacts the whole key range.
func flushAndCompact(t *testing.T, kv kvv1.KVClient) {
	t.Helper()
	flush(t, kv)
	if _, err := kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
}

// waitDeleted waits until no object of keys (those set true) is in
// store.
func waitDeleted(t *testing.T, store objstore.Store, what string, keys map[string]bool) {
	t.Helper()
	waitUntil(t, what, 30*time.Second, func() bool {
		all := listAll(t, store)
		for k, ok := range keys {
			if ok && all[k] {
				return false
			}
		}
		return true
	})
}

// dialOwner connects to a started primary; the test's cleanup stops it.
func dialOwner(t *testing.T, s *Server) *owner {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(o.stop)
	return o
}

// getObject reads a whole object of store.
func getObject(t *testing.T, store objstore.Store, key string) []byte {
	t.Helper()
	r, _, err := store.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cloneThenRewrite starts a parent in pdb with n keys of generation "p1"
// and checkpoint c1, and its clone clone-1 in cdb; then the parent
// deletes c1, rewrites every key (generation "p2") and compacts: only the
// clone's pin keeps c1's tables (rec) in its trash.
func cloneThenRewrite(t *testing.T, pdb, cdb string, n int) (p, c *owner, rec layout.CheckpointRecord) {
	t.Helper()
	p, c1 := parentWithCheckpoint(t, pdb, n)
	rec = checkpointRecord(t, openStore(t, pdb), c1.Id)
	c, err := startClone(t, cdb, pdb, "c1", "clone-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.kv.DeleteCheckpoint(context.Background(), &kvv1.DeleteCheckpointRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	writeKeys(t, p.kv, n, func(i int) string { return value("p2", i) })
	flushAndCompact(t, p.kv)
	return p, c, rec
}
