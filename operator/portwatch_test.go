package operator

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/types"
)

// closedPort is an address on loopback where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestPortRefused(t *testing.T) {
	_, refused := net.Dial("tcp", closedPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	_, timedOut := (&net.Dialer{}).DialContext(ctx, "tcp", "192.0.2.1:7070") // TEST-NET-1: never answers
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused by the kernel", refused, true},
		{"refused, wrapped", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		// What a partition, a frozen process's full backlog or a Pod
		// whose sandbox is gone looks like: proves nothing.
		{"timeout", timedOut, false},
		{"host unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, false},
		{"network unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, false},
		{"reset after connecting", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"none", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil && tc.name != "none" {
				t.Fatalf("no error to classify")
			}
			if got := portRefused(tc.err); got != tc.want {
				t.Errorf("portRefused(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if errors.Is(timedOut, syscall.ECONNREFUSED) {
		t.Fatalf("the timeout case was refused: %v", timedOut)
	}
}

// countingListener counts the connections a server accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// servePort starts a gRPC server (no service needed: the watch makes no
// call) on a loopback port; opts are the server's options.
func servePort(t *testing.T, opts ...grpc.ServerOption) (*grpc.Server, *countingListener) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: l}
	srv := grpc.NewServer(opts...)
	go srv.Serve(cl)
	t.Cleanup(srv.Stop)
	return srv, cl
}

// waitUntil waits for cond, failing t after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPortWatch: real gRPC servers stand in for a primary's KV port.
//   - A server that drops the idle connection (its process alive) is
//     connected to again, and proves nothing.
//   - A server stopping gracefully (SIGTERM, a step-down) is not held up
//     by the watch's connection (a bare TCP connection stuck in the
//     handshake held GracefulStop for two minutes, so a deleted primary
//     did not release the database before it was killed), and once its
//     port refuses the watch says so.
//   - A server that dies (its connections cut, its port closed): said at
//     once.
func TestPortWatch(t *testing.T) {
	db := types.NamespacedName{Namespace: "ns", Name: "orders"}
	w := newPortWatches()
	notified := make(chan types.UID, 4)
	notify := func(uid types.UID) func() { return func() { notified <- uid } }
	waitNotified := func(uid types.UID) {
		t.Helper()
		select {
		case got := <-notified:
			if got != uid {
				t.Fatalf("notified for %s, want %s", got, uid)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no notification for %s after its port closed", uid)
		}
		if !w.refused(uid) {
			t.Fatalf("notified, but refused(%s) is false", uid)
		}
	}

	// Dropped idle connections.
	_, idle := servePort(t, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 100 * time.Millisecond}))
	w.watch(db, "uid-1", idle.Addr().String(), plaintext(), notify("uid-1"))
	w.watch(db, "uid-1", idle.Addr().String(), plaintext(), notify("uid-1")) // again: the same watch
	waitUntil(t, "three connections to a server that drops idle ones", func() bool { return idle.n.Load() >= 3 })
	if w.refused("uid-1") {
		t.Fatal("refused after dropped connections, with the server alive")
	}

	// A graceful stop.
	srv, l := servePort(t)
	w.watch(db, "uid-2", l.Addr().String(), plaintext(), notify("uid-2"))
	if w.watching("uid-1", idle.Addr().String()) {
		t.Fatal("the old Pod's watch survived a new one for the database")
	}
	waitUntil(t, "the watch to connect", func() bool { return w.connected("uid-2") })
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("GracefulStop still waits after 30 s: the watch's connection holds it")
	}
	waitNotified("uid-2")

	// A crash.
	srv, l = servePort(t)
	w.watch(db, "uid-3", l.Addr().String(), plaintext(), notify("uid-3"))
	waitUntil(t, "the watch to connect", func() bool { return w.connected("uid-3") })
	srv.Stop()
	waitNotified("uid-3")
	if w.refused("uid-4") {
		t.Fatal("refused(uid-4) for a Pod never watched")
	}

	w.forget(db)
	w.mu.Lock()
	left := len(w.watches)
	w.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d watches left after forget", left)
	}
}
