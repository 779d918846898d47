package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/primary"
)

// Backups end to end (docs/rfcs/0011-backups-and-point-in-time-restore.md):
// a real primary on a real MinIO, the backup store in a second bucket of
// the same server (server-side copies) or on a second server (streamed).

const n = 10000

// minio starts a server with buckets src and bak and points the AWS_*
// variables at it (the primary opens its store from them).
func minio(t *testing.T) *miniotest.Server {
	t.Helper()
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "src")
	srv.CreateBucket(t, "bak")
	return srv
}

type owner struct {
	srv  *primary.Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
}

func (o *owner) stop() {
	if o.srv != nil {
		o.srv.Stop(time.Second)
		o.conn.Close()
		o.srv = nil
	}
}

func startPrimary(t *testing.T, db string) *owner {
	t.Helper()
	return startPrimaryWith(t, db, time.Hour)
}

func startPrimaryWith(t *testing.T, db string, grace time.Duration) *owner {
	t.Helper()
	sc := shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: grace, CacheDir: filepath.Join(t.TempDir(), "cache")}
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(o.stop)
	return o
}

func value(gen string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", gen, i)))
	return fmt.Sprintf("%s-%05d-%s", gen, i, strings.Repeat(hex.EncodeToString(h[:]), 3))
}

// write puts keys [from, to) of generation gen, synced.
func write(t *testing.T, kv kvv1.KVClient, from, to int, gen string) {
	t.Helper()
	for i := from; i < to; i += 1000 {
		var ms []*kvv1.Mutation
		for j := i; j < min(to, i+1000); j++ {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(fmt.Sprintf("k%05d", j)), Value: []byte(value(gen, j))}}})
		}
		if _, err := kv.Write(context.Background(), &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
}

func checkpoint(t *testing.T, kv kvv1.KVClient, name string) {
	t.Helper()
	if _, err := kv.Checkpoint(context.Background(), &kvv1.CheckpointRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
}

// checkKeys reads every key through a primary: want(i) for k<i>, n keys.
func checkKeys(t *testing.T, who string, kv kvv1.KVClient, want func(i int) string) {
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
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			got[string(p.Key)] = string(p.Value)
		}
	}
	if len(got) != n {
		t.Fatalf("%s holds %d keys, want %d", who, len(got), n)
	}
	for i := range n {
		if k := fmt.Sprintf("k%05d", i); got[k] != want(i) {
			t.Fatalf("%s: %s = %.24q, want %.24q", who, k, got[k], want(i))
		}
	}
}

func open(t *testing.T, url string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func location(t *testing.T, s objstore.Store) backup.Location {
	return backup.Location{Store: s, Database: "orders"}
}

func create(t *testing.T, src objstore.Store, loc backup.Location, id, ck string) backup.Manifest {
	t.Helper()
	m, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: loc, ID: id, Checkpoint: ck})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("backup %s: %d objects, %d bytes; copied %d objects, %d bytes (%d streamed)", id, len(m.Objects), m.Bytes, m.CopiedObjects, m.CopiedBytes, m.Streamed)
	return m
}

