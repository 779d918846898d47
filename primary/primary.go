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
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
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
	Limits        kvserver.Limits
	Engine        engine.Options
	// Storage configures the Shale FileSystem: epoch, cache dir, lease,
	// delete grace, storage classes, timeouts. Store and Logger are set by
	// Start; an empty CacheDir gets DefaultCacheDir(DB).
	Storage shalefs.Config
	Logger  *slog.Logger
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
	grpc      *grpc.Server
	health    *health.Server
	lis       net.Listener
	metrics   *http.Server
	mlis      net.Listener
	done      chan error
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
	u, err := objstore.ParseURL(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
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
	s := &Server{cfg: cfg, done: make(chan error, 3)}
	// Bind before opening so a busy port creates nothing on disk.
	if s.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	defer func() {
		if err != nil {
			s.lis.Close()
		}
	}()
	if cfg.MetricsListen != "" {
		if s.mlis, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
		}
		defer func() {
			if err != nil {
				s.mlis.Close()
			}
		}()
	}
	reg := prometheus.NewRegistry()
	io := iometrics.New(reg)
	sc := cfg.Storage
	sc.Store = store
	sc.Logger = cfg.Logger
	sc.Observe = io.Observe
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
		s.done <- s.fs.FenceError()
	}()

	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(engine.NewCollector(s.db))
	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	reg.MustRegister(grpcMetrics)

	onPanic := recovery.WithRecoveryHandler(func(p any) error {
		cfg.Logger.Error("panic in request handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error: %v", p)
	})
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.Limits.MaxMessageBytes()),
		grpc.ChainUnaryInterceptor(grpcMetrics.UnaryServerInterceptor(), recovery.UnaryServerInterceptor(onPanic)),
		grpc.ChainStreamInterceptor(grpcMetrics.StreamServerInterceptor(), recovery.StreamServerInterceptor(onPanic)),
	)
	kvv1.RegisterKVServer(s.grpc, kvserver.New(s.db, cfg.Limits, kvserver.Info{Role: kvv1.Role_ROLE_PRIMARY, DB: u.String(), Epoch: s.fs.Epoch(), Guard: s.fs}))
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	grpcMetrics.InitializeMetrics(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(kvv1.KV_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	go func() { s.done <- s.grpc.Serve(s.lis) }()
	if s.mlis != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := s.metrics.Serve(s.mlis); !errors.Is(err, http.ErrServerClosed) {
				s.done <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}
	cfg.Logger.Info("primary serving", "db", u.String(), "epoch", s.fs.Epoch(), "cache", sc.CacheDir, "listen", s.lis.Addr().String(), "metrics", s.MetricsAddr())
	return s, nil
}

// Epoch is the epoch this primary owns the database with.
func (s *Server) Epoch() uint64 { return s.fs.Epoch() }

// LeaseWaited is how long the takeover waited out earlier owners' read
// leases (see shalefs.FS.LeaseWaited).
func (s *Server) LeaseWaited() time.Duration { return s.fs.LeaseWaited() }

// Addr is the gRPC address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// MetricsAddr is the HTTP metrics address, or "" when disabled.
func (s *Server) MetricsAddr() string {
	if s.mlis == nil {
		return ""
	}
	return s.mlis.Addr().String()
}

// Done reports a serving error (the server is then unusable; call Stop).
func (s *Server) Done() <-chan error { return s.done }

// Stop stops accepting requests, lets running ones finish (up to a grace
// period), and closes the database.
func (s *Server) Stop(grace time.Duration) {
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		s.grpc.Stop()
		<-stopped
	}
	if s.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.metrics.Shutdown(ctx)
		cancel()
	}
	s.db.Close()
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
		return nil
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
