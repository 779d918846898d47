package compactor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/iometrics"
	"github.com/shale-rocks/shale/internal/node"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// WorkerConfig configures a compactor worker.
type WorkerConfig struct {
	Scheduler string // the scheduler's gRPC address
	// CacheDir holds each running job's local files (its view of the
	// database and its outputs before upload); each job's are removed
	// when it ends.
	CacheDir      string
	Concurrency   int    // jobs at once (default 1)
	ID            string // default: host, pid and a random suffix
	MetricsListen string // "" disables /metrics
	// Poll is how long one Lease call waits for a job (default 10s).
	Poll time.Duration
	// JobTimeout bounds one job (default 30m). Keep it well under the
	// databases' --delete-grace: the worker holds no reader lease, so the
	// files its view names are safe only for that long after it listed.
	JobTimeout time.Duration
	// OpenStore opens a database's store (default objstore.Open, which
	// reads S3 credentials from the environment like a primary does), and
	// a job's cold tier unless ColdEndpoint is set.
	OpenStore func(url string) (objstore.Store, error)
	// ColdEndpoint is the S3 endpoint of the databases' cold tiers when
	// they are on another server than $AWS_ENDPOINT_URL (--cold-endpoint;
	// same credentials). It is the worker's setting, not the job's: a
	// primary does not choose where the worker sends its credentials.
	ColdEndpoint string
	// Security is how the worker reaches the scheduler: with TLS files,
	// mutual TLS with a worker certificate of its pool
	// (shale://NS/worker/POOL), and jobs are taken only from that pool's
	// scheduler; without, plaintext.
	Security auth.ClientConfig
	Logger   *slog.Logger
	// Registerer, when set, receives the worker's metrics (else a
	// registry of its own, served on MetricsListen).
	Registerer prometheus.Registerer
	// afterUpload, in tests, runs after a job's outputs are in the store
	// and before it is reported complete.
	afterUpload func(j *compactorv1.Job)
	// beforeLease, in tests, runs before each Lease call.
	beforeLease func()
	// beforeComplete, in tests, may change a report before it is sent
	// (a worker that misreports).
	beforeComplete func(j *compactorv1.Job, req *compactorv1.CompleteRequest)
}

// Worker runs compaction jobs leased from a scheduler.
type Worker struct {
	cfg    WorkerConfig
	self   *auth.Identity // from the worker's certificate; nil in plaintext
	conn   *grpc.ClientConn
	client compactorv1.CompactorClient
	cache  *node.Cache // locked: one worker per cache dir
	mlis   net.Listener
	msrv   *http.Server
	io     *iometrics.Metrics
	reg    *prometheus.Registry // nil when cfg.Registerer was given

	storesMu sync.Mutex
	stores   map[string]objstore.Store

	mu      sync.Mutex
	running map[string]*runningJob // by job id

	jobs     *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	duration prometheus.Histogram
	active   prometheus.Gauge
}

type runningJob struct {
	job      *compactorv1.Job
	cancel   *rocksshim.Cancel
	ctxStop  context.CancelFunc
	stopped  bool // told to stop: report nothing
	deadline time.Time
}

