package operator

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// podsGoneRecheck is how often a deletion looks again for primaries that
// are still terminating.
const podsGoneRecheck = 2 * time.Second

// reconcileDelete applies the reclaim policy of a RocksDB being deleted,
// then releases it:
//
//  1. delete its primary Pods and its secondaries' Deployment, and wait
//     until the API server has none of their Pods (so no primary writes
//     into a directory being deleted, and no secondary renews its reader
//     lease there; a Pod stuck terminating on a lost node holds the
//     deletion until it is force deleted);
//  2. a cloneFrom clone whose checkpoint in its parent was not released
//     yet (deleted before it was ready) deletes it there, best-effort
//     (dropCloneCheckpoint: it expires within an hour anyway);
//  3. Delete: create _shale/deleting, delete every object under the
//     storage path (cold tier first) but what clones' pins name, then,
//     with no pin left, the marker and the owner record (with pins, the
//     record stays, says Delete, and the garbage collector finishes once
//     the last pin is gone: StoragePinned). Retain: rewrite the owner record with Retain, so the garbage
//     collector never deletes the directory (with the ObjectStore gone,
//     wait for it unless status says the record says Retain already);
//  4. remove the RocksDB from its ObjectStore's status.usedBy, and the
//     finalizer.
//
// Every step is repeated until it succeeds; each is safe to repeat. In a
// namespace being deleted the ObjectStore and its Secret go at the same
// time as the RocksDB, so step 3 is tried once: if it cannot be done, the
// data is left as it is, with its owner record (leaveData), and the
// deletion finishes.
func (r *rocksDBReconciler) reconcileDelete(ctx context.Context, db *shalev1.RocksDB) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(db, shalev1.FinalizerStorage) {
		return ctrl.Result{}, nil
	}
	policy := db.EffectiveReclaimPolicy()
	primaries, err := r.stopPrimaries(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	secondaries, err := r.stopSecondaries(ctx, db)
	if err != nil {
		return ctrl.Result{}, err
	}
	msg := fmt.Sprintf("being deleted (reclaimPolicy %s)", policy)
	var waiting []string
	if primaries > 0 {
		waiting = append(waiting, fmt.Sprintf("%d primary Pod(s)", primaries))
	}
	if secondaries > 0 {
		waiting = append(waiting, "the secondaries")
	}
	if len(waiting) > 0 {
		msg += ": waiting for " + strings.Join(waiting, " and ") + " to stop"
	}
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		cur.Status.Phase = shalev1.PhaseDeleting
		setCondition(cur, metav1.Condition{Type: shalev1.ConditionReady, Status: metav1.ConditionFalse, Reason: shalev1.ReasonDeleting, Message: msg})
		return nil
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if len(waiting) > 0 {
		return ctrl.Result{RequeueAfter: podsGoneRecheck}, nil
	}
	if c := db.Status.Clone; c != nil && clonesFromNew(db) && c.Checkpoint != "" && !c.CheckpointReleased {
		// After the clone's primaries stopped: its bootstrap no longer
		// reads the checkpoint (its pins, if any, hold what it read).
		r.dropCloneCheckpoint(ctx, db)
	}
	if c := db.Status.Clone; c != nil && c.ObjectStore != "" {
		// A copy interrupted by this deletion left its pin in the parent
		// (a finished one deleted it: deleting again changes nothing).
		r.dropCopyPin(ctx, db)
	}

	if db.Status.StoragePath != "" {
		if res, err := r.reclaim(ctx, db, policy); err != nil || !res.IsZero() {
			if !r.namespaceTerminating(ctx, db.Namespace) {
				return res, err
			}
			r.leaveData(ctx, db, policy, err)
		}
	}
	if err := r.unregisterUse(ctx, db); err != nil {
		return ctrl.Result{}, err
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

// stopSecondaries deletes the secondaries' Deployment and returns how many
// of it and its Pods the API server still has. The Deployment is deleted
// in the foreground: the garbage collector removes it only after its
// ReplicaSets and their Pods are gone, so once it is gone no ReplicaSet is
// left to start another secondary.
func (r *rocksDBReconciler) stopSecondaries(ctx context.Context, db *shalev1.RocksDB) (int, error) {
	n := 0
	dep := &appsv1.Deployment{}
	err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.SecondaryDeploymentName()}, dep)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return 0, err
	case metav1.IsControlledBy(dep, db):
		n++
		if dep.DeletionTimestamp == nil {
			uid := dep.UID
			err := r.Delete(ctx, dep, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationForeground))
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return 0, err
			}
		}
	}
	// Pods left by a Deployment deleted in the background (replicas set
	// to 0 just before the RocksDB was deleted).
	var pods corev1.PodList
	sel := db.SecondarySelector()
	sel[shalev1.LabelAppManagedBy] = shalev1.ManagedBy
	if err := r.apiReader.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels(sel)); err != nil {
		return 0, err
	}
	n += len(pods.Items)
	if n > 0 {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventWaitingForPods, "waiting for the secondaries (Deployment %s and %d Pod(s)) to stop before applying reclaimPolicy %s",
			db.SecondaryDeploymentName(), len(pods.Items), db.EffectiveReclaimPolicy())
	}
	return n, nil
}

