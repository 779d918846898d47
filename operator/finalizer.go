package operator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// podsGoneRecheck is how often a deletion looks again for primaries that
// are still terminating.
const podsGoneRecheck = 2 * time.Second

// reconcileDelete applies the reclaim policy of a RocksDB being deleted,
// then releases it:
//
//  1. delete its primary Pods and wait until the API server has none (so
//     no primary writes into a directory being deleted; a Pod stuck
//     terminating on a lost node holds the deletion until it is force
//     deleted);
//  2. Delete: delete every object under the storage path, then the owner
//     record. Retain: rewrite the owner record with Retain, so the garbage
//     collector never deletes the directory;
//  3. remove the finalizer.
//
// Every step is repeated until it succeeds; each is safe to repeat.
func (r *rocksDBReconciler) reconcileDelete(ctx context.Context, db *shalev1.RocksDB) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(db, shalev1.FinalizerStorage) {
		return ctrl.Result{}, nil
	}
	policy := db.EffectiveReclaimPolicy()
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		cur.Status.Phase = shalev1.PhaseDeleting
		setCondition(cur, metav1.Condition{Type: shalev1.ConditionReady, Status: metav1.ConditionFalse, Reason: shalev1.ReasonDeleting,
			Message: fmt.Sprintf("being deleted (reclaimPolicy %s)", policy)})
		return nil
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	remaining, err := r.stopPrimaries(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		return ctrl.Result{RequeueAfter: podsGoneRecheck}, nil
	}

	if db.Status.StoragePath != "" {
		if res, err := r.reclaim(ctx, db, policy); err != nil || !res.IsZero() {
			return res, err
		}
	}

	patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(db, shalev1.FinalizerStorage)
	if err := r.Patch(ctx, db, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.forget(client.ObjectKeyFromObject(db))
	return ctrl.Result{}, nil
}

// stopPrimaries deletes the database's Pods and returns how many the API
// server still has.
func (r *rocksDBReconciler) stopPrimaries(ctx context.Context, db *shalev1.RocksDB) (int, error) {
	var pods corev1.PodList
	if err := r.apiReader.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels{shalev1.LabelRocksDB: db.Name}); err != nil {
		return 0, err
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, db) {
			continue
		}
		n++
		if p.DeletionTimestamp == nil {
			uid := p.UID
			if err := r.Delete(ctx, p, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return 0, err
			}
		}
	}
	if n > 0 {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventWaitingForPods, "waiting for %d primary Pod(s) to stop before applying reclaimPolicy %s", n, db.EffectiveReclaimPolicy())
	}
	return n, nil
}

// reclaim applies the reclaim policy to the storage directory.
func (r *rocksDBReconciler) reclaim(ctx context.Context, db *shalev1.RocksDB, policy shalev1.ReclaimPolicy) (ctrl.Result, error) {
	store := &shalev1.ObjectStore{}
	err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.ObjectStoreRef.Name}, store)
	if apierrors.IsNotFound(err) {
		if policy == shalev1.ReclaimRetain {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageRetained, "kept %s; ObjectStore %s is gone, so no owner record was written", db.Status.StoragePath, db.Spec.ObjectStoreRef.Name)
			return ctrl.Result{}, nil
		}
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteRefused,
			"cannot delete %s: ObjectStore %s does not exist (recreate it, or remove the finalizer %s to leave the data)", db.Status.StoragePath, db.Spec.ObjectStoreRef.Name, shalev1.FinalizerStorage)
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	url := store.DatabaseURL(db.Status.StoragePath)
	if policy == shalev1.ReclaimRetain {
		if err := r.writeOwnerRecord(ctx, db, store, shalev1.ReclaimRetain); err != nil {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventOwnerRecordFailed, "keeping %s: %v", url, err)
			return ctrl.Result{}, err
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventStorageRetained, "kept %s (reclaimPolicy Retain)", url)
		return ctrl.Result{}, nil
	}

	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	st, err := r.stores.database(ctx, store, db.Status.StoragePath)
	if err == nil {
		var objects int
		var bytes int64
		objects, bytes, err = deleteAll(ctx, st, "")
		if err == nil {
			err = r.deleteOwnerRecord(ctx, db, store)
		}
		if err == nil {
			r.recorder.Eventf(db, corev1.EventTypeNormal, eventStorageDeleted, "deleted %s: %d objects, %d bytes (reclaimPolicy Delete)", url, objects, bytes)
			log.FromContext(ctx).Info("deleted storage", "url", url, "objects", objects, "bytes", bytes)
			return ctrl.Result{}, nil
		}
	}
	r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteFailed, "deleting %s: %v", url, err)
	return ctrl.Result{}, err
}

func (r *rocksDBReconciler) deleteOwnerRecord(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	hot, err := r.stores.hot(ctx, store)
	if err != nil {
		return err
	}
	return hot.Delete(ctx, ownerRecordKey(db.Namespace, db.DirName()))
}
