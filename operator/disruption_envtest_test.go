package operator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// waitBudget waits until the PodDisruptionBudget exists and cond holds.
func (h *harness) waitBudget(ns, name, what string, cond func(*policyv1.PodDisruptionBudget) (bool, string)) *policyv1.PodDisruptionBudget {
	h.t.Helper()
	var pdb *policyv1.PodDisruptionBudget
	eventually(h.t, "PodDisruptionBudget "+name+": "+what, func() (bool, string) {
		pdb = &policyv1.PodDisruptionBudget{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, pdb); err != nil {
			return false, err.Error()
		}
		return cond(pdb)
	})
	return pdb
}

func maxUnavailable(n int32) func(*policyv1.PodDisruptionBudget) (bool, string) {
	return func(p *policyv1.PodDisruptionBudget) (bool, string) {
		m := p.Spec.MaxUnavailable
		return m != nil && m.IntVal == n, fmt.Sprintf("maxUnavailable %v, want %d", m, n)
	}
}

// requiredSpread reports whether the Deployment's secondaries must be on
// different nodes.
func requiredSpread(dep *appsv1.Deployment) bool {
	a := dep.Spec.Template.Spec.Affinity
	return a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0
}

// testDisruptions: a RocksDB's PodDisruptionBudgets (primary always,
// secondaries from two replicas) are owned by it and follow the spec, and
// the secondaries' anti-affinity is required while the cluster has a node
// for each of them, preferred once it has not.
func testDisruptions(h *harness) {
	t := h.t
	// Nodes, which envtest has none of: three the secondaries may use, one
	// they may not (a taint they do not tolerate).
	var nodes []string
	for i, taint := range []string{"", "", "", "dedicated"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("disruptions-node-%d", i)}}
		if taint != "" {
			n.Spec.Taints = []corev1.Taint{{Key: taint, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}
		h.create(n)
		nodes = append(nodes, n.Name)
	}
	deleteNode := func(name string) {
		if err := h.c.Delete(h.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			deleteNode(n)
		}
	})

	ns := h.namespace("disruptions")
	sec, store, db := h.samples(ns)
	db.Spec.Secondaries.Replicas = 3
	// Scheduling fields through the CRD to the primary Pod.
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "disruptions-databases"}, Value: 1000}
	h.create(pc)
	t.Cleanup(func() { h.c.Delete(h.ctx, pc) })
	tol := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	db.Spec.Primary.PodScheduling = shalev1.PodScheduling{PriorityClassName: pc.Name, Tolerations: tol, NodeSelector: map[string]string{"pool": "db"},
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "noisy"}}}}}}}}
	h.create(sec, store, db)
	db = h.db(ns, "orders")
	pod := h.waitPod(ns, "orders-primary-1")
	if s := pod.Spec; s.PriorityClassName != pc.Name || s.Priority == nil || *s.Priority != 1000 || s.NodeSelector["pool"] != "db" ||
		!slices.ContainsFunc(s.Tolerations, func(x corev1.Toleration) bool { return x.Key == "dedicated" }) || s.Affinity == nil || s.Affinity.PodAntiAffinity == nil {
		t.Errorf("primary Pod: priority class %q (%v), nodeSelector %v, tolerations %+v, affinity %+v", s.PriorityClassName, s.Priority, s.NodeSelector, s.Tolerations, s.Affinity)
	}
	if r := pod.Spec.Containers[0].Resources.Requests; r.Cpu().IsZero() || r.Memory().IsZero() {
		t.Errorf("primary requests %v: want the defaults (not BestEffort)", r)
	}

	p := h.waitBudget(ns, "orders-primary", "minAvailable 1", func(p *policyv1.PodDisruptionBudget) (bool, string) {
		m := p.Spec.MinAvailable
		return m != nil && m.IntVal == 1 && p.Spec.MaxUnavailable == nil, fmt.Sprintf("minAvailable %v maxUnavailable %v, want minAvailable 1 only", m, p.Spec.MaxUnavailable)
	})
	if !metav1.IsControlledBy(p, db) {
		t.Errorf("orders-primary owners %v: not controlled by the RocksDB (it would outlive it)", p.OwnerReferences)
	}
	if sel := p.Spec.Selector.MatchLabels; sel[shalev1.LabelRocksDB] != "orders" || sel[shalev1.LabelRole] != shalev1.RolePrimary || len(sel) != 2 {
		t.Errorf("orders-primary selects %v: want the primaries of every epoch", sel)
	}
	s := h.waitBudget(ns, "orders-secondary", "maxUnavailable 1", maxUnavailable(1))
	if !metav1.IsControlledBy(s, db) || s.Spec.UnhealthyPodEvictionPolicy == nil || *s.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("orders-secondary: owners %v, unhealthy policy %v", s.OwnerReferences, s.Spec.UnhealthyPodEvictionPolicy)
	}

	// Three eligible nodes for three secondaries: required, and a rollout
	// stops one before starting its successor (no node is free for it).
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	dep := h.waitDeployment(ns, "orders-secondary")
	if !requiredSpread(dep) || dep.Spec.Strategy.RollingUpdate.MaxSurge.IntVal != 0 {
		t.Errorf("3 nodes, 3 secondaries: affinity %+v, strategy %+v; want required, maxSurge 0", dep.Spec.Template.Spec.Affinity, dep.Spec.Strategy.RollingUpdate)
	}

	// A node leaves the cluster: two for three, preferred.
	deleteNode(nodes[0])
	eventually(t, "anti-affinity preferred with 2 nodes for 3 secondaries", func() (bool, string) {
		dep, err := h.deployment(ns, "orders-secondary")
		if err != nil {
			return false, err.Error()
		}
		return !requiredSpread(dep), fmt.Sprintf("affinity %+v", dep.Spec.Template.Spec.Affinity)
	})

	// One secondary: no budget (it would block every drain for nothing).
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 1 })
	eventually(t, "orders-secondary budget deleted at 1 replica", func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-secondary"}, &policyv1.PodDisruptionBudget{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})

	// The primary's node is cordoned (a drain): a Warning says the budget
	// holds the primary there until a switchover moves it, and the
	// switchover starts: a standby with the next epoch.
	if err := h.c.SubResource("binding").Create(h.ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: nodes[1]}}); err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{}
	if err := h.c.Get(h.ctx, types.NamespacedName{Name: nodes[1]}, n); err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = true
	if err := h.c.Update(h.ctx, n); err != nil {
		t.Fatal(err)
	}
	ev := h.waitEvent(ns, "orders", eventPrimaryNodeDraining)
	if !strings.Contains(ev.Message, "until a switchover moves it") || ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %s %q: want a Warning saying a switchover moves the primary", ev.Type, ev.Message)
	}
	h.waitDB(ns, "orders", "a switchover for the drain", func(db *shalev1.RocksDB) (bool, string) {
		sw := db.Status.Switchover
		return sw != nil && sw.Reason == shalev1.ReasonPrimaryNodeDraining && sw.FromEpoch == 1 && sw.ToEpoch == 2, fmt.Sprintf("switchover %+v", sw)
	})
	if sb := h.waitPod(ns, "orders-primary-2"); !slices.Contains(sb.Spec.Containers[0].Args, "--standby") {
		t.Errorf("the drain's standby runs %v, want --standby", sb.Spec.Containers[0].Args)
	}

	// Deleted by hand: back.
	if err := h.c.Delete(h.ctx, p); err != nil {
		t.Fatal(err)
	}
	h.waitBudget(ns, "orders-primary", "recreated", func(b *policyv1.PodDisruptionBudget) (bool, string) {
		return b.UID != p.UID, "still the old one"
	})
}
