package primary

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// The races of RFC 0010 that need an exact interleaving: a store hook
// holds one request between two steps while the test moves the other
// party (docs/rfcs/0010-checkpoints-and-clones.md, "Races considered").

// keptAndReadable: through owner o, every key deleted and compacted and
// the trash loop past its grace, the checkpoint's tables are all in the
// store and a server at it reads back want exactly.
func keptAndReadable(t *testing.T, db string, o *owner, name, id string, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	store := openStore(t, db)
	rec := checkpointRecord(t, store, id)
	var keys []string
	for k := range scanAll(t, o.kv) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if _, err := o.kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte(k), Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	flushAndCompact(t, o.kv)
	waitTrashKeeps(t, store, "the trash loop emptied every table the checkpoint does not name", fileVersions(rec))
	checkKept(t, store, rec, false, "named by checkpoint "+name)
	cs, err := openCheckpoint(t, db, name)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.stop()
	got := scanAll(t, cs.kv)
	if len(got) != len(want) {
		t.Fatalf("the server at %s holds %d keys, want %d", name, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("the server at %s: %s = %q, want %q", name, k, got[k], v)
		}
	}
}

// A is committing a checkpoint's catalog entry when B takes over. Three
// orders: A's PUT held until B has sealed A's catalog version (A's entry
// meets the seal); A's entry stored, its reply held until B has opened
// (B replays it); A's entry stored between B's listing and B's seal (B's
// seal loses the slot and goes after it). The only answers allowed:
// FAILED_PRECONDITION and in no later owner's catalog (its files swept),
// or OK and in every later catalog with every table readable at it; an
// UNAVAILABLE "outcome unknown" that a retry with the same request id
// settles one way or the other.
func TestTakeoverDuringCheckpoint(t *testing.T) {
	storetest.ForEachBackend(t, testTakeoverDuringCheckpoint)
}

