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

// stepStoreOutage: the demo MinIO is scaled to zero for 60 s while a
// client writes. Writes stall or fail meanwhile (never acknowledged
// without the store); once MinIO is back they resume, no acknowledged
// write is lost, and the operator does not churn through epochs (at most
// one failover, and no pile of failed primary Pods).
func stepStoreOutage(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch := db.Status.Epoch
	w := s.startWriter(t, addr, "store-outage")
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	minioDeployment := s.cfg.release + "-minio"
	s.kubectl(t, "-n", s.cfg.namespace, "scale", "deployment/"+minioDeployment, "--replicas=0")
	eventually(t, 3*time.Minute, "the demo MinIO to stop", func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "demo-minio"}); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d MinIO Pods", len(pods.Items))
	})
	down := time.Now()
	// The outage itself: a fixed length is what is being tested.
	time.Sleep(60 * time.Second)
	s.kubectl(t, "-n", s.cfg.namespace, "scale", "deployment/"+minioDeployment, "--replicas=1")
	s.kubectl(t, "-n", s.cfg.namespace, "rollout", "status", "deployment/"+minioDeployment, "--timeout=3m")
	up := time.Now()
	t.Logf("MinIO was down for %s; during it: %s", up.Sub(down).Round(time.Second), describe(s.rocksDB(t, s.db)))

	eventually(t, 5*time.Minute, "writes to resume after the outage", func() (bool, string) {
		return len(w.since(up)) >= 10, w.state()
	})
	after := s.waitReady(t, s.db, epoch, 5*time.Minute)
	if after.Status.Epoch > epoch+1 {
		t.Fatalf("the epoch went from %d to %d over a 60 s store outage: a failover storm", epoch, after.Status.Epoch)
	}
	var prims corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &prims, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	if len(prims.Items) > 3 {
		t.Fatalf("%d primary Pods after the outage: failed ones pile up", len(prims.Items))
	}
	first := w.since(up)[0]
	w.halt()
	t.Logf("writes resumed %s after MinIO came back (epoch %d -> %d, %d primary Pods); writer: %s",
		first.at.Sub(up).Round(time.Millisecond), epoch, after.Status.Epoch, len(prims.Items), w.state())
	s.verifyLedger(t, addr)
}