// reclaim applies the reclaim policy to the storage directory.
func (r *rocksDBReconciler) reclaim(ctx context.Context, db *shalev1.RocksDB, policy shalev1.ReclaimPolicy) (ctrl.Result, error) {
	store := &shalev1.ObjectStore{}
	err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.ObjectStoreRef.Name}, store)
	if apierrors.IsNotFound(err) {
		if policy == shalev1.ReclaimRetain {
			if db.Status.OwnerRecordPolicy == shalev1.ReclaimRetain || db.Status.Epoch == 0 {
				r.recorder.Eventf(db, corev1.EventTypeNormal, eventStorageRetained, "kept %s; ObjectStore %s is gone, and its owner record says Retain already", db.Status.StoragePath, db.Spec.ObjectStoreRef.Name)
				return ctrl.Result{}, nil
			}
			// The record may say Delete (written under an earlier
			// policy): the garbage collector of a later ObjectStore at
			// this location would delete the retained data. Only the
			// ObjectStore's credentials can rewrite it.
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventOwnerRecordStale,
				"keeping %s, but its owner record %s and ObjectStore %s is gone, so it cannot be rewritten: a later ObjectStore at this location would let the garbage collector delete the data. Create ObjectStore %s again (the deletion then completes), or remove the finalizer %s to leave the record as it is",
				db.Status.StoragePath, recordSays(db.Status.OwnerRecordPolicy), db.Spec.ObjectStoreRef.Name, db.Spec.ObjectStoreRef.Name, shalev1.FinalizerStorage)
			return ctrl.Result{RequeueAfter: time.Minute}, nil
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
	d, res, err := r.reclaimTiers(ctx, db, store)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	// Clones may read tables of this directory: reclaimDir keeps what
	// their pins name (docs/rfcs/0010-checkpoints-and-clones.md, step 14).
	done, err := reclaimDir(ctx, d, "reclaim of RocksDB "+db.Namespace+"/"+db.Name, nil)
	r.reportClonePins(ctx, db, done)
	if err == nil && len(done.Pinned) > 0 && db.Status.OwnerRecordPolicy != shalev1.ReclaimDelete {
		// The record stays, and must say Delete (status does not know
		// it does): the garbage collector goes by it.
		err = r.writeOwnerRecord(ctx, db, store, shalev1.ReclaimDelete)
	}
	if err == nil && len(done.Pinned) > 0 {
		// The record stays and says Delete: the garbage collector
		// deletes the rest once the last pin is gone.
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventStoragePinned,
			"deleted %s except what clones read: %d objects, %d bytes deleted; %d kept, pinned by %s; the garbage collector deletes them once those clones detach or are deleted",
			url, done.Objects, done.Bytes, len(done.Kept), strings.Join(done.Pinned, ", "))
		log.FromContext(ctx).Info("deleted storage but pinned objects", "url", url, "objects", done.Objects, "bytes", done.Bytes, "kept", len(done.Kept), "pins", done.Pinned)
		return ctrl.Result{}, nil
	}
	if err == nil {
		err = r.deleteOwnerRecord(ctx, db, store)
	}
	if err == nil {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventStorageDeleted, "deleted %s: %d objects, %d bytes (reclaimPolicy Delete)", url, done.Objects, done.Bytes)
		log.FromContext(ctx).Info("deleted storage", "url", url, "objects", done.Objects, "bytes", done.Bytes)
		return ctrl.Result{}, nil
	}
	r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteFailed, "deleting %s: %v", url, err)
	return ctrl.Result{}, err
}

