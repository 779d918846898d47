// Package primary runs a Shale primary: the single read-write owner of a
// database. It opens the database named by a store URL, serves the KV API
// over gRPC (with the standard health and reflection services) and
// Prometheus metrics over HTTP.
package primary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/iometrics"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/node"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Config is what a primary needs to run.
type Config struct {
	DB            string // store URL of the database, e.g. file:///var/lib/shale/db
	Listen        string // gRPC address
	MetricsListen string // HTTP address for /metrics; "" disables it
	Pprof         bool   // serve /debug/pprof on MetricsListen too
	// Security is the KV port's TLS and client access (--tls-cert,
	// --tls-key, --tls-ca, --access-file); zero: plaintext, allowed on a
	// loopback Listen or with Insecure. The same certificate is the
	// primary's client identity towards the compactor scheduler.
	Security auth.ServerConfig
	Limits   kvserver.Limits
	Engine   engine.Options
	// Storage configures the Shale FileSystem: epoch, cache dir, lease,
	// delete grace, storage classes, timeouts. Store and Logger are set by
	// Start; an empty CacheDir gets node.DefaultCacheDir.
	Storage shalefs.Config
	// CompactionMode is "local" (or "") or "remote": remote submits each
	// compaction to the scheduler in Compaction.Scheduler (falling back
	// to local on any trouble; docs/compaction.md).
	CompactionMode string
	Compaction     compactor.ClientConfig
	Logger         *slog.Logger
	// ColdDB is the cold tier's store URL ("": none), reached through
	// ColdEndpoint when that is set (an s3:// cold tier on its own server,
	// with the same credentials). Engine.ColdAfter says which data goes
	// there (docs/tiering.md).
	ColdDB, ColdEndpoint string
	// NoReadinessCheck keeps the health service SERVING from open to stop
	// or fence, without the readiness check's confirmations (readiness.go):
	// for tests of owners that must confirm nothing in the background.
	NoReadinessCheck bool
	// Clone, when set, makes the database a clone of a checkpoint of
	// another database before it is opened (`--clone-from`: shalefs.Bootstrap;
	// docs/checkpoints.md, "Clones").
	Clone *CloneConfig
	// Standby, when set, starts this primary as the standby of a
	// switchover (`--standby`, RFC 0012): it serves health at once, warms
	// its cache, answers SERVING once warm (every KV call UNAVAILABLE),
	// waits for the current owner's release and only then takes over.
	Standby *StandbyConfig
	// Archive, when set, runs the continuous archive of the database's
	// logs into a backup location (`--archive-to`; RFC 0011 steps 18-23),
	// from the store, after the open. Source, Epoch, Logger and
	// Registerer are set by Start. The primary never waits for it.
	Archive *backup.ArchiveConfig
}

// StandbyConfig configures a standby (RFC 0012).
type StandbyConfig struct {
	// Poll is how often the release is looked for (0: 50 ms).
	Poll time.Duration
	// Warmed, if set, is called once the cache is warm, with the address
	// the standby listens on (tests).
	Warmed func(addr string, rep shalefs.WarmReport)
}

// CloneConfig names the checkpoint a clone starts from.
type CloneConfig struct {
	From       string // the parent database's store URL
	Checkpoint string // its checkpoint's name
	ID         string // this clone's id (the operator passes the RocksDB's UID)
	// Copy asks for a copy of the parent's tables (RFC 0010 step 20);
	// one is made anyway when the parent is in another scheme or
	// endpoint, or read with other credentials (shalefs.CloneCopies).
	Copy bool
	// Endpoint and CredentialsDir reach the parent's store when it is not
	// the clone's (--clone-endpoint, --clone-credentials-dir).
	Endpoint, CredentialsDir string
	// afterCopy and copyParallel: shalefs.BootstrapConfig's AfterCopy
	// and CopyParallel (tests).
	afterCopy    func(key string) error
	copyParallel int
}

