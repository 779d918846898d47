package operator

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The secondaries of a database: the Deployment NAME-secondary and the
// Service NAME-ro, both owned by the RocksDB.
//
//	replicas 0                     delete both (the Pods stop and drop their
//	                               reader leases)
//	no Deployment yet              create it once the primary is available
//	                               (before, the database may not exist yet
//	                               and `shale secondary` would crash-loop)
//	Deployment exists              rewrite its spec when the spec hash
//	                               differs, its replicas when they differ;
//	                               nothing otherwise
//
// The NAME-ro Service exists whenever replicas > 0. A failover changes
// nothing here: the secondaries follow the new primary through the store
// and the NAME-rw Service.

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete

// reconcileSecondaries drives the secondaries towards spec.secondaries and
// reports SecondariesReady and status.secondaries.
func (r *rocksDBReconciler) reconcileSecondaries(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) error {
	want := db.Spec.Secondaries.Replicas
	cur, err := r.secondaries(ctx, db)
	if err != nil {
		return err
	}
	if cur != nil && !metav1.IsControlledBy(cur, db) {
		msg := fmt.Sprintf("Deployment %s exists and is not owned by this RocksDB; delete it or rename the RocksDB", cur.Name)
		rep.setSecondaries(0, metav1.ConditionFalse, shalev1.ReasonSecondariesConflict, msg)
		return &refusal{eventDeploymentConflict, msg}
	}
	if want > 0 && db.Status.Hold != nil && hibernationWanted(db) {
		// Hibernated (hold.go): no secondary runs (their reader leases and
		// refreshes are store requests); the Deployment stays, at 0.
		return r.hibernateSecondaries(ctx, db, cur, rep)
	}

	if want == 0 {
		if err := r.deleteOwnedService(ctx, db, db.ReadOnlyServiceName()); err != nil {
			return err
		}
		if cur != nil && cur.DeletionTimestamp == nil {
			uid := cur.UID
			err := r.Delete(ctx, cur, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			r.recorder.Eventf(db, corev1.EventTypeNormal, eventSecondariesScaled, "removed the secondaries (Deployment %s): spec.secondaries.replicas is 0", cur.Name)
		}
		rep.setSecondaries(observeSecondaries(0, nil))
		rep.secondaryStatus = &[]shalev1.SecondaryStatus{}
		return nil
	}

	// A NAME-ro Service that is someone else's is refused (an Event); the
	// Deployment is reconciled all the same.
	svcErr := r.ensureOwnedService(ctx, db, readOnlyService(db))
	switch {
	case cur == nil && store == nil:
		rep.setSecondaries(0, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, "cannot start secondaries: the ObjectStore does not exist")
		return svcErr
	case cur == nil && (db.Status.StoragePath == "" || !primaryAvailable(db, rep)):
		rep.setSecondaries(0, metav1.ConditionFalse, shalev1.ReasonWaitingForPrimary, "secondaries start once the primary has been available")
		return svcErr
	case cur == nil:
		if cur, err = r.createSecondaries(ctx, db, store); err != nil || cur == nil {
			return firstErr(err, svcErr)
		}
	case store == nil || db.Status.StoragePath == "":
		// Leave running secondaries alone: they need no ObjectStore
		// object to keep serving.
	default:
		if cur, err = r.updateSecondaries(ctx, db, store, cur); err != nil {
			return firstErr(err, svcErr)
		}
	}
	rep.setSecondaries(observeSecondaries(want, cur))
	if cur != nil && r.secondaryStatusDue(client.ObjectKeyFromObject(db), r.now()) {
		st, err := r.pollSecondaries(ctx, db)
		if err != nil {
			return firstErr(svcErr, err)
		}
		rep.secondaryStatus = &st
	}
	return svcErr
}

// firstErr returns the first error that is not nil. (Not errors.Join: a
// refusal joined to an API error would hide that error from the retry
// with backoff.)
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// secondaries returns the Deployment NAME-secondary, nil if it does not
// exist.
func (r *rocksDBReconciler) secondaries(ctx context.Context, db *shalev1.RocksDB) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.SecondaryDeploymentName()}, dep)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return dep, nil
}

// createSecondaries creates the Deployment. It returns nil (and no error)
// when the Deployment turned out to exist already (the cache lags our own
// create, or it is someone else's, not in the cache): the next reconcile
// looks again.
func (r *rocksDBReconciler) createSecondaries(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (*appsv1.Deployment, error) {
	dep := secondaryDeploymentOn(db, store, r.opts.ShaleImage, r.eligibleNodes(ctx, db))
	if err := controllerutil.SetControllerReference(db, dep, r.Scheme()); err != nil {
		return nil, err
	}
	err := r.Create(ctx, dep)
	if apierrors.IsAlreadyExists(err) {
		existing := &appsv1.Deployment{}
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(dep), existing); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		if !metav1.IsControlledBy(existing, db) {
			return nil, &refusal{eventDeploymentConflict, fmt.Sprintf("Deployment %s exists and is not owned by this RocksDB; delete it or rename the RocksDB", dep.Name)}
		}
		return existing, nil
	}
	if err != nil {
		return nil, err
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventSecondariesScaled, "created Deployment %s with %d secondaries", dep.Name, *dep.Spec.Replicas)
	return dep, nil
}

