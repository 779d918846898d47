package compactor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
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
	"github.com/shale-rocks/shale/internal/miniotest"
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
	if err := loadE(kv, m, rng, rounds, perRound); err != nil {
		t.Fatal(err)
	}
}

func loadE(kv kvv1.KVClient, m model, rng *rand.Rand, rounds, perRound int) error {
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
					return err
				}
				muts = nil
			}
		}
		if len(muts) > 0 {
			if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
				return err
			}
		}
		if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			return err
		}
	}
	return nil
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

func checkNoBackgroundErrors(t *testing.T, kv kvv1.KVClient) {
	t.Helper()
	if n := dbStatus(t, kv).Stats.BackgroundErrors; n != 0 {
		t.Fatalf("%d background errors", n)
	}
}

func fallbacks(p *testPrimary) float64 {
	n := 0.0
	for _, v := range p.Compactor().Fallbacks() {
		n += v
	}
	return n
}

// TestWorkerWritesOnlyItsJobDirectory: every write a worker sends to the
// store is under the directory of the job attempt it runs, and its
// store refuses anything else.
func TestWorkerWritesOnlyItsJobDirectory(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	sched := startScheduler(t, compactor.SchedulerConfig{})
	var recorded []*storetest.Counting
	var mu sync.Mutex
	startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
		c.OpenStore = func(url string) (objstore.Store, error) {
			s, err := objstore.Open(url)
			if err != nil {
				return nil, err
			}
			cs := storetest.NewCounting(s)
			mu.Lock()
			recorded = append(recorded, cs)
			mu.Unlock()
			return cs, nil
		}
	})
	p := startPrimary(t, remoteConfig(db, sched.Addr(), 1))
	m := model{}
	load(t, p.kv, m, rand.New(rand.NewSource(2)), 5, 1000)
	if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	// One job at least: how many depends on timing (on a loaded machine
	// the automatic compaction may take all five tables, leaving the
	// manual one nothing but the bottommost level, which it skips).
	waitFor(t, "completed jobs", func() bool { return sched.Snapshot().Total.Completed >= 1 })
	checkModel(t, p.kv, m)
	writes := 0
	mu.Lock()
	defer mu.Unlock()
	for _, cs := range recorded {
		for _, r := range cs.Requests(0) {
			op, key, _ := strings.Cut(r, " ")
			if op == "get" || op == "stat" || op == "list" {
				continue
			}
			writes++
			if !strings.HasPrefix(key, "_shale/compactions/00000000000000000001-") || strings.Count(key, "/") != 4 {
				t.Errorf("the worker wrote %s %s, outside a job's directory", op, key)
			}
		}
	}
	if writes == 0 {
		t.Fatal("the worker wrote nothing at all")
	}
	js := &compactor.JobStore{Store: recorded[0], Dir: "_shale/compactions/00000000000000000001-ab/1/"}
	for _, key := range []string{"CURRENT", "000012.sst.00000000000000000001", "_shale/epoch/00000000000000000009", "_shale/compactions/00000000000000000001-ab/2/000012.sst", "_shale/compactions/00000000000000000001-ab/1/x/000012.sst"} {
		if _, err := js.Put(context.Background(), key, strings.NewReader("x"), 1, objstore.PutOptions{}); !errors.Is(err, compactor.ErrOutsideJob) {
			t.Errorf("put %s: %v, want refused", key, err)
		}
	}
}

// minioDB starts the pinned MinIO server for t, points the AWS_*
// variables at it, and returns a new database URL in a bucket of its own.
func minioDB(t *testing.T, name string) string {
	t.Helper()
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, name)
	return "s3://" + name + "/shale/db"
}