// Server is a running primary.
type Server struct {
	cfg       Config
	cloned    shalefs.BootstrapReport // what the clone's bootstrap did (Config.Clone)
	node      *node.Node              // holds the cache dir while serving: one primary per cache dir
	fs        *shalefs.Owner
	db        *engine.DB
	ep        *kvserver.Endpoint
	durable   *kvserver.Notifier // wakes, and at Stop ends, Watch streams
	compactor *compactor.Client  // nil: local compaction
	// tiered: tiering has been on since open. From then on compactions
	// into the last level stay local (engine.KeepCompactionLocal), even
	// after SetColdAfter(0): one RocksDB picked under the old options may
	// still split its output by key.
	tiered atomic.Bool
	// checkpointWaited, set by tests only, runs at each poll of a
	// checkpoint's wait for its flush (between RocksDB's flush and the
	// file listing of RFC 0010 step 4), so a test can flush a write above
	// S there.
	checkpointWaited func()
	ready            *readiness // keeps the health service's answer current (readiness.go)
	// wrote is when (since born, a monotonic reading) a sync last stored
	// new log bytes: the primary is taking writes (readiness.go).
	born  time.Time
	wrote atomic.Int64

	closeOnce sync.Once // closeDB: RocksDB, the compaction client, the FileSystem's loops
	stepMu    sync.Mutex
	step      *stepDown     // the step-down under way or done (stepdown.go)
	stepped   chan struct{} // closed once a step-down released the database
	// archiver, once opened (it is opened in the background, retrying
	// while the backup store is unreachable).
	archiver    atomic.Pointer[backup.Archiver]
	archiveStop context.CancelFunc
	archiveDone chan struct{}
}

// Start opens the database and starts serving. On error nothing is left
// running or open.
func Start(cfg Config) (*Server, error) {
	return startCtx(context.Background(), cfg)
}

