package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/primary"
)

// Clones against the reclaim and the garbage collector
// (docs/rfcs/0010-checkpoints-and-clones.md, step 14 and the race "A
// parent deleted while a clone opens"). The operator runs no primary in
// these tests' envtest, so the databases are real primaries run in this
// process (`shale primary`, and `shale primary --clone-from`), on MinIO.

var cloneTestStorage = shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: 200 * time.Millisecond}

type testPrimary struct {
	srv  *primary.Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
	once sync.Once
}

func (p *testPrimary) stop() {
	p.once.Do(func() {
		p.srv.Stop(time.Second)
		p.conn.Close()
	})
}

// startPrimary runs `shale primary` on db (with clone: `--clone-from`).
func startPrimary(t *testing.T, db string, clone *primary.CloneConfig) (*testPrimary, error) {
	t.Helper()
	sc := cloneTestStorage
	sc.CacheDir = filepath.Join(t.TempDir(), "cache")
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc, Clone: clone})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPrimary{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(p.stop)
	return p, nil
}

func cloneValue(i int) string { return fmt.Sprintf("v%05d-%s", i, strings.Repeat("x", 100)) }

// parentWithCheckpoint starts a primary on db, writes n keys and takes
// checkpoint c1.
func parentWithCheckpoint(t *testing.T, db string, n int) *testPrimary {
	t.Helper()
	p, err := startPrimary(t, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i += 1000 {
		var ms []*kvv1.Mutation
		for j := i; j < min(n, i+1000); j++ {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(fmt.Sprintf("k%05d", j)), Value: []byte(cloneValue(j))}}})
		}
		if _, err := p.kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkEveryKey scans a database and checks it holds exactly keys 0..n-1.
func checkEveryKey(t *testing.T, who string, kv kvv1.KVClient, n int) {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: scan: %v", who, err)
		}
		for _, p := range r.Pairs {
			got[string(p.Key)] = string(p.Value)
		}
	}
	if len(got) != n {
		t.Fatalf("%s holds %d keys, want %d", who, len(got), n)
	}
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("k%05d", i); got[k] != cloneValue(i) {
			t.Fatalf("%s: %s = %.20q, want %.20q", who, k, got[k], cloneValue(i))
		}
	}
}

// statHooked runs after(key) once the store answered a Stat: the bootstrap
// checks the parent's _shale/deleting with a Stat (step 16.5).
type statHooked struct {
	objstore.Store
	after func(key string)
}

func (s *statHooked) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	info, err := s.Store.Stat(ctx, key)
	if s.after != nil {
		s.after(key)
	}
	return info, err
}

