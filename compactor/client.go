package compactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// ClientConfig is a primary's remote compaction.
type ClientConfig struct {
	Scheduler string // the scheduler's gRPC address
	// DB is the database's store URL, as workers open it.
	DB string
	// ColdDB is the database's cold tier's URL ("": none): workers read
	// the job's cold input tables there (docs/tiering.md).
	ColdDB   string
	Priority uint32 // 1-100 (0: DefaultPriority)
	// StartTimeout bounds the submission (default 5s).
	StartTimeout time.Duration
	// QueueTimeout: a job no worker has taken for this long is cancelled
	// and run locally (default 20s): a compaction the primary waits for
	// holds one of its background slots, and L0 may be filling up.
	QueueTimeout time.Duration
	// JobTimeout bounds a job from submission to result (default 30m).
	JobTimeout time.Duration
	// SweepEvery is how often leftover job directories are looked for
	// (default 10m; one LIST each time, plus deletes).
	SweepEvery time.Duration
	// KeepLocal, when set, names compactions to run locally without
	// asking (by output level): with tiering on, RocksDB (9.11 as 7.8.3)
	// installs every remote output in the output level, so compactions into the last
	// level, which split data per key between hot and cold, stay local.
	KeepLocal func(outputLevel int32) bool
	// Security is how the primary reaches the scheduler: with TLS files,
	// mutual TLS with the primary's own certificate (shale://NS/primary/DB
	// naming DB as its database URL: the scheduler accepts jobs for that
	// database only); without, plaintext.
	Security   auth.ClientConfig
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Fallback reasons, the values of shale_compaction_fallbacks_total's
// reason label.
const (
	ReasonUnavailable = "scheduler_unavailable" // could not submit
	ReasonLost        = "scheduler_lost"        // the stream broke while waiting
	ReasonQueue       = "queue_timeout"
	ReasonTimeout     = "job_timeout"
	ReasonFailed      = "job_failed"
	ReasonBadResult   = "bad_result" // the result does not hold up (checkResult, checkOutputs)
	ReasonFenced      = "fenced"
	ReasonInput       = "bad_input"
	// The database closed while the job waited (RocksDB's
	// CancelAwaitingJobs): its local run stops at once too.
	ReasonCanceled = "canceled"
)

var reasons = []string{ReasonUnavailable, ReasonLost, ReasonQueue, ReasonTimeout, ReasonFailed, ReasonBadResult, ReasonFenced, ReasonInput, ReasonCanceled}

// Client is a primary's rocksshim.CompactionService: it submits each
// compaction to the scheduler and waits for a worker to run it. Any
// trouble makes RocksDB compact locally (never a failure: RocksDB 9.11, as
// 7.8.3, stops writes after a failed remote compaction), and is counted.
type Client struct {
	cfg    ClientConfig
	fs     *shalefs.Owner
	conn   *grpc.ClientConn
	client compactorv1.CompactorClient

	mu         sync.Mutex
	pending    map[jobKey]*pendingJob
	inflight   map[string]bool // job ids submitted and not yet done
	unreported uint64          // fallbacks since the last accepted submission
	skipUntil  time.Time       // scheduler unreachable: do not try before
	backoff    time.Duration
	closed     bool // no more removals start
	// installing: jobs whose result RocksDB is installing, until its
	// OnInstallation says how that went.
	installing map[jobKey]*pendingJob

	// canceled is closed when the waiting jobs are cancelled for good
	// (the database closes, or this owner was fenced); cancelReason says
	// which.
	canceled     chan struct{}
	cancelOnce   sync.Once
	cancelReason string
	cancelErr    error

	jobs      *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	wait      prometheus.Histogram

	stop chan struct{}
	wg   sync.WaitGroup
}

type jobKey struct {
	session string
	id      uint64
}

type pendingJob struct {
	key     jobKey
	id      string
	start   time.Time
	cancel  context.CancelFunc
	events  chan *compactorv1.CompactEvent
	errc    chan error
	attempt uint32
	facts   jobFacts // what the result is judged by
}

const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

// NewClient prepares remote compaction for the database fs owns. It does
// not contact the scheduler: a scheduler that is down only means local
// compactions.
func NewClient(cfg ClientConfig, fs *shalefs.Owner) (*Client, error) {
	if cfg.Scheduler == "" {
		return nil, errors.New("--compaction remote needs --compaction-scheduler (the scheduler's gRPC address, host:port)")
	}
	if cfg.DB == "" {
		return nil, errors.New("remote compaction: the database URL is empty")
	}
	if cfg.Priority > MaxPriority {
		return nil, fmt.Errorf("--compaction-priority %d: must be %d to %d", cfg.Priority, MinPriority, MaxPriority)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.StartTimeout, 5*time.Second)
	def(&cfg.QueueTimeout, 20*time.Second)
	def(&cfg.JobTimeout, 30*time.Minute)
	def(&cfg.SweepEvery, 10*time.Minute)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	creds, err := primaryDialOptions(cfg.Security, cfg.DB)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(cfg.Scheduler, append(creds,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
		// Reconnect soon after the scheduler comes back (gRPC's default
		// backoff grows to two minutes).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}, MinConnectTimeout: 2 * time.Second}))...)
	if err != nil {
		return nil, fmt.Errorf("--compaction-scheduler %s: %w", cfg.Scheduler, err)
	}
	c := &Client{
		cfg: cfg, fs: fs, conn: conn, client: compactorv1.NewCompactorClient(conn),
		pending: map[jobKey]*pendingJob{}, inflight: map[string]bool{}, installing: map[jobKey]*pendingJob{}, backoff: minBackoff,
		stop: make(chan struct{}), canceled: make(chan struct{}),
	}
	c.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shale_compaction_remote_jobs_total",
		Help: "Compactions offered to the remote compactor, by outcome: completed (run remotely and installed), fallback (run locally; see shale_compaction_fallbacks_total), kept_local (run locally without asking: into the last level of a tiered database), install_failed (RocksDB could not install an accepted result: a background error)."}, []string{"outcome"})
	c.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shale_compaction_fallbacks_total",
		Help: "Compactions run locally because remote compaction failed, by reason: scheduler_unavailable, scheduler_lost, queue_timeout, job_timeout, job_failed, bad_result, fenced, bad_input, canceled (the database closed while it waited)."}, []string{"reason"})
	c.wait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shale_compaction_remote_seconds",
		Help: "Time from submission to result of remote compactions that completed.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 16)})
	for _, o := range []string{"completed", "fallback", "kept_local", "install_failed"} {
		c.jobs.WithLabelValues(o)
	}
	for _, r := range reasons {
		c.fallbacks.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		for _, m := range []prometheus.Collector{c.jobs, c.fallbacks, c.wait} {
			if err := cfg.Registerer.Register(m); err != nil {
				conn.Close()
				return nil, err
			}
		}
	}
	c.wg.Add(1)
	go c.sweepLoop()
	if fs != nil {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			select {
			case <-fs.Fenced():
				// A deposed owner installs nothing: free the workers
				// and the scheduler's queue now.
				c.cancelAwaiting(ReasonFenced, fs.FenceError())
			case <-c.stop:
			}
		}()
	}
	return c, nil
}

