package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// testHold drives a fence and a hibernation by hand through a real API
// server (RFC 0014; the kubelet, the primaries and the fence Pod played
// by the test, the fence's takeover run for real against MinIO with the
// epoch the operator gave its Pod): fenced, the primary goes, a fence Pod
// claims the next epoch, phase Fenced and no primary while the
// secondaries stay; unfenced, a primary of the next epoch with
// --existing; hibernated, the primary steps down (its release in the
// store), no Pod runs, the secondaries are scaled to 0, phase Hibernated;
// resumed, the next epoch and the secondaries back.
func testHold(h *harness) {
	t := h.t
	ns := h.namespace("hold")
	sec, store, db := h.samples(ns)
	db.Spec.Secondaries.Replicas = 1
	h.create(sec, store, db)
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Created != nil, fmt.Sprintf("phase %s", db.Status.Phase)
	})
	replicas := func() int32 {
		var dep appsv1.Deployment
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-secondary"}, &dep); err != nil || dep.Spec.Replicas == nil {
			return -1
		}
		return *dep.Spec.Replicas
	}
	eventually(t, "the secondaries' Deployment", func() (bool, string) { r := replicas(); return r == 1, fmt.Sprint(r) })
	path := h.db(ns, "orders").Status.StoragePath
	st := h.store(path)

	// Fenced: the primary goes (no StepDown), a fence Pod of epoch 2.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Annotations = map[string]string{shalev1.AnnotationFenced: "true"}
	})
	h.waitDB(ns, "orders", "fencing", func(db *shalev1.RocksDB) (bool, string) {
		hd := db.Status.Hold
		return hd != nil && hd.Phase == shalev1.HoldFencing && hd.Epoch == 2 && hd.FromEpoch == 1 && db.Status.Epoch == 2 &&
				db.Status.ReservedEpoch == 2 && db.Status.Phase == shalev1.PhaseFenced,
			fmt.Sprintf("hold %+v epoch %d phase %s", hd, db.Status.Epoch, db.Status.Phase)
	})
	h.waitPodGone(ns, "orders-primary-1")
	fp := h.waitPod(ns, "orders-fence-2")
	args := fp.Spec.Containers[0].Args
	if args[0] != "fence" || !slices.Contains(args, "--existing") || fp.Labels[shalev1.LabelRole] != shalev1.RoleFence {
		t.Errorf("fence Pod args %v labels %v", args, fp.Labels)
	}
	// Play the fence Pod: `shale fence`'s takeover with the Pod's epoch,
	// against the store, then the Pod's success.
	epoch, err := strconv.ParseUint(args[slices.Index(args, "--epoch")+1], 10, 64)
	if err != nil {
		t.Fatalf("fence Pod args %v: %v", args, err)
	}
	// The played primary of epoch 1 left CURRENT naming MANIFEST-000001:
	// its log, one segment, which the fence seals.
	h.put(st, layout.SegmentKey("MANIFEST-000001", 1, 1), "manifest bytes")
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	rep, err := shalefs.Fence(ctx, shalefs.Config{Store: st, Epoch: epoch, Existing: true, Lease: time.Second})
	cancel()
	if err != nil || rep.Epoch != 2 {
		t.Fatalf("the fence of epoch %d: %+v, %v", epoch, rep, err)
	}
	h.setPod(ns, "orders-fence-2", corev1.PodSucceeded, false, time.Now())
	h.waitDB(ns, "orders", "fenced", func(db *shalev1.RocksDB) (bool, string) {
		hd := db.Status.Hold
		return hd != nil && hd.Phase == shalev1.HoldHeld && db.Status.Phase == shalev1.PhaseFenced && db.Status.CurrentPrimary == "" &&
				condIs(db, shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonFenced),
			fmt.Sprintf("hold %+v phase %s current %q", hd, db.Status.Phase, db.Status.CurrentPrimary)
	})
	h.waitEvent(ns, "orders", eventFenced)
	h.waitPodGone(ns, "orders-fence-2")
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primaries while fenced: %v", p)
	}
	if r := replicas(); r != 1 {
		t.Errorf("the secondaries were scaled to %d while fenced: they keep serving reads", r)
	}
	if d := h.db(ns, "orders"); d.Status.Failovers != 0 {
		t.Errorf("a fence counted as %d failovers", d.Status.Failovers)
	}

	// Unfenced: the primary of epoch 3, with --existing; it finds epoch 2
	// released (no lease wait).
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { delete(db.Annotations, shalev1.AnnotationFenced) })
	h.waitDB(ns, "orders", "resuming at epoch 3", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Hold == nil && db.Status.Epoch == 3 && db.Status.CurrentPrimary == "orders-primary-3",
			fmt.Sprintf("hold %+v epoch %d current %q", db.Status.Hold, db.Status.Epoch, db.Status.CurrentPrimary)
	})
	if args := h.waitPod(ns, "orders-primary-3").Spec.Containers[0].Args; !slices.Contains(args, "--existing") {
		t.Errorf("the resumed primary's args %v lack --existing", args)
	}
	if _, err := st.Stat(h.ctx, layout.ReleasedKey(2)); err != nil {
		t.Errorf("the fence's release: %v", err)
	}
	h.setPod(ns, "orders-primary-3", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready on epoch 3", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionReady, metav1.ConditionTrue, ""), string(db.Status.Phase)
	})
	h.waitEvent(ns, "orders", eventResumed)

	// Hibernated: the primary steps down (no Pod IP here: its release in
	// the store is what the operator sees), no Pod runs, secondaries 0.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Annotations = map[string]string{shalev1.AnnotationHibernation: "on"}
	})
	h.waitDB(ns, "orders", "stepping down", func(db *shalev1.RocksDB) (bool, string) {
		hd := db.Status.Hold
		return hd != nil && hd.Phase == shalev1.HoldSteppingDown && hd.Epoch == 3, fmt.Sprintf("hold %+v", hd)
	})
	if _, err := h.pod(ns, "orders-primary-3"); err != nil {
		t.Errorf("the primary was deleted before it released the database: %v", err)
	}
	h.put(st, layout.ReleasedKey(3), "released")
	h.waitDB(ns, "orders", "hibernated", func(db *shalev1.RocksDB) (bool, string) {
		hd := db.Status.Hold
		return hd != nil && hd.Phase == shalev1.HoldHeld && hd.Epoch == 3 && db.Status.Epoch == 3 && db.Status.Phase == shalev1.PhaseHibernated &&
				condIs(db, shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonHibernated),
			fmt.Sprintf("hold %+v phase %s", hd, db.Status.Phase)
	})
	h.waitEvent(ns, "orders", eventHibernated)
	h.waitPodGone(ns, "orders-primary-3")
	eventually(t, "the secondaries scaled to 0", func() (bool, string) { r := replicas(); return r == 0, fmt.Sprint(r) })
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primaries while hibernated: %v", p)
	}

	// Resumed: epoch 4 (no fence: 3 released), secondaries back.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Annotations[shalev1.AnnotationHibernation] = "off" })
	h.waitDB(ns, "orders", "resuming at epoch 4", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Hold == nil && db.Status.Epoch == 4 && db.Status.CurrentPrimary == "orders-primary-4",
			fmt.Sprintf("hold %+v epoch %d", db.Status.Hold, db.Status.Epoch)
	})
	if _, err := st.Stat(h.ctx, layout.EpochKey(4)); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("epoch 4 is taken in the store before its primary ran: %v", err)
	}
	h.setPod(ns, "orders-primary-4", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready on epoch 4", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady, string(db.Status.Phase)
	})
	eventually(t, "the secondaries back", func() (bool, string) { r := replicas(); return r == 1, fmt.Sprint(r) })
}