// startCtx is Start; ctx ends a standby's wait for the release.
func startCtx(runCtx context.Context, cfg Config) (_ *Server, err error) {
	switch cfg.CompactionMode {
	case "", "local", "remote":
	default:
		return nil, fmt.Errorf("--compaction %q: want local or remote", cfg.CompactionMode)
	}
	if cfg.Engine.ColdAfter > 0 && cfg.ColdDB == "" && cfg.Storage.Cold == nil {
		return nil, errors.New("--cold-after needs --cold-db: the cold tier's location (s3://BUCKET/PREFIX or file:///ABS/PATH)")
	}
	s := &Server{cfg: cfg, durable: kvserver.NewNotifier(), born: time.Now(), stepped: make(chan struct{})}
	sc := cfg.Storage
	sc.OnDurable = func() {
		s.wrote.Store(int64(time.Since(s.born)))
		s.durable.Notify()
		if a := s.archiver.Load(); a != nil {
			a.Wake()
		}
	}
	if cfg.Archive != nil && sc.KeepFolded == nil {
		// A fold's segments stay until the archive has them (RFC 0011
		// step 22a): they date each write group, the fold only its span.
		sc.KeepFolded = func(name string, epoch, through uint64) bool {
			a := s.archiver.Load()
			return a == nil || !a.Archived(name, epoch, through)
		}
	}
	if sc.Owner == "" {
		host, _ := os.Hostname()
		sc.Owner = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	n, err := node.Start(node.Config{Kind: node.Primary, Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, Pprof: cfg.Pprof,
		Security: cfg.Security, Limits: cfg.Limits, Storage: sc, Logger: cfg.Logger,
		Stores: node.StoreConfig{DB: cfg.DB, ColdDB: cfg.ColdDB, ColdEndpoint: cfg.ColdEndpoint, Store: cfg.Storage.Store, Cold: cfg.Storage.Cold}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Abandon()
		}
	}()
	s.node, s.ep, s.cfg.Logger = n, n.Endpoint, n.Logger
	cfg.Logger, sc = n.Logger, n.Storage
	if sec := n.Secured; sec != nil && sec.Guard.Self.Database != n.URL {
		// Not fatal for the KV API (clients are granted by the database's
		// name), but the compactor scheduler takes submissions only for
		// the URL the certificate names.
		cfg.Logger.Warn("the TLS certificate names another database URL than --db: remote compactions will be refused and done locally",
			"certificate", sec.Guard.Self.Database, "db", n.URL)
	}
	var deferred *kvserver.Deferred
	if sb := cfg.Standby; sb != nil {
		deferred = &kvserver.Deferred{}
		if err := s.standBy(runCtx, n, sb, deferred); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				s.ep.Stop(time.Second) // it serves since standBy
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	if c := cfg.Clone; c != nil {
		// Before the takeover: the directory is empty or holds only this
		// bootstrap's objects (a retry), else it is refused.
		open := sc.OpenOrigin
		if c.Endpoint != "" || c.CredentialsDir != "" {
			open = shalefs.ParentOpener(c.Endpoint, c.CredentialsDir)
		}
		copies, why, berr := shalefs.CloneCopies(n.URL, c.From, c.Endpoint, c.CredentialsDir, c.Copy)
		if berr == nil && copies {
			cfg.Logger.Info("the clone copies its parent's tables", "parent", c.From, "why", why)
		}
		var rep shalefs.BootstrapReport
		if berr == nil {
			rep, berr = shalefs.Bootstrap(ctx, shalefs.BootstrapConfig{Store: sc.Store, Parent: c.From, Checkpoint: c.Checkpoint, CloneID: c.ID,
				OpenOrigin: open, Logger: cfg.Logger, Copy: copies, AfterCopy: c.afterCopy, CopyParallel: c.copyParallel})
		}
		if berr != nil {
			cancel()
			err = fmt.Errorf("--db %s: clone of %s at %q: %w", n.URL, c.From, c.Checkpoint, berr)
			return nil, err
		}
		s.cloned = rep
	}
	s.fs, err = shalefs.Open(ctx, sc)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", n.URL, err)
	}
	defer func() {
		if err != nil {
			s.fs.Stop()
		}
	}()
	eo := cfg.Engine
	eo.FileSystem = s.fs
	if sc.WALPipelineDepth > 1 {
		// WAL syncs return once queued: the engine holds acknowledgements
		// and reads back to the last durable write (RFC 0013).
		eo.Pipeline = s.fs
	}
	s.tiered.Store(eo.ColdAfter > 0)
	if cfg.CompactionMode == "remote" {
		cc := cfg.Compaction
		cc.DB, cc.Logger, cc.Registerer = n.URL, cfg.Logger, n.Registry
		if n.Cold != nil {
			cc.ColdDB = n.Cold.URL()
		}
		// The primary is the scheduler's client with its own certificate,
		// which names the database it may submit compactions for.
		if cfg.Security.TLS.Enabled() {
			cc.Security = auth.ClientConfig{TLS: cfg.Security.TLS}
		}
		cc.KeepLocal = func(outputLevel int32) bool {
			var coldAfter time.Duration
			if s.tiered.Load() {
				coldAfter = time.Second // on, now or earlier (SetColdAfter)
			}
			return engine.KeepCompactionLocal(int(outputLevel), engine.NumLevels, coldAfter)
		}
		if s.compactor, err = compactor.NewClient(cc, s.fs); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				s.compactor.Close()
			}
		}()
		eo.CompactionService = s.compactor
	}
	if s.db, err = engine.Open(sc.CacheDir, eo); err != nil {
		return nil, fmt.Errorf("--db %s: %w", n.URL, err)
	}
	s.fs.Serving()
	epochGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shale_epoch", Help: "Epoch this primary owns the database with."},
		func() float64 { return float64(s.fs.Epoch()) })
	fencedGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shale_fenced", Help: "1 once a newer owner fenced this primary."},
		func() float64 {
			if s.fs.FenceError() != nil {
				return 1
			}
			return 0
		})
	reg := n.Registry
	reg.MustRegister(epochGauge, fencedGauge)
	go func() {
		<-s.fs.Fenced()
		s.ep.Fail(s.fs.FenceError())
	}()
	reg.MustRegister(engine.NewCollector(s.db))
	iometrics.RegisterTierUsage(reg, s.fs.TierUsage, s.db.AgeOutStats)
	iometrics.RegisterRangeCache(reg, s.fs.RangeCacheStats)
	svc := kvserver.New(s.db, cfg.Limits, kvserver.Info{Role: kvv1.Role_ROLE_PRIMARY, DB: n.URL, Epoch: s.fs.Epoch(), Guard: s.fs, Durable: s.durable, Logs: s.logTails, Tiers: tierUsage(s.fs),
		SetColdAfter: s.SetColdAfter, ColdTier: n.Cold != nil, Checkpoints: checkpoints{s}, StepDown: s.StepDown})
	if deferred != nil {
		// A standby serves already (its endpoint answered UNAVAILABLE).
		deferred.Set(svc)
		s.ep.SetServing(true)
	} else {
		s.ep.Serve(svc, reg, cfg.Limits, n.Secured, cfg.Logger)
	}
	if !cfg.NoReadinessCheck {
		s.startReadiness()
	}
	if cfg.Archive != nil {
		ac := *cfg.Archive
		ac.Source, ac.Epoch, ac.Logger, ac.Registerer = sc.Store, s.fs.Epoch(), cfg.Logger, reg
		s.startArchive(ac)
	}
	cfg.Logger.Info("primary serving", "db", n.URL, "epoch", s.fs.Epoch(), "cache", sc.CacheDir, "listen", s.ep.Addr(), "metrics", s.MetricsAddr(),
		"transport", kvserver.TransportName(n.Secured), "compaction", s.compactionMode())
	return s, nil
}

