package kvserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

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
)

// Endpoint serves a KV service over gRPC (with the standard health and
// reflection services) and Prometheus metrics over HTTP: what a primary
// and a secondary have in common.
type Endpoint struct {
	lis, mlis net.Listener
	grpc      *grpc.Server
	health    *health.Server
	metrics   *http.Server
	pprof     bool
	done      chan error
}

// Listen binds the gRPC address and, unless empty, the metrics address, so
// that a busy port fails a server before it opens anything.
func Listen(addr, metricsAddr string) (*Endpoint, error) {
	e := &Endpoint{done: make(chan error, 4)}
	var err error
	if e.lis, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	if metricsAddr != "" {
		if e.mlis, err = net.Listen("tcp", metricsAddr); err != nil {
			e.lis.Close()
			return nil, fmt.Errorf("--metrics-listen %s: %w", metricsAddr, err)
		}
	}
	return e, nil
}

// Close releases the listeners of an endpoint that never served.
func (e *Endpoint) Close() {
	e.lis.Close()
	if e.mlis != nil {
		e.mlis.Close()
	}
}

// EnableProfiling serves Go's /debug/pprof handlers on the metrics
// listener (call before Serve). Off unless asked for: profiles show
// internals to whoever reaches the port, and cost CPU while taken.
func (e *Endpoint) EnableProfiling() { e.pprof = true }

// Serve registers svc and starts serving it, and /metrics from reg (to
// which it adds the Go, process and gRPC collectors) with /healthz.
func (e *Endpoint) Serve(svc kvv1.KVServer, reg *prometheus.Registry, limits Limits, logger *slog.Logger) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	grpcMetrics := newRPCMetrics()
	reg.MustRegister(grpcMetrics)
	onPanic := recovery.WithRecoveryHandler(func(p any) error {
		logger.Error("panic in request handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error: %v", p)
	})
	e.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(limits.MaxMessageBytes()),
		// Handlers run on long-lived worker goroutines whose stacks have
		// already grown, instead of a new goroutine per request that grows
		// (copies) its stack through the handler chain every time: the
		// copies were a tenth of a Get's server CPU. Requests beyond the
		// pool still get a goroutine of their own.
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		grpc.ChainUnaryInterceptor(grpcMetrics.unary, recovery.UnaryServerInterceptor(onPanic)),
		grpc.ChainStreamInterceptor(grpcMetrics.stream, recovery.StreamServerInterceptor(onPanic)),
	)
	kvv1.RegisterKVServer(e.grpc, svc)
	e.health = health.NewServer()
	healthpb.RegisterHealthServer(e.grpc, e.health)
	reflection.Register(e.grpc)
	grpcMetrics.init(e.grpc)
	e.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	e.health.SetServingStatus(kvv1.KV_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	go func() { e.done <- e.grpc.Serve(e.lis) }()
	if e.mlis != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		if e.pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		e.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := e.metrics.Serve(e.mlis); !errors.Is(err, http.ErrServerClosed) {
				e.done <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}
}

// streamWorkers is the size of the gRPC handler pool: enough for the
// requests a few dozen clients keep in flight.
func streamWorkers() int { return max(64, 8*runtime.GOMAXPROCS(0)) }

// SetServing sets what the health service answers (readiness probes): a
// replica that cannot serve reads says so.
func (e *Endpoint) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	e.health.SetServingStatus("", st)
	e.health.SetServingStatus(kvv1.KV_ServiceDesc.ServiceName, st)
}

// Addr is the gRPC address.
func (e *Endpoint) Addr() string { return e.lis.Addr().String() }

// MetricsAddr is the HTTP metrics address, or "" when disabled.
func (e *Endpoint) MetricsAddr() string {
	if e.mlis == nil {
		return ""
	}
	return e.mlis.Addr().String()
}

// Done reports a serving error (the endpoint is then unusable).
func (e *Endpoint) Done() <-chan error { return e.done }

// Fail reports err on Done (for errors of the server behind the endpoint).
func (e *Endpoint) Fail(err error) { e.done <- err }

// Stop stops accepting requests and lets running ones finish, up to grace.
func (e *Endpoint) Stop(grace time.Duration) {
	e.health.Shutdown()
	stopped := make(chan struct{})
	go func() { e.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		e.grpc.Stop()
		<-stopped
	}
	if e.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e.metrics.Shutdown(ctx)
		cancel()
	}
}