func listKeys(t *testing.T, st objstore.Store) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	if err := st.List(context.Background(), "", func(o objstore.ObjectInfo) error { keys[o.Key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

func readPinRecord(t *testing.T, st objstore.Store, id string) layout.PinRecord {
	t.Helper()
	r, _, err := st.Get(context.Background(), layout.PinKey(id), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	pin, err := layout.ParsePin(layout.PinKey(id), b)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

// TestParentDeletedWhileCloneOpens: a reclaim of the parent (reclaimDir,
// as the finalizer and the garbage collector run it) against a clone's
// bootstrap, on MinIO. The deleter's marker written after the clone pinned
// but before its check: the clone refuses and its pin goes, and the next
// deletion removes everything. Written after the clone's check: the
// deleter keeps exactly what the pin names, and the clone reads every key.
func TestParentDeletedWhileCloneOpens(t *testing.T) {
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "clones")
	const n = 3000
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		// beforeCheck: the deleter runs between the clone's pin and its
		// check (the check then finds the marker); else just after it.
		beforeCheck bool
	}{{"marker-before-check", true}, {"marker-after-check", false}} {
		t.Run(tc.name, func(t *testing.T) {
			pdb := "s3://clones/" + tc.name + "/parent"
			cdb := "s3://clones/" + tc.name + "/clone"
			p := parentWithCheckpoint(t, pdb, n)
			p.stop() // the finalizer stops the primaries first
			pstore, err := objstore.Open(pdb)
			if err != nil {
				t.Fatal(err)
			}
			cstore, err := objstore.Open(cdb)
			if err != nil {
				t.Fatal(err)
			}

			var done reclaimDone
			var derr error
			ran := false
			deleter := func() {
				ran = true
				done, derr = reclaimDir(ctx, dirTiers{hot: pstore}, "test", nil)
			}
			hooked := &statHooked{Store: pstore, after: func(key string) {
				if key == layout.DeletingKey && !ran {
					deleter()
				}
			}}
			if tc.beforeCheck {
				// Stand between the clone's pins and its Stat: the marker
				// is there when the Stat is sent.
				hooked = &statHooked{Store: &statBefore{Store: pstore, before: func(key string) {
					if key == layout.DeletingKey && !ran {
						deleter()
					}
				}}}
			}
			_, berr := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: cstore, Parent: pdb, Checkpoint: "c1", CloneID: "clone-1",
				OpenOrigin: func(url string) (objstore.Store, error) {
					if url == pdb {
						return hooked, nil
					}
					return objstore.Open(url)
				}})
			if !ran {
				t.Fatal("the bootstrap never checked the parent's _shale/deleting")
			}
			if derr != nil {
				t.Fatalf("the deletion: %v", derr)
			}
			// Either way the deleter listed the pin (written before its
			// marker) and kept what it names.
			if len(done.Pinned) != 1 || !strings.HasPrefix(done.Pinned[0], "clone-1 ") || len(done.Kept) == 0 {
				t.Fatalf("the deleter kept %d objects for pins %v; want the tables of clone-1's pin", len(done.Kept), done.Pinned)
			}
			left := listKeys(t, pstore)
			if tc.beforeCheck {
				if !errors.Is(berr, shalefs.ErrBootstrapRefused) || !strings.Contains(berr.Error(), "being deleted") {
					t.Fatalf("bootstrap = %v; want refused: the parent is being deleted", berr)
				}
				if left[layout.PinKey("clone-1")] {
					t.Fatal("the refused clone left its pin")
				}
				// The next deletion (the garbage collector's) finds no pin
				// and removes everything, the marker last.
				again, err := reclaimDir(ctx, dirTiers{hot: pstore}, "test", nil)
				if err != nil || len(again.Pinned) > 0 {
					t.Fatalf("second deletion: %+v, %v", again, err)
				}
				if left := listKeys(t, pstore); len(left) != 0 {
					t.Fatalf("left after the second deletion: %v", left)
				}
				return
			}
			if berr != nil {
				t.Fatalf("bootstrap: %v", berr)
			}
			pin := readPinRecord(t, pstore, "clone-1")
			want := map[string]bool{layout.DeletingKey: true, layout.PinKey("clone-1"): true}
			for _, f := range pin.Files {
				want[layout.ObjectKey(f.Name, f.Epoch)] = true
			}
			for k := range left {
				if !want[k] {
					t.Errorf("the deletion left %s, which no pin names", k)
				}
			}
			for k := range want {
				if !left[k] {
					t.Errorf("the deletion removed %s, which the pin names", k)
				}
			}
			c, err := startPrimary(t, cdb, &primary.CloneConfig{From: pdb, Checkpoint: "c1", ID: "clone-1"})
			if err != nil {
				t.Fatal(err)
			}
			checkEveryKey(t, "the clone of the deleted parent", c.kv, n)
		})
	}
}

// statBefore runs before(key) before a Stat is sent.
type statBefore struct {
	objstore.Store
	before func(key string)
}

func (s *statBefore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if s.before != nil {
		s.before(key)
	}
	return s.Store.Stat(ctx, key)
}

// TestCloneSurvivesParentDelete (envtest and MinIO; the clone
// test): a RocksDB with reclaimPolicy Delete, its data written by a real
// primary, is deleted while a clone (`shale primary --clone-from`, run in
// this process) pins it. The finalizer leaves only the marker, the pin and
// the pinned tables, keeps the owner record and says StoragePinned; the
// clone, taken over with an empty cache, reads every key; the garbage
// collector at a 1 s grace keeps the pinned directory. Once the clone has
// compacted its origin tables away and detached, the next GC pass removes
// the rest, record included, and the clone still reads every key.
func TestCloneSurvivesParentDelete(t *testing.T) {
	h := startOperator(t)
	for _, kv := range h.minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // objstore.Open, for the primaries run here
	}
	const n = 3000
	ns := h.namespace("clonedel")
	sec, store, db := h.samples(ns)
	db.Name = "parent"
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	h.create(sec, store, db)
	db = h.waitDB(ns, "parent", "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.StoragePath != "", "want epoch 1 and a storage path"
	})
	pdb := "s3://" + bucket + "/" + db.Status.StoragePath
	pstore := h.store(db.Status.StoragePath)
	p := parentWithCheckpoint(t, pdb, n)
	p.stop()

	// The clone lives outside the operator's prefix (the GC does not judge it).
	cdb := "s3://" + bucket + "/clones/" + ns + "/clone"
	c, err := startPrimary(t, cdb, &primary.CloneConfig{From: pdb, Checkpoint: "c1", ID: "clone-1"})
	if err != nil {
		t.Fatal(err)
	}
	checkEveryKey(t, "the clone", c.kv, n)
	pin := readPinRecord(t, pstore, "clone-1")
	pinned := map[string]bool{layout.DeletingKey: true, layout.PinKey("clone-1"): true}
	for _, f := range pin.Files {
		pinned[layout.ObjectKey(f.Name, f.Epoch)] = true
	}
	if len(pin.Files) == 0 {
		t.Fatal("the clone pins no table of its parent")
	}
	checkLeft := func(when string) {
		t.Helper()
		left := listKeys(t, pstore)
		for k := range left {
			if !pinned[k] {
				t.Errorf("%s: %s is left, which no pin names", when, k)
			}
		}
		for k := range pinned {
			if !left[k] {
				t.Errorf("%s: %s is gone, which the pin names", when, k)
			}
		}
		if rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); rec == nil || rec.ReclaimPolicy != shalev1.ReclaimDelete {
			t.Errorf("%s: owner record %s, want it kept, saying Delete", when, jsonString(rec))
		}
	}

	// The parent deleted with Delete: only what the pin names is left.
	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "parent")
	h.waitEvent(ns, "parent", eventStoragePinned)
	checkLeft("after the reclaim")
	c.stop()
	c, err = startPrimary(t, cdb, nil) // a takeover, with an empty cache
	if err != nil {
		t.Fatal(err)
	}
	checkEveryKey(t, "the clone of the deleted parent", c.kv, n)

	// The garbage collector at a 1 s grace keeps it while pinned.
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), store); err != nil {
		t.Fatal(err)
	}
	g := *h.gc
	g.grace = time.Second
	dir := ns + "/" + db.DirName()
	eventually(t, "the GC judges the parent's directory pinned", func() (bool, string) {
		rep, err := g.pass(h.ctx, store)
		if err != nil {
			return false, err.Error()
		}
		return rep.Verdicts[dir] == keepPinned, "verdict " + rep.Verdicts[dir].String()
	})
	checkLeft("after a GC pass")

	// The clone rewrites every key (same values) and compacts: no origin
	// table is live, and past its grace it releases the pin.
	for i := 0; i < n; i += 1000 {
		var ms []*kvv1.Mutation
		for j := i; j < min(n, i+1000); j++ {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(fmt.Sprintf("k%05d", j)), Value: []byte(cloneValue(j))}}})
		}
		if _, err := c.kv.Write(h.ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.kv.Flush(h.ctx, &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.kv.Compact(h.ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the clone released its pin", func() (bool, string) {
		_, err := pstore.Stat(h.ctx, layout.PinKey("clone-1"))
		return errors.Is(err, objstore.ErrNotFound), fmt.Sprintf("stat: %v", err)
	})
	eventually(t, "the GC removes the rest", func() (bool, string) {
		rep, err := g.pass(h.ctx, store)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(rep.Deleted, dir), "verdict " + rep.Verdicts[dir].String()
	})
	if left := listKeys(t, pstore); len(left) != 0 {
		t.Errorf("left after the GC: %v", left)
	}
	if rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); rec != nil {
		t.Errorf("owner record left: %s", jsonString(rec))
	}
	checkEveryKey(t, "the detached clone", c.kv, n)
}