// TestSchedulerDownFallsBackLocal (issue 11, test 3): with the scheduler
// down, compactions run locally (counted), nothing stalls or errs; a
// scheduler restart mid-job loses nothing; when it is back, remote
// compaction resumes. On MinIO.
func TestSchedulerDownFallsBackLocal(t *testing.T) {
	db := minioDB(t, "schedulerdown")
	sched := startScheduler(t, compactor.SchedulerConfig{})
	addr := sched.Addr()
	held := make(chan *compactorv1.Job, 1)
	release := make(chan struct{})
	var holdOnce sync.Once
	startWorker(t, addr, "w1", func(c *compactor.WorkerConfig) {
		compactor.SetAfterUpload(c, func(j *compactorv1.Job) {
			holdOnce.Do(func() { // the first job only
				held <- j
				<-release
			})
		})
	})
	p := startPrimary(t, remoteConfig(db, addr, 1))
	m := model{}
	rng := rand.New(rand.NewSource(3))

	// A job in flight when the scheduler goes away: the primary compacts
	// locally instead, and the worker's late result is dropped.
	done := make(chan error, 1)
	load(t, p.kv, m, rng, 3, 1000)
	go func() {
		_, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{})
		done <- err
	}()
	<-held
	sched.Stop()
	if err := <-done; err != nil {
		t.Fatalf("compaction with the scheduler gone mid-job: %v", err)
	}
	close(release)
	if p.Compactor().Fallbacks()[compactor.ReasonLost] < 1 {
		t.Fatalf("fallbacks %v, want scheduler_lost", p.Compactor().Fallbacks())
	}
	checkModel(t, p.kv, m)

	// Down: a write load compacts locally; level 0 never reaches the
	// slowdown trigger (20 files), no background error.
	before := fallbacks(p)
	load(t, p.kv, m, rng, 12, 800)
	waitFor(t, "local compactions to drain level 0", func() bool { return dbStatus(t, p.kv).Stats.FilesPerLevel[0] < 4 })
	if fallbacks(p) <= before || p.Compactor().Fallbacks()[compactor.ReasonUnavailable] < 1 {
		t.Fatalf("fallbacks %v: want scheduler_unavailable ones", p.Compactor().Fallbacks())
	}
	checkNoBackgroundErrors(t, p.kv)
	checkModel(t, p.kv, m)

	// Back on the same address: remote compaction resumes.
	sched2, err := compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sched2.Stop)
	waitFor(t, "a remote compaction after the scheduler returned", func() bool {
		load(t, p.kv, m, rng, 2, 500)
		return sched2.Snapshot().Total.Completed >= 1
	})
	if sched2.Snapshot().Total.Fallbacks == 0 {
		t.Fatal("the primary did not report its fallbacks to the new scheduler")
	}
	checkNoBackgroundErrors(t, p.kv)
	checkModel(t, p.kv, m)
}

// TestPrioritiesShareOneWorker (issue 11, test 4): two databases load at
// once through one worker slot. The worker takes its next job only once
// both have one waiting (or after a while), so every pick is contended
// (a primary compacts one job at a time). On MinIO:
// both progress, and priority 30 gets more jobs than priority 10.
func TestPrioritiesShareOneWorker(t *testing.T) {
	sched := startScheduler(t, compactor.SchedulerConfig{})
	hiDB := minioDB(t, "shares")
	loDB := strings.Replace(hiDB, "/shale/db", "/shale/lo", 1) // the same server and bucket, another database
	stop := make(chan struct{})
	bothQueued := func() bool {
		n := 0
		for _, d := range sched.Snapshot().Dbs {
			if d.Counters.Queued > 0 {
				n++
			}
		}
		return n == 2
	}
	startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
		compactor.SetBeforeLease(c, func() {
			deadline := time.Now().Add(10 * time.Second)
			for !bothQueued() && time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	})
	hiCfg, loCfg := remoteConfig(hiDB, sched.Addr(), 1), remoteConfig(loDB, sched.Addr(), 1)
	hiCfg.Compaction.Priority, loCfg.Compaction.Priority = 30, 10
	hi, lo := startPrimary(t, hiCfg), startPrimary(t, loCfg)
	models := []model{{}, {}}
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for i, p := range []*testPrimary{hi, lo} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(10 + i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := loadE(p.kv, models[i], rng, 1, 300); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	perDB := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, d := range sched.Snapshot().Dbs {
			out[d.Db] = d.Counters.Completed
		}
		return out
	}
	waitFor(t, "24 completed jobs", func() bool {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		c := perDB()
		return c[hiDB]+c[loDB] >= 24
	})
	close(stop)
	wg.Wait()
	c := perDB()
	t.Logf("completed: priority 30: %d, priority 10: %d", c[hiDB], c[loDB])
	if c[loDB] < 2 || c[hiDB] <= c[loDB] {
		t.Fatalf("completed jobs: priority 30 %d, priority 10 %d; want both progressing and the higher ahead", c[hiDB], c[loDB])
	}
	checkModel(t, hi.kv, models[0])
	checkModel(t, lo.kv, models[1])
}

