package kvserver

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// rpcMetrics are go-grpc-middleware's server metrics (same names, labels
// and buckets: grpc_server_started_total, grpc_server_handled_total,
// grpc_server_msg_received_total, grpc_server_msg_sent_total,
// grpc_server_handling_seconds), with every method's series resolved once
// when serving starts instead of looked up by label values on every call:
// the lookups were about 5% of a unary Get's server CPU.
type rpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	seconds                          *prometheus.HistogramVec
	methods                          map[string]*methodMetrics // by full method; read-only once serving
}

type methodMetrics struct {
	started, received, sent prometheus.Counter
	seconds                 prometheus.Observer
	handled                 [codes.Unauthenticated + 1]prometheus.Counter
	labels                  []string // type, service, method
}

func newRPCMetrics() *rpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append(append([]string{}, labels...), extra...))
	}
	return &rpcMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server."),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", "grpc_code"),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server."),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server."),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets,
		}, labels),
		methods: map[string]*methodMetrics{},
	}
}

// Describe implements prometheus.Collector.
func (m *rpcMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.seconds} {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *rpcMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.seconds} {
		c.Collect(ch)
	}
}

// init resolves the series of every method s serves (they then show up
// at zero). Call after registering the services, before serving.
func (m *rpcMetrics) init(s *grpc.Server) {
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := "unary"
			switch {
			case mi.IsClientStream && mi.IsServerStream:
				typ = "bidi_stream"
			case mi.IsClientStream:
				typ = "client_stream"
			case mi.IsServerStream:
				typ = "server_stream"
			}
			m.methods["/"+service+"/"+mi.Name] = m.resolve(typ, service, mi.Name)
		}
	}
}

func (m *rpcMetrics) resolve(typ, service, method string) *methodMetrics {
	l := []string{typ, service, method}
	mm := &methodMetrics{
		started:  m.started.WithLabelValues(l...),
		received: m.received.WithLabelValues(l...),
		sent:     m.sent.WithLabelValues(l...),
		seconds:  m.seconds.WithLabelValues(l...),
		labels:   l,
	}
	for c := range mm.handled {
		mm.handled[c] = m.handled.WithLabelValues(typ, service, method, codes.Code(c).String())
	}
	return mm
}

func (m *rpcMetrics) method(full, typ string) *methodMetrics {
	if mm := m.methods[full]; mm != nil {
		return mm
	}
	// Not registered before serving (never for Shale's services).
	service, method, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return m.resolve(typ, service, method)
}

func (mm *methodMetrics) done(start time.Time, err error) {
	code := status.Code(err)
	if int(code) < len(mm.handled) {
		mm.handled[code].Inc()
	}
	mm.seconds.Observe(time.Since(start).Seconds())
}

// interceptor is every call's one interceptor: metrics, then panic
// recovery, then the guard (when serving TLS), then the handler. One
// function instead of gRPC's chain of three, which built a closure per
// level on every call. The guard comes after metrics and recovery:
// refused calls are counted (grpc_server_handled_total{grpc_code=
// "PermissionDenied"}), and a panic in it is an INTERNAL error, not a
// crash.
type interceptor struct {
	metrics     *rpcMetrics
	onPanic     func(p any) error            // the error a panicking call returns
	unaryGuard  grpc.UnaryServerInterceptor  // nil: no authentication
	streamGuard grpc.StreamServerInterceptor // nil: no authentication
}

func (c *interceptor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return c.unaryWith(c.metrics.method(info.FullMethod, "unary"), ctx, req, info, handler)
}

// unaryWith is unary with the method's series resolved by the caller.
func (c *interceptor) unaryWith(mm *methodMetrics, ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	mm.started.Inc()
	mm.received.Inc()
	resp, err := c.unaryRecovered(ctx, req, info, handler)
	if err == nil {
		mm.sent.Inc()
	}
	mm.done(start, err)
	return resp, err
}

func (c *interceptor) unaryRecovered(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = c.onPanic(p)
		}
	}()
	if c.unaryGuard != nil {
		return c.unaryGuard(ctx, req, info, handler)
	}
	return handler(ctx, req)
}

func (c *interceptor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	typ := "server_stream"
	switch {
	case info.IsClientStream && info.IsServerStream:
		typ = "bidi_stream"
	case info.IsClientStream:
		typ = "client_stream"
	}
	mm := c.metrics.method(info.FullMethod, typ)
	start := time.Now()
	mm.started.Inc()
	err := c.streamRecovered(srv, &countedStream{ServerStream: ss, mm: mm}, info, handler)
	mm.done(start, err)
	return err
}

func (c *interceptor) streamRecovered(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = c.onPanic(p)
		}
	}()
	if c.streamGuard != nil {
		return c.streamGuard(srv, ss, info, handler)
	}
	return handler(srv, ss)
}

// countedStream counts a stream's messages.
type countedStream struct {
	grpc.ServerStream
	mm *methodMetrics
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.mm.sent.Inc()
	}
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.mm.received.Inc()
	}
	return err
}

// registerKV registers svc with the hot unary methods (Put, Get, Delete,
// Write, MultiGet) served by fastUnary's handlers instead of the generated
// ones, which allocate a UnaryServerInfo and a closure on every call and
// leave the interceptor to look the method's series up by name.
func registerKV(s *grpc.Server, svc kvv1.KVServer, c *interceptor) {
	desc := kvv1.KV_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		m := &desc.Methods[i]
		full := "/" + desc.ServiceName + "/" + m.MethodName
		switch m.MethodName {
		case "Put":
			m.Handler = fastUnary(c, full, svc, svc.Put)
		case "Get":
			m.Handler = fastUnary(c, full, svc, svc.Get)
		case "Delete":
			m.Handler = fastUnary(c, full, svc, svc.Delete)
		case "Write":
			m.Handler = fastUnary(c, full, svc, svc.Write)
		case "MultiGet":
			m.Handler = fastUnary(c, full, svc, svc.MultiGet)
		}
	}
	s.RegisterService(&desc, svc)
}

// fastUnary is the handler of a unary method call of svc: the generated
// handler's work (decode the request, pass it through the interceptor to
// call) with what does not change between calls built once. It calls c
// itself, the server's only unary interceptor, rather than the one gRPC
// passes (the same).
func fastUnary[Req, Resp any](c *interceptor, full string, svc any, call func(context.Context, *Req) (Resp, error)) grpc.MethodHandler {
	info := &grpc.UnaryServerInfo{Server: svc, FullMethod: full}
	mm := c.metrics.method(full, "unary")
	handler := func(ctx context.Context, req any) (any, error) { return call(ctx, req.(*Req)) }
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		return c.unaryWith(mm, ctx, in, info, handler)
	}
}