// TestReclaimReleasesClonePins (envtest and MinIO): deleting a clone
// releases its pins in its parent first (RFC 0010 step 14), whether the
// finalizer deletes it (reclaimPolicy Delete) or the garbage collector
// deletes its orphaned directory; a clone directory whose origin record
// names another clone id than its RocksDB's UID keeps its pins, said in an
// Event.
func TestReclaimReleasesClonePins(t *testing.T) {
	h := startOperator(t)
	for _, kv := range h.minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ns := h.namespace("clonerel")
	sec, store, db := h.samples(ns)
	db.Name = "clone"
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	h.create(sec, store, db)
	pdb := "s3://" + bucket + "/parents/" + ns + "/parent"
	parentWithCheckpoint(t, pdb, 500).stop()
	pstore := h.store("parents/" + ns + "/parent")
	bootstrap := func(dir, id string) {
		t.Helper()
		cstore, err := objstore.Open("s3://" + bucket + "/" + dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shalefs.Bootstrap(h.ctx, shalefs.BootstrapConfig{Store: cstore, Parent: pdb, Checkpoint: "c1", CloneID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := pstore.Stat(h.ctx, layout.PinKey(id)); err != nil {
			t.Fatalf("pin %s after the bootstrap: %v", id, err)
		}
	}

	// The finalizer: the clone's directory bootstrapped as its first
	// primary would (`--clone-id` its UID).
	db = h.waitDB(ns, "clone", "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.StoragePath != "", "want epoch 1 and a storage path"
	})
	bootstrap(db.Status.StoragePath, string(db.UID))
	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "clone")
	h.waitEvent(ns, "clone", eventClonePinsReleased)
	if _, err := pstore.Stat(h.ctx, layout.PinKey(string(db.UID))); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the deleted clone's pin in its parent: %v, want it gone", err)
	}
	if left := h.keys(h.store(db.Status.StoragePath), ""); len(left) != 0 {
		t.Errorf("left in the deleted clone's directory: %v", left)
	}

	// The garbage collector: an orphaned clone directory (its RocksDB
	// gone without its finalizer) and one whose record names another id.
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), store); err != nil {
		t.Fatal(err)
	}
	hot := h.store(store.Spec.Hot.Prefix)
	orphanDir := func(name, id string) string {
		uid := types.UID(uuid.NewString())
		dirName := name + "-" + string(uid)
		if id == "" {
			id = string(uid)
		}
		bootstrap(store.Spec.Hot.Prefix+"/"+ns+"/"+dirName, id)
		if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(ns, dirName), dirOwnerRecord{Cluster: h.cluster, Namespace: ns, Name: name, UID: uid, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
			t.Fatal(err)
		}
		return dirName
	}
	ghost := orphanDir("ghost", "")
	stranger := orphanDir("stranger", "someone-else")
	// An orphan with an unreadable pin: nothing of it is deleted, and the
	// pass goes on with the others.
	broken := "broken-" + uuid.NewString()
	_, brokenUID, _ := parseDirName(broken)
	h.put(hot, dbDirKey(ns, broken)+"000005.sst.00000000000000000001", "a table")
	h.put(hot, dbDirKey(ns, broken)+layout.PinKey("mangled"), "not JSON")
	if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(ns, broken), dirOwnerRecord{Cluster: h.cluster, Namespace: ns, Name: "broken", UID: brokenUID, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
		t.Fatal(err)
	}
	g := *h.gc
	g.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	rep, err := g.pass(h.ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ghost, stranger} {
		if !slices.Contains(rep.Deleted, ns+"/"+d) {
			t.Errorf("%s not deleted: verdict %v", d, rep.Verdicts[ns+"/"+d])
		}
	}
	if got := h.keys(hot, dbDirKey(ns, broken)); !slices.Contains(got, dbDirKey(ns, broken)+"000005.sst.00000000000000000001") {
		t.Errorf("the orphan with an unreadable pin lost its table: %v", got)
	}
	h.waitEvent(ns, store.Name, eventOrphanDeleteFailed)
	_, ghostUID, _ := parseDirName(ghost)
	if _, err := pstore.Stat(h.ctx, layout.PinKey(string(ghostUID))); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the orphaned clone's pin: %v, want it gone", err)
	}
	if _, err := pstore.Stat(h.ctx, layout.PinKey("someone-else")); err != nil {
		t.Errorf("the pin of a clone id that is not the directory's UID: %v, want it kept", err)
	}
	h.waitEvent(ns, store.Name, eventStoragePinned)
}

