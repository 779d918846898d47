package operator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// A RocksDB's remote compaction (spec.compaction): the primary Pod gets
// the flags (primary_pod.go); here the RocksDB reports whether its pool
// can serve it (CompactorPoolReady) and copies its line of the pool's
// status into status.compaction. Nothing here stops the database: a
// primary whose pool is missing, elsewhere or down compacts locally.

// indexCompactorPoolRef indexes RocksDBs by the CompactorPool they use.
const indexCompactorPoolRef = "spec.compaction.compactorPoolRef.name"

func compactorPoolOf(o client.Object) []string {
	db := o.(*shalev1.RocksDB)
	if db.EffectiveCompactionMode() != shalev1.CompactionRemote || db.Spec.Compaction.CompactorPoolRef == nil {
		return nil
	}
	return []string{db.Spec.Compaction.CompactorPoolRef.Name}
}

// forCompactorPool maps a pool to the RocksDBs that use it (its status
// carries their counters).
func (r *rocksDBReconciler) forCompactorPool(ctx context.Context, o client.Object) []reconcile.Request {
	var dbs shalev1.RocksDBList
	if err := r.List(ctx, &dbs, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexCompactorPoolRef: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the RocksDBs of a CompactorPool", "compactorpool", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(dbs.Items))
	for _, db := range dbs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
	}
	return reqs
}

// reconcileCompaction sets CompactorPoolReady and status.compaction.
func (r *rocksDBReconciler) reconcileCompaction(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) error {
	rep.compactionSet = true
	if db.EffectiveCompactionMode() != shalev1.CompactionRemote || db.Spec.Compaction.CompactorPoolRef == nil {
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionTrue, shalev1.ReasonLocalCompaction, "compactions run in the primary's Pod (spec.compaction.mode Local)")
		return nil
	}
	name := db.Spec.Compaction.CompactorPoolRef.Name
	pool := &shalev1.CompactorPool{}
	err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: name}, pool)
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("CompactorPool %s does not exist in namespace %s; the primary compacts locally until it does", name, db.Namespace)
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolMissing, msg)
		r.recorder.Event(db, corev1.EventTypeWarning, eventCompactorPoolProblem, msg)
		return nil
	}
	if err != nil {
		return err
	}
	if pool.Spec.ObjectStoreRef.Name != db.Spec.ObjectStoreRef.Name {
		msg := fmt.Sprintf("CompactorPool %s serves ObjectStore %s, this database lives in %s: its workers cannot reach it, and the primary compacts locally; use a pool of ObjectStore %s",
			name, pool.Spec.ObjectStoreRef.Name, db.Spec.ObjectStoreRef.Name, db.Spec.ObjectStoreRef.Name)
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolStore, msg)
		r.recorder.Event(db, corev1.EventTypeWarning, eventCompactorPoolProblem, msg)
		return nil
	}
	if pool.TLSEnabled() != db.TLSEnabled() {
		msg := fmt.Sprintf("CompactorPool %s serves %s and this database uses %s: its primary cannot submit to it, and compacts locally; set spec.tls.enabled alike on both",
			name, tlsWord(pool.TLSEnabled()), tlsWord(db.TLSEnabled()))
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolTLS, msg)
		r.recorder.Event(db, corev1.EventTypeWarning, eventCompactorPoolProblem, msg)
		return nil
	}
	if c := pool.Condition(shalev1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionTrue, shalev1.ReasonCompactorPoolReady, fmt.Sprintf("CompactorPool %s is ready", name))
	} else {
		why := "not reconciled yet"
		if c != nil {
			why = c.Message
		}
		rep.set(shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolNotReady,
			fmt.Sprintf("CompactorPool %s is not ready (%s); the primary compacts locally meanwhile", name, why))
	}
	if store != nil && db.Status.StoragePath != "" {
		url := store.DatabaseURL(db.Status.StoragePath)
		for i := range pool.Status.Databases {
			if pool.Status.Databases[i].DB == url {
				line := pool.Status.Databases[i]
				rep.compaction = &line
			}
		}
		if rep.compaction == nil {
			rep.compaction = &shalev1.CompactionStats{DB: url}
		}
	}
	return nil
}

func tlsWord(on bool) string {
	if on {
		return "TLS"
	}
	return "plaintext (spec.tls.enabled false)"
}
