// Package compactor runs Shale's remote compaction (docs/architecture.md,
// docs/compaction.md): a scheduler that queues compaction jobs from
// primaries with per-database priority and fair share, stateless workers
// that run them with RocksDB's DB::OpenAndCompact against the database in
// the object store, and the client a primary's CompactionService uses to
// submit a job and wait for it.
package compactor

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/internal/auth"
)

// SchedulerConfig tunes a scheduler.
type SchedulerConfig struct {
	// LeaseTTL: a worker that has not heartbeated a job for this long has
	// lost it, and the job goes back to the queue (default 15s).
	LeaseTTL time.Duration
	// MaxAttempts bounds how often a job is leased before it fails
	// (default 3): a job that kills every worker must not go round forever.
	MaxAttempts uint32
	Logger      *slog.Logger
}

func (c *SchedulerConfig) defaults() {
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Scheduler is the job queue. It keeps everything in memory: soft state
// that primaries and workers rebuild by themselves after a restart (a
// primary whose stream breaks compacts locally; a worker told its job is
// unknown stops it).
type Scheduler struct {
	compactorv1.UnimplementedCompactorServer
	cfg     SchedulerConfig
	started time.Time
	// secured: the server authenticates every caller (auth.Guard with
	// auth.RequireScheduler), and a submission must be for the database
	// the submitting primary's certificate names.
	secured bool

	mu      sync.Mutex
	dbs     map[string]*dbState
	jobs    map[string]*job
	workers map[string]*workerState
	wake    chan struct{} // closed when a job is queued

	stop chan struct{}
	wg   sync.WaitGroup
}

type dbState struct {
	name     string
	priority uint32
	pass     uint64
	queue    []*job // FIFO
	running  int
	c        compactorv1.Counters // completed ... bytes_written (queued and running are live)
}

type jobState int

const (
	jobQueued jobState = iota
	jobRunning
	jobFinished
)

type job struct {
	id string
	db *dbState
	// owner is who submitted it (the primary's identity; "" in
	// plaintext), for the logs. The job's events go only to the stream
	// that submitted it (events).
	owner    string
	req      *compactorv1.CompactRequest
	state    jobState
	attempt  uint32
	worker   string
	leaseEnd time.Time
	queuedAt time.Time
	// events go to the primary's stream. Every send is non-blocking: a job
	// sends at most 2*MaxAttempts+1 events, and the buffer holds them all.
	events chan *compactorv1.CompactEvent
}

type workerState struct {
	slots     uint32
	seen      time.Time
	completed uint64
}

// NewScheduler returns a scheduler; call Close to stop its lease checks.
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	cfg.defaults()
	s := &Scheduler{
		cfg: cfg, started: time.Now(),
		dbs: map[string]*dbState{}, jobs: map[string]*job{}, workers: map[string]*workerState{},
		wake: make(chan struct{}), stop: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.expireLoop()
	return s
}

// Close stops the scheduler's background work.
func (s *Scheduler) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

func (s *Scheduler) expireLoop() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.cfg.LeaseTTL/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.expire(time.Now())
		}
	}
}

// expire re-queues the jobs whose worker stopped heartbeating.
func (s *Scheduler) expire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.jobs {
		if j.state == jobRunning && now.After(j.leaseEnd) {
			s.cfg.Logger.Warn("compaction job lost its worker; re-queued", "job", j.id, "db", j.db.name, "worker", j.worker, "attempt", j.attempt)
			s.retryLocked(j, fmt.Sprintf("worker %s stopped heartbeating", j.worker))
		}
	}
}

// retryLocked puts a running job back in the queue, or fails it after
// MaxAttempts.
func (s *Scheduler) retryLocked(j *job, why string) {
	j.db.running--
	if j.attempt >= s.cfg.MaxAttempts {
		j.db.c.Failed++
		s.finishLocked(j, &compactorv1.CompactEvent{State: compactorv1.CompactEvent_FAILED, JobId: j.id,
			Error: fmt.Sprintf("%s (attempt %d of %d)", why, j.attempt, s.cfg.MaxAttempts)})
		return
	}
	j.worker = ""
	j.db.c.Requeued++
	s.queueLocked(j)
	send(j, &compactorv1.CompactEvent{State: compactorv1.CompactEvent_QUEUED, JobId: j.id, Attempt: j.attempt, Error: why})
}

