package operator

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// waitPolicy waits until the NetworkPolicy exists and cond holds for it.
func (h *harness) waitPolicy(ns, name, what string, cond func(*networkingv1.NetworkPolicy) (bool, string)) *networkingv1.NetworkPolicy {
	h.t.Helper()
	var np *networkingv1.NetworkPolicy
	eventually(h.t, "NetworkPolicy "+name+": "+what, func() (bool, string) {
		np = &networkingv1.NetworkPolicy{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, np); err != nil {
			return false, err.Error()
		}
		return cond(np)
	})
	return np
}

// specIs: the policy on the API server is exactly want's (after the API
// server's defaulting, so the operator does not rewrite it every
// reconcile).
func specIs(want *networkingv1.NetworkPolicy) func(*networkingv1.NetworkPolicy) (bool, string) {
	return func(np *networkingv1.NetworkPolicy) (bool, string) {
		return equality.Semantic.DeepEqual(np.Spec, want.Spec), fmt.Sprintf("spec %+v, want %+v", np.Spec, want.Spec)
	}
}

// testNetworkPolicies: the operator keeps a RocksDB's NetworkPolicy as the
// spec says, against edits and deletion, and removes it when told to.
func testNetworkPolicies(h *harness) {
	t := h.t
	ns := h.namespace("netpol")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	peers := peersOf(testOptions())

	db = h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
	if !db.NetworkPolicyEnabled() || db.Spec.NetworkPolicy.Enabled == nil {
		t.Errorf("spec.networkPolicy.enabled %v: want the API server's default, true", db.Spec.NetworkPolicy.Enabled)
	}
	np := h.waitPolicy(ns, "orders-ingress", "as built", specIs(databasePolicy(db, peers)))
	if !metav1.IsControlledBy(np, db) {
		t.Errorf("NetworkPolicy owners %v: not controlled by the RocksDB (it would outlive it)", np.OwnerReferences)
	}
	// It selects the primary Pod the operator made, on its named ports.
	pod := h.waitPod(ns, "orders-primary-1")
	if sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("NetworkPolicy selector %s does not select the primary Pod (labels %v)", sel, pod.Labels)
	}
	named := map[string]bool{}
	for _, p := range pod.Spec.Containers[0].Ports {
		named[p.Name] = true
	}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if !named[p.Port.StrVal] {
				t.Errorf("NetworkPolicy port %v is no port of the primary container (%v)", p.Port, named)
			}
		}
	}

	// An edit by hand (admit everyone) does not last.
	patch := client.MergeFrom(np.DeepCopy())
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := h.c.Patch(h.ctx, np, patch); err != nil {
		t.Fatal(err)
	}
	h.waitPolicy(ns, "orders-ingress", "edit undone", specIs(databasePolicy(db, peers)))

	// Deleted, it comes back.
	if err := h.c.Delete(h.ctx, np); err != nil {
		t.Fatal(err)
	}
	h.waitPolicy(ns, "orders-ingress", "recreated", func(got *networkingv1.NetworkPolicy) (bool, string) {
		return got.UID != np.UID && equality.Semantic.DeepEqual(got.Spec, databasePolicy(db, peers).Spec), "want a new policy as built"
	})

	// More clients.
	reports := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelNamespaceName: "analytics"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "reports"}},
	}
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{reports} })
	db = h.db(ns, "orders")
	h.waitPolicy(ns, "orders-ingress", "with the extra client", specIs(databasePolicy(db, peers)))

	// A bad peer the CRD cannot catch (the API server validates CIDRs in
	// NetworkPolicies only): an Event, the policy as it was, and the
	// primary unaffected.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{reports, {IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}
	})
	db = h.db(ns, "orders")
	h.waitEvent(ns, "orders", eventNetworkPolicyInvalid)
	good := db.DeepCopy()
	good.Spec.NetworkPolicy.Clients = good.Spec.NetworkPolicy.Clients[:1]
	h.waitPolicy(ns, "orders-ingress", "unchanged", specIs(databasePolicy(good, peers)))

	// Turned off: gone, and the operator does not bring it back.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.NetworkPolicy = shalev1.NetworkPolicySpec{Enabled: ptr.To(false)}
	})
	eventually(t, "NetworkPolicy orders-ingress gone", func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-ingress"}, &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "Ready without a policy", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.ObservedGeneration == db.Generation, "want Ready"
	})
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-ingress"}, &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy with spec.networkPolicy.enabled false: %v", err)
	}

	// A policy of that name that is someone else's is refused, not taken.
	other := databasePolicy(&shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}}, peers)
	other.Name = "mine-ingress"
	h.create(other)
	mine := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns}, Spec: shalev1.RocksDBSpec{ObjectStoreRef: db.Spec.ObjectStoreRef}}
	h.create(mine)
	h.waitEvent(ns, "mine", eventNetworkPolicyConflict)
	h.waitDB(ns, "mine", "started despite the conflict", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
}
