package compactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
)

// maxMessageBytes bounds gRPC messages: a job carries RocksDB's serialized
// input (the options of the database, a few KiB) and a result.
const maxMessageBytes = 64 << 20

// SchedulerServerConfig is what `shale compactor scheduler` runs.
type SchedulerServerConfig struct {
	Listen        string // gRPC address
	MetricsListen string // HTTP address for /metrics; "" disables it
	Scheduler     SchedulerConfig
	Logger        *slog.Logger
}

// SchedulerServer is a scheduler serving gRPC and metrics.
type SchedulerServer struct {
	*Scheduler
	lis, mlis net.Listener
	grpc      *grpc.Server
	metrics   *http.Server
	done      chan error
}

// StartScheduler binds the addresses and starts serving.
func StartScheduler(cfg SchedulerServerConfig) (*SchedulerServer, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Scheduler.Logger = cfg.Logger
	s := &SchedulerServer{done: make(chan error, 2)}
	var err error
	if s.lis, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	if cfg.MetricsListen != "" {
		if s.mlis, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			s.lis.Close()
			return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
		}
	}
	s.Scheduler = NewScheduler(cfg.Scheduler)
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes))
	compactorv1.RegisterCompactorServer(s.grpc, s.Scheduler)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, hs)
	hs.SetServingStatus(compactorv1.Compactor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	reflection.Register(s.grpc)
	go func() { s.done <- s.grpc.Serve(s.lis) }()
	if s.mlis != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), NewStatsCollector(s.Snapshot))
		s.metrics = serveMetrics(s.mlis, reg, s.done)
	}
	cfg.Logger.Info("compactor scheduler serving", "listen", s.Addr(), "metrics", s.MetricsAddr(), "lease_ttl", s.cfg.LeaseTTL)
	return s, nil
}

func serveMetrics(lis net.Listener, reg *prometheus.Registry, done chan error) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			done <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	return srv
}

// Addr is the gRPC address.
func (s *SchedulerServer) Addr() string { return s.lis.Addr().String() }

// MetricsAddr is the metrics address, or "".
func (s *SchedulerServer) MetricsAddr() string {
	if s.mlis == nil {
		return ""
	}
	return s.mlis.Addr().String()
}

// Done reports a serving error.
func (s *SchedulerServer) Done() <-chan error { return s.done }

// Stop stops serving. Waiting primaries see their streams end and compact
// locally; workers learn at their next heartbeat that their jobs are gone.
func (s *SchedulerServer) Stop() {
	s.Scheduler.Close()
	s.grpc.Stop()
	if s.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.metrics.Shutdown(ctx)
		cancel()
	}
}
