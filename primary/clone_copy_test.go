package primary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Clones of a parent in another store (docs/rfcs/0010-checkpoints-and-
// clones.md, step 20): every object the checkpoint names is copied.

// copyParent is a parent for the copy tests: n keys of generation "p1",
// written three times and flushed each time (three tables), checkpoint c1. store, when set, is the
// parent's store (on another server than the environment's).
func copyParent(t *testing.T, db string, store objstore.Store, n int) *owner {
	t.Helper()
	sc := cloneStorage
	sc.Store = store
	p, err := startOwnerWith(t, db, sc)
	if err != nil {
		t.Fatal(err)
	}
	for part := 0; part < 3; part++ {
		writeKeys(t, p.kv, n, func(i int) string { return value("p1", i) })
		if _, err := p.kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.kv.Checkpoint(context.Background(), &kvv1.CheckpointRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	return p
}

// startCopyClone starts a clone's first primary with clone settings c.
func startCopyClone(t *testing.T, db string, c CloneConfig) (*owner, error) {
	t.Helper()
	sc := cloneStorage
	sc.CacheDir = filepath.Join(t.TempDir(), "cache")
	s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc, Clone: &c})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(o.stop)
	return o, nil
}

// deleteAll deletes every object of a store: the parent gone entirely.
func deleteAll(t *testing.T, s objstore.Store) {
	t.Helper()
	_, keys := storeBytes(t, s)
	var all []string
	for k := range keys {
		all = append(all, k)
	}
	if err := s.DeleteMany(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	if n, _ := storeBytes(t, s); n != 0 {
		t.Fatalf("the parent still holds %d bytes", n)
	}
}

func TestCloneFromAnotherStoreCopies(t *testing.T) {
	const n = 6000
	envMinIO := func(t *testing.T) *miniotest.Server {
		srv := miniotest.Start(t)
		for _, kv := range srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		return srv
	}
	t.Run("two-buckets-one-minio", func(t *testing.T) {
		srv := envMinIO(t)
		srv.CreateBucket(t, "parent")
		srv.CreateBucket(t, "clone")
		pdb, cdb := "s3://parent/shale/p", "s3://clone/shale/c"
		testCopyClone(t, n, pdb, openStore(t, pdb), cdb, CloneConfig{Copy: true}, "server-side")
	})
	t.Run("second-minio", func(t *testing.T) {
		srv := envMinIO(t)
		srv.CreateBucket(t, "clone")
		other := miniotest.Start(t)
		other.CreateBucket(t, "parent")
		pdb, cdb := "s3://parent/shale/p", "s3://clone/shale/c"
		pstore, err := objstore.OpenS3(pdb, other.S3Config())
		if err != nil {
			t.Fatal(err)
		}
		creds := filepath.Join(t.TempDir(), "parent-credentials")
		other.WriteCredentials(t, creds)
		// Not asked: another endpoint and other keys make it copy.
		testCopyClone(t, n, pdb, pstore, cdb, CloneConfig{Endpoint: other.Endpoint, CredentialsDir: creds}, "streamed")
	})
	t.Run("file-to-minio", func(t *testing.T) {
		srv := envMinIO(t)
		srv.CreateBucket(t, "clone")
		pdb := "file://" + filepath.Join(t.TempDir(), "parent")
		cdb := "s3://clone/shale/c"
		testCopyClone(t, n, pdb, openStore(t, pdb), cdb, CloneConfig{}, "streamed")
	})
}

func testCopyClone(t *testing.T, n int, pdb string, pstore objstore.Store, cdb string, cc CloneConfig, how string) {
	p := copyParent(t, pdb, pstore, n)
	cc.From, cc.Checkpoint, cc.ID = pdb, "c1", "copy-1"
	c, err := startCopyClone(t, cdb, cc)
	if err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the clone", c.kv, n, "p1")
	rep := c.srv.Cloned()
	t.Logf("%s: copied %d objects, %d bytes (%d streamed through this process); %d tables, %d bytes", how, rep.CopiedObjects, rep.CopiedBytes, rep.Streamed, rep.Tables, rep.TableBytes)
	if rep.Tables < 2 || rep.CopiedObjects != rep.Tables+1 || rep.CopiedBytes <= rep.TableBytes {
		t.Fatalf("bootstrap report %+v: want every table and the MANIFEST copied", rep)
	}
	switch how {
	case "server-side":
		if rep.Streamed != 0 {
			t.Fatalf("%d bytes streamed: two buckets of one endpoint copy server-side", rep.Streamed)
		}
	case "streamed":
		if rep.Streamed != rep.CopiedBytes {
			t.Fatalf("streamed %d of %d bytes: a copy across servers passes through the process", rep.Streamed, rep.CopiedBytes)
		}
	}
	// No pin left in the parent, no origin record in the clone: it owns
	// its tables.
	_, pkeys := storeBytes(t, pstore)
	for k := range pkeys {
		if strings.HasPrefix(k, layout.PinsPrefix) {
			t.Fatalf("the parent keeps pin %s after the copy", k)
		}
	}
	cstore := openStore(t, cdb)
	if _, err := cstore.Stat(context.Background(), layout.OriginKey); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the copied clone has %s (%v): it must read nothing of its parent", layout.OriginKey, err)
	}
	if _, err := cstore.Stat(context.Background(), layout.CopyKey); err != nil {
		t.Fatalf("%s: %v", layout.CopyKey, err)
	}

	// Writes on either side are invisible to the other.
	writeKeys(t, p.kv, n, func(i int) string { return value("p2", i) })
	writeKeys(t, c.kv, n/2, func(i int) string { return value("c2", i) })
	checkKeys(t, "the parent", p.kv, n, "p2")
	mixed := func(who string, kv kvv1.KVClient) {
		t.Helper()
		got := scanAll(t, kv)
		for i := 0; i < n; i++ {
			want := value("p1", i)
			if i < n/2 {
				want = value("c2", i)
			}
			if k := fmt.Sprintf("k%05d", i); got[k] != want {
				t.Fatalf("%s: %s = %.20q, want %.20q", who, k, got[k], want)
			}
		}
	}
	mixed("the clone", c.kv)

	// The parent deleted entirely: the clone, after a takeover, reads
	// every key.
	p.stop()
	deleteAll(t, pstore)
	c.stop()
	c2, err := startOwnerWith(t, cdb, cloneStorage)
	if err != nil {
		t.Fatal(err)
	}
	mixed("the clone after its parent was deleted and a takeover", c2.kv)
}

// A copy stopped half-way (a crash: the hook fails after the first
// table) leaves the pins in the parent; the rerun copies only the rest,
// releases the pins and serves every key. An object with other content
// at a key the copy writes refuses, naming both.
func TestCloneCopyResumes(t *testing.T) {
	const n = 6000
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "parent")
	srv.CreateBucket(t, "clone")
	pdb, cdb := "s3://parent/shale/p", "s3://clone/shale/c"
	pstore, cstore := openStore(t, pdb), openStore(t, cdb)
	copyParent(t, pdb, pstore, n)
	cc := CloneConfig{From: pdb, Checkpoint: "c1", ID: "copy-1", Copy: true, copyParallel: 1}

	var copied atomic.Int32
	crash := errors.New("crashed after a table")
	cc.afterCopy = func(key string) error {
		if copied.Add(1) == 2 {
			return crash
		}
		return nil
	}
	if _, err := startCopyClone(t, cdb, cc); !errors.Is(err, crash) {
		t.Fatalf("the first run: %v, want the simulated crash", err)
	}
	if _, err := pstore.Stat(context.Background(), layout.PinKey("copy-1")); err != nil {
		t.Fatalf("the pin in the parent after a crash mid-copy: %v (it must keep the tables left to copy)", err)
	}
	if _, err := cstore.Stat(context.Background(), layout.CurrentKey); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("CURRENT after a crash mid-copy: %v", err)
	}
	rec, err := layout.ParseCopyRecord(readObject(t, cstore, layout.CopyKey))
	if err != nil {
		t.Fatal(err)
	}
	objs := rec.CopyObjects()
	_, have := storeBytes(t, cstore)
	var present []layout.CopyObject
	for _, o := range objs {
		if _, ok := have[o.To]; ok {
			present = append(present, o)
		}
	}
	if len(present) < 2 || len(present) == len(objs) {
		t.Fatalf("%d of %d objects copied before the crash; want the MANIFEST, a table, and some left", len(present), len(objs))
	}

	// Another object at a key the copy wrote: refused, naming both.
	bad := present[1]
	if _, err := cstore.Put(context.Background(), bad.To, strings.NewReader("not a table"), 11, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cc.afterCopy = nil
	_, err = startCopyClone(t, cdb, cc)
	if !errors.Is(err, shalefs.ErrBootstrapRefused) || !strings.Contains(err.Error(), bad.To) || !strings.Contains(err.Error(), bad.Key) {
		t.Fatalf("a rerun over a foreign object at %s: %v; want a refusal naming it and %s", bad.To, err, bad.Key)
	}
	if err := cstore.Delete(context.Background(), bad.To); err != nil {
		t.Fatal(err)
	}

	c, err := startCopyClone(t, cdb, cc)
	if err != nil {
		t.Fatal(err)
	}
	rep := c.srv.Cloned()
	if want := len(objs) - len(present) + 1; rep.CopiedObjects != want {
		t.Fatalf("the rerun copied %d objects; want the %d left", rep.CopiedObjects, want)
	}
	if _, err := pstore.Stat(context.Background(), layout.PinKey("copy-1")); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the pin after the copy completed: %v, want it gone", err)
	}
	checkKeys(t, "the clone", c.kv, n, "p1")
}

func readObject(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	r, _, err := s.Get(context.Background(), key, 0, -1)
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
