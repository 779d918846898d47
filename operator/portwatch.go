package operator

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"k8s.io/apimachinery/pkg/types"
)

// Watching a ready primary's KV port, to learn of its process's death
// sooner than the kubelet says so (issue 29). The kubelet notices a dead
// container at its next relist (every second) and the API hears of it a
// little later; a failover by SIGKILL spent 0.6-1.6 s there. The operator
// holds one idle gRPC connection to each ready primary (its own identity,
// no call made): when the process dies its kernel closes the connection
// at once, and then a plain TCP connection to the Pod's IP is refused (the
// Pod's network namespace answers with a reset: nothing listens on the
// port any more). Only a refusal counts: a timeout or an unreachable host
// is what a partition or a frozen process looks like too, and is left to
// the kubelet, the node controller and --failover-grace.
//
// A gRPC connection, not a bare TCP one: a primary that stops gracefully
// (SIGTERM, a step-down) waits for connections still in their handshake,
// up to two minutes, and would not release the database before its Pod's
// grace ran out (its successor then waits out the lease); an idle
// established connection is closed by the server's GOAWAY at once. The
// probe connection is closed as soon as it is made.
//
// This only decides when a failover starts. What makes it safe is
// unchanged: the next primary claims a higher epoch and waits out the old
// owner's lease (docs/fencing.md). A refusal from a live process (one that
// closed its listener: fenced, released, shutting down) costs at worst a
// failover that was coming anyway.

// portRefused reports whether a failed dial to a Pod's port proves that no
// process listens there.
func portRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

const (
	// portDialTimeout bounds one connection attempt.
	portDialTimeout = 2 * time.Second
	// portRedialAfter spaces out the probes while the connection is not
	// established.
	portRedialAfter = 500 * time.Millisecond
	// portGiveUpAfter: a watch whose attempts have all failed (without a
	// refusal) for this long stops: the Pod is gone or cut off, which the
	// kubelet and the node controller report.
	portGiveUpAfter = time.Minute
)

// portWatches holds one watch per primary Pod (by UID).
type portWatches struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)

	mu      sync.Mutex
	watches map[types.UID]*portWatch
}

type portWatch struct {
	db     types.NamespacedName
	addr   string
	cancel context.CancelFunc
	// refused: a connection to addr was refused after the Pod was seen
	// ready. connected: the watch's connection is established.
	refused, connected bool
}

func newPortWatches() *portWatches {
	d := &net.Dialer{Timeout: portDialTimeout}
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	return &portWatches{dial: dial, watches: map[types.UID]*portWatch{}}
}

// watch starts watching the port of a ready primary Pod (once per UID and
// address), and forgets the other watches of the same database.
func (w *portWatches) watch(db types.NamespacedName, uid types.UID, addr string, opt grpc.DialOption, notify func()) {
	if w == nil || addr == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, pw := range w.watches {
		if pw.db == db && (id != uid || pw.addr != addr) {
			pw.cancel()
			delete(w.watches, id)
		}
	}
	if _, ok := w.watches[uid]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	pw := &portWatch{db: db, addr: addr, cancel: cancel}
	w.watches[uid] = pw
	go w.run(ctx, pw, opt, notify)
}

// watching reports whether the Pod's port at addr is watched already.
func (w *portWatches) watching(uid types.UID, addr string) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pw, ok := w.watches[uid]
	return ok && pw.addr == addr
}

// forget stops watching a database's Pods (it has none ready, or is gone).
func (w *portWatches) forget(db types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, pw := range w.watches {
		if pw.db == db {
			pw.cancel()
			delete(w.watches, id)
		}
	}
}

// refused reports whether the Pod's port refused a connection since it
// was seen ready.
func (w *portWatches) refused(uid types.UID) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pw, ok := w.watches[uid]
	return ok && pw.refused
}

// connected reports whether the watch of the Pod holds an established
// connection now.
func (w *portWatches) connected(uid types.UID) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pw, ok := w.watches[uid]
	return ok && pw.connected
}

func (w *portWatches) run(ctx context.Context, pw *portWatch, opt grpc.DialOption, notify func()) {
	conn, err := grpc.NewClient(pw.addr, opt)
	if err != nil {
		return
	}
	defer conn.Close()
	setConnected := func(v bool) {
		w.mu.Lock()
		pw.connected = v
		w.mu.Unlock()
	}
	var failingSince time.Time
	for ctx.Err() == nil {
		conn.Connect()
		state := conn.GetState()
		if state == connectivity.Ready {
			failingSince = time.Time{}
			setConnected(true)
			// Until the server closes it: its process died, it stopped, or
			// it dropped an idle connection.
			conn.WaitForStateChange(ctx, state)
			setConnected(false)
			continue
		}
		// Not connected: does anything listen on the port?
		c, err := w.dial(ctx, pw.addr)
		switch {
		case err == nil:
			c.Close()
			failingSince = time.Time{}
		case ctx.Err() != nil:
			return
		case portRefused(err):
			w.mu.Lock()
			pw.refused = true
			w.mu.Unlock()
			notify()
			return
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) > portGiveUpAfter:
			return
		}
		wait, cancel := context.WithTimeout(ctx, portRedialAfter)
		conn.WaitForStateChange(wait, state)
		cancel()
	}
}