func (s *Scheduler) queueLocked(j *job) {
	d := j.db
	if len(d.queue) == 0 && d.running == 0 {
		var active []uint64
		for _, o := range s.dbs {
			if o != d && (len(o.queue) > 0 || o.running > 0) {
				active = append(active, o.pass)
			}
		}
		d.pass = Activate(d.pass, active)
	}
	j.state = jobQueued
	j.queuedAt = time.Now()
	d.queue = append(d.queue, j)
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *Scheduler) finishLocked(j *job, ev *compactorv1.CompactEvent) {
	j.state = jobFinished
	delete(s.jobs, j.id)
	send(j, ev)
}

func send(j *job, ev *compactorv1.CompactEvent) {
	select {
	case j.events <- ev:
	default: // cannot happen (see job.events); never block the scheduler
	}
}

// Compact implements the Compactor service: the primary's side of a job.
func (s *Scheduler) Compact(req *compactorv1.CompactRequest, stream compactorv1.Compactor_CompactServer) error {
	if err := checkSubmit(req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	owner := ""
	if s.secured {
		id, ok := auth.FromContext(stream.Context())
		if !ok {
			return status.Error(codes.Unauthenticated, "compact: the caller is not authenticated")
		}
		// Workers open the job's database with the store's credentials:
		// only its own primary may make them.
		if err := auth.CheckSubmission(id, req.Db); err != nil {
			s.cfg.Logger.Warn("refused a compaction submitted for another database", "caller", id.String(), "callers_db", id.Database, "db", req.Db, "job", req.JobId)
			return err
		}
		owner = id.String()
	}
	j, err := s.submit(req, owner)
	if err != nil {
		return err
	}
	if err := stream.Send(&compactorv1.CompactEvent{State: compactorv1.CompactEvent_ACCEPTED, JobId: j.id}); err != nil {
		s.cancel(j)
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			s.cancel(j)
			return stream.Context().Err()
		case ev := <-j.events:
			if err := stream.Send(ev); err != nil {
				s.cancel(j)
				return err
			}
			if ev.State == compactorv1.CompactEvent_DONE || ev.State == compactorv1.CompactEvent_FAILED {
				return nil
			}
		}
	}
}

func checkSubmit(r *compactorv1.CompactRequest) error {
	switch {
	case r.Db == "":
		return fmt.Errorf("compact: db is empty (the database's store URL)")
	case r.JobId == "":
		return fmt.Errorf("compact: job_id is empty")
	case len(r.Input) == 0:
		return fmt.Errorf("compact: input is empty (RocksDB's serialized CompactionServiceInput)")
	case r.Priority > MaxPriority:
		return fmt.Errorf("compact: priority %d is above %d", r.Priority, MaxPriority)
	}
	return nil
}

// submit queues a new job. A job id already queued or running is
// refused, whoever submitted it: a submission never attaches to another
// one's job (its events, its result), and the error says nothing of it.
func (s *Scheduler) submit(req *compactorv1.CompactRequest, owner string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.jobs[req.JobId]; dup {
		return nil, status.Errorf(codes.AlreadyExists, "job %s is already queued or running: submit each compaction under a new job id", req.JobId)
	}
	d := s.dbs[req.Db]
	if d == nil {
		d = &dbState{name: req.Db}
		s.dbs[req.Db] = d
	}
	d.priority = clampPriority(req.Priority)
	d.c.Fallbacks += req.Fallbacks
	j := &job{id: req.JobId, db: d, owner: owner, req: req, events: make(chan *compactorv1.CompactEvent, 2*s.cfg.MaxAttempts+2)}
	s.jobs[j.id] = j
	s.queueLocked(j)
	return j, nil
}