// blind is an owner that never re-confirms its ownership by itself: only
// the store's conditional writes can stop it (primary/fencing_test.go).
func blind(cfg primary.Config) primary.Config {
	cfg.Storage.ConfirmEvery, cfg.Storage.IdleConfirmEvery, cfg.Storage.DeleteGrace = time.Hour, time.Hour, time.Hour
	cfg.NoReadinessCheck = true // it confirms too
	return cfg
}

func epochTables(t *testing.T, db string, epoch uint64) int {
	n := 0
	for _, k := range storeKeys(t, db, "") {
		if strings.HasSuffix(k, fmt.Sprintf(".sst.%020d", epoch)) {
			n++
		}
	}
	return n
}

// TestDeposedPrimarysJobInstallsNothing (issue 11, test 5; docs/fencing.md,
// "Remote compaction"): A submits a compaction; the worker has uploaded
// its outputs when B takes the database over; then the worker reports.
// A, which has not noticed, installs them, and its MANIFEST edit hits
// B's seal: A is fenced, and B's database (and C's after it) holds
// exactly the model. With newSweeps, B sweeps A's job directory before
// the result arrives, and A's check of the outputs sends it local, where
// the same seal stops it.
func TestDeposedPrimarysJobInstallsNothing(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		for _, newSweeps := range []bool{false, true} {
			t.Run(fmt.Sprintf("new owner sweeps=%v", newSweeps), func(t *testing.T) {
				testDeposedJob(t, loc.NewURL(t), newSweeps)
			})
		}
	})
}

func testDeposedJob(t *testing.T, db string, newSweeps bool) {
	sched := startScheduler(t, compactor.SchedulerConfig{})
	held := make(chan *compactorv1.Job, 1)
	release := make(chan struct{})
	var once sync.Once
	startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
		compactor.SetAfterUpload(c, func(j *compactorv1.Job) {
			once.Do(func() {
				held <- j
				<-release
			})
		})
	})
	a := startPrimary(t, blind(remoteConfig(db, sched.Addr(), 1)))
	m := model{}
	rng := rand.New(rand.NewSource(5))
	load(t, a.kv, m, rng, 3, 1000) // flushed: every write is in the store
	compacted := make(chan error, 1)
	go func() {
		_, err := a.kv.Compact(context.Background(), &kvv1.CompactRequest{})
		compacted <- err
	}()
	j := <-held
	jobDir := fmt.Sprintf("_shale/compactions/%s/%d/", j.JobId, j.Attempt)
	if len(storeKeys(t, db, jobDir)) == 0 {
		t.Fatal("the held job has no outputs in the store")
	}

	bCfg := remoteConfig(db, sched.Addr(), 2)
	if !newSweeps {
		bCfg.CompactionMode = "local"
	}
	b := startPrimary(t, bCfg)
	checkModel(t, b.kv, m)
	bLevels := fmt.Sprint(dbStatus(t, b.kv).Stats.FilesPerLevel)
	if newSweeps {
		waitFor(t, "B to sweep A's job directory", func() bool { return len(storeKeys(t, db, jobDir)) == 0 })
	}
	before := epochTables(t, db, 1)
	close(release)

	<-compacted // its error is not reported (RocksDB's C CompactRange returns none); the fence is
	select {
	case err := <-a.Done():
		if !strings.Contains(fmt.Sprint(err), "fenced") {
			t.Fatalf("A stopped with %v, want fenced", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("A was not fenced")
	}
	if newSweeps {
		if a.Compactor().Fallbacks()[compactor.ReasonBadResult] != 1 {
			t.Fatalf("A's fallbacks %v: want its late result refused (outputs swept)", a.Compactor().Fallbacks())
		}
	} else if after := epochTables(t, db, 1); after <= before {
		t.Fatalf("A's late install left no table of epoch 1 (%d before, %d after): the test did not exercise it", before, after)
	}
	// B never saw any of it.
	checkModel(t, b.kv, m)
	if got := fmt.Sprint(dbStatus(t, b.kv).Stats.FilesPerLevel); got != bLevels {
		t.Fatalf("B's levels changed from %s to %s without B compacting", bLevels, got)
	}
	checkNoBackgroundErrors(t, b.kv)
	load(t, b.kv, m, rng, 2, 500)
	b.stop()
	c := startPrimary(t, remoteConfig(db, sched.Addr(), 3))
	checkModel(t, c.kv, m)
	checkNoBackgroundErrors(t, c.kv)
}