// TestCloneOfCloneAfterMiddleDeleted (RFC 0010 step 19 and the race "The
// middle clone deleted while a clone of it opens"): P, its clone C1
// (rewrites a third of the keys, then checkpoint cc), and C2, a clone of
// cc, on MinIO, deleted as the finalizer and the garbage collector do
// (reclaimDir). C1 and P both deleted after C2 opened: each keeps only
// what C2's pins name, and C2, taken over with an empty cache, reads every
// key. C1 deleted while C2 opens (between C2's pins and its check of C1's
// own pin in P): C2 refuses, naming the gone pin, leaves no pin in either,
// and the next deletion of C1 removes everything.
func TestCloneOfCloneAfterMiddleDeleted(t *testing.T) {
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "chain")
	const n = 3000
	ctx := context.Background()
	open := func(url string) objstore.Store {
		t.Helper()
		st, err := objstore.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// middle starts P and C1 (id clone-1, its own writes over a third of
	// the keys, same values) and takes checkpoint cc of C1.
	middle := func(name string) (pdb, c1db string) {
		t.Helper()
		pdb, c1db = "s3://chain/"+name+"/p", "s3://chain/"+name+"/c1"
		p := parentWithCheckpoint(t, pdb, n)
		c1, err := startPrimary(t, c1db, &primary.CloneConfig{From: pdb, Checkpoint: "c1", ID: "clone-1"})
		if err != nil {
			t.Fatal(err)
		}
		var ms []*kvv1.Mutation
		for j := 0; j < n/3; j++ {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(fmt.Sprintf("k%05d", j)), Value: []byte(cloneValue(j))}}})
		}
		if _, err := c1.kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c1.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "cc"}); err != nil {
			t.Fatal(err)
		}
		// The finalizer stops a database's primaries before its reclaim.
		c1.stop()
		p.stop()
		return pdb, c1db
	}
	// deleteC1 is C1's reclaim with reclaimPolicy Delete: its own pins
	// released (its UID is its clone id), then all but what pins name.
	deleteC1 := func(c1db string) reclaimDone {
		t.Helper()
		done, err := reclaimDir(ctx, dirTiers{hot: open(c1db), uid: "clone-1", openOrigin: objstore.Open}, "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	onlyPinned := func(who string, st objstore.Store, id string) {
		t.Helper()
		pin := readPinRecord(t, st, id)
		want := map[string]bool{layout.DeletingKey: true, layout.PinKey(id): true}
		for _, f := range pin.Files {
			want[layout.ObjectKey(f.Name, f.Epoch)] = true
		}
		left := listKeys(t, st)
		for k := range left {
			if !want[k] {
				t.Errorf("%s: the deletion left %s, which no pin names", who, k)
			}
		}
		for k := range want {
			if !left[k] {
				t.Errorf("%s: the deletion removed %s, which %s's pin names", who, k, id)
			}
		}
		if len(pin.Files) == 0 {
			t.Errorf("%s: %s's pin names no table", who, id)
		}
	}

	t.Run("middle-and-grandparent-deleted", func(t *testing.T) {
		pdb, c1db := middle("after")
		c2db := "s3://chain/after/c2"
		c2, err := startPrimary(t, c2db, &primary.CloneConfig{From: c1db, Checkpoint: "cc", ID: "clone-2"})
		if err != nil {
			t.Fatal(err)
		}
		checkEveryKey(t, "the clone of the clone", c2.kv, n)
		done := deleteC1(c1db)
		if len(done.Released) != 1 || !strings.HasSuffix(done.Released[0], layout.PinKey("clone-1")) {
			t.Fatalf("C1's reclaim released %v; want its pin in P", done.Released)
		}
		onlyPinned("C1", open(c1db), "clone-2")
		if _, err := reclaimDir(ctx, dirTiers{hot: open(pdb)}, "test", nil); err != nil {
			t.Fatal(err)
		}
		onlyPinned("P", open(pdb), "clone-2")
		c2.stop()
		c2b, err := startPrimary(t, c2db, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkEveryKey(t, "the clone of the clone, its parent and grandparent deleted", c2b.kv, n)
	})

	t.Run("middle-deleted-while-grandchild-opens", func(t *testing.T) {
		pdb, c1db := middle("during")
		pstore := open(pdb)
		// C1's deletion runs just before C2's check of C1's pin in P:
		// after C2 pinned (in C1 and P), and after its check of C1's
		// catalog and _shale/deleting.
		ran := false
		hooked := &statBefore{Store: pstore, before: func(key string) {
			if key == layout.PinKey("clone-1") && !ran {
				ran = true
				if done := deleteC1(c1db); len(done.Pinned) != 1 {
					t.Errorf("C1's deletion kept objects for pins %v; want clone-2's, written before it", done.Pinned)
				}
			}
		}}
		_, err := shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: open("s3://chain/during/c2"), Parent: c1db, Checkpoint: "cc", CloneID: "clone-2",
			OpenOrigin: func(url string) (objstore.Store, error) {
				if url == pdb {
					return hooked, nil
				}
				return objstore.Open(url)
			}})
		if !ran {
			t.Fatal("the bootstrap never checked C1's pin in P")
		}
		if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), "no longer pins its tables in "+pdb) {
			t.Fatalf("bootstrap = %v; want refused: C1 no longer pins its tables in P", err)
		}
		for who, st := range map[string]objstore.Store{"P": pstore, "C1": open(c1db)} {
			if listKeys(t, st)[layout.PinKey("clone-2")] {
				t.Errorf("the refused clone left its pin in %s", who)
			}
		}
		// The next deletion of C1 (the garbage collector's) finds no pin
		// and removes everything.
		if again := deleteC1(c1db); len(again.Pinned) > 0 {
			t.Fatalf("second deletion of C1 kept objects for %v", again.Pinned)
		}
		if left := listKeys(t, open(c1db)); len(left) != 0 {
			t.Fatalf("left in C1 after the second deletion: %v", left)
		}
	})
}
