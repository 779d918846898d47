package operator

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

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

// TestPortWatch: a real listener stands in for a primary's KV port. A
// connection the server drops (an idle one it closes) is redialled and
// proves nothing; once nothing listens (the process died: its connection
// closed and the port refuses), the watch says so once.
func TestPortWatch(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	next := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(time.Minute):
			t.Fatalf("no connection %s", what)
			return nil
		}
	}
	w := newPortWatches()
	db := types.NamespacedName{Namespace: "ns", Name: "orders"}
	notified := make(chan struct{}, 4)
	w.watch(db, "uid-1", l.Addr().String(), func() { notified <- struct{}{} })
	w.watch(db, "uid-1", l.Addr().String(), func() { notified <- struct{}{} }) // again: the same watch

	// The server drops the connection; the process is alive: redialled.
	next("from the watch").Close()
	c := next("redialled after the server dropped the first")
	if w.refused("uid-1") {
		t.Fatal("refused after a dropped connection, with the listener alive")
	}

	// The process dies: its listener and connection close.
	l.Close()
	c.Close()
	select {
	case <-notified:
	case <-time.After(time.Minute):
		t.Fatal("no notification after the port closed")
	}
	if !w.refused("uid-1") {
		t.Fatal("notified, but refused(uid-1) is false")
	}
	if w.refused("uid-2") {
		t.Fatal("refused(uid-2) for a Pod never watched")
	}
	// A new primary of the database replaces the watch.
	w.watch(db, "uid-2", closedPort(t), func() {})
	if w.refused("uid-1") {
		t.Fatal("the old Pod's watch survived a new one for the database")
	}
	w.forget(db)
	w.mu.Lock()
	left := len(w.watches)
	w.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d watches left after forget", left)
	}
}