// cancel drops a job whose primary went away or gave up.
func (s *Scheduler) cancel(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch j.state {
	case jobFinished:
		return
	case jobQueued:
		q := j.db.queue
		for i := range q {
			if q[i] == j {
				j.db.queue = append(q[:i:i], q[i+1:]...)
				break
			}
		}
	case jobRunning:
		j.db.running-- // the worker learns at its next heartbeat
	}
	j.db.c.Cancelled++
	j.state = jobFinished
	delete(s.jobs, j.id)
}

// Lease implements the Compactor service.
func (s *Scheduler) Lease(ctx context.Context, req *compactorv1.LeaseRequest) (*compactorv1.LeaseResponse, error) {
	if req.Worker == "" {
		return nil, status.Error(codes.InvalidArgument, "lease: worker is empty")
	}
	wait := time.Duration(req.WaitMillis) * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		s.seenLocked(req.Worker, req.Slots)
		j := s.nextLocked()
		if j != nil {
			j.state = jobRunning
			j.attempt++
			j.worker = req.Worker
			j.leaseEnd = time.Now().Add(s.cfg.LeaseTTL)
			j.db.running++
			j.db.pass += stride(j.db.priority)
			send(j, &compactorv1.CompactEvent{State: compactorv1.CompactEvent_RUNNING, JobId: j.id, Attempt: j.attempt, Worker: req.Worker})
			r := j.req
			s.mu.Unlock()
			return &compactorv1.LeaseResponse{Job: &compactorv1.Job{
				JobId: j.id, Attempt: j.attempt, Db: r.Db, Input: r.Input, TableOptions: r.TableOptions,
				InputFiles: r.InputFiles, InputBytes: r.InputBytes, LeaseMillis: uint32(s.cfg.LeaseTTL / time.Millisecond),
				ColdDb: r.ColdDb,
			}}, nil
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			return &compactorv1.LeaseResponse{}, nil
		case <-ctx.Done():
			return &compactorv1.LeaseResponse{}, nil
		case <-s.stop:
			return nil, status.Error(codes.Unavailable, "scheduler stopping")
		}
	}
}

// nextLocked takes the next job off its database's queue by Pick.
func (s *Scheduler) nextLocked() *job {
	var cands []Candidate
	var dbs []*dbState
	for _, d := range s.dbs {
		if len(d.queue) > 0 {
			cands = append(cands, Candidate{DB: d.name, Priority: d.priority, Pass: d.pass, Oldest: d.queue[0].queuedAt})
			dbs = append(dbs, d)
		}
	}
	i := Pick(cands)
	if i < 0 {
		return nil
	}
	d := dbs[i]
	j := d.queue[0]
	d.queue = d.queue[1:]
	return j
}

func (s *Scheduler) seenLocked(worker string, slots uint32) {
	w := s.workers[worker]
	if w == nil {
		w = &workerState{}
		s.workers[worker] = w
	}
	w.seen = time.Now()
	if slots > 0 {
		w.slots = slots
	}
}

// holds reports whether worker holds the lease of attempt of a running job.
func (s *Scheduler) holdsLocked(worker string, ref *compactorv1.JobRef) *job {
	if ref == nil {
		return nil
	}
	j := s.jobs[ref.JobId]
	if j == nil || j.state != jobRunning || j.attempt != ref.Attempt || j.worker != worker {
		return nil
	}
	return j
}

// Heartbeat implements the Compactor service.
func (s *Scheduler) Heartbeat(_ context.Context, req *compactorv1.HeartbeatRequest) (*compactorv1.HeartbeatResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenLocked(req.Worker, req.Slots)
	resp := &compactorv1.HeartbeatResponse{}
	for _, ref := range req.Jobs {
		if j := s.holdsLocked(req.Worker, ref); j != nil {
			j.leaseEnd = time.Now().Add(s.cfg.LeaseTTL)
		} else {
			resp.Stop = append(resp.Stop, ref)
		}
	}
	return resp, nil
}

