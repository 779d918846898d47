package compactor_test

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

// waitDeadline bounds every wait for a condition: generous, because the
// suite runs on two loaded cores; never a fixed sleep.
const waitDeadline = 2 * time.Minute

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startScheduler(t *testing.T, cfg compactor.SchedulerConfig) *compactor.SchedulerServer {
	t.Helper()
	s, err := compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: "127.0.0.1:0", Scheduler: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

type testWorker struct {
	*compactor.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

func startWorker(t *testing.T, sched, id string, mod func(*compactor.WorkerConfig)) *testWorker {
	t.Helper()
	cfg := compactor.WorkerConfig{Scheduler: sched, CacheDir: filepath.Join(t.TempDir(), "worker-"+id), ID: id, Poll: 500 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	w, err := compactor.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw := &testWorker{Worker: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tw.done)
		w.Run(ctx)
	}()
	t.Cleanup(tw.stop)
	return tw
}

func (w *testWorker) stop() {
	w.cancel()
	<-w.done
	w.Close()
}

// counter reads one series of a gatherer.
func counter(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

type testPrimary struct {
	*primary.Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
}

func remoteConfig(db, sched string, epoch uint64) primary.Config {
	return primary.Config{
		DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage:        shalefs.Config{Epoch: epoch, Lease: 200 * time.Millisecond},
		CompactionMode: "remote",
		Compaction:     compactor.ClientConfig{Scheduler: sched, Priority: 10, QueueTimeout: time.Minute},
	}
}

func startPrimary(t *testing.T, cfg primary.Config) *testPrimary {
	t.Helper()
	if cfg.Storage.CacheDir == "" {
		cfg.Storage.CacheDir = filepath.Join(t.TempDir(), "cache")
	}
	s, err := primary.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPrimary{Server: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(p.stop)
	return p
}

func (p *testPrimary) stop() {
	if p.Server != nil {
		p.Server.Stop(time.Second)
		p.conn.Close()
		p.Server = nil
	}
}

// model is what the database must hold.
type model map[string]string

// load writes rounds of puts and deletes, flushing after each round, so
// that level 0 fills and RocksDB compacts.
func load(t *testing.T, kv kvv1.KVClient, m model, rng *rand.Rand, rounds, perRound int) {
	t.Helper()
	ctx := context.Background()
	for r := 0; r < rounds; r++ {
		var muts []*kvv1.Mutation
		for i := 0; i < perRound; i++ {
			k := fmt.Sprintf("key%06d", rng.Intn(4*perRound))
			if rng.Intn(10) == 0 {
				muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte(k)}}})
				delete(m, k)
				continue
			}
			v := fmt.Sprintf("%s-r%d-%d-%s", k, r, i, strings.Repeat("v", rng.Intn(200)))
			muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}})
			m[k] = v
			if len(muts) == 200 {
				if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
					t.Fatal(err)
				}
				muts = nil
			}
		}
		if len(muts) > 0 {
			if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkModel scans the whole database and compares it with m.
func checkModel(t *testing.T, kv kvv1.KVClient, m model) {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			want, ok := m[string(p.Key)]
			if !ok || want != string(p.Value) {
				t.Fatalf("scan: %s = %.40q, model has %.40q (present %v)", p.Key, p.Value, want, ok)
			}
			n++
		}
	}
	if n != len(m) {
		t.Fatalf("scan returned %d keys, the model has %d", n, len(m))
	}
}

func dbStatus(t *testing.T, kv kvv1.KVClient) *kvv1.StatusResponse {
	t.Helper()
	st, err := kv.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func storeKeys(t *testing.T, db, prefix string) []string {
	t.Helper()
	s, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRemoteCompactionMatchesModel (issue 11, test 1): with remote
// compaction on, a write load compacts on the worker (scheduler stats and
// worker metrics show it), nothing falls back, and a full scan equals the
// model, on this owner and on the next one from an empty cache.
func TestRemoteCompactionMatchesModel(t *testing.T) {
	storetest.ForEachBackend(t, testRemoteCompactionMatchesModel)
}

func testRemoteCompactionMatchesModel(t *testing.T, loc storetest.Location) {
	db := loc.NewURL(t)
	sched := startScheduler(t, compactor.SchedulerConfig{})
	w := startWorker(t, sched.Addr(), "w1", nil)
	p := startPrimary(t, remoteConfig(db, sched.Addr(), 1))
	m := model{}
	rng := rand.New(rand.NewSource(1))
	load(t, p.kv, m, rng, 6, 1500) // level 0 reaches its trigger: automatic compactions
	waitFor(t, "an automatic compaction completed on the worker", func() bool { return sched.Snapshot().Total.Completed >= 1 })
	if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	checkModel(t, p.kv, m)

	st := sched.Snapshot()
	if st.Total.Completed < 2 || st.Total.Failed != 0 || len(st.Dbs) != 1 || st.Dbs[0].Db != db {
		t.Fatalf("scheduler stats %v", st)
	}
	if n := counter(t, w.Gatherer(), "shale_compactor_worker_jobs_total", "outcome", "completed"); n != float64(st.Total.Completed) {
		t.Fatalf("worker completed %v jobs, the scheduler %d", n, st.Total.Completed)
	}
	for reason, n := range p.Compactor().Fallbacks() {
		if n != 0 {
			t.Fatalf("%v compactions fell back (%s)", n, reason)
		}
	}
	s := dbStatus(t, p.kv)
	if s.Stats.BackgroundErrors != 0 || s.Stats.FilesPerLevel[0] != 0 {
		t.Fatalf("after a full compaction: %v", s.Stats)
	}
	// Installed outputs leave nothing in the job directories.
	waitFor(t, "empty job directories", func() bool { return len(storeKeys(t, db, "_shale/compactions/")) == 0 })

	// The next owner, from an empty cache, reads the same data.
	p.stop()
	p2 := startPrimary(t, remoteConfig(db, sched.Addr(), 2))
	checkModel(t, p2.kv, m)
}

// startRemote starts a scheduler, one worker and a remote primary.
func checkNoBackgroundErrors(t *testing.T, kv kvv1.KVClient) {
	t.Helper()
	if n := dbStatus(t, kv).Stats.BackgroundErrors; n != 0 {
		t.Fatalf("%d background errors", n)
	}
}

var _ = compactorv1.CompactEvent_DONE
