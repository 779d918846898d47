//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shale-rocks/shale/internal/kubectlshale"
)

// stepSwitchover: planned switchovers (RFC 0012) asked with `kubectl shale
// switchover` while a client writes synced puts through NAME-rw in a loop.
// Each moves the primary to a new Pod at the next epoch without a failover
// (status.failovers unchanged); the client sees only retryable errors
// (UNAVAILABLE, DEADLINE_EXCEEDED), and every acknowledged write is still
// there. Measured: the longest time without an acknowledged write around
// each handover (the target: p50 under 1 s on kind).
func stepSwitchover(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	w := s.startWriter(t, addr, "switchover")
	var gaps []time.Duration
	for i := 1; i <= s.cfg.switchoverRuns; i++ {
		db := s.waitReady(t, s.db, 1, 3*time.Minute)
		epoch, failovers, oldPod := db.Status.Epoch, db.Status.Failovers, db.Status.CurrentPrimary
		w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

		t0 := time.Now()
		cmd := kubectlshale.NewCommand(func() (kubectlshale.Target, error) {
			return kubectlshale.Target{Config: s.rest, Namespace: s.cfg.namespace}, nil
		})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"switchover", s.db, "--wait", "5m"})
		if err := cmd.ExecuteContext(ctx(t, 6*time.Minute)); err != nil {
			t.Fatalf("run %d: kubectl shale switchover: %v\n%s", i, err, out.String())
		}
		asked := time.Since(t0)
		after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
		firstNew := w.waitAcks(t, t0, uint64(after.Status.Epoch), 5, 3*time.Minute)
		var lastOld time.Time
		for _, a := range w.since(t0.Add(-time.Minute)) {
			if a.epoch == uint64(epoch) && a.at.Before(firstNew.at) {
				lastOld = a.at
			}
		}
		gap := firstNew.at.Sub(lastOld)
		gaps = append(gaps, gap)
		if after.Status.Failovers != failovers {
			t.Errorf("run %d: status.failovers went from %d to %d: the switchover became a failover", i, failovers, after.Status.Failovers)
		}
		if after.Status.CurrentPrimary == oldPod {
			t.Fatalf("run %d: the primary is still %s", i, oldPod)
		}
		if st := kvStatus(t, addr); st.Epoch != uint64(after.Status.Epoch) {
			t.Fatalf("run %d: the primary behind %s-rw runs epoch %d, want %d", i, s.db, st.Epoch, after.Status.Epoch)
		}
		t.Logf("run %d: epoch %d -> %d (%s -> %s) in %s from the request; no write acknowledged for %s\n%s",
			i, epoch, after.Status.Epoch, oldPod, after.Status.CurrentPrimary, asked.Round(time.Millisecond), gap.Round(time.Millisecond), strings.TrimSpace(out.String()))
	}
	w.halt()
	w.mu.Lock()
	seen := fmt.Sprint(w.codes)
	var bad []string
	for c, n := range w.codes {
		if c != codes.Unavailable && c != codes.DeadlineExceeded {
			bad = append(bad, fmt.Sprintf("%s x%d", c, n))
		}
	}
	w.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("the writer saw errors a client cannot simply retry: %v (all: %s)", bad, seen)
	}
	t.Logf("writer: %s; errors by code %s", w.state(), seen)
	slices.Sort(gaps)
	t.Logf("switchover over %d runs: no write acknowledged for p50 %s, max %s; each: %s", len(gaps), p50(gaps), gaps[len(gaps)-1].Round(time.Millisecond), durations(gaps))
	s.verifyLedger(t, addr)
}
