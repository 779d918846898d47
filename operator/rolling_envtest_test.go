package operator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TestRollingUpdate: a change of spec.primary.resources on a ready
// database makes the primary outdated (PrimaryUpToDate False);
// unsupervised, once the secondaries rolled out, a switchover replaces it
// with a standby built from the new spec (phase Upgrading), and the
// condition is True again; supervised, only the condition and an Event
// until a switchover is asked for.
func TestRollingUpdate(t *testing.T) {
	opts := testOptions()
	opts.MaxConcurrentUpdates = 1
	h := startOperatorWith(t, opts)
	t.Run("Unsupervised", func(t *testing.T) { testRollingUnsupervised(h.with(t)) })
	t.Run("Supervised", func(t *testing.T) { testRollingSupervised(h.with(t)) })
	t.Run("OperatorUpgrade", func(t *testing.T) { testRollingOperatorUpgrade(h.with(t)) })
}

var rollingMemory = resource.MustParse("768Mi")

// readyForUpdate creates the sample database (mod applied), makes its
// first primary ready and waits for PrimaryUpToDate True.
func readyForUpdate(h *harness, ns string, mod func(*shalev1.RocksDB)) {
	sec, store, db := h.samples(ns)
	mod(db)
	h.create(sec, store, db)
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready and up to date", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Created != nil &&
				condIs(db, shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate),
			statusString(db)
	})
	if p := h.waitPod(ns, "orders-primary-1"); p.Annotations[shalev1.AnnotationPodSpecHash] == "" {
		t := h.t
		t.Errorf("primary Pod without %s", shalev1.AnnotationPodSpecHash)
	}
}

func changeResources(h *harness, ns string) {
	changeMemory(h, ns, rollingMemory)
}

func changeMemory(h *harness, ns string, q resource.Quantity) {
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.Primary.Resources.Requests[corev1.ResourceMemory] = q
	})
}

func outdatedCond(db *shalev1.RocksDB) *metav1.Condition {
	c := db.Condition(shalev1.ConditionPrimaryUpToDate)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != shalev1.ReasonPrimaryOutdated {
		return nil
	}
	return c
}

// rollOut plays the Deployment controller: the secondaries' Deployment
// observed, with available of its replicas available.
func rollOut(h *harness, ns string, available int32) {
	h.t.Helper()
	eventually(h.t, "secondaries' Deployment status", func() (bool, string) {
		dep := &appsv1.Deployment{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-secondary"}, dep); err != nil {
			return false, err.Error()
		}
		n := *dep.Spec.Replicas
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, AvailableReplicas: available, ReadyReplicas: available}
		if err := h.c.Status().Update(h.ctx, dep); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// finishSwitchover makes the standby of epoch ready and writes the
// release of from, as the primaries would.
func finishSwitchover(h *harness, ns string, from, to int64) {
	finishSwitchoverOf(h, ns, "orders", from, to)
}

func finishSwitchoverOf(h *harness, ns, name string, from, to int64) {
	h.setPod(ns, fmt.Sprintf("%s-primary-%d", name, to), corev1.PodRunning, true, time.Now())
	h.waitDB(ns, name, "handing over", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Phase == shalev1.SwitchoverHandingOver, fmt.Sprintf("switchover %+v", sw)
	})
	d := h.db(ns, name)
	h.put(h.store(d.Status.StoragePath), layout.ReleasedKey(uint64(from)), "released")
	h.waitDB(ns, name, "switched over", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == to && db.Status.Switchover == nil, statusString(db)
	})
}

func checkStandbyResources(h *harness, ns, name string) {
	sb := h.waitPod(ns, name)
	if got := sb.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]; got.Cmp(rollingMemory) != 0 {
		h.t.Errorf("standby %s requests memory %s, want the new spec's %s", name, got.String(), rollingMemory.String())
	}
}

func testRollingUnsupervised(h *harness) {
	t := h.t
	ns := h.namespace("rolling")
	readyForUpdate(h, ns, func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 1 })
	rollOut(h, ns, 0) // the secondaries are still rolling

	changeResources(h, ns)
	d := h.waitDB(ns, "orders", "outdated, waiting for the secondaries", func(db *shalev1.RocksDB) (bool, string) {
		c := outdatedCond(db)
		return c != nil && strings.Contains(c.Message, "secondaries") && db.Status.ObservedGeneration == db.Generation, statusString(db)
	})
	if d.Status.Switchover != nil {
		t.Fatalf("an update switchover started before the secondaries rolled out: %+v", d.Status.Switchover)
	}
	if _, err := h.pod(ns, "orders-primary-2"); err == nil {
		t.Fatal("a standby was created before the secondaries rolled out")
	}

	rollOut(h, ns, 1)
	h.waitDB(ns, "orders", "upgrading", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Reason == shalev1.ReasonPrimaryOutdated && sw.ToEpoch == 2 && db.Status.Phase == shalev1.PhaseUpgrading &&
			outdatedCond(db) != nil, statusString(db)
	})
	checkStandbyResources(h, ns, "orders-primary-2")
	h.waitEvent(ns, "orders", eventSwitchoverStarted)
	finishSwitchover(h, ns, 1, 2)
	h.waitDB(ns, "orders", "ready and up to date on epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Switchovers == 1 && db.Status.PrimaryUpdate == nil &&
			condIs(db, shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate), statusString(db)
	})

	// An update switchover that fails is abandoned and not retried at
	// once: status.primaryUpdate holds the backoff (1 min), and no new
	// standby comes meanwhile.
	changeMemory(h, ns, resource.MustParse("896Mi"))
	h.waitDB(ns, "orders", "second update switchover", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Reason == shalev1.ReasonPrimaryOutdated && sw.ToEpoch == 3, statusString(db)
	})
	h.setPod(ns, "orders-primary-3", corev1.PodFailed, false, time.Now())
	d = h.waitDB(ns, "orders", "abandoned, backing off", func(db *shalev1.RocksDB) (bool, string) {
		c := outdatedCond(db)
		pu := db.Status.PrimaryUpdate
		return c != nil && strings.Contains(c.Message, "abandoned") && pu != nil && pu.Failures == 1 && pu.NotBefore != nil,
			fmt.Sprintf("%s primaryUpdate %+v", statusString(db), pu)
	})
	if d.Status.Switchover != nil || d.Status.ReservedEpoch != 3 || d.Status.Epoch != 2 {
		t.Fatalf("after an abandoned update: switchover %+v, reserved epoch %d, epoch %d; want none, 3, 2", d.Status.Switchover, d.Status.ReservedEpoch, d.Status.Epoch)
	}
	if wait := d.Status.PrimaryUpdate.NotBefore.Sub(time.Now()); wait < 30*time.Second {
		t.Errorf("the next update switchover may start in %s, want about a minute", wait)
	}
	if d.Status.Phase != shalev1.PhaseReady {
		t.Errorf("phase %s after an abandoned update, want Ready", d.Status.Phase)
	}
}