// keysUnder lists a store's keys under prefix.
func keysUnder(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var out []string
	if err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) error {
		out = append(out, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The first test: 10,000 keys, backup, overwrite all, restore
// into a new directory: the original values. Server-side copies (two
// buckets of one server): nothing streams through the process.
func TestBackupRestoresAfterOverwrite(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	m := create(t, src, loc, "b1", "c1")
	if m.Streamed != 0 || m.CopiedObjects != len(m.Objects) {
		t.Fatalf("a first backup within one endpoint copies every object server-side: %d of %d copied, %d bytes streamed", m.CopiedObjects, len(m.Objects), m.Streamed)
	}
	if left := keysUnder(t, src, layout.PinsPrefix); len(left) != 0 {
		t.Fatalf("the backup left its pin in the source: %q", left)
	}

	write(t, p.kv, 0, n, "v2")
	if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the source after the overwrite", p.kv, func(i int) string { return value("v2", i) })

	const restored = "s3://src/restored"
	rep, err := backup.Restore(context.Background(), loc, "b1", open(t, restored))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored %d tables, %d bytes (%d streamed), sequence %d", rep.Tables, rep.Bytes, rep.Streamed, rep.Sequence)
	rstore := open(t, restored)
	epoch0 := func() (out []string) {
		for _, k := range keysUnder(t, rstore, "") {
			if name, e, ok := layout.ParseObjectKey(k); ok && e == 0 && layout.KindOf(name) == layout.KindTable {
				out = append(out, k)
			}
		}
		return out
	}
	// Checked before the restored database runs: once it compacts, its
	// trash loop may delete them within its 200 ms grace.
	if len(epoch0()) == 0 {
		t.Fatal("the restored directory holds no epoch-0 table")
	}
	r := startPrimaryWith(t, restored, 200*time.Millisecond)
	checkKeys(t, "the restored database", r.kv, func(i int) string { return value("v1", i) })
	// It is a database of its own: its writes do not reach the source,
	// and its restored (epoch-0) tables, once rewritten, are deleted as
	// any table (they are no clone's origin tables).
	write(t, r.kv, 0, n, "r1")
	if _, err := r.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, "the source", p.kv, func(i int) string { return value("v2", i) })
	for deadline := time.Now().Add(time.Minute); len(epoch0()) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("restored tables compacted away are never deleted: %q", epoch0())
		}
		time.Sleep(50 * time.Millisecond) // polling the store for a condition
	}
	checkKeys(t, "the restored database after its compaction", r.kv, func(i int) string { return value("r1", i) })

	// A second restore into the same (now used) directory is refused.
	if _, err := backup.Restore(context.Background(), loc, "b1", open(t, restored)); err == nil || !strings.Contains(err.Error(), "restore") {
		t.Fatalf("a restore into a database's directory: %v", err)
	}
}

// After a 1 % change, an incremental backup copies under 5 % of the bytes.
func TestIncrementalBackupCopiesLittle(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src, loc := open(t, db), location(t, open(t, "s3://bak/shale/orders"))
	create(t, src, loc, "b1", "c1")
	write(t, p.kv, 0, n/100, "v2") // 1 %
	checkpoint(t, p.kv, "c2")
	m := create(t, src, loc, "b2", "c2")
	t.Logf("incremental after a 1%% change: copied %d of %d bytes (%.2f%%), %d of %d objects", m.CopiedBytes, m.Bytes, 100*float64(m.CopiedBytes)/float64(m.Bytes), m.CopiedObjects, len(m.Objects))
	if m.CopiedBytes*20 >= m.Bytes {
		t.Fatalf("the incremental backup copied %d of %d bytes: not under 5%%", m.CopiedBytes, m.Bytes)
	}
	ms, err := backup.List(context.Background(), loc)
	if err != nil || len(ms) != 2 || ms[0].ID != "b1" || ms[1].ID != "b2" {
		t.Fatalf("list: %v %+v", err, ms)
	}
	// A rerun of a published backup answers it and leaves nothing behind;
	// its id with another checkpoint is refused.
	if again := create(t, src, loc, "b2", "c2"); !again.CompletedAt.Equal(m.CompletedAt) {
		t.Fatalf("a rerun of b2 answered another manifest: %+v", again)
	}
	if ps, _ := backup.ListPending(context.Background(), loc); len(ps) != 0 {
		t.Fatalf("a rerun of a published backup left pending records: %+v", ps)
	}
	if _, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: loc, ID: "b2", Checkpoint: "c1"}); err == nil || !strings.Contains(err.Error(), "published already") {
		t.Fatalf("b2's id for another checkpoint: %v", err)
	}
	// A location with its own credentials (Stream) copies through the
	// process even on the same endpoint.
	own := backup.Location{Store: open(t, "s3://bak/own/orders"), Database: "orders", Stream: true}
	if m := create(t, src, own, "b3", "c2"); m.Streamed != m.Bytes {
		t.Fatalf("a Stream location: %d of %d bytes streamed", m.Streamed, m.Bytes)
	}
}

// onList runs hook once, when the store is first listed under prefix.
type onList struct {
	objstore.Store
	prefix string
	hook   func()
	done   atomic.Bool
}

func (o *onList) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	if prefix == o.prefix && o.done.CompareAndSwap(false, true) {
		o.hook()
	}
	return o.Store.List(ctx, prefix, fn)
}

