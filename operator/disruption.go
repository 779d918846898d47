package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// PodDisruptionBudgets (issue 28): voluntary disruptions (kubectl drain,
// the cluster autoscaler, a node upgrade) go through the eviction API,
// which honours them; the operator's own deletes and the node controller's
// evictions of a lost node do not.
//
//	NAME-primary    minAvailable 1: a drain cannot evict the ready
//	                primary (during a switchover, with its standby
//	                ready, one of the two); it waits while the operator, seeing the
//	                node cordoned, moves the primary by a switchover
//	                (switchover.go); the old Pod is then deleted by the
//	                operator and the drain goes on. Not maxUnavailable:
//	                the disruption controller computes that from the
//	                Pods' controller's scale subresource, which a
//	                RocksDB does not have (on kind it failed with
//	                CalculateExpectedPodCountFailed); an integer
//	                minAvailable needs only the Pods.
//	NAME-secondary  maxUnavailable 1 with two or more replicas, so a drain
//	                never takes them all at once; none with fewer (one
//	                secondary would block every drain for nothing: reads
//	                fall back to nothing either way).
//
// Both let unhealthy Pods go (unhealthyPodEvictionPolicy AlwaysAllow): a
// primary that is not ready serves nothing, and blocking a drain for it
// helps no one. Both are owned by the RocksDB.

// eventBudgetConflict: a PodDisruptionBudget of the operator's name is someone else's.
const eventBudgetConflict = "PodDisruptionBudgetConflict"

// eventPrimaryNodeDraining: the primary's node is cordoned (a drain), and
// the budget holds the primary there until it is moved.
const eventPrimaryNodeDraining = "PrimaryNodeDraining"

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete

// primaryPDB is the primary's budget: it selects the primary of every
// epoch (one runs at a time).
func primaryPDB(db *shalev1.RocksDB) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: db.Name + "-primary", Namespace: db.Namespace, Labels: budgetLabels(db, shalev1.RolePrimary)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: map[string]string{shalev1.LabelRocksDB: db.Name, shalev1.LabelRole: shalev1.RolePrimary}},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// secondaryPDB is the secondaries' budget, nil when there is to be none.
func secondaryPDB(db *shalev1.RocksDB) *policyv1.PodDisruptionBudget {
	if db.Spec.Secondaries.Replicas < 2 {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: db.Name + "-secondary", Namespace: db.Namespace, Labels: budgetLabels(db, shalev1.RoleSecondary)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: db.SecondarySelector()},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

func budgetLabels(db *shalev1.RocksDB, role string) map[string]string {
	return map[string]string{
		shalev1.LabelRocksDB:      db.Name,
		shalev1.LabelAppName:      shalev1.AppName,
		shalev1.LabelAppInstance:  db.Name,
		shalev1.LabelAppComponent: role,
		shalev1.LabelAppManagedBy: shalev1.ManagedBy,
	}
}

// reconcileDisruptionBudgets keeps both budgets as the spec says. A budget
// of the same name that the RocksDB does not own is refused, not touched.
func (r *rocksDBReconciler) reconcileDisruptionBudgets(ctx context.Context, db *shalev1.RocksDB) error {
	err := firstErr(
		ensureBudget(ctx, r.Client, db, db.Name+"-primary", primaryPDB(db)),
		ensureBudget(ctx, r.Client, db, db.Name+"-secondary", secondaryPDB(db)),
	)
	r.noticeDrain(ctx, db)
	return err
}

// noticeDrain tells, with a Warning Event on the RocksDB, that the
// primary's node is being drained and what to do: the drain waits on the
// primary's budget until the primary is moved.
func (r *rocksDBReconciler) noticeDrain(ctx context.Context, db *shalev1.RocksDB) {
	if db.Status.CurrentPrimary == "" {
		return
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Status.CurrentPrimary}, pod); err != nil || pod.Spec.NodeName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nodeListTimeout)
	defer cancel()
	node := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Error(err, "reading the primary's Node", "node", pod.Spec.NodeName)
		}
		return
	}
	if msg := drainNotice(db, pod, node); msg != "" {
		r.recorder.Event(db, corev1.EventTypeWarning, eventPrimaryNodeDraining, msg)
	}
}

// drainNotice is the message when the running primary's node is cordoned,
// "" otherwise.
func drainNotice(db *shalev1.RocksDB, pod *corev1.Pod, node *corev1.Node) string {
	if !node.Spec.Unschedulable || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return ""
	}
	return fmt.Sprintf("node %s is cordoned (a drain?) and PodDisruptionBudget %s-primary keeps the primary %s there "+
		"until a switchover moves it to a standby on another node (docs/rfcs/0012-switchover.md); then the drain goes on",
		node.Name, db.Name, pod.Name)
}

// forCordonedNode maps a Node whose spec.unschedulable changed to the
// RocksDBs whose primary runs on it.
func (r *rocksDBReconciler) forCordonedNode(ctx context.Context, o client.Object) []reconcile.Request {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingLabels{shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		log.FromContext(ctx).Error(err, "listing the primaries after a Node was cordoned", "node", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pods.Items {
		if p.Spec.NodeName == o.GetName() && p.Labels[shalev1.LabelRocksDB] != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Labels[shalev1.LabelRocksDB]}})
		}
	}
	return reqs
}

// cordonChanged passes a Node update only when it was cordoned or
// uncordoned (Nodes change often otherwise).
var cordonChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return ok1 && ok2 && o.Spec.Unschedulable != n.Spec.Unschedulable
	},
}

// ensureBudget creates, updates or (want nil) deletes one budget.
func ensureBudget(ctx context.Context, c client.Client, db *shalev1.RocksDB, name string, want *policyv1.PodDisruptionBudget) error {
	var cur policyv1.PodDisruptionBudget
	err := c.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: name}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		if want == nil {
			return nil
		}
		if err := controllerutil.SetControllerReference(db, want, c.Scheme()); err != nil {
			return err
		}
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return err // AlreadyExists: the cache lags our own create
		}
		return nil
	case err != nil:
		return err
	case !metav1.IsControlledBy(&cur, db):
		if want == nil {
			return nil
		}
		return &refusal{reason: eventBudgetConflict, msg: fmt.Sprintf("PodDisruptionBudget %s exists and is not owned by this RocksDB; delete it or rename the RocksDB", name)}
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
	return c.Patch(ctx, &cur, patch)
}
