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
	"net"
	"net/http"
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
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
)

// Config is what a primary needs to run.
type Config struct {
	DB            string // store URL of the database, e.g. file:///var/lib/shale/db
	Listen        string // gRPC address
	MetricsListen string // HTTP address for /metrics; "" disables it
	Limits        kvserver.Limits
	Engine        engine.Options
	Logger        *slog.Logger
}

// Server is a running primary.
type Server struct {
	cfg     Config
	db      *engine.DB
	grpc    *grpc.Server
	health  *health.Server
	lis     net.Listener
	metrics *http.Server
	mlis    net.Listener
	done    chan error
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
	if u.Scheme == "s3" {
		// objstore opens s3:// stores; the FileSystem that runs RocksDB on
		// them is not in this build yet.
		return nil, fmt.Errorf("--db %s: s3:// databases are not supported by this build yet; use file:///ABS/PATH", cfg.DB)
	}
	store, err := objstore.Open(u.String())
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	dir, ok := objstore.LocalDir(store)
	if !ok {
		return nil, fmt.Errorf("--db %s: only file:// databases are supported by this build", cfg.DB)
	}

	s := &Server{cfg: cfg, done: make(chan error, 2)}
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
	if s.db, err = engine.Open(dir, cfg.Engine); err != nil {
		return nil, fmt.Errorf("--db %s: %w", u, err)
	}

	reg := prometheus.NewRegistry()
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
	kvv1.RegisterKVServer(s.grpc, kvserver.New(s.db, cfg.Limits, kvserver.Info{Role: kvv1.Role_ROLE_PRIMARY, DB: u.String()}))
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
	cfg.Logger.Info("primary serving", "db", u.String(), "listen", s.lis.Addr().String(), "metrics", s.MetricsAddr())
	return s, nil
}

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
	s.cfg.Logger.Info("primary stopped", "db", s.cfg.DB)
}

// Run starts a primary and serves until ctx is done or serving fails.
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
		s.Stop(time.Second)
		return err
	}
}
