package operator

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Watching a ready primary's KV port, to learn of its process's death
// sooner than the kubelet says so (issue 29). The kubelet notices a dead
// container at its next relist (every second) and the API hears of it a
// little later; a failover by SIGKILL spent 0.6-1.6 s there. The operator
// holds one idle TCP connection to each ready primary's port: when the
// process dies its kernel closes that connection at once, and a new
// connection to the Pod's IP is refused (the Pod's network namespace
// answers with a reset: nothing listens on the port any more). Only a
// refusal counts: a timeout or an unreachable host is what a partition or
// a frozen process looks like too, and is left to the kubelet, the node
// controller and --failover-grace.
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
	// portRedialAfter spaces out attempts after one that did not connect,
	// or after a connection that lasted less than it (a server closing
	// connections at once must not make this loop spin).
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
	// ready.
	refused bool
}

func newPortWatches() *portWatches {
	d := &net.Dialer{Timeout: portDialTimeout}
	dial := func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	return &portWatches{dial: dial, watches: map[types.UID]*portWatch{}}
}

// watch starts watching the port of a ready primary Pod (once per UID and
// address), and forgets the other watches of the same database.
func (w *portWatches) watch(db types.NamespacedName, uid types.UID, addr string, notify func()) {
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
	go w.run(ctx, uid, pw, notify)
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

func (w *portWatches) run(ctx context.Context, uid types.UID, pw *portWatch, notify func()) {
	failingSince := time.Time{}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		c, err := w.dial(ctx, pw.addr)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if portRefused(err) {
				w.mu.Lock()
				pw.refused = true
				w.mu.Unlock()
				notify()
				return
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > portGiveUpAfter {
				return
			}
			if !wait(portRedialAfter) {
				return
			}
			continue
		}
		failingSince = time.Time{}
		opened := time.Now()
		// Nothing is ever sent: the read returns when the peer closes the
		// connection (its process died, or its server dropped an idle
		// connection that never started TLS), or when this watch stops.
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				c.Close()
			case <-done:
			}
		}()
		_, _ = io.Copy(io.Discard, c)
		close(done)
		c.Close()
		if time.Since(opened) < portRedialAfter && !wait(portRedialAfter) {
			return
		}
	}
}
