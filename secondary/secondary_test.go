package secondary

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

func client(t *testing.T, addr string) kvv1.KVClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kvv1.NewKVClient(conn)
}

func startPrimary(t *testing.T, db string, epoch uint64) *primary.Server {
	t.Helper()
	p, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{Epoch: epoch, Lease: 100 * time.Millisecond, CacheDir: filepath.Join(t.TempDir(), "primary")}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startSecondary(t *testing.T, db string) *Server {
	t.Helper()
	s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "secondary")}, CatchupInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(time.Second) })
	return s
}

// waitVisible waits until every key of want reads back on kv.
func waitVisible(t *testing.T, kv kvv1.KVClient, want map[string]string) time.Duration {
	t.Helper()
	start := time.Now()
	for k, v := range want {
		for {
			r, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(k)})
			if err == nil && string(r.Value) == v {
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("%s=%s not visible on the secondary after a minute: %v", k, v, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// Synced writes on the primary become visible on the secondary; writes to
// the secondary are refused; it says it is a secondary.
func TestSecondaryServesPrimaryWrites(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		p := startPrimary(t, db, 1)
		defer p.Stop(time.Second)
		pkv := client(t, p.Addr())
		want := map[string]string{}
		put := func(from, to int) {
			for i := from; i < to; i++ {
				k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
				if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true}); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
		}
		put(0, 50)
		s := startSecondary(t, db)
		skv := client(t, s.Addr())
		waitVisible(t, skv, want)
		put(50, 300)
		if _, err := pkv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
		put(300, 320)
		lag := waitVisible(t, skv, want)
		t.Logf("%s: the last 20 writes visible on the secondary %v after the primary acknowledged them", loc.Name, lag)

		_, err := skv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("x"), Value: []byte("y"), Sync: true})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("a write to the secondary: %v, want FAILED_PRECONDITION", err)
		}
		st, err := skv.Status(context.Background(), &kvv1.StatusRequest{})
		if err != nil || st.Role != kvv1.Role_ROLE_SECONDARY {
			t.Fatalf("status of the secondary: %v %v", st, err)
		}
	})
}

// A new primary takes over (epoch 2) while the secondary serves: the
// secondary keeps every write of the old primary and follows the new one,
// without a restart.
func TestSecondaryFollowsFailover(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		a := startPrimary(t, db, 1)
		defer a.Stop(time.Second)
		akv := client(t, a.Addr())
		want := map[string]string{}
		for i := 0; i < 100; i++ {
			k, v := fmt.Sprintf("a%03d", i), "A"
			if _, err := akv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true}); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		s := startSecondary(t, db)
		skv := client(t, s.Addr())
		waitVisible(t, skv, want)

		b := startPrimary(t, db, 2) // deposes A
		defer b.Stop(time.Second)
		bkv := client(t, b.Addr())
		for i := 0; i < 100; i++ {
			k, v := fmt.Sprintf("b%03d", i), "B"
			if _, err := bkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true}); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
		waitVisible(t, skv, want)
	})
}

// With the primary's notifications, writes are visible on the secondary
// long before its polling interval (a minute here) would have found them,
// and its status reports the primary's sequence number and no lag once
// caught up.
func TestSecondaryCatchesUpOnNotifications(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		p := startPrimary(t, db, 1)
		defer p.Stop(time.Second)
		pkv := client(t, p.Addr())
		if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("first"), Value: []byte("1"), Sync: true}); err != nil {
			t.Fatal(err)
		}
		s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "secondary")}, CatchupInterval: time.Minute, Primary: p.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(time.Second)
		skv := client(t, s.Addr())
		for !s.watching.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		var lags []time.Duration
		for i := 0; i < 20; i++ {
			k := fmt.Sprintf("n%02d", i)
			if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte("v"), Sync: true}); err != nil {
				t.Fatal(err)
			}
			lag := waitVisible(t, skv, map[string]string{k: "v"})
			if lag > 30*time.Second {
				t.Fatalf("%s took %v to reach the secondary: notifications did not drive the catch-up", k, lag)
			}
			lags = append(lags, lag)
		}
		t.Logf("%s: visibility lag of 20 synced writes with notifications: %v", loc.Name, lags)
		st, err := skv.Status(context.Background(), &kvv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.PrimarySequence == 0 || st.PrimarySequence > st.LatestSequence || st.LagSeconds != 0 {
			t.Fatalf("caught-up secondary's status: primary sequence %d, applied %d, lag %vs", st.PrimarySequence, st.LatestSequence, st.LagSeconds)
		}
		// A secondary has no stream of its own to offer.
		stream, err := skv.Watch(context.Background(), &kvv1.WatchRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("watch on a secondary: %v, want UNIMPLEMENTED", err)
		}
	})
}