// updateSecondaries rewrites the Deployment's spec when the spec the
// operator builds now has another hash than the one it was written with,
// and its replicas when they differ; otherwise it leaves it alone (so
// neither an operator restart nor the API server's defaults roll the
// Pods).
func (r *rocksDBReconciler) updateSecondaries(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, cur *appsv1.Deployment) (*appsv1.Deployment, error) {
	if cur.DeletionTimestamp != nil {
		return cur, nil // deleted (replicas went to 0 and back): created again once it is gone
	}
	want := secondaryDeploymentOn(db, store, r.opts.ShaleImage, r.eligibleNodes(ctx, db))
	from := int32(1) // the API server's default
	if cur.Spec.Replicas != nil {
		from = *cur.Spec.Replicas
	}
	to := *want.Spec.Replicas
	respec := cur.Annotations[shalev1.AnnotationSpecHash] != want.Annotations[shalev1.AnnotationSpecHash]
	if !respec && from == to {
		return cur, nil
	}
	next := cur.DeepCopy()
	next.Spec.Replicas = want.Spec.Replicas
	if respec {
		// The selector is immutable and always the same; the rest is ours.
		next.Spec.Template = want.Spec.Template
		next.Spec.Strategy = want.Spec.Strategy
		next.Spec.RevisionHistoryLimit = want.Spec.RevisionHistoryLimit
		next.Labels = want.Labels
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[shalev1.AnnotationSpecHash] = want.Annotations[shalev1.AnnotationSpecHash]
	}
	// Update carries cur's resourceVersion: a conflict means someone wrote
	// it meanwhile, and the reconcile is retried from a fresh cache.
	if err := r.Update(ctx, next); err != nil {
		return nil, err
	}
	if from != to {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventSecondariesScaled, "scaled the secondaries from %d to %d", from, to)
	}
	if respec {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventSecondariesUpdated, "updated the secondaries' Pod template (rolling update, one at a time)")
	}
	return next, nil
}

// eligibleNodes counts the nodes the secondaries could run on; 0 (unknown:
// preferred anti-affinity only) when the Nodes cannot be read.
func (r *rocksDBReconciler) eligibleNodes(ctx context.Context, db *shalev1.RocksDB) int32 {
	// Bounded: a cache that cannot sync (no RBAC for Nodes) must not hold
	// the reconcile.
	ctx, cancel := context.WithTimeout(ctx, nodeListTimeout)
	defer cancel()
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		log.FromContext(ctx).Error(err, "listing the Nodes to spread the secondaries; their anti-affinity stays preferred")
		return 0
	}
	s := db.Spec.Secondaries
	return eligibleNodes(nodes.Items, s.NodeSelector, s.Tolerations)
}

// nodeListTimeout bounds eligibleNodes' read of the Node cache.
const nodeListTimeout = 5 * time.Second

// primaryAvailable reports whether the primary is available, as this
// reconcile found it (or, if it did not look, as status says).
func primaryAvailable(db *shalev1.RocksDB, rep *report) bool {
	c := rep.get(shalev1.ConditionPrimaryAvailable)
	if c == nil {
		c = db.Condition(shalev1.ConditionPrimaryAvailable)
	}
	return c != nil && c.Status == metav1.ConditionTrue
}

// observeSecondaries derives status.secondaries (ready Pods) and the
// SecondariesReady condition from the Deployment: True once it runs want
// Pods, all of the current spec and ready.
func observeSecondaries(want int32, dep *appsv1.Deployment) (int32, metav1.ConditionStatus, string, string) {
	if want == 0 {
		return 0, metav1.ConditionTrue, shalev1.ReasonNoSecondaries, "no secondaries requested"
	}
	if dep == nil {
		return 0, metav1.ConditionFalse, shalev1.ReasonSecondariesNotReady, fmt.Sprintf("0 of %d secondaries ready: no Deployment", want)
	}
	st := dep.Status
	ready := st.ReadyReplicas
	switch {
	case dep.DeletionTimestamp != nil:
		return ready, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating, fmt.Sprintf("Deployment %s is being deleted; it is created again once it is gone", dep.Name)
	case st.ObservedGeneration < dep.Generation:
		return ready, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating, fmt.Sprintf("%d of %d secondaries ready; Deployment %s has not acted on its latest spec yet", ready, want, dep.Name)
	case st.UpdatedReplicas < want || st.Replicas > want:
		return ready, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating, fmt.Sprintf("%d of %d secondaries ready; rolling out: %d Pods, %d of the current spec", ready, want, st.Replicas, st.UpdatedReplicas)
	case ready < want:
		return ready, metav1.ConditionFalse, shalev1.ReasonSecondariesNotReady, fmt.Sprintf("%d of %d secondaries ready", ready, want)
	}
	return ready, metav1.ConditionTrue, shalev1.ReasonSecondariesReady, fmt.Sprintf("%d of %d secondaries ready", ready, want)
}

// hibernateSecondaries scales the secondaries' Deployment (if any) to 0
// while the database hibernates; the normal path scales it back.
func (r *rocksDBReconciler) hibernateSecondaries(ctx context.Context, db *shalev1.RocksDB, cur *appsv1.Deployment, rep *report) error {
	if cur != nil && cur.DeletionTimestamp == nil && (cur.Spec.Replicas == nil || *cur.Spec.Replicas != 0) {
		patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
		cur.Spec.Replicas = ptr.To[int32](0)
		if err := r.Patch(ctx, cur, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventSecondariesScaled, "scaled the secondaries (Deployment %s) to 0: the database hibernates", cur.Name)
	}
	rep.setSecondaries(0, metav1.ConditionFalse, shalev1.ReasonHibernated, "no secondaries while the database hibernates")
	rep.secondaryStatus = &[]shalev1.SecondaryStatus{}
	return nil
}