func (s *Server) compactionMode() string {
	if s.compactor != nil {
		return "remote via " + s.cfg.Compaction.Scheduler
	}
	return "local"
}

// SetColdAfter changes the running primary's cold-after (SetTiering, the
// operator's spec.tiering.coldAfter): RocksDB's options and the age-out
// pass, without a restart. The KV service checks that a cold tier exists
// before turning tiering on.
func (s *Server) SetColdAfter(d time.Duration) error {
	if d > 0 {
		// Before RocksDB's options change: no compaction into the last
		// level goes remote from here on.
		s.tiered.Store(true)
	}
	if err := s.db.SetColdAfter(d); err != nil {
		return err
	}
	s.cfg.Logger.Info("cold-after changed", "coldAfter", d)
	return nil
}

// Compactor is the remote compaction client, or nil (local compaction).
func (s *Server) Compactor() *compactor.Client { return s.compactor }

// Epoch is the epoch this primary owns the database with.
func (s *Server) Epoch() uint64 { return s.fs.Epoch() }

// Cloned is what the clone's bootstrap did (zero without Config.Clone).
func (s *Server) Cloned() shalefs.BootstrapReport { return s.cloned }

// LeaseWaited is how long the takeover waited out earlier owners' read
// leases (see shalefs.Owner.LeaseWaited).
func (s *Server) LeaseWaited() time.Duration { return s.fs.LeaseWaited() }

// Addr is the gRPC address the server listens on.
func (s *Server) Addr() string { return s.ep.Addr() }

// MetricsAddr is the HTTP metrics address, or "" when disabled.
func (s *Server) MetricsAddr() string { return s.ep.MetricsAddr() }

// Done reports a serving error (the server is then unusable; call Stop).
func (s *Server) Done() <-chan error { return s.ep.Done() }

// Stop stops accepting requests, lets running ones finish (up to a grace
// period), and closes the database.
func (s *Server) Stop(grace time.Duration) {
	s.stopReadiness()
	s.stopArchive()
	s.durable.Close()
	stopped := make(chan struct{})
	go func() {
		s.ep.Stop(grace)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(grace):
		// A request still running after the grace, such as a Compact
		// whose compaction waits for a worker, ends with the database's
		// shutdown, which begins now.
		s.db.CancelBackgroundWork()
		<-stopped
	}
	s.closeDB()
	if !s.fs.Released() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.fs.Release(ctx); err != nil {
			s.cfg.Logger.Warn("could not record the release; the next owner waits one lease", "err", err)
		}
		cancel()
	}
	s.node.Close()
	s.cfg.Logger.Info("primary stopped", "db", s.cfg.DB)
}