// CancelAwaiting implements rocksshim.CompactionCanceler: RocksDB calls it
// when the database closes. Every job submitted and not yet done is
// cancelled at the scheduler (its stream ends), every Wait returns at
// once, and later Starts run locally.
func (c *Client) CancelAwaiting() {
	c.cancelAwaiting(ReasonCanceled, errors.New("the database is closing"))
}

func (c *Client) cancelAwaiting(reason string, err error) {
	c.cancelOnce.Do(func() {
		c.mu.Lock()
		c.cancelReason, c.cancelErr = reason, err
		close(c.canceled)
		for _, p := range c.pending {
			p.cancel()
		}
		c.mu.Unlock()
	})
}

// cancellation is the reason and error the waiting jobs were cancelled
// with, once c.canceled is closed.
func (c *Client) cancellation() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelReason, c.cancelErr
}

// primaryDialOptions are the credentials a primary submits with. A
// certificate that is not this database's primary's would have every
// submission refused (each compaction then runs locally): say so now.
func primaryDialOptions(sec auth.ClientConfig, db string) ([]grpc.DialOption, error) {
	if sec.TLS.Cert != "" {
		t, err := auth.LoadTLS(sec.TLS)
		if err != nil {
			return nil, fmt.Errorf("remote compaction: %w", err)
		}
		id, err := t.Identity()
		if err != nil {
			return nil, fmt.Errorf("remote compaction: --tls-cert %s: %w", sec.TLS.Cert, err)
		}
		if id.Kind != auth.KindPrimary || id.Database != db {
			return nil, fmt.Errorf("remote compaction: --tls-cert %s names %s for database %q; the scheduler takes jobs for %s only from a primary certificate naming it (shale://NAMESPACE/primary/NAME plus the URI %s)", sec.TLS.Cert, id, id.Database, db, db)
		}
	}
	opts, err := sec.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("remote compaction: %w", err)
	}
	return opts, nil
}