// A secondary on a missing bucket or with wrong credentials says so at
// start, naming what to fix, as a primary does: before it binds, opens a
// cache or retries anything.
func TestSecondaryMisconfiguredStore(t *testing.T) {
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "exists")
	start := func(db string) error {
		t.Helper()
		cache := filepath.Join(t.TempDir(), "secondary")
		s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage: shalefs.Config{CacheDir: cache}})
		if err == nil {
			s.Stop(time.Second)
		}
		if _, serr := os.Stat(cache); serr == nil {
			t.Errorf("a secondary that could not start on %s created its cache dir", db)
		}
		return err
	}
	err := start("s3://no-such-bucket/db")
	if want := "bucket no-such-bucket does not exist at " + srv.Endpoint + "; create it first"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a secondary on a missing bucket: %v, want an error containing %q", err, want)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	err = start("s3://exists/db")
	if err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("a secondary with a wrong secret: %v, want an error naming AWS_SECRET_ACCESS_KEY", err)
	}
}

// A catch-up that fails (here the store refuses one read; in life the
// MANIFEST rolled, a file went, the store hiccuped) is retried within
// moments, not at the next polling interval (an hour here), and readers
// meanwhile read the last version without an error.
func TestSecondaryRetriesFailedCatchUp(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		p := startPrimary(t, db, 1)
		defer p.Stop(time.Second)
		pkv := client(t, p.Addr())
		put := func(k string) {
			if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte("v"), Sync: true}); err != nil {
				t.Fatal(err)
			}
		}
		put("before")
		real, err := objstore.Open(db)
		if err != nil {
			t.Fatal(err)
		}
		var fail atomic.Bool
		store := &storetest.Hooked{Store: real, BeforeGet: func(key string) error {
			if key == "_shale/owner" && fail.CompareAndSwap(true, false) {
				return errors.New("injected: the store refused this read")
			}
			return nil
		}}
		s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage: shalefs.Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "secondary"), ReaderTTL: 4 * time.Hour}, CatchupInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(time.Second)
		skv := client(t, s.Addr())
		waitVisible(t, skv, map[string]string{"before": "v"})

		put("after")
		fail.Store(true)
		s.kick <- struct{}{} // as a notification would
		for fail.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := skv.Get(context.Background(), &kvv1.GetRequest{Key: []byte("before")}); err != nil {
			t.Fatalf("a read while the catch-up failed: %v", err)
		}
		waitVisible(t, skv, map[string]string{"after": "v"})
		if n := testutil.ToFloat64(s.failures); n != 1 {
			t.Fatalf("%v failed catch-ups, want the one injected", n)
		}
	})
}

// Every write RPC on a secondary fails with FAILED_PRECONDITION, saying it
// is a read-only replica and where writes go; nothing reaches its RocksDB.
func TestSecondaryRefusesWrites(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	p := startPrimary(t, db, 1)
	defer p.Stop(time.Second)
	s := startSecondary(t, db)
	kv := client(t, s.Addr())
	ctx := context.Background()
	put := &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte("k"), Value: []byte("v")}}}
	for name, call := range map[string]func() error{
		"Put": func() error {
			_, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v"), Sync: true})
			return err
		},
		"Delete": func() error { _, err := kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte("k")}); return err },
		"Write": func() error {
			_, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{put}})
			return err
		},
		"Flush":   func() error { _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); return err },
		"Compact": func() error { _, err := kv.Compact(ctx, &kvv1.CompactRequest{}); return err },
	} {
		err := call()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "read-only replica") {
			t.Errorf("%s on a secondary: %v, want FAILED_PRECONDITION saying read-only replica", name, err)
		}
	}
	if _, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte("k")}); status.Code(err) != codes.NotFound {
		t.Errorf("a refused write reached the secondary: get k: %v", err)
	}
}