// RFC 0011, "Retention racing a backup": a backup lists the backup store
// after checking for delete markers; a delete of the backup it shares a
// table with runs in between (marker, listing, deletes). The delete sees
// the backup's pending record and keeps the table, so the backup it then
// publishes, having skipped the table as present, restores.
func TestDeleteRacesBackup(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	create(t, src, loc, "b1", "c1")
	write(t, p.kv, 0, n/100, "v2")
	checkpoint(t, p.kv, "c2")

	var delErr error
	held := &onList{Store: bak, prefix: backup.BackupsPrefix, hook: func() {
		_, delErr = backup.Delete(context.Background(), loc, "b1", nil)
	}}
	m, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: backup.Location{Store: held, Database: "orders"}, ID: "b2", Checkpoint: "c2"})
	if err != nil || delErr != nil {
		t.Fatalf("backup %v, delete %v", err, delErr)
	}
	if m.CopiedObjects == len(m.Objects) {
		t.Fatalf("b2 copied all %d objects: the race did not happen (it should skip b1's table)", m.CopiedObjects)
	}
	if r, err := backup.Verify(context.Background(), loc, "b2", t.TempDir()); err != nil || r.Keys != n {
		t.Fatalf("b2, published while b1 was deleted: %v %+v", err, r)
	}
}

// failing is a backup store whose object PUTs fail after the first `after`.
type failing struct {
	objstore.Store
	after int32
	puts  atomic.Int32
}

var errDown = errors.New("backup store down (test)")

func (f *failing) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if strings.HasPrefix(key, backup.ObjectsPrefix) && f.puts.Add(1) > f.after {
		return objstore.ObjectInfo{}, errDown
	}
	return f.Store.Put(ctx, key, r, size, opts)
}

// A backup interrupted (the backup store failing after 2 objects) is not
// listed, and a rerun with the same id completes, copying only the rest
// and releasing its pin.
func TestInterruptedBackupNotListed(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	for i := range 3 { // three tables
		write(t, p.kv, i*n/3, (i+1)*n/3, "v1")
		if _, err := p.kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint(t, p.kv, "c1")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	down := &failing{Store: bak, after: 2}
	_, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: backup.Location{Store: down, Database: "orders"}, ID: "b1", Checkpoint: "c1", Concurrency: 1})
	if !errors.Is(err, errDown) {
		t.Fatalf("a backup whose store fails: %v", err)
	}
	t.Logf("interrupted: %v", err)
	if ms, err := backup.List(context.Background(), loc); err != nil || len(ms) != 0 {
		t.Fatalf("an interrupted backup is listed: %v %+v", err, ms)
	}
	if ps, err := backup.ListPending(context.Background(), loc); err != nil || len(ps) != 1 || ps[0].ID != "b1" {
		t.Fatalf("the interrupted backup's pending record: %v %+v", err, ps)
	}
	if got := keysUnder(t, src, layout.PinsPrefix); !slices.Equal(got, []string{layout.PinKey("backup-b1")}) {
		t.Fatalf("while interrupted, the source holds pins %q, want the backup's", got)
	}
	if _, err := backup.Restore(context.Background(), loc, "b1", open(t, "s3://src/restored")); !errors.Is(err, backup.ErrNotFound) {
		t.Fatalf("restore of an interrupted backup: %v", err)
	}

	// A delete running in the location refuses the rerun (RFC 0011,
	// "Retention racing a backup"); once it ended, the rerun goes on.
	marker := backup.Format(backup.Deleting{ID: "b0"})
	if _, err := bak.Put(context.Background(), backup.DeletingKey("b0"), bytes.NewReader(marker), int64(len(marker)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: loc, ID: "b1", Checkpoint: "c1"}); err == nil || !strings.Contains(err.Error(), "a delete is running") {
		t.Fatalf("a backup while a delete runs: %v", err)
	}
	if err := bak.Delete(context.Background(), backup.DeletingKey("b0")); err != nil {
		t.Fatal(err)
	}

	m := create(t, src, loc, "b1", "c1")
	if m.CopiedObjects != len(m.Objects)-2 {
		t.Fatalf("the rerun copied %d of %d objects; the interrupted run had stored 2", m.CopiedObjects, len(m.Objects))
	}
	if ms, err := backup.List(context.Background(), loc); err != nil || len(ms) != 1 {
		t.Fatalf("after the rerun: %v %+v", err, ms)
	}
	if ps, _ := backup.ListPending(context.Background(), loc); len(ps) != 0 {
		t.Fatalf("pending records left: %+v", ps)
	}
	if got := keysUnder(t, src, layout.PinsPrefix); len(got) != 0 {
		t.Fatalf("pins left in the source: %q", got)
	}
	if rep, err := backup.Verify(context.Background(), loc, "b1", t.TempDir()); err != nil || rep.Keys != n {
		t.Fatalf("verify after the rerun: %v %+v", err, rep)
	}

	// An interrupted backup discarded: its pin, its pending record and
	// the objects only it stored go; b1's stay.
	write(t, p.kv, 0, n/10, "v2")
	checkpoint(t, p.kv, "c2")
	down = &failing{Store: bak, after: 2}
	if _, err := backup.Create(context.Background(), backup.CreateConfig{Source: src, To: backup.Location{Store: down, Database: "orders"}, ID: "b2", Checkpoint: "c2", Concurrency: 1}); !errors.Is(err, errDown) {
		t.Fatalf("b2 with the store failing: %v", err)
	}
	before := keysUnder(t, bak, backup.ObjectsPrefix)
	rep, err := backup.Delete(context.Background(), loc, "b2", nil)
	if err != nil || rep.Published || rep.PinLeft != "" {
		t.Fatalf("discard b2: %v %+v", err, rep)
	}
	if got := keysUnder(t, src, layout.PinsPrefix); len(got) != 0 {
		t.Fatalf("pins left in the source after the discard: %q", got)
	}
	if ps, _ := backup.ListPending(context.Background(), loc); len(ps) != 0 {
		t.Fatalf("pending records left after the discard: %+v", ps)
	}
	after := keysUnder(t, bak, backup.ObjectsPrefix)
	if len(before)-len(after) != 2 || rep.Objects != 2 {
		t.Fatalf("the discard removed %d objects (reported %d), want the 2 b2 had stored: %q -> %q", len(before)-len(after), rep.Objects, before, after)
	}
	if r, err := backup.Verify(context.Background(), loc, "b1", t.TempDir()); err != nil || r.Keys != n {
		t.Fatalf("b1 after b2's discard: %v %+v", err, r)
	}
}

