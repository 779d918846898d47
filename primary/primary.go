// Package primary runs a Shale primary: the single read-write owner of a
// database. It opens the database named by a store URL, serves the KV API
// over gRPC (with the standard health and reflection services) and
// Prometheus metrics over HTTP.
package primary

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/iometrics"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
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
	// Start; an empty CacheDir gets DefaultCacheDir(DB).
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
}

// DefaultCacheDir is where a primary keeps its local cache of db when
// --cache-dir is not given: under the user's cache directory, one
// directory per database URL.
func DefaultCacheDir(db string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(db))
	return filepath.Join(base, "shale", "db-"+hex.EncodeToString(sum[:8]))
}

// Server is a running primary.
type Server struct {
	cfg       Config
	cacheLock *os.File // held while serving: one primary per cache dir
	fs        *shalefs.FS
	db        *engine.DB
	ep        *kvserver.Endpoint
	durable   *kvserver.Notifier // wakes, and at Stop ends, Watch streams
	compactor *compactor.Client  // nil: local compaction
}

// Start opens the database and starts serving. On error nothing is left
// running or open.
func Start(cfg Config) (_ *Server, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	sec, err := kvserver.Secure(cfg.Security, cfg.Listen, auth.KindPrimary, cfg.Logger)
	if err != nil {
		return nil, err
	}
	switch cfg.CompactionMode {
	case "", "local", "remote":
	default:
		return nil, fmt.Errorf("--compaction %q: want local or remote", cfg.CompactionMode)
	}
	u, err := objstore.ParseURL(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	if sec != nil && sec.Guard.Self.Database != u.String() {
		// Not fatal for the KV API (clients are granted by the database's
		// name), but the compactor scheduler takes submissions only for
		// the URL the certificate names.
		cfg.Logger.Warn("the TLS certificate names another database URL than --db: remote compactions will be refused and done locally",
			"certificate", sec.Guard.Self.Database, "db", u.String())
	}
	store := cfg.Storage.Store // set by tests that wrap the store
	if store == nil {
		if store, err = objstore.Open(u.String()); err != nil {
			return nil, fmt.Errorf("--db: %w", err)
		}
	}
	if s3, ok := store.(*objstore.S3Store); ok {
		// A missing bucket or bad credentials: say so before anything else.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s3.CheckBucket(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("--db %s: %w", u, err)
		}
	}
	cold := cfg.Storage.Cold // set by tests that wrap the store
	if cold == nil {
		if cold, err = shalefs.OpenColdTier(cfg.ColdDB, cfg.ColdEndpoint); err != nil {
			return nil, err
		}
	}
	if cold != nil {
		if err := shalefs.CheckTierLocations(u.String(), cold.URL(), cfg.ColdEndpoint == ""); err != nil {
			return nil, err
		}
	}
	if cfg.Engine.ColdAfter > 0 && cold == nil {
		return nil, errors.New("--cold-after needs --cold-db: the cold tier's location (s3://BUCKET/PREFIX or file:///ABS/PATH)")
	}
	s := &Server{cfg: cfg}
	// Bind before opening so a busy port creates nothing on disk.
	if s.ep, err = kvserver.Listen(cfg.Listen, cfg.MetricsListen); err != nil {
		return nil, err
	}
	if cfg.Pprof {
		s.ep.EnableProfiling()
	}
	defer func() {
		if err != nil {
			s.ep.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	io := iometrics.New(reg)
	sc := cfg.Storage
	sc.Store = store
	sc.Cold = cold
	sc.Logger = cfg.Logger
	sc.Observe = io.Observe
	s.durable = kvserver.NewNotifier()
	sc.OnDurable = s.durable.Notify
	if sc.CacheDir == "" {
		sc.CacheDir = DefaultCacheDir(u.String())
	}
	if sc.Owner == "" {
		host, _ := os.Hostname()
		sc.Owner = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	// Take the local cache's lock before fencing anyone: a second primary
	// on the same machine and cache must fail, not depose the first.
	if _, statErr := os.Stat(sc.CacheDir); errors.Is(statErr, os.ErrNotExist) {
		defer func() {
			if err != nil {
				os.RemoveAll(sc.CacheDir) // created here: leave nothing behind
			}
		}()
	}
	if err := os.MkdirAll(sc.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("--cache-dir %s: %w", sc.CacheDir, err)
	}
	if s.cacheLock, err = engine.LockFile(sc.CacheDir, "SHALE-OWNER.lock"); err != nil {
		return nil, fmt.Errorf("--db %s: cache %w", u, err)
	}
	defer func() {
		if err != nil {
			s.cacheLock.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	s.fs, err = shalefs.Open(ctx, sc)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", u, err)
	}
	defer func() {
		if err != nil {
			s.fs.Stop()
		}
	}()
	eo := cfg.Engine
	eo.FileSystem = s.fs
	if cfg.CompactionMode == "remote" {
		cc := cfg.Compaction
		cc.DB, cc.Logger, cc.Registerer = u.String(), cfg.Logger, reg
		if cold != nil {
			cc.ColdDB = cold.URL()
		}
		// The primary is the scheduler's client with its own certificate,
		// which names the database it may submit compactions for.
		if cfg.Security.TLS.Enabled() {
			cc.Security = auth.ClientConfig{TLS: cfg.Security.TLS}
		}
		coldAfter := cfg.Engine.ColdAfter
		cc.KeepLocal = func(outputLevel int32) bool {
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
		return nil, fmt.Errorf("--db %s: %w", u, err)
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
	reg.MustRegister(epochGauge, fencedGauge)
	go func() {
		<-s.fs.Fenced()
		s.ep.Fail(s.fs.FenceError())
	}()
	reg.MustRegister(engine.NewCollector(s.db))
	iometrics.RegisterTierUsage(reg, s.fs.TierUsage, s.db.AgeOutStats)
	iometrics.RegisterRangeCache(reg, s.fs.RangeCacheStats)
	s.ep.Serve(kvserver.New(s.db, cfg.Limits, kvserver.Info{Role: kvv1.Role_ROLE_PRIMARY, DB: u.String(), Epoch: s.fs.Epoch(), Guard: s.fs, Durable: s.durable, Logs: s.logTails, Tiers: tierUsage(s.fs)}), reg, cfg.Limits, sec, cfg.Logger)
	cfg.Logger.Info("primary serving", "db", u.String(), "epoch", s.fs.Epoch(), "cache", sc.CacheDir, "listen", s.ep.Addr(), "metrics", s.MetricsAddr(),
		"transport", kvserver.TransportName(sec), "compaction", s.compactionMode())
	return s, nil
}

func (s *Server) compactionMode() string {
	if s.compactor != nil {
		return "remote via " + s.cfg.Compaction.Scheduler
	}
	return "local"
}

// Compactor is the remote compaction client, or nil (local compaction).
func (s *Server) Compactor() *compactor.Client { return s.compactor }

// Epoch is the epoch this primary owns the database with.
func (s *Server) Epoch() uint64 { return s.fs.Epoch() }

// LeaseWaited is how long the takeover waited out earlier owners' read
// leases (see shalefs.FS.LeaseWaited).
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
	// Closing RocksDB cancels the compactions waiting for a worker
	// (CancelAwaitingJobs: the client ends their streams, so the
	// scheduler drops them from its queue, and RocksDB abandons them);
	// the client closes after, with no job left to wait for.
	s.db.Close()
	if s.compactor != nil {
		s.compactor.Close()
	}
	s.fs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.fs.Release(ctx); err != nil {
		s.cfg.Logger.Warn("could not record the release; the next owner waits one lease", "err", err)
	}
	cancel()
	s.cacheLock.Close()
	s.cfg.Logger.Info("primary stopped", "db", s.cfg.DB)
}

// FenceDrain is how long a fenced primary keeps answering, with
// FAILED_PRECONDITION naming the new epoch, before it exits: clients learn
// why instead of seeing a refused connection.
const FenceDrain = 2 * time.Second

// Run starts a primary and serves until ctx is done or serving fails; a
// fenced primary returns the fence error.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	select {
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
func tierUsage(fs *shalefs.FS) func() []*kvv1.TierUsage {
	return func() []*kvv1.TierUsage {
		var out []*kvv1.TierUsage
		for _, u := range fs.TierUsage() {
			out = append(out, &kvv1.TierUsage{Tier: u.Tier, Files: uint64(u.Files), Bytes: uint64(max(u.Bytes, 0))})
		}
		return out
	}
}
