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
	"github.com/shale-rocks/shale/internal/auth"
)

// Endpoint serves a KV service over gRPC (with the standard health and,
// where it is safe, reflection services) and Prometheus metrics over
// HTTP: what a primary and a secondary have in common.
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
// which it adds the Go, process and gRPC collectors) with /healthz. With
// sec, gRPC is TLS and every call passes sec's guard (nil: plaintext, no
// authentication; the caller checked that the listener allows it).
func (e *Endpoint) Serve(svc kvv1.KVServer, reg *prometheus.Registry, limits Limits, sec *auth.Secured, logger *slog.Logger) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	grpcMetrics := newRPCMetrics()
	reg.MustRegister(grpcMetrics)
	onPanic := func(p any) error {
		logger.Error("panic in request handler", "panic", p)
		return status.Errorf(codes.Internal, "internal error: %v", p)
	}
	calls := &interceptor{metrics: grpcMetrics, onPanic: onPanic}
	if sec != nil {
		calls.unaryGuard, calls.streamGuard = sec.Guard.Unary(), sec.Guard.Stream()
	}
	e.grpc = grpc.NewServer(
		sec.ServerOption(),
		grpc.MaxRecvMsgSize(limits.MaxMessageBytes()),
		// Handlers run on long-lived worker goroutines whose stacks have
		// already grown, instead of a new goroutine per request that grows
		// (copies) its stack through the handler chain every time: the
		// copies were a tenth of a Get's server CPU. Requests beyond the
		// pool still get a goroutine of their own.
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		grpc.UnaryInterceptor(calls.unary),
		grpc.StreamInterceptor(calls.stream),
	)
	registerKV(e.grpc, svc, calls)
	e.health = health.NewServer()
	healthpb.RegisterHealthServer(e.grpc, e.health)
	if serveReflection(sec != nil, e.lis.Addr()) {
		reflection.Register(e.grpc)
	}
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

// serveReflection says whether to serve gRPC reflection (what grpcurl
// lists and describes): on a secured server, where the guard gives it to
// admin clients only, and on a plaintext listener only this machine can
// reach (`shale dev`). Never on plaintext others can reach (--insecure):
// it would describe the API to anyone on the network.
func serveReflection(secured bool, addr net.Addr) bool {
	if secured {
		return true
	}
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
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

// Secure checks a KV server's security settings against the address it
// listens on and loads its TLS files and access file: nil for plaintext
// (loopback, or --insecure). The certificate must name a server of kind
// (a primary's or a secondary's identity): the guard grants clients by
// the database it names, and the primary grants the database's
// secondaries read.
func Secure(c auth.ServerConfig, listen string, kind auth.Kind, logger *slog.Logger) (*auth.Secured, error) {
	if err := c.Check(listen); err != nil {
		return nil, err
	}
	sec, err := auth.Secure(c, nil)
	if err != nil || sec == nil {
		return nil, err
	}
	if self := sec.Guard.Self; self.Kind != kind {
		return nil, fmt.Errorf("--tls-cert %s is issued to %s, not to a %s: issue one with `shale admin cert issue --kind %s` (or let the operator do it)", c.TLS.Cert, self.URI(), kind, kind)
	}
	sec.TLS.OnReloadError(func(err error) {
		logger.Warn("changed TLS files are unusable; still serving with the previous certificate", "err", err)
	})
	return sec, nil
}

// TransportName says in a log line how the KV port is served.
func TransportName(sec *auth.Secured) string {
	if sec == nil {
		return "plaintext, no authentication"
	}
	return "TLS as " + sec.Guard.Self.URI().String()
}