// reportClonePins says what became of the pins of a clone being deleted.
func (r *rocksDBReconciler) reportClonePins(ctx context.Context, db *shalev1.RocksDB, done reclaimDone) {
	if len(done.Released) > 0 {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventClonePinsReleased, "released the clone's pins in its origins: %s", strings.Join(done.Released, ", "))
		log.FromContext(ctx).Info("released a clone's pins", "pins", done.Released)
	}
	if done.Unreleased != "" {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventStoragePinned, "%s", done.Unreleased)
	}
}

func (r *rocksDBReconciler) deleteOwnerRecord(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	hot, err := r.stores.hot(ctx, store)
	if err != nil {
		return err
	}
	key, _ := ownerRecordOf(db, r.clusterID, "", r.now())
	return hot.Delete(ctx, key)
}

// reclaimTiers opens the database's directory in the hot tier and, if it
// has one, in the cold tier.
func (r *rocksDBReconciler) reclaimTiers(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (dirTiers, ctrl.Result, error) {
	var d dirTiers
	var err error
	if db.Status.ColdStoragePath != "" {
		if store.Spec.Cold == nil {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteRefused,
				"cannot delete the cold tables under %s: ObjectStore %s has no spec.cold any more (restore it, or remove the finalizer %s to leave the data)", db.Status.ColdStoragePath, store.Name, shalev1.FinalizerStorage)
			return d, ctrl.Result{RequeueAfter: time.Minute}, nil
		}
		url := store.ColdDatabaseURL(db.Status.ColdStoragePath)
		if d.cold, err = r.stores.open(ctx, store, store.ColdEndpoint(), url); err != nil {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteFailed, "deleting %s: %v", url, err)
			return d, ctrl.Result{}, err
		}
	}
	d.uid = string(db.UID)
	d.openOrigin = func(url string) (objstore.Store, error) { return r.stores.open(ctx, store, store.Spec.Endpoint, url) }
	if d.hot, err = r.stores.database(ctx, store, db.Status.StoragePath); err != nil {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventStorageDeleteFailed, "deleting %s: %v", store.DatabaseURL(db.Status.StoragePath), err)
		return d, ctrl.Result{}, err
	}
	return d, ctrl.Result{}, nil
}

// namespaceTerminating reports whether the namespace is being deleted.
func (r *rocksDBReconciler) namespaceTerminating(ctx context.Context, name string) bool {
	var ns corev1.Namespace
	if err := r.apiReader.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return apierrors.IsNotFound(err)
	}
	return ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating
}

// leaveData ends the deletion of a RocksDB in a namespace being deleted
// whose reclaim policy could not be applied (its ObjectStore or Secret
// gone with the namespace, or the store failing): the directory stays
// with its owner record, which decides what happens to it next (Delete:
// the garbage collector of any ObjectStore at that location deletes it
// after --gc-grace; Retain: nothing ever does). Said in an Event (which a
// terminating namespace may refuse) and the operator's log.
func (r *rocksDBReconciler) leaveData(ctx context.Context, db *shalev1.RocksDB, policy shalev1.ReclaimPolicy, cause error) {
	why := "the ObjectStore is gone or unusable"
	if cause != nil {
		why = cause.Error()
	}
	next := "the garbage collector of any ObjectStore at that location deletes it after --gc-grace"
	switch db.Status.OwnerRecordPolicy {
	case shalev1.ReclaimRetain:
		next = "it is kept: the garbage collector never deletes it"
	case "":
		next = "its owner record, as last written, decides whether the garbage collector of an ObjectStore at that location deletes it"
	}
	msg := fmt.Sprintf("namespace %s is being deleted and reclaimPolicy %s could not be applied (%s): left %s (ObjectStore %s) as it is; its owner record %s, so %s",
		db.Namespace, policy, why, db.Status.StoragePath, db.Spec.ObjectStoreRef.Name, recordSays(db.Status.OwnerRecordPolicy), next)
	r.recorder.Event(db, corev1.EventTypeWarning, eventStorageLeft, msg)
	log.FromContext(ctx).Info("deletion in a terminating namespace left the data", "path", db.Status.StoragePath, "policy", policy, "ownerRecord", db.Status.OwnerRecordPolicy, "cause", why)
}

// recordSays says what an owner record says, as status knows it.
func recordSays(p shalev1.ReclaimPolicy) string {
	if p == "" {
		return "may still say Delete (what it says is not known)"
	}
	return "says " + string(p)
}