// A secondary opened on an empty cache dir against a database with data in
// many tables and a live WAL (synced writes not flushed yet) serves all of
// it, with its tables in a cache too small to hold any (read from the
// store range by range) as well as with a roomy one.
func TestSecondaryEmptyCacheManyTables(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		eo := engine.DefaultOptions()
		eo.TargetFileSizeBytes = 64 << 10 // many small tables
		p, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: eo,
			Storage: shalefs.Config{Epoch: 1, Lease: 100 * time.Millisecond, CacheDir: filepath.Join(t.TempDir(), "primary")}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(time.Second)
		pkv := client(t, p.Addr())
		ctx := context.Background()
		want := map[string]string{}
		tables := uint64(0)
		rnd := rand.New(rand.NewSource(1))
		value := func() string { // incompressible, so tables fill up
			b := make([]byte, 500)
			rnd.Read(b)
			return hex.EncodeToString(b)
		}
		for round := 0; round < 12; round++ {
			var ms []*kvv1.Mutation
			for i := 0; i < 200; i++ {
				// Rounds overlap, so compactions rewrite tables as they go.
				k, v := fmt.Sprintf("k%05d", (round*97+i*13)%3000), fmt.Sprintf("r%d-%d-%s", round, i, value())
				ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}})
				want[k] = v
			}
			if _, err := pkv.Write(ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := pkv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 100; i++ { // the live WAL
			k := fmt.Sprintf("wal%03d", i)
			if _, err := pkv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte("w"), Sync: true}); err != nil {
				t.Fatal(err)
			}
			want[k] = "w"
		}
		st, err := pkv.Status(ctx, &kvv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		tables = st.Stats.SstFiles
		if tables < 10 {
			t.Fatalf("the primary has %d tables; the test wants several", tables)
		}
		for _, cacheBytes := range []int64{1, 0} {
			s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
				Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "empty"), CacheBytes: cacheBytes}, CatchupInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			skv := client(t, s.Addr())
			// Right after the open, before any catch-up: all there.
			var keys [][]byte
			for k := range want {
				keys = append(keys, []byte(k))
			}
			r, err := skv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				if res := r.Results[i]; !res.Found || string(res.Value) != want[string(k)] {
					t.Fatalf("cache of %d bytes: %s reads %q (found %v), want %q", cacheBytes, k, res.Value, res.Found, want[string(k)])
				}
			}
			scan, err := skv.Scan(ctx, &kvv1.ScanRequest{})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for {
				resp, err := scan.Recv()
				if err != nil {
					break
				}
				n += len(resp.Pairs)
			}
			if n != len(want) {
				t.Fatalf("cache of %d bytes: a scan of the secondary returned %d keys, want %d", cacheBytes, n, len(want))
			}
			t.Logf("%s, cache of %d bytes: %d keys from %d tables and a live WAL", loc.Name, cacheBytes, len(want), tables)
			s.Stop(time.Second)
		}
	})
}

// An idle secondary that follows the primary's notifications makes almost
// no store requests: its periodic catch-ups follow the last hint (nothing
// new: no request), and only the trash listing and the lease renewal, each
// every TTL/3, remain. A polling secondary lists the store at every one.
func TestSecondaryIdleRequests(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	p := startPrimary(t, db, 1)
	defer p.Stop(time.Second)
	pkv := client(t, p.Addr())
	if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	for _, notified := range []bool{true, false} {
		real, err := objstore.Open(db)
		if err != nil {
			t.Fatal(err)
		}
		counting := storetest.NewCounting(real)
		var catchups atomic.Int64
		cfg := Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage:         shalefs.Config{Store: counting, CacheDir: filepath.Join(t.TempDir(), "secondary"), ReaderTTL: time.Minute},
			CatchupInterval: 20 * time.Millisecond, OnCatchUp: func(uint64) { catchups.Add(1) }}
		if notified {
			cfg.Primary = p.Addr()
			cfg.CatchupInterval = 2 * time.Millisecond // every 20 ms with notifications
		}
		s, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		waitVisible(t, client(t, s.Addr()), map[string]string{"k": "v"})
		for notified && !s.watching.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		start := catchups.Load()
		for catchups.Load() < start+3 { // settle: the first catch-ups list
			time.Sleep(5 * time.Millisecond)
		}
		start, before := catchups.Load(), counting.Total()
		for catchups.Load() < start+20 {
			time.Sleep(5 * time.Millisecond)
		}
		n, reqs := catchups.Load()-start, counting.Total()-before
		t.Logf("notified %v: %d idle catch-ups made %d store requests", notified, n, reqs)
		if notified && reqs > 2 {
			t.Errorf("a notified idle secondary made %d store requests in %d catch-ups, want at most a trash listing and a lease renewal: %v", reqs, n, counting.Requests(counting.Total()-reqs))
		}
		if !notified && reqs < int(n) {
			t.Errorf("a polling secondary made %d store requests in %d catch-ups: it did not list the store", reqs, n)
		}
		s.Stop(time.Second)
	}
}

// A secondary whose start fails after its reader opened (here RocksDB
// cannot open as a secondary: its directory is a file) drops the reader
// lease the open published: the primary need not keep the files it named
// until the lease expires.
func TestSecondaryFailedStartDropsLease(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "db")
	p := startPrimary(t, db, 1)
	defer p.Stop(time.Second)
	cache := filepath.Join(dir, "secondary")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "secondary"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: cache, ReaderID: "doomed"}})
	if err == nil {
		s.Stop(time.Second)
		t.Fatal("a secondary whose RocksDB directory is a file started")
	}
	if !strings.Contains(err.Error(), "open as secondary") {
		t.Fatalf("start failed elsewhere than at RocksDB's open: %v", err)
	}
	store, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var leases []string
	if err := store.List(context.Background(), "_shale/readers/", func(o objstore.ObjectInfo) error {
		leases = append(leases, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(leases) > 0 {
		t.Errorf("the failed secondary left its reader lease: %v", leases)
	}
}
