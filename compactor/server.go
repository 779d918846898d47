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

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/internal/auth"
)

// maxMessageBytes bounds gRPC messages: a job carries RocksDB's serialized
// input (the options of the database, a few KiB) and a result.
const maxMessageBytes = 64 << 20

// SchedulerServerConfig is what `shale compactor scheduler` runs.
type SchedulerServerConfig struct {
	Listen        string // gRPC address
	MetricsListen string // HTTP address for /metrics; "" disables it
	Scheduler     SchedulerConfig
	// Security is TLS and who may call what (docs/compaction.md,
	// "Security"): with a certificate of a scheduler (shale://NS/scheduler/POOL)
	// only primaries of NS submit, and only for the database their
	// certificate names; only workers of POOL take and report jobs.
	// Plaintext (no authentication at all) only on a loopback address or
	// with Insecure. AccessFile is not used: the scheduler has no clients.
	Security auth.ServerConfig
	Logger   *slog.Logger
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
	sec, err := secureScheduler(cfg)
	if err != nil {
		return nil, err
	}
	s := &SchedulerServer{done: make(chan error, 2)}
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
	s.Scheduler.secured = sec != nil
	// No reflection: it would describe the service to anyone, and the
	// guard refuses every method it does not know.
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes), sec.ServerOption(),
		grpc.ChainUnaryInterceptor(sec.UnaryInterceptors()...), grpc.ChainStreamInterceptor(sec.StreamInterceptors()...))
	compactorv1.RegisterCompactorServer(s.grpc, s.Scheduler)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, hs)
	hs.SetServingStatus(compactorv1.Compactor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	go func() { s.done <- s.grpc.Serve(s.lis) }()
	if s.mlis != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), NewStatsCollector(s.Snapshot))
		s.metrics = serveMetrics(s.mlis, reg, s.done)
	}
	if sec != nil {
		self := sec.Guard.Self
		cfg.Logger.Info("compactor scheduler serving", "listen", s.Addr(), "metrics", s.MetricsAddr(), "lease_ttl", s.cfg.LeaseTTL,
			"tls", true, "identity", self.String(), "primaries_of", self.Namespace, "workers_of", self.Namespace+"/"+self.Name)
	} else {
		level := slog.LevelInfo
		if !auth.IsLoopback(cfg.Listen) {
			level = slog.LevelWarn
		}
		cfg.Logger.Log(context.Background(), level, "compactor scheduler serving in plaintext with no authentication: anyone who reaches it can submit jobs and report results",
			"listen", s.Addr(), "metrics", s.MetricsAddr(), "lease_ttl", s.cfg.LeaseTTL, "insecure", cfg.Security.Insecure)
	}
	return s, nil
}

// secureScheduler checks cfg.Security against the listen address and
// loads its files: nil for plaintext.
func secureScheduler(cfg SchedulerServerConfig) (*auth.Secured, error) {
	if err := cfg.Security.Check(cfg.Listen); err != nil {
		return nil, fmt.Errorf("compactor scheduler: %w", err)
	}
	if cfg.Security.AccessFile != "" {
		return nil, errors.New("compactor scheduler: an access file lists a database's clients; the scheduler has none (primaries and workers are known by their certificates)")
	}
	sec, err := auth.Secure(cfg.Security, auth.RequireScheduler)
	if err != nil || sec == nil {
		return nil, err
	}
	if self := sec.Guard.Self; self.Kind != auth.KindScheduler {
		return nil, fmt.Errorf("compactor scheduler: --tls-cert %s names %s, not a compactor scheduler (shale://NAMESPACE/scheduler/POOL): issue the scheduler its own certificate", cfg.Security.TLS.Cert, self)
	}
	sec.TLS.OnReloadError(func(err error) {
		cfg.Logger.Warn("renewed TLS files cannot be used; serving with the previous ones", "err", err)
	})
	return sec, nil
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