// Close stops the client; the database must be closed (no job waits).
func (c *Client) Close() {
	select {
	case <-c.stop:
		return
	default:
		close(c.stop)
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
	c.mu.Lock()
	for _, p := range c.pending {
		p.cancel()
	}
	c.mu.Unlock()
	c.conn.Close()
}

// Fallbacks returns the fallbacks counted so far, by reason.
func (c *Client) Fallbacks() map[string]float64 {
	out := map[string]float64{}
	for _, r := range reasons {
		var m dto.Metric
		c.fallbacks.WithLabelValues(r).Write(&m)
		out[r] = m.GetCounter().GetValue()
	}
	return out
}

// KeptLocal returns how many compactions ran locally without asking
// (ClientConfig.KeepLocal).
func (c *Client) KeptLocal() float64 { return c.jobCount("kept_local") }

func (c *Client) jobCount(outcome string) float64 {
	var m dto.Metric
	c.jobs.WithLabelValues(outcome).Write(&m)
	return m.GetCounter().GetValue()
}

// fallback counts a compaction that runs locally, and tells RocksDB so.
func (c *Client) fallback(reason, job string, err error) rocksshim.CompactionStatus {
	c.fallbacks.WithLabelValues(reason).Inc()
	c.jobs.WithLabelValues("fallback").Inc()
	c.mu.Lock()
	c.unreported++
	if job != "" {
		delete(c.inflight, job)
		c.removeJobLocked(job)
	}
	c.mu.Unlock()
	level := slog.LevelWarn
	if errors.Is(err, errSkipping) {
		level = slog.LevelDebug // said once when the scheduler went away
	}
	c.cfg.Logger.Log(context.Background(), level, "remote compaction failed; compacting locally", "reason", reason, "job", job, "err", err)
	return rocksshim.CompactionUseLocal
}

// removeJobLocked deletes, in the background, the directory of a job
// that is over: a refused result's outputs, whatever a worker uploaded
// for a job the primary gave up on, or what is left of an installed one. A worker still
// running it has its late report refused and drops its outputs; anything
// left after that is the sweep's.
func (c *Client) removeJobLocked(job string) {
	if c.closed || c.fs.FenceError() != nil {
		return // the sweep (this owner's next start, or the new owner's) has it
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := c.fs.RemoveJob(ctx, job)
		switch {
		case err != nil:
			c.cfg.Logger.Warn("could not remove the directory of a finished compaction job; the sweep will", "job", job, "err", err)
		case n > 0:
			c.cfg.Logger.Info("removed the objects left in a finished compaction job's directory", "job", job, "objects", n)
		}
	}()
}

var errSkipping = errors.New("the scheduler was unreachable moments ago; not retrying yet")

// Start implements rocksshim.CompactionService.
func (c *Client) Start(job rocksshim.CompactionJob) rocksshim.CompactionStatus {
	if err := c.fs.FenceError(); err != nil {
		return c.fallback(ReasonFenced, "", err)
	}
	select {
	case <-c.canceled:
		reason, err := c.cancellation()
		return c.fallback(reason, "", err)
	default:
	}
	c.mu.Lock()
	skip := time.Now().Before(c.skipUntil)
	c.mu.Unlock()
	if skip {
		return c.fallback(ReasonUnavailable, "", errSkipping)
	}
	files, err := rocksshim.CompactionInputFiles(job.Input)
	if err != nil {
		return c.fallback(ReasonInput, "", err)
	}
	facts, err := parseJobFacts(job.Input, job.Inputs)
	if err != nil {
		return c.fallback(ReasonInput, "", err)
	}
	var inputBytes uint64
	for _, f := range files {
		if n, ok := c.fs.Stat(f); ok {
			inputBytes += uint64(n)
		}
	}
	outLevel := int32(facts.outputLevel)
	if c.cfg.KeepLocal != nil && c.cfg.KeepLocal(outLevel) {
		c.jobs.WithLabelValues("kept_local").Inc()
		return rocksshim.CompactionUseLocal
	}
	// What a result will be judged by (checkResult): without it no result
	// could be installed, so do not ask a worker.
	if err := knownInputs(files, job.Inputs); err != nil {
		return c.fallback(ReasonInput, "", err)
	}
	id := c.fs.NewJobID()
	c.mu.Lock()
	report := c.unreported
	c.inflight[id] = true
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	p := &pendingJob{key: jobKey{job.Session, job.ID}, id: id, start: time.Now(), cancel: cancel, events: make(chan *compactorv1.CompactEvent, 16), errc: make(chan error, 1), facts: facts}
	first := make(chan error, 1)
	go func() {
		stream, err := c.client.Compact(ctx, &compactorv1.CompactRequest{
			Db: c.cfg.DB, Priority: c.cfg.Priority, JobId: id, Input: job.Input, TableOptions: job.TableOptions,
			InputFiles: files, InputBytes: inputBytes, OutputLevel: outLevel, Fallbacks: report, ColdDb: c.cfg.ColdDB,
		})
		if err == nil {
			var ev *compactorv1.CompactEvent
			if ev, err = stream.Recv(); err == nil && ev.State != compactorv1.CompactEvent_ACCEPTED {
				err = fmt.Errorf("scheduler answered %v, not ACCEPTED", ev.State)
			}
		}
		first <- err
		if err != nil {
			return
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				p.errc <- err
				return
			}
			select {
			case p.events <- ev:
			case <-ctx.Done():
				return
			}
			if ev.State == compactorv1.CompactEvent_DONE || ev.State == compactorv1.CompactEvent_FAILED {
				return
			}
		}
	}()
	timer := time.NewTimer(c.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case err = <-first:
	case <-timer.C:
		err = fmt.Errorf("no answer from the scheduler within %s", c.cfg.StartTimeout)
	}
	if err != nil {
		cancel()
		c.mu.Lock()
		c.skipUntil = time.Now().Add(c.backoff)
		c.backoff = min(2*c.backoff, maxBackoff)
		c.mu.Unlock()
		return c.fallback(ReasonUnavailable, id, err)
	}
	c.mu.Lock()
	c.unreported -= report // the scheduler counted them
	c.backoff = minBackoff
	c.pending[p.key] = p
	select {
	case <-c.canceled:
		p.cancel() // cancelled meanwhile; Wait falls back at once
	default:
	}
	c.mu.Unlock()
	return rocksshim.CompactionSuccess
}