// Deleting the oldest of two backups removes exactly the objects only it
// named; the other still verifies.
func TestDeleteOldestRemovesOnlyItsObjects(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	m1 := create(t, src, loc, "b1", "c1")
	write(t, p.kv, 0, n/2, "v2")
	if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, p.kv, "c2")
	m2 := create(t, src, loc, "b2", "c2")

	in2 := map[string]bool{}
	for _, o := range m2.Objects {
		in2[o.Key] = true
	}
	var only1 []string
	for _, o := range m1.Objects {
		if !in2[o.Key] {
			only1 = append(only1, backup.ObjectKey(o.Key))
		}
	}
	before := keysUnder(t, bak, backup.ObjectsPrefix)
	rep, err := backup.Delete(context.Background(), loc, "b1", nil)
	if err != nil {
		t.Fatal(err)
	}
	after := keysUnder(t, bak, backup.ObjectsPrefix)
	var removed []string
	for _, k := range before {
		if !slices.Contains(after, k) {
			removed = append(removed, k)
		}
	}
	slices.Sort(only1)
	t.Logf("deleted b1: %d objects, %d bytes removed; %d kept for b2", rep.Objects, rep.Bytes, rep.KeptObjectsFor)
	if len(only1) == 0 || !slices.Equal(removed, only1) {
		t.Fatalf("deleting b1 removed %q, want exactly the objects only b1 named %q", removed, only1)
	}
	if ms, _ := backup.List(context.Background(), loc); len(ms) != 1 || ms[0].ID != "b2" {
		t.Fatalf("after the delete: %+v", ms)
	}
	if got := keysUnder(t, bak, backup.DeletingPrefix); len(got) != 0 {
		t.Fatalf("delete markers left: %q", got)
	}
	if r, err := backup.Verify(context.Background(), loc, "b2", t.TempDir()); err != nil || r.Keys != n {
		t.Fatalf("b2 after b1's delete: %v %+v", err, r)
	}

	// The sweep: an object no backup names (an interrupted delete's) goes
	// once past the grace; one a running backup's pending record names,
	// and b2's, stay.
	put := func(key string, b []byte) {
		if _, err := bak.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const stray, running = "000001.sst.00000000000000000009", "000002.sst.00000000000000000009"
	put(backup.ObjectKey(stray), []byte("stray"))
	put(backup.ObjectKey(running), []byte("running"))
	put(backup.PendingKey("b9"), backup.Format(backup.Pending{ID: "b9", Keys: []string{running}}))
	if n, _, err := backup.Sweep(context.Background(), loc, time.Hour, time.Now()); err != nil || n != 0 {
		t.Fatalf("a sweep within the grace removed %d objects: %v", n, err)
	}
	if n, _, err := backup.Sweep(context.Background(), loc, time.Nanosecond, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("the sweep removed %d objects, want the stray one: %v", n, err)
	}
	left := keysUnder(t, bak, backup.ObjectsPrefix)
	if slices.Contains(left, backup.ObjectKey(stray)) || !slices.Contains(left, backup.ObjectKey(running)) {
		t.Fatalf("after the sweep: %q", left)
	}
	if got := keysUnder(t, bak, backup.DeletingPrefix); len(got) != 0 {
		t.Fatalf("sweep markers left: %q", got)
	}
	if r, err := backup.Verify(context.Background(), loc, "b2", t.TempDir()); err != nil || r.Keys != n {
		t.Fatalf("b2 after the sweep: %v %+v", err, r)
	}
}