// Complete implements the Compactor service.
func (s *Scheduler) Complete(_ context.Context, req *compactorv1.CompleteRequest) (*compactorv1.CompleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenLocked(req.Worker, 0)
	j := s.holdsLocked(req.Worker, req.Job)
	if j == nil {
		return &compactorv1.CompleteResponse{Accepted: false}, nil
	}
	d := j.db
	d.running--
	d.c.Completed++
	d.c.BytesRead += req.BytesRead
	d.c.BytesWritten += req.BytesWritten
	s.workers[req.Worker].completed++
	s.finishLocked(j, &compactorv1.CompactEvent{State: compactorv1.CompactEvent_DONE, JobId: j.id, Attempt: j.attempt,
		Worker: req.Worker, Result: req.Result, Outputs: req.Outputs})
	return &compactorv1.CompleteResponse{Accepted: true}, nil
}

// Fail implements the Compactor service.
func (s *Scheduler) Fail(_ context.Context, req *compactorv1.FailRequest) (*compactorv1.FailResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seenLocked(req.Worker, 0)
	j := s.holdsLocked(req.Worker, req.Job)
	if j == nil {
		return &compactorv1.FailResponse{}, nil
	}
	s.cfg.Logger.Warn("compaction job failed on a worker", "job", j.id, "db", j.db.name, "submitter", j.owner, "worker", req.Worker, "attempt", j.attempt, "retryable", req.Retryable, "err", req.Error)
	if req.Retryable {
		s.retryLocked(j, fmt.Sprintf("worker %s: %s", req.Worker, req.Error))
		return &compactorv1.FailResponse{}, nil
	}
	j.db.running--
	j.db.c.Failed++
	s.finishLocked(j, &compactorv1.CompactEvent{State: compactorv1.CompactEvent_FAILED, JobId: j.id, Attempt: j.attempt,
		Error: fmt.Sprintf("worker %s: %s", req.Worker, req.Error)})
	return &compactorv1.FailResponse{}, nil
}

// workerWindow: workers seen within it count as present.
func (s *Scheduler) workerWindow() time.Duration { return max(2*s.cfg.LeaseTTL, 30*time.Second) }

// Stats implements the Compactor service.
func (s *Scheduler) Stats(context.Context, *compactorv1.StatsRequest) (*compactorv1.StatsResponse, error) {
	return s.Snapshot(), nil
}

// Snapshot returns the scheduler's statistics.
func (s *Scheduler) Snapshot() *compactorv1.StatsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	resp := &compactorv1.StatsResponse{Total: &compactorv1.Counters{}, UptimeSeconds: uint64(now.Sub(s.started) / time.Second)}
	t := resp.Total
	for _, d := range s.dbs {
		c := &compactorv1.Counters{
			Queued: uint64(len(d.queue)), Running: uint64(d.running),
			Completed: d.c.Completed, Failed: d.c.Failed, Requeued: d.c.Requeued, Cancelled: d.c.Cancelled,
			Fallbacks: d.c.Fallbacks, BytesRead: d.c.BytesRead, BytesWritten: d.c.BytesWritten,
		}
		resp.Dbs = append(resp.Dbs, &compactorv1.DBStats{Db: d.name, Priority: d.priority, Counters: c})
		t.Queued += c.Queued
		t.Running += c.Running
		t.Completed += c.Completed
		t.Failed += c.Failed
		t.Requeued += c.Requeued
		t.Cancelled += c.Cancelled
		t.Fallbacks += c.Fallbacks
		t.BytesRead += c.BytesRead
		t.BytesWritten += c.BytesWritten
	}
	sort.Slice(resp.Dbs, func(i, k int) bool { return resp.Dbs[i].Db < resp.Dbs[k].Db })
	running := map[string]uint32{}
	for _, j := range s.jobs {
		if j.state == jobRunning {
			running[j.worker]++
		}
	}
	for name, w := range s.workers {
		ago := now.Sub(w.seen)
		if ago > s.workerWindow() {
			delete(s.workers, name) // gone: forget it
			continue
		}
		resp.Workers = append(resp.Workers, &compactorv1.WorkerStats{Worker: name, Slots: w.slots, Running: running[name],
			Completed: w.completed, SeenMillisAgo: uint32(ago / time.Millisecond)})
	}
	sort.Slice(resp.Workers, func(i, k int) bool { return resp.Workers[i].Worker < resp.Workers[k].Worker })
	return resp
}
