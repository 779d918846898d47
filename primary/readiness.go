package primary

import (
	"context"
	"sync"
	"time"
)

// readiness keeps the health service's answer, which the Pod's readiness
// probe asks (and through it the NAME-rw Service's endpoints and the
// operator's failover), to whether this primary can serve: not fenced, and
// its ownership confirmed recently enough, or confirmed on the spot. A
// primary that cannot reach the store cannot confirm.
//
// How recent is enough depends on whether it is being used
// (readinessMaxAge): while it serves reads or takes writes, half the lease,
// so that it turns NOT_SERVING within about one lease of the store going
// away (a check every lease/4 finds the confirmation lease/2 old and
// confirms with a lease/4 deadline); reads confirm four times per lease
// anyway, so this costs requests only under writes alone, next to their
// uploads. Idle, the owner's own confirmation every --idle-confirm-interval
// (30 s) is enough: no client is served, and an idle primary keeps costing
// one GET per 30 s (docs/cost.md); a client that comes back makes it busy.
type readiness struct {
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once // Stop may be called more than once
}

// readinessMaxAge is how old the last ownership confirmation may be for a
// primary to answer SERVING without confirming again: half the lease
// while it was busy (reads or writes) within the idle confirmation
// interval, else that interval plus half a lease (its own confirmation is
// due first).
func readinessMaxAge(lease, idleConfirm, sinceActivity time.Duration) time.Duration {
	if sinceActivity < idleConfirm {
		return lease / 2
	}
	return idleConfirm + lease/2
}

// readinessEvery is how often the check runs, and a confirmation's
// deadline.
func readinessEvery(lease time.Duration) time.Duration {
	return max(lease/4, 10*time.Millisecond)
}

func (s *Server) startReadiness() {
	r := &readiness{stop: make(chan struct{}), done: make(chan struct{})}
	s.ready = r
	lease, idle := s.fs.Lease(), s.fs.IdleConfirmEvery()
	every := readinessEvery(lease)
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		serving := true // Serve starts SERVING: the database was just opened and ownership confirmed
		for {
			select {
			case <-r.stop:
				return
			case <-s.fs.Fenced():
				s.ep.SetServing(false)
				return
			case <-tick.C:
			}
			since := s.fs.SinceReads()
			if w := s.wrote.Load(); w != 0 {
				since = min(since, time.Since(s.born)-time.Duration(w))
			}
			ctx, cancel := context.WithTimeout(context.Background(), every)
			err := s.fs.CheckServing(ctx, readinessMaxAge(lease, idle, since))
			cancel()
			if ok := err == nil; ok != serving {
				serving = ok
				if ok {
					s.cfg.Logger.Info("ready again: ownership confirmed")
				} else {
					s.cfg.Logger.Warn("not ready: cannot serve", "err", err)
				}
			}
			s.ep.SetServing(serving)
		}
	}()
}

func (s *Server) stopReadiness() {
	if r := s.ready; r != nil {
		r.stopOnce.Do(func() { close(r.stop) })
		<-r.done
	}
}