// Verify finds one flipped byte in a table: by its SHA-256, and, with the
// manifest rewritten to match the damage, by RocksDB's own checksums.
func TestVerifyDetectsFlippedByte(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	m := create(t, src, loc, "b1", "c1")
	rep, err := backup.Verify(context.Background(), loc, "b1", t.TempDir())
	if err != nil || rep.Keys != n || rep.Tables == 0 {
		t.Fatalf("verify of a good backup: %v %+v", err, rep)
	}
	t.Logf("verified: %+v", rep)

	// Flip one byte in the middle of the largest table.
	var table backup.Object
	for _, o := range m.Objects {
		if name, _, ok := layout.ParseObjectKey(o.Key); ok && layout.KindOf(name) == layout.KindTable && o.Size > table.Size {
			table = o
		}
	}
	key := backup.ObjectKey(table.Key)
	r, _, err := bak.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	b[len(b)/3] ^= 0x40
	if _, err := bak.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = backup.Verify(context.Background(), loc, "b1", t.TempDir())
	if !errors.Is(err, backup.ErrDamaged) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("verify after a flipped byte in %s: %v", key, err)
	}
	t.Logf("flipped byte: %v", err)

	// The manifest rewritten to the damaged bytes' sum: RocksDB's check.
	sum := sha256.Sum256(b)
	for i := range m.Objects {
		if m.Objects[i].Key == table.Key {
			m.Objects[i].SHA256 = hex.EncodeToString(sum[:])
		}
	}
	mb := backup.Format(m)
	if _, err := bak.Put(context.Background(), backup.ManifestKey("b1"), bytes.NewReader(mb), int64(len(mb)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = backup.Verify(context.Background(), loc, "b1", t.TempDir())
	if !errors.Is(err, backup.ErrDamaged) || !strings.Contains(err.Error(), "RocksDB") {
		t.Fatalf("verify after a flipped byte the manifest agrees with: %v", err)
	}
	t.Logf("flipped byte, manifest matching: %v", err)
}

// The backup store on a second MinIO server: copies stream through the
// process (bounded: one object at a time per worker), and the backup
// restores back onto the first server.
func TestBackupAcrossEndpoints(t *testing.T) {
	minio(t)
	other := miniotest.Start(t)
	other.CreateBucket(t, "offsite")
	const db = "s3://src/orders"
	p := startPrimary(t, db)
	write(t, p.kv, 0, n, "v1")
	checkpoint(t, p.kv, "c1")
	src := open(t, db)
	bak, err := objstore.OpenS3("s3://offsite/shale/orders", other.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	loc := location(t, bak)
	m := create(t, src, loc, "b1", "c1")
	if m.Streamed != m.Bytes {
		t.Fatalf("across endpoints every byte streams: %d of %d", m.Streamed, m.Bytes)
	}
	if r, err := backup.Verify(context.Background(), loc, "b1", t.TempDir()); err != nil || r.Keys != n {
		t.Fatalf("verify: %v %+v", err, r)
	}
	const restored = "s3://src/restored"
	rep, err := backup.Restore(context.Background(), loc, "b1", open(t, restored))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Streamed == 0 {
		t.Fatalf("a restore across endpoints streams: %+v", rep)
	}
	r := startPrimary(t, restored)
	checkKeys(t, "the restored database", r.kv, func(i int) string { return value("v1", i) })
}
