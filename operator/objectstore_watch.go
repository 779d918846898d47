package operator

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// An ObjectStore's status changes often without anything a RocksDB reads
// of it changing: every check sets lastCheckTime, and every RocksDB adds
// itself to usedBy. Mapping each such change to every RocksDB of the store
// reconciled all of them once per check at rest (1,000 reconciles every
// check interval for 1,000 databases) and all of a namespace's databases
// for each one created (issue 29, make bench-operator).

// storeChange is what an update of an ObjectStore means to its RocksDBs.
type storeChange struct {
	// all: something every RocksDB of the store reads changed (the spec,
	// the Reachable condition, deletion).
	all bool
	// users: RocksDBs whose usedBy entry went or changed; each adds
	// itself back when reconciled (registerUse), so that the entry guards
	// the store's location again.
	users []string
}

// objectStoreChange decides which RocksDBs an update of their ObjectStore
// concerns.
func objectStoreChange(old, cur *shalev1.ObjectStore) storeChange {
	if old.Generation != cur.Generation ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		!equality.Semantic.DeepEqual(meta.FindStatusCondition(old.Status.Conditions, shalev1.ConditionReachable),
			meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionReachable)) {
		return storeChange{all: true}
	}
	var ch storeChange
	for _, u := range old.Status.UsedBy {
		if !slices.Contains(cur.Status.UsedBy, u) {
			ch.users = append(ch.users, u.Name)
		}
	}
	return ch
}

// objectStoreHandler maps ObjectStore events to the RocksDBs they concern.
func (r *rocksDBReconciler) objectStoreHandler() handler.EventHandler {
	all := handler.EnqueueRequestsFromMapFunc(r.forObjectStore)
	return handler.Funcs{
		CreateFunc:  all.Create,
		DeleteFunc:  all.Delete,
		GenericFunc: all.Generic,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, ok1 := e.ObjectOld.(*shalev1.ObjectStore)
			cur, ok2 := e.ObjectNew.(*shalev1.ObjectStore)
			if !ok1 || !ok2 {
				all.Update(ctx, e, q)
				return
			}
			ch := objectStoreChange(old, cur)
			if ch.all {
				all.Update(ctx, e, q)
				return
			}
			for _, name := range ch.users {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cur.Namespace, Name: name}})
			}
		},
	}
}
