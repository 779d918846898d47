package operator

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus/testutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// testSwitchover drives a switchover through a real API server (the
// kubelet and the primaries played by the test): the annotation starts
// it, a standby with the next epoch warms while the Service stays on the
// primary, the primary's release in the store completes it and moves the
// Service; a standby that fails is abandoned; and a later failover takes
// an epoch above the abandoned standby's (RFC 0012, steps 5-9).
func testSwitchover(h *harness) {
	t := h.t
	completed := testutil.ToFloat64(switchoversTotal.WithLabelValues("completed"))
	abandoned := testutil.ToFloat64(switchoversTotal.WithLabelValues("abandoned"))
	ns := h.namespace("switchover")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Created != nil, fmt.Sprintf("phase %s", db.Status.Phase)
	})
	selector := func() string {
		var svc corev1.Service
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-rw"}, &svc); err != nil {
			return err.Error()
		}
		return svc.Spec.Selector[shalev1.LabelEpoch]
	}

	// Asked for: a standby of epoch 2 warms; the primary keeps the Service.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Annotations = map[string]string{shalev1.AnnotationSwitchover: "first"}
	})
	h.waitDB(ns, "orders", "switching over, warming", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Phase == shalev1.SwitchoverWarming && sw.FromEpoch == 1 && sw.ToEpoch == 2 && sw.Request == "first" &&
				db.Status.LastSwitchoverRequest == "first" && db.Status.ReservedEpoch == 2 && db.Status.Phase == shalev1.PhaseSwitchingOver &&
				condIs(db, shalev1.ConditionSwitchover, metav1.ConditionTrue, string(shalev1.SwitchoverWarming)),
			fmt.Sprintf("switchover %+v phase %s", sw, db.Status.Phase)
	})
	sb := h.waitPod(ns, "orders-primary-2")
	if args := sb.Spec.Containers[0].Args; !slices.Contains(args, "--standby") || !slices.Contains(args, "--existing") {
		t.Errorf("standby args %v: want --standby and --existing", args)
	}
	if s := selector(); s != "1" {
		t.Errorf("the Service selects epoch %s while the standby warms, want 1", s)
	}

	// Warm: the operator hands over (it cannot reach this primary's
	// StepDown: no Pod IP; the release in the store is what it waits for).
	h.setPod(ns, "orders-primary-2", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "handing over", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Phase == shalev1.SwitchoverHandingOver, fmt.Sprintf("switchover %+v", sw)
	})
	if s := selector(); s != "1" {
		t.Errorf("the Service selects epoch %s before the release, want 1", s)
	}
	// The primary's step-down writes its release.
	d := h.db(ns, "orders")
	h.put(h.store(d.Status.StoragePath), layout.ReleasedKey(1), "released")
	d = h.waitDB(ns, "orders", "switched over to epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 2 && db.Status.CurrentPrimary == "orders-primary-2" && db.Status.Switchover == nil && db.Status.Switchovers == 1 &&
				condIs(db, shalev1.ConditionSwitchover, metav1.ConditionFalse, shalev1.ReasonSwitchoverCompleted),
			fmt.Sprintf("epoch %d current %s switchover %+v", db.Status.Epoch, db.Status.CurrentPrimary, db.Status.Switchover)
	})
	if d.Status.Failovers != 0 {
		t.Errorf("a switchover counted as %d failovers", d.Status.Failovers)
	}
	eventually(t, "Service follows epoch 2", func() (bool, string) { s := selector(); return s == "2", s })
	h.waitEvent(ns, "orders", eventSwitchoverCompleted)
	if got := testutil.ToFloat64(switchoversTotal.WithLabelValues("completed")); got < completed+1 {
		// At least: other subtests' databases share the counter.
		t.Errorf("shale_operator_switchovers_total{completed} %v, want at least %v", got, completed+1)
	}
	h.waitDB(ns, "orders", "ready on epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady, string(db.Status.Phase)
	})
	h.waitPodGone(ns, "orders-primary-1")

	// The same value again: nothing. A new one whose standby fails:
	// abandoned, the primary stays, the standby goes.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Annotations[shalev1.AnnotationSwitchover] = "second" })
	h.waitDB(ns, "orders", "second switchover warming", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.ToEpoch == 3, fmt.Sprintf("switchover %+v", sw)
	})
	h.setPod(ns, "orders-primary-3", corev1.PodFailed, false, time.Now())
	h.waitDB(ns, "orders", "abandoned", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Switchover == nil && db.Status.Epoch == 2 && db.Status.ReservedEpoch == 3 &&
				condIs(db, shalev1.ConditionSwitchover, metav1.ConditionFalse, shalev1.ReasonSwitchoverAbandoned),
			fmt.Sprintf("epoch %d switchover %+v", db.Status.Epoch, db.Status.Switchover)
	})
	h.waitEvent(ns, "orders", eventSwitchoverAbandoned)
	if got := testutil.ToFloat64(switchoversTotal.WithLabelValues("abandoned")); got < abandoned+1 {
		t.Errorf("shale_operator_switchovers_total{abandoned} %v, want at least %v", got, abandoned+1)
	}
	h.waitPodGone(ns, "orders-primary-3")

	// A failover after that takes epoch 4, above the abandoned standby's.
	h.setPod(ns, "orders-primary-2", corev1.PodFailed, false, time.Now())
	h.waitDB(ns, "orders", "failed over above the reserved epoch", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 4 && db.Status.CurrentPrimary == "orders-primary-4", fmt.Sprintf("epoch %d current %s", db.Status.Epoch, db.Status.CurrentPrimary)
	})
}
