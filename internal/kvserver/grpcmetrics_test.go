package kvserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The one interceptor counts every call, turns a panic in a handler (or
// in the guard) into INTERNAL instead of a crash, and runs the guard
// before the handler: a refused call never reaches it.
func TestInterceptor(t *testing.T) {
	refuse := errors.New("refused")
	guard := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if req == "refuse" {
			return nil, status.Error(codes.PermissionDenied, refuse.Error())
		}
		return h(ctx, req)
	}
	sguard := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if srv == "refuse" {
			return status.Error(codes.PermissionDenied, refuse.Error())
		}
		return h(srv, ss)
	}
	for _, guarded := range []bool{false, true} {
		m := newRPCMetrics()
		reg := prometheus.NewRegistry()
		reg.MustRegister(m)
		c := &interceptor{metrics: m, onPanic: func(p any) error { return status.Errorf(codes.Internal, "internal error: %v", p) }}
		if guarded {
			c.unaryGuard, c.streamGuard = guard, sguard
		}
		info := &grpc.UnaryServerInfo{FullMethod: "/shale.kv.v1.KV/Put"}
		reached := 0
		handler := func(_ context.Context, req any) (any, error) {
			reached++
			if req == "panic" {
				panic("boom")
			}
			return "ok", nil
		}
		if resp, err := c.unary(context.Background(), "x", info, handler); err != nil || resp != "ok" {
			t.Fatalf("guarded=%v: a plain call: %v %v", guarded, resp, err)
		}
		if _, err := c.unary(context.Background(), "panic", info, handler); status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error: boom" {
			t.Fatalf("guarded=%v: a panicking handler: %v", guarded, err)
		}
		want := map[string]float64{"OK": 1, "Internal": 1}
		if guarded {
			if _, err := c.unary(context.Background(), "refuse", info, handler); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("a refused call: %v", err)
			}
			want["PermissionDenied"] = 1
		}
		if reached != 2 {
			t.Errorf("guarded=%v: the handler ran %d times, want 2 (never for a refused call)", guarded, reached)
		}
		for code, n := range want {
			if got := handled(t, reg, "Put", code); got != n {
				t.Errorf("guarded=%v: grpc_server_handled_total{grpc_method=Put,grpc_code=%s} = %v, want %v", guarded, code, got, n)
			}
		}

		sinfo := &grpc.StreamServerInfo{FullMethod: "/shale.kv.v1.KV/Scan", IsServerStream: true}
		err := c.stream("panic", fakeStream{}, sinfo, func(any, grpc.ServerStream) error { panic("stream boom") })
		if status.Code(err) != codes.Internal {
			t.Fatalf("guarded=%v: a panicking stream handler: %v", guarded, err)
		}
		if got := handled(t, reg, "Scan", "Internal"); got != 1 {
			t.Errorf("guarded=%v: grpc_server_handled_total{grpc_method=Scan,grpc_code=Internal} = %v, want 1", guarded, got)
		}
	}
}

// fakeStream is a ServerStream that no test reads or writes.
type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context     { return context.Background() }
func (fakeStream) SetHeader(metadata.MD) error  { return nil }
func (fakeStream) SendHeader(metadata.MD) error { return nil }
func (fakeStream) SetTrailer(metadata.MD)       {}

// showKey renders keys in error messages as fmt's %q did, shortened past
// 40 bytes.
func TestShowKey(t *testing.T) {
	long := bytes.Repeat([]byte("k\x00é"), 20)
	for _, k := range [][]byte{nil, []byte("user:42"), []byte("a\"b\\c\n"), {0xff, 0xfe, 0}, []byte("日本"), long[:40]} {
		if got, want := showKey(k), fmt.Sprintf("%q", k); got != want {
			t.Errorf("showKey(%v) = %s, want %s", k, got, want)
		}
	}
	if got, want := showKey(long), fmt.Sprintf("%q... (%d bytes)", long[:40], len(long)); got != want {
		t.Errorf("showKey of %d bytes = %s, want %s", len(long), got, want)
	}
}
