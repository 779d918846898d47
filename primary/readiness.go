package primary

import (
	"context"
	"time"
)

// readiness keeps the health service's answer, which the Pod's readiness
// probe asks (and through it the NAME-rw Service's endpoints and the
// operator's failover), to whether this primary can serve: not fenced, and
// its ownership confirmed within half the lease, or confirmed on the spot.
// A primary that cannot reach the store cannot confirm, so it turns
// NOT_SERVING within about one lease of the store going away (a check
// every lease/4 finds the confirmation lease/2 old and confirms with a
// lease/4 deadline), and SERVING again at the first confirmation after it
// comes back. Idle, this costs one read of the owner record per half
// lease.
type readiness struct {
	stop chan struct{}
	done chan struct{}
}

// readinessTiming is the check interval, the confirmation age that needs
// no new one, and a confirmation's deadline, for a lease.
func readinessTiming(lease time.Duration) (every, maxAge, timeout time.Duration) {
	every = max(lease/4, 10*time.Millisecond)
	return every, 2 * every, every
}

func (s *Server) startReadiness() {
	r := &readiness{stop: make(chan struct{}), done: make(chan struct{})}
	s.ready = r
	every, maxAge, timeout := readinessTiming(s.fs.Lease())
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
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := s.fs.CheckServing(ctx, maxAge)
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
		close(r.stop)
		<-r.done
	}
}