// closeDB closes RocksDB (after running calls), then the compaction
// client, then stops the FileSystem's loops; once.
func (s *Server) closeDB() {
	s.closeOnce.Do(func() {
		// Closing RocksDB cancels the compactions waiting for a worker
		// (CancelAwaitingJobs: the client ends their streams, so the
		// scheduler drops them from its queue, and RocksDB abandons them);
		// the client closes after, with no job left to wait for.
		s.db.Close()
		if s.compactor != nil {
			s.compactor.Close()
		}
		s.fs.Stop()
	})
}

// startArchive opens the archiver in the background, retrying while the
// backup store cannot be reached, then runs it until Stop or a fence.
func (s *Server) startArchive(ac backup.ArchiveConfig) {
	ctx, cancel := context.WithCancel(context.Background())
	s.archiveStop, s.archiveDone = cancel, make(chan struct{})
	go func() {
		defer close(s.archiveDone)
		for wait := time.Second; ; wait = min(2*wait, time.Minute) {
			a, err := backup.OpenArchiver(ctx, ac)
			if err == nil {
				s.archiver.Store(a)
				a.Start()
				s.cfg.Logger.Info("archiving the logs", "to", ac.To.Store.URL())
				select {
				case <-ctx.Done():
				case <-s.fs.Fenced():
				}
				a.Stop()
				return
			}
			s.cfg.Logger.Error("the archive cannot start; retrying (point-in-time restores lag meanwhile)", "to", ac.To.Store.URL(), "err", err, "retry_in", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
}

func (s *Server) stopArchive() {
	if s.archiveStop != nil {
		s.archiveStop()
		<-s.archiveDone
	}
}

// Archiver is the running archiver (nil until it opened, or without one).
func (s *Server) Archiver() *backup.Archiver { return s.archiver.Load() }

// FenceDrain is how long a fenced primary keeps answering, with
// FAILED_PRECONDITION naming the new epoch, before it exits: clients learn
// why instead of seeing a refused connection.
const FenceDrain = 2 * time.Second

// Run starts a primary and serves until ctx is done or serving fails; a
// fenced primary returns the fence error.
func Run(ctx context.Context, cfg Config) error {
	s, err := startCtx(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-s.stepped:
		// Stepped down (StepDown): the standby takes over. Keep answering
		// UNAVAILABLE for a moment, so clients learn why, then exit.
		select {
		case <-time.After(FenceDrain):
		case <-ctx.Done():
		}
		s.Stop(time.Second)
		s.stepMu.Lock()
		err := s.step.err
		s.stepMu.Unlock()
		// Exit 0 only after a release: the operator completes a
		// switchover on a primary that exited 0 (RFC 0012, step 8).
		return err
	case <-ctx.Done():
		s.Stop(10 * time.Second)
		// Asked to stop, but deposed meanwhile (a frozen primary resumes
		// with both pending): say so, and exit 1.
		return s.fs.FenceError()
	case err := <-s.Done():
		if s.fs.FenceError() != nil {
			select {
			case <-time.After(FenceDrain):
			case <-ctx.Done():
			}
		}
		s.Stop(time.Second)
		return err
	}
}

// logTails is what the primary announces to secondaries with each
// notification: the logs it has stored, so they fetch just what is new.
func (s *Server) logTails() ([]*kvv1.LogTail, string) {
	tails, current := s.fs.Tails()
	out := make([]*kvv1.LogTail, len(tails))
	for i, t := range tails {
		out[i] = &kvv1.LogTail{Name: t.Name, Epoch: t.Epoch, LastSegment: t.LastSegment, Bytes: uint64(t.Bytes)}
	}
	return out, current
}

// tierUsage reports fs's live tables per tier for the Status call.
func tierUsage(fs *shalefs.Owner) func() []*kvv1.TierUsage {
	return func() []*kvv1.TierUsage {
		var out []*kvv1.TierUsage
		for _, u := range fs.TierUsage() {
			out = append(out, &kvv1.TierUsage{Tier: u.Tier, Files: uint64(u.Files), Bytes: uint64(max(u.Bytes, 0))})
		}
		return out
	}
}
