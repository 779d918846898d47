package primary

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/node"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// A switchover (docs/rfcs/0012-switchover.md): the standby (standBy) warms
// its cache and waits; the primary's StepDown stops writes, flushes,
// closes and releases; the standby sees the release and takes the next
// epoch without waiting out a lease.

// stepDown is one step-down: later StepDown calls wait for the first
// one's result.
type stepDown struct {
	done chan struct{}
	resp *kvv1.StepDownResponse
	err  error
}

// stepDownTimeout bounds the flush, close and release of a step-down.
const stepDownTimeout = 2 * time.Minute

// StepDown hands the database over to a standby (KV StepDown): it answers
// once the release is durable, or with why not. Only the owner of epoch
// may step down; anything else is FAILED_PRECONDITION and changes nothing.
func (s *Server) StepDown(ctx context.Context, epoch uint64) (*kvv1.StepDownResponse, error) {
	if epoch == 0 || epoch != s.fs.Epoch() {
		return nil, status.Errorf(codes.FailedPrecondition, "not the owner of epoch %d: this primary owns epoch %d", epoch, s.fs.Epoch())
	}
	if err := s.fs.FenceError(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "not the owner of epoch %d any more: %v", epoch, err)
	}
	s.stepMu.Lock()
	st := s.step
	if st == nil {
		st = &stepDown{done: make(chan struct{})}
		s.step = st
		go s.runStepDown(st)
	}
	s.stepMu.Unlock()
	select {
	case <-st.done:
		return st.resp, st.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// runStepDown: no write after StopWrites; every acknowledged one flushed
// into a table (or, should the flush fail, in the synced WAL the successor
// replays); reads end with Close; the release is written last, and the
// Owner refuses everything from the moment it begins (RFC 0012, step 3).
func (s *Server) runStepDown(st *stepDown) {
	defer close(st.done)
	start := time.Now()
	log := s.cfg.Logger
	log.Info("stepping down: stopping writes", "epoch", s.fs.Epoch())
	s.stopReadiness()
	s.ep.SetServing(false)
	s.db.StopWrites()
	t := time.Now()
	if err := s.db.Flush(); err != nil {
		// Not fatal: what the flush would have written is in the WAL (the
		// synced part) and replayed by the successor.
		log.Warn("step-down: flush failed; the successor replays the WAL", "err", err)
	}
	flush := time.Since(t)
	s.closeDB()
	if err := s.fs.FenceError(); err != nil {
		st.err = status.Errorf(codes.FailedPrecondition, "not the owner any more: %v", err)
		close(s.stepped)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepDownTimeout)
	err := s.fs.Release(ctx)
	cancel()
	if err != nil {
		// Stopped, but the release may not be in the store: a successor
		// waits out this primary's lease (a failover).
		st.err = status.Errorf(codes.Unavailable, "stepped down, but the release could not be recorded (the successor waits out the lease): %v", err)
		log.Warn("step-down: could not record the release", "err", err)
	} else {
		st.resp = &kvv1.StepDownResponse{Epoch: s.fs.Epoch(), Took: durationpb.New(time.Since(start)), Flush: durationpb.New(flush)}
		log.Info("stepped down: database released", "epoch", s.fs.Epoch(), "took", time.Since(start).Round(time.Millisecond), "flush", flush.Round(time.Millisecond))
	}
	close(s.stepped)
}

// standBy is the standby's part of Start (RFC 0012, steps 1-2): serve
// health (NOT_SERVING) and UNAVAILABLE at once, warm the cache, answer
// SERVING, and wait for the current owner's release. It returns when the
// takeover may begin.
func (s *Server) standBy(ctx context.Context, n *node.Node, sb *StandbyConfig, deferred *kvserver.Deferred) (err error) {
	log := s.cfg.Logger
	s.ep.Serve(deferred, n.Registry, s.cfg.Limits, n.Secured, log)
	s.ep.SetServing(false)
	defer func() {
		if err != nil {
			s.ep.Stop(time.Second)
		}
	}()
	sc := n.Storage
	rep, err := shalefs.Warm(ctx, sc)
	if err != nil {
		// A standby that cannot warm can still take over: a cold cache is
		// only slower.
		log.Warn("standby: warming the cache failed; going on with what it holds", "err", err)
	}
	log.Info("standby: cache warm; waiting for the primary's release", "tables", rep.Tables, "kept", rep.Kept, "bytes", rep.Bytes, "skipped", rep.Skipped)
	if sb.Warmed != nil {
		sb.Warmed(s.ep.Addr(), rep)
	}
	s.ep.SetServing(true)
	released, err := shalefs.WaitReleased(ctx, sc, sb.Poll)
	if err != nil {
		if errors.Is(err, shalefs.ErrNotReleased) {
			return fmt.Errorf("standby for %s: %w", n.URL, err)
		}
		return fmt.Errorf("standby for %s: waiting for the release: %w", n.URL, err)
	}
	log.Info("standby: the primary released the database; taking over", "released", released)
	return nil
}