// testRollingOperatorUpgrade: primaries an older operator made (no pod
// spec hash) are replaced one database at a time
// (--max-concurrent-updates=1 here).
func testRollingOperatorUpgrade(h *harness) {
	t := h.t
	ns := h.namespace("rolling-upgrade")
	sec, store, orders := h.samples(ns)
	users := orders.DeepCopy()
	users.Name = "users"
	users.Spec.Clients = nil
	h.create(sec, store, orders, users)
	names := []string{"orders", "users"}
	for _, n := range names {
		h.setPod(ns, n+"-primary-1", corev1.PodRunning, true, time.Now())
		h.waitDB(ns, n, "ready and up to date", func(db *shalev1.RocksDB) (bool, string) {
			return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate), statusString(db)
		})
	}
	// What an older operator's Pods look like: no hash.
	for _, n := range names {
		eventually(t, "strip the hash of "+n, func() (bool, string) {
			p, err := h.pod(ns, n+"-primary-1")
			if err != nil {
				return false, err.Error()
			}
			delete(p.Annotations, shalev1.AnnotationPodSpecHash)
			if err := h.c.Update(h.ctx, p); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	}
	// One upgrades; the other waits for the slot.
	var first, second string
	eventually(t, "one database upgrading, the other waiting", func() (bool, string) {
		a, b := h.db(ns, "orders"), h.db(ns, "users")
		for _, pair := range [][2]*shalev1.RocksDB{{a, b}, {b, a}} {
			up, wait := pair[0], pair[1]
			c := outdatedCond(wait)
			if up.Status.Phase == shalev1.PhaseUpgrading && wait.Status.Switchover == nil && c != nil && strings.Contains(c.Message, "max-concurrent-updates") {
				first, second = up.Name, wait.Name
				return true, ""
			}
		}
		return false, statusString(a) + " | " + statusString(b)
	})
	if d := h.db(ns, second); d.Status.Switchover != nil {
		t.Fatalf("two update switchovers at once: %s and %s", first, second)
	}
	finishSwitchoverOf(h, ns, first, 1, 2)
	h.waitDB(ns, second, "upgrading after the first", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseUpgrading, statusString(db)
	})
	finishSwitchoverOf(h, ns, second, 1, 2)
	for _, n := range names {
		h.waitDB(ns, n, "up to date on epoch 2", func(db *shalev1.RocksDB) (bool, string) {
			return db.Status.Epoch == 2 && condIs(db, shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate), statusString(db)
		})
	}
}

func testRollingSupervised(h *harness) {
	t := h.t
	ns := h.namespace("rolling-supervised")
	readyForUpdate(h, ns, func(db *shalev1.RocksDB) { db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateSupervised })

	changeResources(h, ns)
	h.waitDB(ns, "orders", "outdated, supervised", func(db *shalev1.RocksDB) (bool, string) {
		return outdatedCond(db) != nil, statusString(db)
	})
	ev := h.waitEvent(ns, "orders", eventPrimaryUpdateWaiting)
	if !strings.Contains(ev.Message, "kubectl shale switchover orders") {
		t.Errorf("event %q does not say how to switch over", ev.Message)
	}
	if d := h.db(ns, "orders"); d.Status.Switchover != nil || d.Status.Phase != shalev1.PhaseReady {
		t.Fatalf("supervised: switchover %+v, phase %s; want none, Ready", d.Status.Switchover, d.Status.Phase)
	}
	if _, err := h.pod(ns, "orders-primary-2"); err == nil {
		t.Fatal("supervised: a standby was created without a request")
	}

	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Annotations = map[string]string{shalev1.AnnotationSwitchover: "update"}
	})
	h.waitDB(ns, "orders", "switching over on request", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Reason == shalev1.ReasonSwitchoverRequested && sw.ToEpoch == 2, statusString(db)
	})
	checkStandbyResources(h, ns, "orders-primary-2")
	finishSwitchover(h, ns, 1, 2)
	h.waitDB(ns, "orders", "up to date on epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate), statusString(db)
	})
}