func testTakeoverDuringCheckpoint(t *testing.T, be storetest.Location) {
	for _, order := range []string{"seal-first", "entry-first", "entry-between-listing-and-seal"} {
		t.Run(order, func(t *testing.T) {
			db := be.NewURL(t)
			ctx := context.Background()
			aHold, bHold := newHold(), newHold()
			var aStored atomic.Bool
			aStoredCh := make(chan struct{})
			aStore := &storetest.Hooked{Store: openStore(t, db),
				BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
					if catalogEntryKey(key, 1) && order != "entry-first" {
						aHold.stop()
					}
					return nil
				},
				AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
					if catalogEntryKey(key, 1) && err == nil && aStored.CompareAndSwap(false, true) {
						close(aStoredCh)
						if order == "entry-first" {
							aHold.stop()
						}
					}
					return err
				}}
			ac := blindOwner(1)
			ac.Store = aStore
			a, err := startOwnerWith(t, db, ac)
			if err != nil {
				t.Fatal(err)
			}
			writeKeys(t, a.kv, 500, func(int) string { return "a" }) // in the memtable: the create flushes
			aHold.armed.Store(true)
			type answer struct {
				r   *kvv1.CheckpointResponse
				err error
			}
			done := make(chan answer, 1)
			go func() {
				r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "during", RequestId: "r1"})
				done <- answer{r, err}
			}()
			aHold.wait(t, "A's catalog entry is held")
			// Meanwhile A rewrites every key and compacts: the checkpoint's
			// tables are obsolete in A's MANIFEST (A holds its deletes), so
			// B's RocksDB finds them obsolete at its open and trashes them.
			writeKeys(t, a.kv, 500, func(int) string { return "b" })
			flushAndCompact(t, a.kv)

			bc := raceCfg(2)
			if order == "entry-between-listing-and-seal" {
				// B has listed A's catalog version and is sealing it: A's
				// entry goes first, into the slot B's seal aims at.
				bHold.armed.Store(true)
				bc.Store = &storetest.Hooked{Store: openStore(t, db), BeforePut: func(key string, size int64, o objstore.PutOptions) error {
					if name, e, _, _, ok := layout.ParseSegmentKey(key); ok && name == layout.CatalogLog && e == 1 && size == 0 && bHold.armed.Load() {
						bHold.armed.Store(false)
						close(aHold.release)
						<-aStoredCh
					}
					return nil
				}}
			}
			b, err := startOwnerWith(t, db, bc)
			if err != nil {
				t.Fatal(err)
			}
			switch order {
			case "seal-first", "entry-first":
				close(aHold.release)
			case "entry-between-listing-and-seal":
				if !aStored.Load() {
					t.Fatal("B opened without sealing A's catalog version")
				}
			}
			ans := <-done
			t.Logf("A's answer: %v", ans.err)
			bList := listNames(t, b.kv)
			id, present := bList["during"]
			switch code := status.Code(ans.err); {
			case code == codes.Unavailable && strings.Contains(ans.err.Error(), "outcome unknown"):
				// Settled by a retry with the same request id on B.
				r, err := b.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "during", RequestId: "r1"})
				if present {
					if err != nil || r.Checkpoint.Id != id {
						t.Fatalf("B lists %s; a retry on B answered %v, %v", id, r, err)
					}
				} else if err == nil && r.Checkpoint.Epoch == 1 {
					t.Fatalf("B does not list A's checkpoint but a retry answered it: %v", r)
				}
				present, id = true, ""
				if err == nil {
					id = r.Checkpoint.Id
				}
				if id == "" {
					t.Fatalf("the retry on B failed: %v", err)
				}
			case code == codes.FailedPrecondition:
				if present {
					t.Fatalf("A was answered FAILED_PRECONDITION but B lists the checkpoint (%s)", id)
				}
				if order != "seal-first" {
					t.Fatalf("A's entry was stored before B sealed, yet A was told FAILED_PRECONDITION")
				}
			case ans.err == nil:
				if !present || id != ans.r.Checkpoint.Id {
					t.Fatalf("A acknowledged %s but B lists %v", ans.r.Checkpoint.Id, bList)
				}
				if order == "seal-first" {
					t.Fatalf("A acknowledged a checkpoint whose entry met B's seal")
				}
			default:
				t.Fatalf("A's checkpoint: %v; want OK, FAILED_PRECONDITION or UNAVAILABLE outcome unknown", ans.err)
			}
			a.stop()
			b.stop()
			c, err := startOwnerWith(t, db, raceCfg(3))
			if err != nil {
				t.Fatal(err)
			}
			cList, dbList := listNames(t, c.kv), storeListNames(t, db)
			if !present {
				if len(cList) != 0 || len(dbList) != 0 {
					t.Fatalf("a fenced checkpoint is listed: C %v, --db %v", cList, dbList)
				}
				if dirs := checkpointDirs(t, db); len(dirs) != 0 {
					t.Fatalf("the fenced checkpoint's files were not swept:\n%s", strings.Join(dirs, "\n"))
				}
				return
			}
			if cList["during"] != id || dbList["during"] != id {
				t.Fatalf("checkpoint %s: C lists %v, --db %v", id, cList, dbList)
			}
			// The later owners' RocksDB trashed the checkpoint's tables
			// (obsolete since A's compaction); the catalog kept them.
			_, trashed := tableState(t, openStore(t, db), checkpointRecord(t, openStore(t, db), id))
			nTrashed := 0
			for _, tr := range trashed {
				if tr {
					nTrashed++
				}
			}
			if nTrashed == 0 {
				t.Fatal("no table of the checkpoint was trashed: the test did not make them obsolete")
			}
			if got := scanAll(t, c.kv); len(got) != 500 || got["k00000"] != "b" {
				t.Fatalf("C holds %d keys, k00000 = %q; want A's 500 rewritten ones", len(got), got["k00000"])
			}
			keptAndReadable(t, db, c, "during", id, keysWritten(500, "a"))
		})
	}
}

// The store fails around a create. Before the commit (MinIO stopped, or
// the record's PUT failing): UNAVAILABLE "not created", never listed, its
// files swept at the next open. The commit's reply lost (the entry is
// stored, every answer errors): UNAVAILABLE "outcome unknown", the
// checkpoint listed and protecting its tables meanwhile, and settled as
// created by a retry with the same request id or by the next owner.
func TestCheckpointStoreOutage(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointStoreOutage)
}

