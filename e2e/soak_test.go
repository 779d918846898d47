//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stepSoak (label soak; only when E2E_FOCUS names it): E2E_SOAK_FAILOVERS
// (21) changes of primary in a row, Pod deletion, SIGKILL and switchover in
// turn, while a client writes synced puts through NAME-rw. Each must end
// at exactly the next epoch with writes acknowledged by the new primary;
// a switchover counts no failover; at the end every write acknowledged
// over the whole soak is read back. Prints the time per kind (p50, max)
// and how long the soak took.
func stepSoak(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	w := s.startWriter(t, addr, "soak")
	kinds := []string{string(failoverPodDelete), string(failoverSIGKILL), "switchover"}
	took := map[string][]time.Duration{}
	start := time.Now()
	for i := 0; i < s.cfg.soakFailovers; i++ {
		kind := kinds[i%len(kinds)]
		db := s.waitReady(t, s.db, 1, 3*time.Minute)
		epoch, failovers := db.Status.Epoch, db.Status.Failovers
		old := s.pod(t, db.Status.CurrentPrimary)
		if old == nil {
			t.Fatalf("soak %d: the current primary %s does not exist", i+1, db.Status.CurrentPrimary)
		}
		w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)
		t0 := time.Now()
		switch kind {
		case string(failoverPodDelete):
			if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		case string(failoverSIGKILL):
			s.signal(t, old, "KILL")
		default:
			plugin(t, s, "switchover", s.db, "--wait", "5m")
		}
		firstNew := w.waitAcks(t, t0, uint64(epoch+1), 5, 4*time.Minute)
		after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
		if after.Status.Epoch != epoch+1 {
			t.Fatalf("soak %d (%s): the epoch went from %d to %d, want exactly one more", i+1, kind, epoch, after.Status.Epoch)
		}
		wantFailovers := failovers + 1
		if kind == "switchover" {
			wantFailovers = failovers
		}
		if after.Status.Failovers != wantFailovers {
			t.Errorf("soak %d (%s): status.failovers went from %d to %d, want %d", i+1, kind, failovers, after.Status.Failovers, wantFailovers)
		}
		d := firstNew.at.Sub(t0)
		took[kind] = append(took[kind], d)
		t.Logf("soak %d/%d (%s): epoch %d -> %d, writes acknowledged again %s after the disruption; writer %s",
			i+1, s.cfg.soakFailovers, kind, epoch, epoch+1, d.Round(time.Millisecond), w.state())
	}
	w.halt()
	s.verifyLedger(t, addr)
	var parts []string
	for _, k := range kinds {
		d := took[k]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		parts = append(parts, fmt.Sprintf("%s x%d p50 %s max %s", k, len(d), p50(d), d[len(d)-1].Round(time.Millisecond)))
	}
	t.Logf("soak: %d changes of primary in %s (%s); every acknowledged write read back",
		s.cfg.soakFailovers, time.Since(start).Round(time.Second), strings.Join(parts, "; "))
}
