package compactor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
)

// startTestScheduler serves a scheduler on loopback and returns a client.
func startTestScheduler(t *testing.T, cfg SchedulerConfig) (*SchedulerServer, compactorv1.CompactorClient) {
	t.Helper()
	s, err := StartScheduler(SchedulerServerConfig{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Scheduler: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, compactorv1.NewCompactorClient(conn)
}

// submitted is a job submitted by a test primary.
type submitted struct {
	stream compactorv1.Compactor_CompactClient
	cancel context.CancelFunc
}

func submit(t *testing.T, c compactorv1.CompactorClient, db, id string, prio uint32) *submitted {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Compact(ctx, &compactorv1.CompactRequest{Db: db, JobId: id, Priority: prio, Input: []byte("input of " + id)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &submitted{stream: st, cancel: cancel}
	t.Cleanup(cancel)
	s.expect(t, compactorv1.CompactEvent_ACCEPTED)
	return s
}

func (s *submitted) expect(t *testing.T, want compactorv1.CompactEvent_State) *compactorv1.CompactEvent {
	t.Helper()
	ev, err := s.stream.Recv()
	if err != nil {
		t.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.State != want {
		t.Fatalf("event %v (%s), want %v", ev.State, ev.Error, want)
	}
	return ev
}

func lease(t *testing.T, c compactorv1.CompactorClient, worker string, wait time.Duration) *compactorv1.Job {
	t.Helper()
	r, err := c.Lease(context.Background(), &compactorv1.LeaseRequest{Worker: worker, Slots: 1, WaitMillis: uint32(wait / time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	return r.Job
}

func complete(t *testing.T, c compactorv1.CompactorClient, worker string, j *compactorv1.Job) bool {
	t.Helper()
	r, err := c.Complete(context.Background(), &compactorv1.CompleteRequest{Worker: worker, Job: &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt},
		Result: []byte("result"), Outputs: []*compactorv1.OutputFile{{Name: "000009.sst", Size: 100}}, BytesRead: 10, BytesWritten: 20})
	if err != nil {
		t.Fatal(err)
	}
	return r.Accepted
}

func stats(t *testing.T, c compactorv1.CompactorClient) *compactorv1.StatsResponse {
	t.Helper()
	s, err := c.Stats(context.Background(), &compactorv1.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJobLifecycle(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{})
	p := submit(t, c, "s3://b/db1", "1-a", 0)
	if st := stats(t, c); st.Total.Queued != 1 {
		t.Fatalf("queued = %d, want 1", st.Total.Queued)
	}
	j := lease(t, c, "w1", time.Second)
	if j == nil || j.JobId != "1-a" || j.Attempt != 1 || j.Db != "s3://b/db1" || string(j.Input) != "input of 1-a" {
		t.Fatalf("leased %v", j)
	}
	if ev := p.expect(t, compactorv1.CompactEvent_RUNNING); ev.Worker != "w1" || ev.Attempt != 1 {
		t.Fatalf("running event %v", ev)
	}
	if st := stats(t, c); st.Total.Running != 1 || st.Total.Queued != 0 || len(st.Workers) != 1 || st.Workers[0].Running != 1 {
		t.Fatalf("stats while running: %v", st)
	}
	if !complete(t, c, "w1", j) {
		t.Fatal("completion refused")
	}
	ev := p.expect(t, compactorv1.CompactEvent_DONE)
	if string(ev.Result) != "result" || len(ev.Outputs) != 1 || ev.Outputs[0].Name != "000009.sst" || ev.Attempt != 1 {
		t.Fatalf("done event %v", ev)
	}
	st := stats(t, c)
	if st.Total.Completed != 1 || st.Total.Running != 0 || st.Total.BytesWritten != 20 || st.Dbs[0].Priority != DefaultPriority {
		t.Fatalf("stats after: %v", st)
	}
	// A second completion of the same attempt is refused: the job is gone.
	if complete(t, c, "w1", j) {
		t.Fatal("a finished job was completed twice")
	}
}

func TestLostWorkerRequeues(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{LeaseTTL: time.Second})
	p := submit(t, c, "db", "1-a", 10)
	j1 := lease(t, c, "dead", time.Second)
	p.expect(t, compactorv1.CompactEvent_RUNNING)
	// "dead" never heartbeats: the job comes back.
	if ev := p.expect(t, compactorv1.CompactEvent_QUEUED); !strings.Contains(ev.Error, "dead stopped heartbeating") {
		t.Fatalf("queued again with %q", ev.Error)
	}
	j2 := lease(t, c, "alive", time.Second)
	if j2 == nil || j2.Attempt != 2 {
		t.Fatalf("second lease %v", j2)
	}
	p.expect(t, compactorv1.CompactEvent_RUNNING)
	// The dead worker wakes up: told to stop, and its completion refused.
	hb, err := c.Heartbeat(context.Background(), &compactorv1.HeartbeatRequest{Worker: "dead", Jobs: []*compactorv1.JobRef{{JobId: j1.JobId, Attempt: j1.Attempt}}})
	if err != nil || len(hb.Stop) != 1 {
		t.Fatalf("heartbeat of the dead worker: %v %v, want told to stop", hb, err)
	}
	if complete(t, c, "dead", j1) {
		t.Fatal("a lost lease completed the job")
	}
	// The live worker heartbeats past several TTLs and keeps the job.
	for i := 0; i < 4; i++ {
		hb, err := c.Heartbeat(context.Background(), &compactorv1.HeartbeatRequest{Worker: "alive", Jobs: []*compactorv1.JobRef{{JobId: j2.JobId, Attempt: j2.Attempt}}})
		if err != nil || len(hb.Stop) != 0 {
			t.Fatalf("heartbeat: %v %v", hb, err)
		}
		time.Sleep(400 * time.Millisecond) // the heartbeat period under test, not a wait for a condition
	}
	if !complete(t, c, "alive", j2) {
		t.Fatal("completion refused")
	}
	if ev := p.expect(t, compactorv1.CompactEvent_DONE); ev.Attempt != 2 || ev.Worker != "alive" {
		t.Fatalf("done %v", ev)
	}
	if st := stats(t, c); st.Total.Requeued != 1 || st.Total.Completed != 1 {
		t.Fatalf("stats %v", st.Total)
	}
}

func TestAttemptsBounded(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{MaxAttempts: 2})
	p := submit(t, c, "db", "1-a", 10)
	for attempt := uint32(1); attempt <= 2; attempt++ {
		j := lease(t, c, "w", time.Second)
		p.expect(t, compactorv1.CompactEvent_RUNNING)
		if _, err := c.Fail(context.Background(), &compactorv1.FailRequest{Worker: "w", Job: &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt}, Error: "disk full", Retryable: true}); err != nil {
			t.Fatal(err)
		}
		if attempt == 1 {
			p.expect(t, compactorv1.CompactEvent_QUEUED)
		}
	}
	if ev := p.expect(t, compactorv1.CompactEvent_FAILED); !strings.Contains(ev.Error, "disk full") || !strings.Contains(ev.Error, "attempt 2 of 2") {
		t.Fatalf("failure %q", ev.Error)
	}
	// A failure that would recur elsewhere fails at once.
	p2 := submit(t, c, "db", "1-b", 10)
	j := lease(t, c, "w", time.Second)
	p2.expect(t, compactorv1.CompactEvent_RUNNING)
	c.Fail(context.Background(), &compactorv1.FailRequest{Worker: "w", Job: &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt}, Error: "corrupt input"})
	p2.expect(t, compactorv1.CompactEvent_FAILED)
	if st := stats(t, c); st.Total.Failed != 2 || st.Total.Requeued != 1 {
		t.Fatalf("stats %v", st.Total)
	}
}

// waitFor polls cond until it holds (the suite runs on loaded machines:
// conditions, never fixed sleeps).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCancelledByPrimary(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{})
	queued := submit(t, c, "db", "1-q", 10)
	running := submit(t, c, "db", "1-r", 10)
	// Lease one: the older, 1-q. Cancel the other while queued.
	j := lease(t, c, "w", time.Second)
	if j.JobId != "1-q" {
		t.Fatalf("leased %s, want the older job", j.JobId)
	}
	running.cancel()
	waitFor(t, "the queued job's cancellation", func() bool { return stats(t, c).Total.Cancelled == 1 })
	if st := stats(t, c); st.Total.Queued != 0 {
		t.Fatalf("cancelled job still queued: %v", st.Total)
	}
	// Cancel the running one: the worker is told at its next heartbeat.
	queued.cancel()
	waitFor(t, "the running job's cancellation", func() bool { return stats(t, c).Total.Cancelled == 2 })
	hb, err := c.Heartbeat(context.Background(), &compactorv1.HeartbeatRequest{Worker: "w", Jobs: []*compactorv1.JobRef{{JobId: j.JobId, Attempt: j.Attempt}}})
	if err != nil || len(hb.Stop) != 1 {
		t.Fatalf("heartbeat %v %v, want told to stop", hb, err)
	}
	if complete(t, c, "w", j) {
		t.Fatal("a cancelled job was completed")
	}
	if st := stats(t, c); st.Total.Running != 0 || st.Total.Completed != 0 {
		t.Fatalf("stats %v", st.Total)
	}
}

// TestFairShareThroughTheQueue: two databases keep four jobs each in the
// queue; one worker slot takes 40 jobs. Priority 30 gets three times the
// starts of priority 10, and the low one is never starved.
func TestFairShareThroughTheQueue(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{})
	type db struct {
		name    string
		prio    uint32
		n       int
		pending map[string]*submitted
	}
	dbs := []*db{{name: "hi", prio: 30, pending: map[string]*submitted{}}, {name: "lo", prio: 10, pending: map[string]*submitted{}}}
	seq := 0
	refill := func(d *db) {
		for len(d.pending) < 4 {
			seq++
			id := fmt.Sprintf("1-%s%d", d.name, seq)
			d.pending[id] = submit(t, c, d.name, id, d.prio)
		}
	}
	for _, d := range dbs {
		refill(d)
	}
	var order []string
	for i := 0; i < 40; i++ {
		j := lease(t, c, "w", time.Second)
		if j == nil {
			t.Fatal("no job leased")
		}
		var d *db
		for _, x := range dbs {
			if x.name == j.Db {
				d = x
			}
		}
		d.n++
		order = append(order, d.name)
		if !complete(t, c, "w", j) {
			t.Fatal("completion refused")
		}
		p := d.pending[j.JobId]
		p.expect(t, compactorv1.CompactEvent_RUNNING)
		p.expect(t, compactorv1.CompactEvent_DONE)
		delete(d.pending, j.JobId)
		refill(d)
	}
	if dbs[0].n < 28 || dbs[0].n > 32 || dbs[1].n < 8 {
		t.Fatalf("priority 30 started %d and priority 10 %d of 40 (want about 30 and 10); order %v", dbs[0].n, dbs[1].n, order)
	}
	st := stats(t, c)
	for _, d := range st.Dbs {
		if d.Counters.Queued != 4 {
			t.Fatalf("%s has %d queued, want 4", d.Db, d.Counters.Queued)
		}
	}
}

func TestSubmitValidation(t *testing.T) {
	_, c := startTestScheduler(t, SchedulerConfig{})
	for _, tc := range []struct {
		req  *compactorv1.CompactRequest
		want string
	}{
		{&compactorv1.CompactRequest{JobId: "1-a", Input: []byte("x")}, "db is empty"},
		{&compactorv1.CompactRequest{Db: "d", Input: []byte("x")}, "job_id is empty"},
		{&compactorv1.CompactRequest{Db: "d", JobId: "1-a"}, "input is empty"},
		{&compactorv1.CompactRequest{Db: "d", JobId: "1-a", Input: []byte("x"), Priority: 101}, "priority 101 is above 100"},
	} {
		st, err := c.Compact(context.Background(), tc.req)
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument %q", tc.req, err, tc.want)
		}
	}
	submit(t, c, "d", "1-dup", 10)
	st, err := c.Compact(context.Background(), &compactorv1.CompactRequest{Db: "d", JobId: "1-dup", Input: []byte("x")})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("duplicate job: %v", err)
	}
}

