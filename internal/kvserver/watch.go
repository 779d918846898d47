package kvserver

import (
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// Notifier tells watchers that writes became durable in the store, and
// that the primary is stopping.
type Notifier struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed chan struct{}
	once   sync.Once
}

// NewNotifier returns a Notifier with no watchers.
func NewNotifier() *Notifier {
	return &Notifier{ch: make(chan struct{}), closed: make(chan struct{})}
}

// Close ends every Watch stream. A stopping primary calls it before its
// graceful stop, which would otherwise wait for the streams (they never
// end by themselves) for its whole grace period, delaying the release
// that lets the next primary take over without waiting out a lease.
func (n *Notifier) Close() { n.once.Do(func() { close(n.closed) }) }

// Notify wakes every watcher.
func (n *Notifier) Notify() {
	n.mu.Lock()
	close(n.ch)
	n.ch = make(chan struct{})
	n.mu.Unlock()
}

func (n *Notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

// watchHeartbeat is how often Watch sends an event when nothing changed.
const watchHeartbeat = time.Second

// Watch implements KV: an event whenever writes became durable, and a
// heartbeat every second, until the client goes away or the primary is
// fenced.
func (s *Server) Watch(_ *kvv1.WatchRequest, stream kvv1.KV_WatchServer) error {
	if s.info.Durable == nil {
		return status.Error(codes.Unimplemented, "watch is served by the primary, not by a "+roleName(s.info.Role))
	}
	hb := time.NewTicker(watchHeartbeat)
	defer hb.Stop()
	for {
		if err := s.canWrite(); err != nil {
			return err // fenced: the secondary falls back to polling
		}
		select {
		case <-s.info.Durable.closed:
			return status.Error(codes.Unavailable, "the primary is stopping; follow its successor")
		default:
		}
		ch := s.info.Durable.wait()
		if err := stream.Send(&kvv1.WatchEvent{LatestSequence: s.db.LatestSequence(), Epoch: s.info.Epoch}); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-hb.C:
		case <-s.info.Durable.closed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

func roleName(r kvv1.Role) string {
	switch r {
	case kvv1.Role_ROLE_SECONDARY:
		return "secondary"
	case kvv1.Role_ROLE_PRIMARY:
		return "primary"
	}
	return "server without a store"
}