// Wait implements rocksshim.CompactionService.
func (c *Client) Wait(job rocksshim.CompactionJob) (rocksshim.CompactionStatus, []byte) {
	key := jobKey{job.Session, job.ID}
	c.mu.Lock()
	p := c.pending[key]
	delete(c.pending, key)
	c.mu.Unlock()
	if p == nil {
		return c.fallback(ReasonLost, "", errors.New("waiting for a job that was never submitted")), nil
	}
	defer p.cancel() // ends the stream: a job still queued or running is cancelled
	queue := time.NewTimer(c.cfg.QueueTimeout)
	defer queue.Stop()
	deadline := time.NewTimer(c.cfg.JobTimeout - time.Since(p.start))
	defer deadline.Stop()
	for {
		select {
		case <-c.stop:
			return c.fallback(ReasonLost, p.id, errors.New("the primary is stopping")), nil
		case <-c.canceled:
			reason, err := c.cancellation()
			return c.fallback(reason, p.id, err), nil
		case err := <-p.errc:
			return c.fallback(ReasonLost, p.id, err), nil
		case <-queue.C:
			return c.fallback(ReasonQueue, p.id, fmt.Errorf("no worker took the job within %s", c.cfg.QueueTimeout)), nil
		case <-deadline.C:
			return c.fallback(ReasonTimeout, p.id, fmt.Errorf("no result within %s", c.cfg.JobTimeout)), nil
		case ev := <-p.events:
			switch ev.State {
			case compactorv1.CompactEvent_RUNNING:
				queue.Stop()
			case compactorv1.CompactEvent_QUEUED:
				queue.Reset(c.cfg.QueueTimeout)
			case compactorv1.CompactEvent_FAILED:
				return c.fallback(ReasonFailed, p.id, errors.New(ev.Error)), nil
			case compactorv1.CompactEvent_DONE:
				return c.done(p, ev)
			}
		}
	}
}