func TestStatsCollector(t *testing.T) {
	s, c := startTestScheduler(t, SchedulerConfig{})
	submit(t, c, "s3://b/one", "1-a", 20)
	p := submit(t, c, "s3://b/two", "1-b", 10)
	p.cancel()
	waitFor(t, "the cancellation", func() bool { return stats(t, c).Total.Cancelled == 1 })
	lease(t, c, "w1", 0)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewStatsCollector(s.Snapshot))
	want := `
# HELP shale_compactor_running Compaction jobs running on workers.
# TYPE shale_compactor_running gauge
shale_compactor_running{db="s3://b/one"} 1
shale_compactor_running{db="s3://b/two"} 0
# HELP shale_compactor_workers Workers seen recently.
# TYPE shale_compactor_workers gauge
shale_compactor_workers 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shale_compactor_running", "shale_compactor_workers"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(filterCollector{reg, "shale_compactor_jobs_total", `outcome="cancelled"`}); n != 1 {
		t.Fatalf("cancelled = %v", n)
	}
}

// filterCollector exposes one series of a registry for testutil.ToFloat64.
type filterCollector struct {
	reg    *prometheus.Registry
	name   string
	labels string
}

func (f filterCollector) Describe(chan<- *prometheus.Desc) {}

func (f filterCollector) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != f.name {
			continue
		}
		for _, m := range mf.Metric {
			var parts []string
			for _, l := range m.Label {
				parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if strings.Contains(strings.Join(parts, ","), f.labels) && m.Counter.GetValue() > 0 {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(f.name, "", nil, nil), prometheus.CounterValue, m.Counter.GetValue())
			}
		}
	}
}
