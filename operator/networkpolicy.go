package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// NetworkPolicies of the Pods the operator runs (docs/kubernetes.md,
// "Network policies and RBAC"). Each admits ingress only; egress (the
// object store, the primary's Service, the scheduler) is not restricted.
//
//	NAME-ingress            primary and secondaries of a RocksDB
//	  grpc (KV)             Pods labelled shale.rocks/client=NAME, the
//	                        spec.networkPolicy.clients peers, the database's
//	                        secondaries (they Watch the primary), the operator
//	                        (Status of each secondary, the primary's tiers)
//	  metrics               the operator, the monitoring namespaces
//	POOL-scheduler-ingress  a CompactorPool's scheduler
//	  grpc                  primaries labelled
//	                        shale.rocks/compactorpool-client=POOL, the pool's
//	                        workers, the operator (its Stats)
//	  metrics               the operator, the monitoring namespaces
//	POOL-worker-ingress     a CompactorPool's workers
//	  metrics               the operator, the monitoring namespaces
//
// Ports are the containers' port names, so one rule covers the primary
// (7070) and the secondaries (7071). The kubelet's probes come from the
// node, which NetworkPolicies do not govern.

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete

// labelNamespaceName is the label the API server puts on every Namespace
// with its name.
const labelNamespaceName = "kubernetes.io/metadata.name"

// networkPeers are the peers every policy admits besides the ones of its
// database or pool.
type networkPeers struct {
	// Operator selects the operator's Pods.
	Operator networkingv1.NetworkPolicyPeer
	// Metrics selects the namespaces allowed to scrape metrics.
	Metrics networkingv1.NetworkPolicyPeer
}

// peersOf builds the peers from the operator's options.
func peersOf(o Options) networkPeers {
	op := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelNamespaceName: o.Namespace}},
		PodSelector:       &metav1.LabelSelector{},
	}
	if o.OperatorPodSelector != nil {
		op.PodSelector = o.OperatorPodSelector.DeepCopy()
	}
	ms := &metav1.LabelSelector{}
	if o.MetricsNamespaceSelector != nil {
		ms = o.MetricsNamespaceSelector.DeepCopy()
	}
	return networkPeers{Operator: op, Metrics: networkingv1.NetworkPolicyPeer{NamespaceSelector: ms}}
}

// databasePolicy is the NetworkPolicy NAME-ingress of a RocksDB.
func databasePolicy(db *shalev1.RocksDB, p networkPeers) *networkingv1.NetworkPolicy {
	kv := []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{shalev1.LabelClient: db.Name}}},
		{PodSelector: &metav1.LabelSelector{MatchLabels: db.SecondarySelector()}},
		*p.Operator.DeepCopy(),
	}
	for _, c := range db.Spec.NetworkPolicy.Clients {
		kv = append(kv, *c.DeepCopy())
	}
	return policy(db.Namespace, db.NetworkPolicyName(), db.Name,
		map[string]string{shalev1.LabelRocksDB: db.Name, shalev1.LabelAppManagedBy: shalev1.ManagedBy},
		rule(portNameKV, kv...), metricsRule(p))
}

// schedulerPolicy is the NetworkPolicy of a CompactorPool's scheduler.
func schedulerPolicy(pool *shalev1.CompactorPool, p networkPeers) *networkingv1.NetworkPolicy {
	return policy(pool.Namespace, pool.SchedulerPolicyName(), pool.Name, pool.Selector(shalev1.ComponentScheduler),
		rule(portNameKV,
			networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				shalev1.LabelRole: shalev1.RolePrimary, shalev1.LabelCompactorPoolClient: pool.Name,
			}}},
			networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: pool.Selector(shalev1.ComponentWorker)}},
			*p.Operator.DeepCopy(),
		),
		metricsRule(p))
}

// workerPolicy is the NetworkPolicy of a CompactorPool's workers: they
// serve nothing but metrics (they call the scheduler, not the reverse).
func workerPolicy(pool *shalev1.CompactorPool, p networkPeers) *networkingv1.NetworkPolicy {
	return policy(pool.Namespace, pool.WorkerPolicyName(), pool.Name, pool.Selector(shalev1.ComponentWorker), metricsRule(p))
}

func metricsRule(p networkPeers) networkingv1.NetworkPolicyIngressRule {
	return rule(portNameMet, *p.Operator.DeepCopy(), *p.Metrics.DeepCopy())
}

func rule(port string, from ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
	tcp := corev1.ProtocolTCP
	named := intstr.FromString(port)
	return networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &named}},
		From:  from,
	}
}

