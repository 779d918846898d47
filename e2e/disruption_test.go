//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepOperatorKilledMidFailover: the primary's Pod is deleted, and once
// the operator has started the failover (the RocksDB is FailingOver or
// names the next epoch) the operator's Pod is killed too (no grace). The
// operator that comes back must finish that failover, not start another:
// exactly one new primary, the epoch up by exactly one, and every
// acknowledged write still there.
func stepOperatorKilledMidFailover(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch, old := db.Status.Epoch, db.Status.CurrentPrimary
	w := s.startWriter(t, addr, "operator-killed")
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	t0 := time.Now()
	if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the operator to start the failover", func() (bool, string) {
		cur := s.rocksDB(t, s.db)
		return cur.Status.Phase == shalev1.PhaseFailingOver || cur.Status.Epoch > epoch, describe(cur)
	})
	var ops corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &ops, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	for _, p := range ops.Items {
		if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed %d operator Pod(s) %s after the primary's deletion, with the RocksDB %s", len(ops.Items), time.Since(t0).Round(time.Millisecond), describe(s.rocksDB(t, s.db)))
	s.waitLeader(t)

	w.waitAcks(t, t0, uint64(epoch+1), 10, 4*time.Minute)
	after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
	if after.Status.Epoch != epoch+1 {
		t.Fatalf("the epoch went from %d to %d across a failover the operator was killed in: want exactly one more", epoch, after.Status.Epoch)
	}
	var prims corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &prims, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range prims.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			live = append(live, fmt.Sprintf("%s (epoch %s)", p.Name, p.Labels[shalev1.LabelEpoch]))
		}
	}
	if len(live) != 1 {
		t.Fatalf("running primaries after the failover: %v; want exactly one", live)
	}
	w.halt()
	t.Logf("epoch %d -> %d with the operator killed mid-failover; primary %s; writer: %s", epoch, after.Status.Epoch, live[0], w.state())
	s.verifyLedger(t, addr)
}