// done checks a result before RocksDB installs it. RocksDB installs
// what the result says as it is: the outputs it names (none is fine by
// RocksDB), with the boundaries, sequence numbers and ids it claims, and
// then deletes the inputs; a result it cannot read, a failure status in
// it, or an output it cannot rename or open stops its writes. So the
// result must parse as RocksDB parses it, report success, name only this
// attempt's outputs, each in the store with the size the worker reported
// and a table's properties, and account for the inputs (checkResult).
// Only then does the FileSystem accept those outputs; anything else
// compacts locally.
func (c *Client) done(p *pendingJob, ev *compactorv1.CompactEvent) (rocksshim.CompactionStatus, []byte) {
	if err := c.fs.FenceError(); err != nil {
		return c.fallback(ReasonFenced, p.id, err), nil
	}
	res, err := rocksshim.ParseCompactionResult(ev.Result)
	if err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	if !res.Status.OK() {
		return c.fallback(ReasonFailed, p.id, fmt.Errorf("the worker's result reports %s", res.Status)), nil
	}
	if err := checkOutputPath(res.OutputPath, p.id, ev.Attempt); err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	if res.OutputLevel != p.facts.outputLevel {
		return c.fallback(ReasonBadResult, p.id, fmt.Errorf("the result is for level %d, the job for level %d", res.OutputLevel, p.facts.outputLevel)), nil
	}
	names := make([]string, len(res.Files))
	for i, f := range res.Files {
		names[i] = f.Name
	}
	if err := checkOutputNames(names); err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	reported := map[string]int64{}
	for _, o := range ev.Outputs {
		reported[o.Name] = int64(o.Size)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored, err := c.fs.JobOutputs(ctx, p.id, ev.Attempt)
	if err != nil {
		return c.fallback(ReasonBadResult, p.id, fmt.Errorf("list the job's outputs: %w", err)), nil
	}
	if err := checkOutputs(names, reported, stored); err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	outs, err := c.outputFacts(ctx, p.id, ev.Attempt, res.Files, reported)
	if err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	if err := checkResult(p.facts, outs); err != nil {
		return c.fallback(ReasonBadResult, p.id, err), nil
	}
	c.fs.ExpectJobOutputs(p.id, ev.Attempt, reported)
	c.mu.Lock()
	delete(c.inflight, p.id)
	c.installing[p.key] = p
	c.mu.Unlock()
	return rocksshim.CompactionSuccess, ev.Result
}

// Installed implements rocksshim.CompactionInstallObserver: RocksDB
// installed the result Wait handed it (ok), or could not (a background
// error: it stops writes). Either way the job is over: what is left of
// its directory (outputs of earlier attempts; an installed output whose
// delete failed; every output of a failed install) is removed now rather
// than at the next sweep.
func (c *Client) Installed(job rocksshim.CompactionJob, ok bool) {
	key := jobKey{job.Session, job.ID}
	c.mu.Lock()
	p := c.installing[key]
	delete(c.installing, key)
	c.mu.Unlock()
	if p == nil {
		return
	}
	c.fs.ForgetJob(p.id)
	if ok {
		c.jobs.WithLabelValues("completed").Inc()
		c.wait.Observe(time.Since(p.start).Seconds())
	} else {
		c.jobs.WithLabelValues("install_failed").Inc()
		c.cfg.Logger.Error("RocksDB could not install an accepted remote compaction result (a background error: writes stop until the primary restarts)", "job", p.id)
	}
	c.mu.Lock()
	c.removeJobLocked(p.id)
	c.mu.Unlock()
}

// Completed returns how many remote compactions RocksDB installed.
func (c *Client) Completed() float64 { return c.jobCount("completed") }

// outputFacts reads each output's properties from the store (a ranged
// GET of its tail, a few at a time) next to what the result claims.
func (c *Client) outputFacts(ctx context.Context, job string, attempt uint32, files []rocksshim.CompactionOutput, sizes map[string]int64) ([]outputFacts, error) {
	outs := make([]outputFacts, len(files))
	errs := make([]error, len(files))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			props, err := c.fs.JobOutputProps(ctx, job, attempt, f.Name, sizes[f.Name])
			if err != nil {
				errs[i] = err
				return
			}
			o := outputFacts{name: f.Name, smallest: f.SmallestKey, largest: f.LargestKey, smallestSeqno: f.SmallestSeqno, largestSeqno: f.LargestSeqno, epoch: f.EpochNumber, resultID: f.UniqueID, props: props}
			o.tableID, o.tableIDErr = rocksshim.TableUniqueID(props.DBID, props.SessionID, props.OrigFileNumber)
			outs[i] = o
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

// knownInputs: RocksDB described every input table of the job.
func knownInputs(files []string, inputs []rocksshim.CompactionInput) error {
	known := map[string]bool{}
	for _, in := range inputs {
		if in.Props != nil {
			known[in.Name] = true
		}
	}
	for _, f := range files {
		if !known[f] {
			return fmt.Errorf("RocksDB gave no metadata for input %s (a compaction while the database closes?); a result could not be judged", f)
		}
	}
	return nil
}

// checkOutputs: the result's outputs, the worker's report and the store
// agree (names and sizes).
func checkOutputs(result []string, reported, stored map[string]int64) error {
	if len(result) != len(reported) {
		return fmt.Errorf("the result names %d outputs, the worker reported %d", len(result), len(reported))
	}
	sort.Strings(result)
	for _, n := range result {
		size, ok := reported[n]
		if !ok {
			return fmt.Errorf("output %s is in the result but the worker did not report it", n)
		}
		got, ok := stored[n]
		if !ok {
			return fmt.Errorf("output %s is not in the store", n)
		}
		if got != size {
			return fmt.Errorf("output %s has %d bytes in the store, the worker reported %d", n, got, size)
		}
	}
	return nil
}

func (c *Client) isInflight(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[job]
}

// sweepLoop deletes leftover job directories: now, then every SweepEvery.
func (c *Client) sweepLoop() {
	defer c.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := c.fs.SweepCompactions(ctx, c.isInflight)
		cancel()
		switch {
		case err != nil && c.fs.FenceError() == nil:
			c.cfg.Logger.Warn("sweeping leftover compaction job directories failed; retrying later", "err", err)
		case n > 0:
			c.cfg.Logger.Info("swept leftover compaction job objects", "objects", n)
		}
		timer.Reset(c.cfg.SweepEvery)
	}
}