// NewWorker connects to the scheduler (lazily: it may be down) and
// prepares the cache directory.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Scheduler == "" {
		return nil, errors.New("compactor worker: --scheduler is required (the scheduler's gRPC address, host:port)")
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("compactor worker: --cache-dir is required (a local directory for running jobs' files)")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 10 * time.Second
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 30 * time.Minute
	}
	if cfg.OpenStore == nil {
		cfg.OpenStore = objstore.Open
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	w := &Worker{cfg: cfg, stores: map[string]objstore.Store{}, running: map[string]*runningJob{}}
	creds, err := w.dialOptions()
	if err != nil {
		return nil, err
	}
	if w.cache, err = node.LockCache(node.Worker, cfg.CacheDir, ""); err != nil {
		return nil, err
	}
	// A crashed worker's job directories: nothing in them is needed.
	if entries, err := os.ReadDir(cfg.CacheDir); err == nil {
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "job-") {
				os.RemoveAll(filepath.Join(cfg.CacheDir, e.Name()))
			}
		}
	}
	if w.conn, err = grpc.NewClient(cfg.Scheduler, append(creds,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))...); err != nil {
		w.cache.Close()
		return nil, fmt.Errorf("--scheduler %s: %w", cfg.Scheduler, err)
	}
	w.client = compactorv1.NewCompactorClient(w.conn)

	reg := cfg.Registerer
	var own *prometheus.Registry
	if reg == nil {
		own = prometheus.NewRegistry()
		own.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = own
		w.reg = own
	}
	w.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shale_compactor_worker_jobs_total",
		Help: "Jobs this worker ran, by outcome: completed, failed, stopped (cancelled or lost its lease), refused (the scheduler no longer held the attempt)."}, []string{"outcome"})
	w.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shale_compactor_worker_bytes_total",
		Help: "Bytes completed jobs read and wrote (RocksDB's count)."}, []string{"direction"})
	w.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shale_compactor_worker_job_seconds",
		Help: "Time from lease to completion of a job.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 14)})
	w.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "shale_compactor_worker_running", Help: "Jobs running on this worker."})
	reg.MustRegister(w.jobs, w.bytes, w.duration, w.active)
	for _, o := range []string{"completed", "failed", "stopped", "refused"} {
		w.jobs.WithLabelValues(o)
	}
	w.io = iometrics.New(reg)
	if own != nil && cfg.MetricsListen != "" {
		if w.mlis, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			w.conn.Close()
			w.cache.Close()
			return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
		}
		w.msrv = serveMetrics(w.mlis, own, make(chan error, 1))
	}
	return w, nil
}

// dialOptions are the worker's credentials. With TLS it must present a
// worker certificate: the scheduler gives jobs to nobody else.
func (w *Worker) dialOptions() ([]grpc.DialOption, error) {
	sec := w.cfg.Security
	if sec.TLS.Enabled() {
		if sec.TLS.Cert == "" {
			return nil, errors.New("compactor worker: TLS needs the worker's certificate (--tls-cert and --tls-key): the scheduler gives jobs only to workers of its pool")
		}
		if sec.TokenFile != "" {
			return nil, errors.New("compactor worker: a worker is known by its certificate, not a token")
		}
		t, err := auth.LoadTLS(sec.TLS)
		if err != nil {
			return nil, fmt.Errorf("compactor worker: %w", err)
		}
		id, err := t.Identity()
		if err != nil {
			return nil, fmt.Errorf("compactor worker: --tls-cert %s: %w", sec.TLS.Cert, err)
		}
		if id.Kind != auth.KindWorker {
			return nil, fmt.Errorf("compactor worker: --tls-cert %s names %s, not a compactor worker (shale://NAMESPACE/worker/POOL): issue the worker its pool's worker certificate", sec.TLS.Cert, id)
		}
		w.self = &id
	}
	opts, err := sec.DialOptions()
	if err != nil {
		return nil, fmt.Errorf("compactor worker: %w", err)
	}
	return opts, nil
}

// checkScheduler refuses a job from anything but the scheduler of the
// worker's own pool: TLS verified the server's name, this its identity,
// so the worker opens only databases that scheduler's authenticated
// primaries asked for.
func (w *Worker) checkScheduler(p *peer.Peer) error {
	if w.self == nil {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return errors.New("the scheduler presented no certificate")
	}
	id, err := auth.FromCertificate(ti.State.PeerCertificates[0])
	if err != nil {
		return fmt.Errorf("the scheduler's certificate: %w", err)
	}
	if id.Kind != auth.KindScheduler || id.Namespace != w.self.Namespace || id.Name != w.self.Name {
		return fmt.Errorf("the server at %s is %s, not the scheduler of this worker's pool %s/%s", w.cfg.Scheduler, id, w.self.Namespace, w.self.Name)
	}
	return nil
}

// Gatherer returns the worker's own metrics registry (nil when the
// metrics went to WorkerConfig.Registerer).
func (w *Worker) Gatherer() prometheus.Gatherer {
	if w.reg == nil {
		return nil
	}
	return w.reg
}