func testCheckpointStoreOutage(t *testing.T, be storetest.Location) {
	ctx := context.Background()
	type faults struct {
		beforeManifest, failRecord, loseCommit atomic.Bool
		entryStored                            atomic.Bool
	}
	start := func(t *testing.T, db string, f *faults, cfg shalefs.Config) *owner {
		cfg.Epoch = 1
		cfg.RetryFor = time.Second
		cfg.Store = &storetest.Hooked{Store: openStore(t, db),
			BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
				switch {
				case strings.HasPrefix(key, layout.CheckpointsPrefix) && strings.Contains(key, "/MANIFEST-") && f.beforeManifest.Load():
					if be.MinIO != nil {
						f.beforeManifest.Store(false)
						be.MinIO.Stop() // the store goes away under the create
						return nil
					}
					return outage{"MANIFEST copy"} // on file://, every retry fails
				case strings.HasPrefix(key, layout.CheckpointsPrefix) && strings.HasSuffix(key, "/record") && f.failRecord.Load():
					return outage{"record"}
				case catalogEntryKey(key, 1) && f.loseCommit.Load() && f.entryStored.Load():
					return outage{"catalog entry"} // every retry fails too
				}
				return nil
			},
			AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
				if catalogEntryKey(key, 1) && err == nil && f.loseCommit.Load() {
					f.entryStored.Store(true)
					return outage{"catalog entry's reply"}
				}
				return err
			}}
		o, err := startOwnerWith(t, db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	notCreated := func(t *testing.T, what string, arm func(*faults)) {
		t.Run(what, func(t *testing.T) {
			db := be.NewURL(t)
			f := &faults{}
			cfg := blindOwner(1)
			a := start(t, db, f, cfg)
			writeKeys(t, a.kv, 300, func(int) string { return "a" })
			arm(f)
			_, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "outage", RequestId: "r1"})
			if be.MinIO != nil && !be.MinIO.Running() {
				be.MinIO.Restart(t)
			}
			f.failRecord.Store(false)
			f.beforeManifest.Store(false)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not created") {
				t.Fatalf("create during an outage before the commit: %v, want UNAVAILABLE not created", err)
			}
			if l := listNames(t, a.kv); len(l) != 0 {
				t.Fatalf("A lists %v after a create that failed before its commit", l)
			}
			// The primary goes on: a new create works.
			if _, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "after", RequestId: "r2"}); err != nil {
				t.Fatalf("create after the outage: %v", err)
			}
			a.srv.fs.Stop()
			b, err := startOwnerWith(t, db, raceCfg(2))
			if err != nil {
				t.Fatal(err)
			}
			a.stop()
			for who, l := range map[string]map[string]string{"B": listNames(t, b.kv), "--db": storeListNames(t, db)} {
				if _, ok := l["outage"]; ok || len(l) != 1 {
					t.Fatalf("%s lists %v, want only \"after\"", who, l)
				}
			}
			after := listNames(t, b.kv)["after"]
			for _, k := range checkpointDirs(t, db) {
				if !strings.HasPrefix(k, layout.CheckpointDir(after)) {
					t.Fatalf("B's open did not sweep the failed create's files: %s", k)
				}
			}
		})
	}
	notCreated(t, "store-down-before-manifest-copy", func(f *faults) { f.beforeManifest.Store(true) })
	notCreated(t, "record-put-failing", func(f *faults) { f.failRecord.Store(true) })

	for _, settle := range []string{"retry", "takeover"} {
		t.Run("commit-reply-lost/"+settle, func(t *testing.T) {
			db := be.NewURL(t)
			f := &faults{}
			a := start(t, db, f, raceCfg(1))
			writeKeys(t, a.kv, 1000, func(int) string { return "a" })
			f.loseCommit.Store(true)
			_, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "lost", RequestId: "r1"})
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "outcome unknown") {
				t.Fatalf("create whose commit reply was lost: %v, want UNAVAILABLE outcome unknown", err)
			}
			if !f.entryStored.Load() {
				t.Fatal("the test needs the entry in the store")
			}
			id := listNames(t, a.kv)["lost"]
			if id == "" {
				t.Fatal("A does not list a checkpoint whose outcome is unknown (it must keep it as if created)")
			}
			// Meanwhile it protects its tables: everything rewritten,
			// compacted and past the grace, they stay.
			keptAndReadable(t, db, a, "lost", id, keysWritten(1000, "a"))
			if _, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "lost", RequestId: "other"}); status.Code(err) != codes.Unavailable {
				t.Fatalf("a create while the catalog is unreachable: %v, want UNAVAILABLE", err)
			}
			f.loseCommit.Store(false)
			o := a
			if settle == "takeover" {
				a.srv.fs.Stop()
				b, err := startOwnerWith(t, db, raceCfg(2))
				if err != nil {
					t.Fatal(err)
				}
				a.stop()
				o = b
			}
			r, err := o.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "lost", RequestId: "r1"})
			if err != nil || r.Checkpoint.Id != id {
				t.Fatalf("retry with the same request id (%s): %v, %v; want checkpoint %s", settle, r, err, id)
			}
			if _, err := o.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "lost", RequestId: "other"}); status.Code(err) != codes.AlreadyExists {
				t.Fatalf("another request for the name: %v, want ALREADY_EXISTS", err)
			}
			o.stop()
			c, err := startOwnerWith(t, db, raceCfg(3))
			if err != nil {
				t.Fatal(err)
			}
			if got := listNames(t, c.kv)["lost"]; got != id {
				t.Fatalf("C lists %q, want %s", got, id)
			}
			checkServes(t, db, "lost", 1000)
		})
	}
}