func policy(ns, name, instance string, selector map[string]string, rules ...networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: ns,
			Labels: map[string]string{
				shalev1.LabelAppName:      shalev1.AppName,
				shalev1.LabelAppInstance:  instance,
				shalev1.LabelAppManagedBy: shalev1.ManagedBy,
			},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
}

// ensureNetworkPolicy creates want, owned by owner, or resets the spec of
// the existing one to want's (an edit by hand does not last). want nil
// deletes the owner's policy of that name. A policy of that name the owner
// does not own is refused.
func ensureNetworkPolicy(ctx context.Context, c client.Client, owner client.Object, name string, want *networkingv1.NetworkPolicy) error {
	var cur networkingv1.NetworkPolicy
	err := c.Get(ctx, types.NamespacedName{Namespace: owner.GetNamespace(), Name: name}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		if want == nil {
			return nil
		}
		if err := controllerutil.SetControllerReference(owner, want, c.Scheme()); err != nil {
			return err
		}
		err = c.Create(ctx, want)
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache lags our own create; the next reconcile checks it
		}
		if apierrors.IsInvalid(err) {
			return &refusal{reason: eventNetworkPolicyInvalid, msg: fmt.Sprintf("the API server refused NetworkPolicy %s (check spec.networkPolicy.clients): %v", name, err)}
		}
		return err
	case err != nil:
		return err
	case !metav1.IsControlledBy(&cur, owner):
		if want == nil {
			return nil
		}
		return &refusal{reason: eventNetworkPolicyConflict, msg: fmt.Sprintf("NetworkPolicy %s exists and is not owned by %s %s; delete it or rename %s",
			name, owner.GetObjectKind().GroupVersionKind().Kind, owner.GetName(), owner.GetName())}
	case want == nil:
		if cur.DeletionTimestamp != nil {
			return nil
		}
		uid := cur.UID
		if err := c.Delete(ctx, &cur, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	case equality.Semantic.DeepEqual(cur.Spec, want.Spec):
		return nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec = want.Spec
	if err := c.Patch(ctx, &cur, patch); err != nil {
		if apierrors.IsInvalid(err) {
			return &refusal{reason: eventNetworkPolicyInvalid, msg: fmt.Sprintf("the API server refused NetworkPolicy %s (check spec.networkPolicy.clients): %v", name, err)}
		}
		return err
	}
	return nil
}

// reconcileNetworkPolicy keeps the database's NetworkPolicy, or removes it
// when policies are off (the operator's flag or spec.networkPolicy).
func (r *rocksDBReconciler) reconcileNetworkPolicy(ctx context.Context, db *shalev1.RocksDB) error {
	var want *networkingv1.NetworkPolicy
	if r.opts.NetworkPolicies && db.NetworkPolicyEnabled() {
		want = databasePolicy(db, peersOf(r.opts))
	}
	return ensureNetworkPolicy(ctx, r.Client, db, db.NetworkPolicyName(), want)
}

// reconcileNetworkPolicies keeps the pool's two NetworkPolicies, or
// removes them when the operator's flag turns policies off.
func (r *compactorPoolReconciler) reconcileNetworkPolicies(ctx context.Context, pool *shalev1.CompactorPool) error {
	var sched, workers *networkingv1.NetworkPolicy
	if r.opts.NetworkPolicies {
		p := peersOf(r.opts)
		sched, workers = schedulerPolicy(pool, p), workerPolicy(pool, p)
	}
	if err := ensureNetworkPolicy(ctx, r.Client, pool, pool.SchedulerPolicyName(), sched); err != nil {
		return err
	}
	return ensureNetworkPolicy(ctx, r.Client, pool, pool.WorkerPolicyName(), workers)
}

// ParseSelector parses a label selector flag: the label-selector syntax
// (a=b,c in (d,e)) or a JSON LabelSelector ({"matchLabels":{...}}), as the
// chart passes it.
func ParseSelector(flag, s string) (*metav1.LabelSelector, error) {
	s = strings.TrimSpace(s)
	var sel *metav1.LabelSelector
	if strings.HasPrefix(s, "{") {
		sel = &metav1.LabelSelector{}
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(sel); err != nil {
			return nil, fmt.Errorf("%s: %q is not a JSON label selector ({\"matchLabels\": {...}, \"matchExpressions\": [...]}): %v", flag, s, err)
		}
	} else {
		var err error
		if sel, err = metav1.ParseToLabelSelector(s); err != nil {
			return nil, fmt.Errorf("%s: %q is not a label selector (such as a=b,c in (d,e)): %v", flag, s, err)
		}
	}
	if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
		return nil, fmt.Errorf("%s: %v", flag, err)
	}
	return sel, nil
}