// ID is the worker's name at the scheduler.
func (w *Worker) ID() string { return w.cfg.ID }

// MetricsAddr is the metrics address, or "".
func (w *Worker) MetricsAddr() string {
	if w.mlis == nil {
		return ""
	}
	return w.mlis.Addr().String()
}

// Run leases and runs jobs until ctx is done; running jobs are then
// cancelled and handed back to the scheduler.
func (w *Worker) Run(ctx context.Context) error {
	w.cfg.Logger.Info("compactor worker running", "id", w.cfg.ID, "scheduler", w.cfg.Scheduler, "concurrency", w.cfg.Concurrency, "cache", w.cfg.CacheDir, "metrics", w.MetricsAddr())
	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.leaseLoop(ctx)
		}()
	}
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeatLoop(ctx)
	}()
	wg.Wait()
	<-hbDone
	return nil
}

// Close releases the worker's connection, metrics listener and cache lock.
func (w *Worker) Close() {
	w.conn.Close()
	if w.msrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w.msrv.Shutdown(ctx)
		cancel()
	}
	w.cache.Close()
}

func (w *Worker) leaseLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	failing := false
	for ctx.Err() == nil {
		if w.cfg.beforeLease != nil {
			w.cfg.beforeLease()
		}
		var from peer.Peer
		r, err := w.client.Lease(ctx, &compactorv1.LeaseRequest{Worker: w.cfg.ID, Slots: uint32(w.cfg.Concurrency), WaitMillis: uint32(w.cfg.Poll / time.Millisecond)}, grpc.Peer(&from))
		if err == nil && r.Job != nil {
			if perr := w.checkScheduler(&from); perr != nil {
				// Not run, not reported: its lease runs out there.
				w.cfg.Logger.Error("refused a job from a server that is not this pool's scheduler", "job", r.Job.JobId, "db", r.Job.Db, "err", perr)
				err = perr
				failing = true // said: not again as "cannot reach"
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				switch status.Code(err) {
				case codes.Unauthenticated, codes.PermissionDenied:
					w.cfg.Logger.Error("the compactor scheduler refuses this worker; retrying", "scheduler", w.cfg.Scheduler, "err", err)
				default:
					w.cfg.Logger.Warn("cannot reach the compactor scheduler; retrying", "scheduler", w.cfg.Scheduler, "err", err)
				}
			}
			failing = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		if failing {
			w.cfg.Logger.Info("compactor scheduler reachable again", "scheduler", w.cfg.Scheduler)
		}
		failing, backoff = false, 100*time.Millisecond
		if r.Job != nil {
			w.run(ctx, r.Job)
		}
	}
}

// heartbeatLoop extends the leases of running jobs and stops the jobs the
// scheduler no longer holds for this worker. Jobs whose leases could not
// be renewed for a whole lease period are stopped too: the scheduler has
// given them to another worker (or lost them).
func (w *Worker) heartbeatLoop(ctx context.Context) {
	lastOK := time.Now()
	for {
		period := 5 * time.Second
		w.mu.Lock()
		var refs []*compactorv1.JobRef
		for _, r := range w.running {
			refs = append(refs, &compactorv1.JobRef{JobId: r.job.JobId, Attempt: r.job.Attempt})
			period = min(period, time.Duration(r.job.LeaseMillis)*time.Millisecond/3)
		}
		w.mu.Unlock()
		period = max(period, 10*time.Millisecond)
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		if len(refs) == 0 {
			lastOK = time.Now()
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, max(period, time.Second))
		resp, err := w.client.Heartbeat(hctx, &compactorv1.HeartbeatRequest{Worker: w.cfg.ID, Jobs: refs, Slots: uint32(w.cfg.Concurrency)})
		cancel()
		if err != nil {
			if time.Since(lastOK) > 3*period {
				for _, ref := range refs {
					w.stop(ref, "its lease could not be renewed: "+err.Error())
				}
			}
			continue
		}
		lastOK = time.Now()
		for _, ref := range resp.Stop {
			w.stop(ref, "the scheduler no longer holds it for this worker")
		}
	}
}