// Step 4's retry: a write above S flushed between the flush wait and the
// file listing sends the capture round again; twice forces the third
// attempt, which holds the write gate across its flush and ends. The
// server at the checkpoint holds exactly the writes up to S.
func TestCheckpointRetriesAboveS(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointRetriesAboveS)
}

func testCheckpointRetriesAboveS(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	ctx := context.Background()
	a := mustOwner(t, db, 1)
	writeKeys(t, a.kv, 200, func(int) string { return "a" })
	seqs := map[string]uint64{}
	put := func(k string) {
		if err := a.srv.db.Put([]byte(k), []byte("x"), true); err != nil {
			t.Error(err)
		}
		seqs[k] = a.srv.db.LatestSequence()
	}
	fires := 0
	a.srv.checkpointWaited = func() {
		if fires == 2 {
			return // the third attempt holds the gate: a write here would wait forever
		}
		fires++
		// A write above S, flushed before the listing; then one left in
		// the memtable, so the next attempt has something to flush.
		put(fmt.Sprintf("above-%d", fires))
		if err := a.srv.db.Flush(); err != nil {
			t.Error(err)
		}
		put(fmt.Sprintf("unflushed-%d", fires))
	}
	r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "retried"})
	a.srv.checkpointWaited = nil
	if err != nil {
		t.Fatal(err)
	}
	put("after")
	s := r.Checkpoint.Sequence
	t.Logf("S = %d after %d writes above it were flushed during the wait; writes: %v", s, fires, seqs)
	cs, err := openCheckpoint(t, db, "retried")
	if err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, cs.kv)
	for k, q := range seqs {
		if _, in := got[k]; in != (q <= s) {
			t.Fatalf("write %s (sequence %d) in the checkpoint at %d: %v", k, q, s, in)
		}
	}
	if len(got) != 200+4 {
		t.Fatalf("the checkpoint holds %d keys, want %d", len(got), 204)
	}
	if fires != 2 {
		t.Fatalf("the hook ran %d times, want 2 (the test did not force the third attempt)", fires)
	}
	if s < seqs["unflushed-2"] {
		t.Fatalf("S = %d is below unflushed-2 (%d), written during the second attempt: no third attempt ran", s, seqs["unflushed-2"])
	}
}