func (w *Worker) stop(ref *compactorv1.JobRef, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.running[ref.JobId]
	if r == nil || r.job.Attempt != ref.Attempt || r.stopped {
		return
	}
	r.stopped = true
	r.cancel.Set()
	r.ctxStop()
	w.cfg.Logger.Info("stopping a compaction job", "job", ref.JobId, "attempt", ref.Attempt, "why", why)
}

// run runs one job to its end and reports it.
func (w *Worker) run(ctx context.Context, j *compactorv1.Job) {
	start := time.Now()
	jctx, cancelCtx := context.WithTimeout(ctx, w.cfg.JobTimeout)
	defer cancelCtx()
	r := &runningJob{job: j, cancel: rocksshim.NewCancel(), ctxStop: cancelCtx}
	defer r.cancel.Close()
	w.mu.Lock()
	w.running[j.JobId] = r
	w.mu.Unlock()
	w.active.Inc()
	defer func() {
		w.active.Dec()
		w.mu.Lock()
		delete(w.running, j.JobId)
		w.mu.Unlock()
	}()
	// Stop RocksDB too when the job's context ends (timeout, shutdown).
	go func() {
		<-jctx.Done()
		r.cancel.Set()
	}()

	log := w.cfg.Logger.With("job", j.JobId, "attempt", j.Attempt, "db", j.Db)
	outputs, result, err := w.execute(jctx, j, log)
	w.mu.Lock()
	stopped := r.stopped
	w.mu.Unlock()
	ref := &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt}
	switch {
	case stopped:
		w.jobs.WithLabelValues("stopped").Inc()
		return
	case err != nil:
		w.jobs.WithLabelValues("failed").Inc()
		retry := retryable(err) || ctx.Err() != nil
		log.Warn("compaction job failed", "err", err, "retryable", retry)
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w.client.Fail(rctx, &compactorv1.FailRequest{Worker: w.cfg.ID, Job: ref, Error: err.Error(), Retryable: retry})
		cancel()
		return
	}
	read, written := rocksshim.CompactionResultUint(result, "bytes_read"), rocksshim.CompactionResultUint(result, "bytes_written")
	req := &compactorv1.CompleteRequest{Worker: w.cfg.ID, Job: ref, Result: result, Outputs: outputs, BytesRead: read, BytesWritten: written}
	if w.cfg.beforeComplete != nil {
		w.cfg.beforeComplete(j, req)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	resp, err := w.client.Complete(rctx, req)
	cancel()
	if err != nil || !resp.Accepted {
		w.jobs.WithLabelValues("refused").Inc()
		log.Warn("the scheduler did not take the job's result; its outputs are dropped", "err", err)
		w.dropOutputs(j, outputs)
		return
	}
	w.jobs.WithLabelValues("completed").Inc()
	w.bytes.WithLabelValues("read").Add(float64(read))
	w.bytes.WithLabelValues("written").Add(float64(written))
	w.duration.Observe(time.Since(start).Seconds())
	log.Info("compaction job done", "outputs", len(outputs), "bytes_read", read, "bytes_written", written, "took", time.Since(start).Round(time.Millisecond))
}

// retryable: RocksDB's verdicts on the input itself would recur on any
// worker; anything else (the store, this machine) may not.
func retryable(err error) bool {
	msg := err.Error()
	for _, s := range []string{"Corruption", "Invalid argument", "Not implemented"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}

func (w *Worker) store(url string) (objstore.Store, error) {
	w.storesMu.Lock()
	defer w.storesMu.Unlock()
	if s := w.stores[url]; s != nil {
		return s, nil
	}
	s, err := w.cfg.OpenStore(url)
	if err != nil {
		return nil, err
	}
	w.stores[url] = s
	return s, nil
}

// coldStore opens (once) a job's cold tier.
func (w *Worker) coldStore(url string) (objstore.Store, error) {
	if w.cfg.ColdEndpoint == "" {
		return w.store(url)
	}
	key := url + " via " + w.cfg.ColdEndpoint
	w.storesMu.Lock()
	defer w.storesMu.Unlock()
	if s := w.stores[key]; s != nil {
		return s, nil
	}
	s, err := shalefs.OpenTierStore(url, w.cfg.ColdEndpoint)
	if err != nil {
		return nil, err
	}
	w.stores[key] = s
	return s, nil
}

// execute runs OpenAndCompact on a read-only view of the database and
// uploads the outputs into the job's directory. The store it uses refuses
// every write outside that directory.
func (w *Worker) execute(ctx context.Context, j *compactorv1.Job, log *slog.Logger) ([]*compactorv1.OutputFile, []byte, error) {
	base, err := w.store(j.Db)
	if err != nil {
		return nil, nil, fmt.Errorf("open the database's store: %w", err)
	}
	if _, ok := layout.JobEpoch(j.JobId); !ok || j.Attempt == 0 {
		return nil, nil, fmt.Errorf("Invalid argument: job %q attempt %d is not a Shale job name", j.JobId, j.Attempt)
	}
	dirKey := layout.JobDir(j.JobId, j.Attempt)
	store := &JobStore{Store: base, Dir: dirKey}
	local := filepath.Join(w.cfg.CacheDir, fmt.Sprintf("job-%s-%d", j.JobId, j.Attempt))
	defer os.RemoveAll(local)
	dbDir := filepath.Join(local, "db")
	// The output directory's path ends in the job's directory in the
	// store: the primary's FileSystem finds the objects from it.
	outDir := filepath.Join(local, "out", filepath.FromSlash(strings.TrimSuffix(dirKey, "/")))
	if err := os.MkdirAll(filepath.Dir(outDir), 0o755); err != nil {
		return nil, nil, err
	}
	inputs := map[string]bool{}
	for _, f := range j.InputFiles {
		inputs[f] = true
	}
	// A tiered database's cold tables are read from its cold tier; the
	// reader checks that tier is this database's (the pairing records,
	// docs/tiering.md) and the worker writes nothing there.
	var cold objstore.Store
	if j.ColdDb != "" {
		c, err := w.coldStore(j.ColdDb)
		if err != nil {
			return nil, nil, fmt.Errorf("open the database's cold tier %s: %w", j.ColdDb, err)
		}
		cold = &readOnlyStore{c}
	}
	fs, err := shalefs.OpenReader(ctx, shalefs.Config{
		Store: store, Cold: cold, CacheDir: dbDir, NoReaderLease: true, SkipWALs: true, ReaderID: w.cfg.ID,
		FetchWhole: func(name string) bool { return inputs[name] },
		Logger:     log, Observe: w.io.Observe,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("open the database read-only: %w", err)
	}
	defer fs.Stop()
	envOpts := grocksdb.NewDefaultOptions()
	defer envOpts.Destroy()
	attached := rocksshim.AttachFileSystem(envOpts, dbDir, fs)
	defer attached.Close()
	w.mu.Lock()
	cancel := w.running[j.JobId].cancel
	w.mu.Unlock()
	result, err := rocksshim.OpenAndCompact(envOpts, dbDir, outDir, j.Input, j.TableOptions, cancel)
	if err != nil {
		return nil, nil, fmt.Errorf("OpenAndCompact: %w", err)
	}
	if p, ok, err := rocksshim.CompactionOutputPath(result); err != nil || !ok || p != outDir {
		return nil, nil, fmt.Errorf("the result names output path %q, not %q (%v)", p, outDir, err)
	}
	names, err := rocksshim.CompactionOutputFiles(result)
	if err != nil {
		return nil, nil, err
	}
	var outputs []*compactorv1.OutputFile
	for _, name := range names {
		size, err := w.upload(ctx, store, filepath.Join(outDir, name), dirKey+name)
		if err != nil {
			return nil, nil, fmt.Errorf("upload %s: %w", name, err)
		}
		outputs = append(outputs, &compactorv1.OutputFile{Name: name, Size: uint64(size)})
	}
	if w.cfg.afterUpload != nil {
		w.cfg.afterUpload(j)
	}
	return outputs, result, nil
}

// upload stores one output, create-only: each attempt has its own
// directory, so an existing key means a retry of our own upload.
func (w *Worker) upload(ctx context.Context, s objstore.Store, path, key string) (int64, error) {
	var size int64
	err := retry(ctx, func(ctx context.Context) error {
		fh, err := os.Open(path)
		if err != nil {
			return err
		}
		defer fh.Close()
		fi, err := fh.Stat()
		if err != nil {
			return err
		}
		size = fi.Size()
		start := time.Now()
		_, err = s.Put(ctx, key, fh, size, objstore.PutOptions{IfNoneMatch: true})
		w.io.Observe(shalefs.Request{Op: "put", FileType: "sst", Activity: "compaction", Bytes: size, Duration: time.Since(start), Err: err})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			info, serr := s.Stat(ctx, key)
			if serr == nil && info.Size == size {
				return nil // our own earlier attempt landed
			}
			return fmt.Errorf("%s exists with %d bytes, not ours", key, info.Size)
		}
		return err
	})
	return size, err
}

// retry runs fn until it succeeds, fails for good, or ctx ends.
func retry(ctx context.Context, fn func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := fn(actx)
		cancel()
		if err == nil || !objstore.IsRetryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// dropOutputs deletes an attempt's outputs nobody will install.
func (w *Worker) dropOutputs(j *compactorv1.Job, outputs []*compactorv1.OutputFile) {
	base, err := w.store(j.Db)
	if err != nil {
		return
	}
	store := &JobStore{Store: base, Dir: layout.JobDir(j.JobId, j.Attempt)}
	var keys []string
	for _, o := range outputs {
		keys = append(keys, store.Dir+o.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store.DeleteMany(ctx, keys)
}

// ErrOutsideJob is the error of a worker's write outside its job's
// directory: a worker writes nothing else.
var ErrOutsideJob = errors.New("a compactor worker writes only under its job's directory")

// JobStore is a database's store as a worker sees it: reads anywhere,
// writes only under Dir (a job attempt's directory, "…/" ).
type JobStore struct {
	objstore.Store
	Dir string
}

func (s *JobStore) check(key string) error {
	if !strings.HasPrefix(key, s.Dir) || strings.Contains(strings.TrimPrefix(key, s.Dir), "/") {
		return fmt.Errorf("%w (%s), not %s", ErrOutsideJob, s.Dir, key)
	}
	return nil
}

// Put implements objstore.Store.
func (s *JobStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.check(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, r, size, opts)
}

// Copy implements objstore.Store.
func (s *JobStore) Copy(ctx context.Context, src, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.check(dst); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Copy(ctx, src, dst, opts)
}

// Delete implements objstore.Store.
func (s *JobStore) Delete(ctx context.Context, key string) error {
	if err := s.check(key); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// DeleteMany implements objstore.Store.
func (s *JobStore) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := s.check(k); err != nil {
			return err
		}
	}
	return s.Store.DeleteMany(ctx, keys)
}

// readOnlyStore is a cold tier as a worker sees it: it reads the job's
// cold input tables and writes nothing (outputs go to the job's
// directory in the hot store; the primary places them).
type readOnlyStore struct{ objstore.Store }

func (s *readOnlyStore) refuse(key string) error {
	return fmt.Errorf("a compactor worker writes nothing in a cold tier (%s in %s)", key, s.Store.URL())
}

// Put implements objstore.Store.
func (s *readOnlyStore) Put(_ context.Context, key string, _ io.Reader, _ int64, _ objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, s.refuse(key)
}

// Copy implements objstore.Store.
func (s *readOnlyStore) Copy(_ context.Context, _, dst string, _ objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, s.refuse(dst)
}

// Delete implements objstore.Store.
func (s *readOnlyStore) Delete(_ context.Context, key string) error { return s.refuse(key) }

// DeleteMany implements objstore.Store.
func (s *readOnlyStore) DeleteMany(_ context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return s.refuse(keys[0])
}