// An adversary's requests: each refused with a clear error, or answered
// exactly once.
func TestCheckpointAPIAdversary(t *testing.T) {
	storetest.ForEachBackend(t, testCheckpointAPIAdversary)
}

func testCheckpointAPIAdversary(t *testing.T, be storetest.Location) {
	ctx := context.Background()
	db := be.NewURL(t)
	a, err := startOwnerWith(t, db, raceCfg(1))
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, a.kv, 100, func(int) string { return "a" })
	top := t // owners started in a subtest serve the later ones

	t.Run("bad-requests", func(t *testing.T) {
		for _, c := range []struct {
			req  *kvv1.CheckpointRequest
			want string
		}{
			{&kvv1.CheckpointRequest{Name: "past", Expires: timestamppb.New(time.Now().Add(-time.Hour))}, "not in the future"},
			{&kvv1.CheckpointRequest{Name: "epoch", Expires: &timestamppb.Timestamp{}}, "not in the future"},
			{&kvv1.CheckpointRequest{Name: "broken", Expires: &timestamppb.Timestamp{Seconds: 1 << 62}}, "expires"},
			{&kvv1.CheckpointRequest{Name: ""}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "Upper"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "-lead"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "trail-"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "a/b"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "../x"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "a.b"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "a\nb"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: "é"}, "not valid"},
			{&kvv1.CheckpointRequest{Name: strings.Repeat("a", 64)}, "not valid"},
		} {
			_, err := a.kv.Checkpoint(ctx, c.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Errorf("create %q expires %v: %v; want INVALID_ARGUMENT naming %q", c.req.Name, c.req.Expires, err, c.want)
			}
		}
		if _, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: strings.Repeat("a", 63)}); err != nil {
			t.Errorf("a 63-character name: %v", err)
		}
		if _, err := a.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: "../x"}); status.Code(err) != codes.NotFound {
			t.Errorf("delete of a bad name: %v, want NOT_FOUND", err)
		}
		if l := listNames(t, a.kv); len(l) != 1 {
			t.Errorf("after the refusals A lists %v", l)
		}
	})

	t.Run("same-request-id-1000", func(t *testing.T) {
		const n = 1000
		ids := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "once", RequestId: "same"})
				errs[i] = err
				if err == nil {
					ids[i] = r.Checkpoint.Id
				}
			}()
		}
		wg.Wait()
		for i := range errs {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("request %d: %v, id %s; want every one answered checkpoint %s", i, errs[i], ids[i], ids[0])
			}
		}
		n1 := 0
		for _, k := range checkpointDirs(t, db) {
			if strings.HasSuffix(k, "/record") || strings.Contains(k, "/record ") {
				n1++
			}
		}
		if l := listNames(t, a.kv); l["once"] != ids[0] || n1 != 2 {
			t.Fatalf("after 1000 creates with one request id: list %v, %d records in the store (want 2: once and the 63-character one)", l, n1)
		}
		// Different request ids racing for one name: one wins.
		won := atomic.Int32{}
		for i := 0; i < 100; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "contended", RequestId: fmt.Sprint(i)})
				switch status.Code(err) {
				case codes.OK:
					won.Add(1)
				case codes.AlreadyExists:
				default:
					t.Errorf("contended create: %v", err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 {
			t.Fatalf("%d creates of one name with different request ids succeeded, want 1", won.Load())
		}
	})

	t.Run("delete-races-create", func(t *testing.T) {
		want := listNames(t, a.kv)
		for i := 0; i < 20; i++ {
			name := fmt.Sprintf("race-%d", i)
			var wg sync.WaitGroup
			var cerr, derr error
			var cid string
			wg.Add(2)
			go func() {
				defer wg.Done()
				r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: name, RequestId: name})
				cerr = err
				if err == nil {
					cid = r.Checkpoint.Id
				}
			}()
			go func() {
				defer wg.Done()
				_, derr = a.kv.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: name})
			}()
			wg.Wait()
			if cerr != nil {
				t.Fatalf("create %s racing its delete: %v", name, cerr)
			}
			switch status.Code(derr) {
			case codes.OK: // the delete came second
			case codes.NotFound:
				want[name] = cid
			default:
				t.Fatalf("delete %s racing its create: %v", name, derr)
			}
			if got := listNames(t, a.kv); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after create/delete of %s (delete: %v): A lists %v, want %v", name, derr, got, want)
			}
		}
		a.srv.fs.Stop()
		b, err := startOwnerWith(top, db, raceCfg(2))
		if err != nil {
			t.Fatal(err)
		}
		a.stop()
		if got := listNames(t, b.kv); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after a takeover B lists %v, want %v", got, want)
		}
		a = b
	})

	t.Run("tampered-record", func(t *testing.T) {
		r, err := a.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "guarded"})
		if err != nil {
			t.Fatal(err)
		}
		store := openStore(t, db)
		key := layout.CheckpointRecordKey(r.Checkpoint.Id)
		get := func(key string) []byte {
			rd, _, err := store.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			b, err := io.ReadAll(rd)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		origBytes := get(key)
		putKey := func(key string, b []byte) {
			if _, err := store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		put := func(b []byte) { putKey(key, b) }
		mutate := func(f func(*layout.CheckpointRecord)) []byte {
			rec := checkpointRecord(t, store, r.Checkpoint.Id)
			f(&rec)
			return rec.Format()
		}
		for _, c := range []struct {
			what string
			data []byte
		}{
			{"garbage", []byte("not a record")},
			{"a later sequence", mutate(func(r *layout.CheckpointRecord) { r.Sequence += 1000 })},
			{"a table dropped", mutate(func(r *layout.CheckpointRecord) { r.Files = r.Files[1:] })},
			{"a table's epoch changed", mutate(func(r *layout.CheckpointRecord) { r.Files[0].Epoch += 7 })},
			{"a table's size changed", mutate(func(r *layout.CheckpointRecord) { r.Files[0].Size++ })},
			{"the MANIFEST cut short", mutate(func(r *layout.CheckpointRecord) { r.Manifest.Size /= 2 })},
			{"another checkpoint's id", mutate(func(r *layout.CheckpointRecord) { r.ID = "0000000000000001-deadbeef" })},
		} {
			put(c.data)
			cs, err := openCheckpoint(t, db, "guarded")
			if err == nil {
				st, _ := cs.kv.Status(ctx, &kvv1.StatusRequest{})
				cs.stop()
				t.Errorf("record with %s: the server opened (at sequence %d, the catalog says %d); want it refused", c.what, st.GetLatestSequence(), r.Checkpoint.Sequence)
				continue
			}
			if !strings.Contains(err.Error(), "does not match") || !strings.Contains(err.Error(), key) {
				t.Errorf("record with %s: refused with %q; want an error naming the record and what is wrong", c.what, err)
			}
		}
		put(origBytes)
		// The MANIFEST copy changed, its size kept.
		rec := checkpointRecord(t, store, r.Checkpoint.Id)
		mkey := layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name)
		morig := get(mkey)
		bad := bytes.Clone(morig)
		bad[len(bad)/2] ^= 0x20
		putKey(mkey, bad)
		if _, err := openCheckpoint(t, db, "guarded"); err == nil || !strings.Contains(err.Error(), "does not match") || !strings.Contains(err.Error(), mkey) {
			t.Errorf("a changed MANIFEST copy: %v; want it refused, naming %s", err, mkey)
		}
		putKey(mkey, morig)
		if _, err := openCheckpoint(t, db, "guarded"); err != nil {
			t.Fatalf("the restored record: %v", err)
		}
		// Nothing that deletes trusts the record: the catalog names the
		// files. A sweep (the next open) keeps its directory.
		put([]byte("not a record"))
		a.srv.fs.Stop()
		b, err := startOwnerWith(t, db, raceCfg(3))
		if err != nil {
			t.Fatal(err)
		}
		a.stop()
		if got := listNames(t, b.kv)["guarded"]; got != r.Checkpoint.Id {
			t.Fatalf("after a tampered record B lists %q", got)
		}
		if _, err := store.Stat(ctx, key); err != nil {
			t.Fatalf("the sweep deleted a live checkpoint's record: %v", err)
		}
	})
}
