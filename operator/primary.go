package operator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// The primary's life cycle. status.epoch is the highest epoch handed out;
// status.currentPrimary names the Pod created for it once that Pod exists.
//
//	epoch 0                         allocate the first epoch, create its Pod
//	currentPrimary != Pod of epoch  (re)create the Pod of epoch (idempotent:
//	                                one name per epoch), then record it
//	otherwise                       watch the Pod; fail over when
//	                                decideFailover says so
//
// A failover raises status.epoch with an optimistic-lock patch that
// requires the epoch it observed, so of two racing reconciles (or two
// operators, should leader election ever fail) one bumps and the other
// finds its precondition gone. Then it creates the new Pod and deletes the
// old one. Nothing depends on the old Pod stopping: the new primary's epoch
// fences it in the store.

// reconcilePrimary drives the primary of a database towards running and
// reports PrimaryAvailable (and Failover when it fails over).
func (r *rocksDBReconciler) reconcilePrimary(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (ctrl.Result, error) {
	// A fence or a hibernation by hand first (hold.go): while one is
	// wanted or in place, no primary is created, switched over or failed
	// over.
	if res, done, err := r.reconcileHold(ctx, db, store, rep); done || err != nil {
		return res, err
	}
	epoch := db.Status.Epoch
	switch {
	case epoch == 0:
		return r.startFirstPrimary(ctx, db, store, rep)
	case db.Status.CurrentPrimary != db.PrimaryPodName(epoch):
		// The cache may predate the status write that recorded the Pod
		// (which may since have been deleted): creating it again would
		// start a primary with an epoch already taken. Decide from the
		// API server's copy.
		fresh := &shalev1.RocksDB{}
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(db), fresh); err != nil {
			return ctrl.Result{}, err
		}
		if fresh.Status.Epoch != epoch || fresh.Status.CurrentPrimary != db.Status.CurrentPrimary {
			*db = *fresh
			return r.reconcilePrimary(ctx, db, store, rep)
		}
		if store == nil {
			rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, "cannot create the primary: its ObjectStore does not exist")
			return ctrl.Result{}, &refusal{eventObjectStoreMissing, fmt.Sprintf("cannot create the primary of epoch %d: ObjectStore %s does not exist", epoch, db.Spec.ObjectStoreRef.Name)}
		}
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryStarting, "creating the primary Pod "+db.PrimaryPodName(epoch))
		return ctrl.Result{}, r.createPrimary(ctx, db, store, epoch)
	}

	pod, err := r.primaryPod(ctx, db, epoch, false)
	if err != nil {
		return ctrl.Result{}, err
	}
	// A switchover first (switchover.go): while the primary steps down on
	// request, the failover logic must not take it for a failing one.
	swAfter, swDone, err := r.reconcileSwitchover(ctx, db, store, pod, rep)
	if swDone || err != nil {
		return ctrl.Result{RequeueAfter: swAfter}, err
	}
	res, err := r.reconcileServingPrimary(ctx, db, store, pod, rep)
	if swAfter > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > swAfter) {
		res.RequeueAfter = swAfter
	}
	return res, err
}

// reconcileServingPrimary watches the primary of status.epoch (pod, nil
// when it does not exist) and fails over when decideFailover says so.
func (r *rocksDBReconciler) reconcileServingPrimary(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod *corev1.Pod, rep *report) (ctrl.Result, error) {
	epoch := db.Status.Epoch
	var err error
	now := r.now()
	d := decideFailover(r.observePrimary(pod, db, epoch, now), now, r.opts.FailoverGrace, r.opts.StartupGrace)
	if d.Action == actionFailover {
		// Never fail over on the cache's word: read the Pod from the API
		// server and decide again.
		if pod, err = r.primaryPod(ctx, db, epoch, true); err != nil {
			return ctrl.Result{}, err
		}
		d = decideFailover(r.observePrimary(pod, db, epoch, now), now, r.opts.FailoverGrace, r.opts.StartupGrace)
	}
	if d.Reason != shalev1.ReasonPrimaryReady {
		r.pruneFailedPrimaries(ctx, db, epoch)
	}
	switch d.Action {
	case actionFailover:
		return r.failover(ctx, db, store, d, pod, rep)
	case actionWait:
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryNotReady, d.Message)
		return ctrl.Result{RequeueAfter: d.RecheckAfter}, nil
	}
	if d.Reason == shalev1.ReasonPrimaryReady {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionTrue, shalev1.ReasonPrimaryReady, fmt.Sprintf("primary %s (epoch %d) is ready", pod.Name, epoch))
		r.watchPort(ctx, db, pod)
		r.deleteStalePrimaries(ctx, db, epoch)
		if err := r.recordCreated(ctx, db, store); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.recordReadyEpoch(ctx, db, epoch); err != nil {
			return ctrl.Result{}, err
		}
		return r.clearFailures(ctx, db)
	}
	if reason, msg, ok := startingCause(pod); ok {
		// Retrying will not help; said where users look (Ready copies it).
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, reason, fmt.Sprintf("primary %s (epoch %d) cannot start: %s", pod.Name, epoch, msg))
		return ctrl.Result{RequeueAfter: d.RecheckAfter}, nil
	}
	rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryStarting, fmt.Sprintf("primary %s (epoch %d) is starting", pod.Name, epoch))
	return ctrl.Result{RequeueAfter: d.RecheckAfter}, nil
}

// observePrimary is observePrimary with the operator's own probes of the
// Pod (RFC 0015) and its port watch (portwatch.go).
func (r *rocksDBReconciler) observePrimary(pod *corev1.Pod, db *shalev1.RocksDB, epoch int64, now time.Time) primaryState {
	p := observePrimary(pod, db.Condition(shalev1.ConditionPrimaryAvailable), db.Status.ReadyEpoch == epoch)
	if pod != nil {
		p.Unreachable, p.UnreachableSince, _ = r.liveness.verdict(pod.UID, now)
		p.PortRefused = r.ports.refused(pod.UID)
	}
	return p
}

// watchPort watches the ready primary's KV port (portwatch.go): a refused
// connection brings the RocksDB back to Reconcile, which fails over.
func (r *rocksDBReconciler) watchPort(ctx context.Context, db *shalev1.RocksDB, pod *corev1.Pod) {
	if r.ports == nil {
		return
	}
	addr, _ := secondaryAddr(pod) // the primary's port has the same name
	key := client.ObjectKeyFromObject(db)
	if addr == "" || r.ports.watching(pod.UID, addr) {
		return
	}
	dial, err := r.kvDial(ctx, db, db.ServiceName())
	if err != nil {
		return // no identity to connect with yet: the kubelet's word only
	}
	r.ports.watch(key, pod.UID, addr, dial, func() {
		obj := &shalev1.RocksDB{}
		obj.Namespace, obj.Name = key.Namespace, key.Name
		r.portEvents <- event.GenericEvent{Object: obj}
	})
}

// recordCreated records, the first time a primary is seen ready, where the
// database is (status.created): its data exists from then on, so later
// primaries get --existing.
func (r *rocksDBReconciler) recordCreated(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	if db.Status.Created != nil || store == nil {
		return nil
	}
	loc := &shalev1.DatabaseLocation{Time: metav1.NewTime(r.now()), Endpoint: store.Spec.Endpoint, Region: store.Spec.Region, Bucket: store.Spec.Hot.Bucket}
	return patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Created == nil {
			cur.Status.Created = loc
		}
		return nil
	})
}

// recordReadyEpoch notes that the primary of epoch was seen ready
// (status.readyEpoch), once.
func (r *rocksDBReconciler) recordReadyEpoch(ctx context.Context, db *shalev1.RocksDB, epoch int64) error {
	if db.Status.ReadyEpoch >= epoch {
		return nil
	}
	return patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != epoch || cur.Status.ReadyEpoch >= epoch {
			return errNoChange
		}
		cur.Status.ReadyEpoch = epoch
		return nil
	})
}

// clearFailures forgets the failures in a row once the current primary
// has been ready for the longest backoff.
func (r *rocksDBReconciler) clearFailures(ctx context.Context, db *shalev1.RocksDB) (ctrl.Result, error) {
	if db.Status.PrimaryFailures == nil {
		return ctrl.Result{}, nil
	}
	// The condition as stored: this reconcile may be the one that makes it
	// True (then it is looked at again after the full wait).
	avail := db.Condition(shalev1.ConditionPrimaryAvailable)
	if avail == nil || avail.Status != metav1.ConditionTrue {
		return ctrl.Result{RequeueAfter: r.opts.FailoverBackoffMax}, nil
	}
	if left := avail.LastTransitionTime.Add(r.opts.FailoverBackoffMax).Sub(r.now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	epoch := db.Status.Epoch
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != epoch {
			return errNoChange
		}
		cur.Status.PrimaryFailures = nil
		return nil
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	return ctrl.Result{}, err
}

// primaryPod returns the Pod of an epoch, nil if it does not exist. A Pod
// missing from the cache is looked up on the API server too (the cache
// lags the operator's own creates); fresh forces that read.
func (r *rocksDBReconciler) primaryPod(ctx context.Context, db *shalev1.RocksDB, epoch int64, fresh bool) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: db.Namespace, Name: db.PrimaryPodName(epoch)}
	pod := &corev1.Pod{}
	if !fresh {
		err := r.Get(ctx, key, pod)
		if err == nil {
			return pod, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	if err := r.apiReader.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return pod, nil
}

// startFirstPrimary allocates the first epoch and creates its Pod, once the
// ObjectStore is known to be reachable and the owner record is written.
func (r *rocksDBReconciler) startFirstPrimary(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (ctrl.Result, error) {
	switch {
	case store == nil:
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, "waiting for the ObjectStore")
		return ctrl.Result{}, &refusal{eventObjectStoreMissing, fmt.Sprintf("not starting a primary: ObjectStore %s does not exist", db.Spec.ObjectStoreRef.Name)}
	case !store.IsReachable() && !objectStoreChecked(store):
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonNotChecked, "waiting for the ObjectStore's first check")
		return ctrl.Result{}, nil
	case !store.IsReachable():
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, eventObjectStoreUnreachable, "waiting for the ObjectStore to be reachable")
		// The ObjectStore's status changes wake this up.
		return ctrl.Result{}, &refusal{eventObjectStoreUnreachable, fmt.Sprintf("not starting a primary: ObjectStore %s is not reachable (see its Reachable condition)", store.Name)}
	}
	if db.Status.StoragePath == "" {
		// An adoption not done yet (bootstrap.go): nothing to start.
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryStarting, "waiting for the storage path")
		return ctrl.Result{RequeueAfter: epochsRecheck}, nil
	}
	if err := r.ensureOwnerRecord(ctx, db, store); err != nil {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, eventOwnerRecordFailed, err.Error())
		r.recorder.Event(db, corev1.EventTypeWarning, eventOwnerRecordFailed, err.Error())
		return ctrl.Result{}, err
	}
	highest, known := r.storageEpoch(ctx, db, store)
	if !known && adopts(db) {
		// The first primary of an adopted directory must claim above
		// every epoch taken there: wait until they can be read.
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreUnreachable,
			fmt.Sprintf("the epoch claims of the adopted directory %s cannot be read from ObjectStore %s right now: no primary starts until they can", db.Status.StoragePath, store.Name))
		return ctrl.Result{RequeueAfter: epochsRecheck}, nil
	}
	next, err := nextEpoch(0, highest, known)
	if err != nil {
		return ctrl.Result{}, &refusal{eventEpochExhausted, err.Error()}
	}
	starting := metav1.Condition{Type: shalev1.ConditionPrimaryAvailable, Status: metav1.ConditionFalse, Reason: shalev1.ReasonPrimaryStarting,
		Message: "creating the primary Pod " + db.PrimaryPodName(next)}
	err = patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != 0 {
			return errNoChange
		}
		cur.Status.Epoch = next
		setCondition(cur, starting)
		return nil
	})
	if errors.Is(err, errNoChange) {
		return ctrl.Result{Requeue: true}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	rep.set(starting.Type, starting.Status, starting.Reason, starting.Message)
	return ctrl.Result{}, r.createPrimary(ctx, db, store, next)
}

// createPrimary creates the Pod of an epoch (if it does not exist) and
// records it as the current primary.
func (r *rocksDBReconciler) createPrimary(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64) error {
	if err := tieringRefusal(db, store); err != nil {
		return err
	}
	if err := r.ensureOwnerRecord(ctx, db, store); err != nil {
		// Not fatal once the first primary exists: it was written then.
		log.FromContext(ctx).Error(err, "updating the owner record")
	}
	pod := primaryPod(db, store, epoch, r.opts.ShaleImage)
	if node := r.unreachableNode(ctx, db, epoch); node != "" {
		preferOtherNode(&pod.Spec, node)
	}
	if err := r.withRestore(ctx, db, store, pod); err != nil {
		return err
	}
	if err := controllerutil.SetControllerReference(db, pod, r.Scheme()); err != nil {
		return err
	}
	err := r.Create(ctx, pod)
	switch {
	case err == nil:
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventPrimaryCreated, "created primary %s with epoch %d", pod.Name, epoch)
	case apierrors.IsAlreadyExists(err):
		existing, gerr := r.primaryPod(ctx, db, epoch, true)
		if gerr != nil {
			return gerr
		}
		if existing != nil && !metav1.IsControlledBy(existing, db) {
			return &refusal{"PodConflict", fmt.Sprintf("Pod %s exists and is not owned by this RocksDB; delete it or rename the RocksDB", pod.Name)}
		}
	default:
		return err
	}
	return patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != epoch {
			return errNoChange
		}
		cur.Status.CurrentPrimary = pod.Name
		return nil
	})
}

// unreachableNode is the node of the primary that the failover to epoch
// replaced when the operator's probes found it unreachable (RFC 0015), ""
// otherwise. Until the node controller notices (40 s), a dead node still
// looks schedulable, and a new primary placed there would never start.
func (r *rocksDBReconciler) unreachableNode(ctx context.Context, db *shalev1.RocksDB, epoch int64) string {
	c := db.Condition(shalev1.ConditionFailover)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != shalev1.ReasonPrimaryUnreachable {
		return ""
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels{shalev1.LabelRocksDB: db.Name, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		return ""
	}
	node, newest := "", int64(0)
	for _, p := range pods.Items {
		e, err := strconv.ParseInt(p.Labels[shalev1.LabelEpoch], 10, 64)
		if err == nil && e < epoch && e > newest && p.Spec.NodeName != "" {
			node, newest = p.Spec.NodeName, e
		}
	}
	return node
}

// failover replaces the primary of the observed epoch with one of a higher
// epoch: it records the failure of the old one (pod, nil when gone), then
// starts the new one unless decideRestart says to wait or the database is
// not where it was created.
func (r *rocksDBReconciler) failover(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, d failoverDecision, pod *corev1.Pod, rep *report) (ctrl.Result, error) {
	observed := db.Status.Epoch
	if store == nil {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, d.Reason, d.Message)
		return ctrl.Result{}, &refusal{eventFailoverRefused, fmt.Sprintf("%s, but ObjectStore %s does not exist: cannot start a new primary", d.Message, db.Spec.ObjectStoreRef.Name)}
	}
	now := r.now()
	if countsAsFailure(d.Reason) {
		if err := r.recordFailure(ctx, db, pod, d, now); err != nil {
			return ctrl.Result{}, err
		}
	}
	if dec := decideRestart(db.Status.PrimaryFailures, db.Generation, store.IsReachable(), now, r.opts.FailoverBackoff, r.opts.FailoverBackoffMax); !dec.Start {
		msg := dec.Message
		if dec.Reason == shalev1.ReasonObjectStoreUnreachable {
			msg = fmt.Sprintf("%s (primary %s); no new primary starts while ObjectStore %s is not reachable (see its Reachable condition): it could not open the database", d.Message, db.PrimaryPodName(observed), store.Name)
		}
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, dec.Reason, msg)
		if dec.NotBefore.IsZero() {
			// The ObjectStore's status changing wakes this up; look again
			// now and then all the same.
			return ctrl.Result{RequeueAfter: unreachableRecheck}, nil
		}
		return ctrl.Result{RequeueAfter: dec.NotBefore.Sub(now)}, nil
	}
	highest, known := r.storageEpoch(ctx, db, store)
	if db.Status.Created != nil && known && highest == 0 {
		// A database that was ready has claims in its directory: none
		// means the ObjectStore now points elsewhere. A primary there
		// would refuse (--existing); better not to start one at all.
		// Unless the directory still holds the owner record or CURRENT:
		// then the listing was wrong (MinIO answered one with nothing a
		// few seconds after it restarted, in make e2e), so look again.
		if found, err := r.databaseMarkers(ctx, db, store); err != nil || found {
			known = false
		} else {
			msg := describeLocationChange(db, store)
			rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonDatabaseNotFound, msg)
			return ctrl.Result{RequeueAfter: time.Minute}, &refusal{eventDatabaseNotFound, msg}
		}
	}
	if db.Status.Created != nil && !known {
		// The database exists, and its epochs cannot be read now: a new
		// primary could not open it either, and each one that fails
		// counts toward the backoff. Look again soon.
		msg := fmt.Sprintf("%s (primary %s); the database's epoch claims cannot be read from ObjectStore %s right now: no new primary starts until they can", d.Message, db.PrimaryPodName(observed), store.Name)
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreUnreachable, msg)
		return ctrl.Result{RequeueAfter: epochsRecheck}, nil
	}
	// Above a switchover's standby too (status.reservedEpoch), whose Pod
	// may still exist.
	next, err := nextEpoch(max(observed, db.Status.ReservedEpoch), highest, known)
	if err != nil {
		return ctrl.Result{}, &refusal{eventEpochExhausted, err.Error()}
	}
	oldName := db.PrimaryPodName(observed)
	failing := metav1.Condition{Type: shalev1.ConditionFailover, Status: metav1.ConditionTrue, Reason: d.Reason,
		Message: fmt.Sprintf("%s (%s, epoch %d); replacing it with %s, epoch %d", d.Message, oldName, observed, db.PrimaryPodName(next), next)}
	starting := metav1.Condition{Type: shalev1.ConditionPrimaryAvailable, Status: metav1.ConditionFalse, Reason: shalev1.ReasonPrimaryStarting,
		Message: "creating the primary Pod " + db.PrimaryPodName(next)}
	err = patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != observed || cur.Status.CurrentPrimary != oldName {
			return errNoChange
		}
		cur.Status.Epoch = next
		cur.Status.ReservedEpoch = max(cur.Status.ReservedEpoch, next)
		cur.Status.Failovers++
		cur.Status.LastFailoverTime = &metav1.Time{Time: now}
		setCondition(cur, failing)
		setCondition(cur, starting)
		cur.Status.Phase = shalev1.PhaseFailingOver
		return nil
	})
	if errors.Is(err, errNoChange) {
		// Someone else moved the epoch on; look again.
		return ctrl.Result{Requeue: true}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	failoversTotal.WithLabelValues(d.Reason).Inc()
	r.mu.Lock()
	r.failoverStarted[client.ObjectKeyFromObject(db)] = failoverStart{uid: db.UID, epoch: next, at: now}
	r.mu.Unlock()
	r.recorder.Event(db, corev1.EventTypeWarning, eventFailover, failing.Message)
	log.FromContext(ctx).Info("failover", "reason", d.Reason, "from", observed, "to", next)
	rep.set(failing.Type, failing.Status, failing.Reason, failing.Message)
	rep.set(starting.Type, starting.Status, starting.Reason, starting.Message)

	// The old Pod is kept until the new primary is ready
	// (deleteStalePrimaries): its logs stay readable during the failover,
	// and a primary that is only slow or frozen finds its fence in the
	// store and exits by itself. Nothing depends on its deletion: the new
	// epoch fences it in the store whether or not its Pod goes away.
	if err := r.createPrimary(ctx, db, store, next); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// recordFailure adds the failure of the primary of the current epoch to
// status.primaryFailures (once per epoch), with its cause, and says so in
// an Event.
func (r *rocksDBReconciler) recordFailure(ctx context.Context, db *shalev1.RocksDB, pod *corev1.Pod, d failoverDecision, now time.Time) error {
	epoch := db.Status.Epoch
	if pf := db.Status.PrimaryFailures; pf != nil && len(pf.Recent) > 0 && pf.Recent[len(pf.Recent)-1].Epoch >= epoch {
		return nil // recorded by an earlier reconcile
	}
	reason, msg := classifyFailure(pod, d)
	f := shalev1.PrimaryFailure{Epoch: epoch, Time: metav1.NewTime(now), Reason: reason, Message: msg, Generation: specGeneration(pod, db)}
	newRow := startsNewRow(observePrimary(pod, db.Condition(shalev1.ConditionPrimaryAvailable), db.Status.ReadyEpoch == epoch).EverReady, reason)
	added := false
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != epoch {
			return errNoChange
		}
		cur.Status.PrimaryFailures, added = addFailure(cur.Status.PrimaryFailures, f, newRow)
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	if added {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventPrimaryFailed, "primary %s (epoch %d) failed (%d in a row): %s: %s",
			db.PrimaryPodName(epoch), epoch, db.Status.PrimaryFailures.Count, reason, msg)
		if reason == shalev1.ReasonBootstrapRefused {
			// The restore refused (or failed): say so as a refused
			// bootstrap, as the operator's own checks do.
			r.recorder.Eventf(db, corev1.EventTypeWarning, shalev1.ReasonBootstrapRefused, "the restore of primary %s refused to start the database: %s", db.PrimaryPodName(epoch), msg)
		}
		log.FromContext(ctx).Info("primary failed", "epoch", epoch, "reason", reason, "message", msg, "inARow", db.Status.PrimaryFailures.Count)
	}
	return nil
}

// specGeneration is the RocksDB generation a primary Pod was built from
// (its annotation; the current one for Pods of older operators).
func specGeneration(pod *corev1.Pod, db *shalev1.RocksDB) int64 {
	if pod != nil {
		if g, err := strconv.ParseInt(pod.Annotations[shalev1.AnnotationSpecGeneration], 10, 64); err == nil {
			return g
		}
	}
	return db.Generation
}

// pruneFailedPrimaries deletes the failed primary Pods of older epochs
// but the newest keepFailedPods (for their logs and termination
// messages), so that primaries failing again and again do not pile up.
func (r *rocksDBReconciler) pruneFailedPrimaries(ctx context.Context, db *shalev1.RocksDB, epoch int64) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels{shalev1.LabelRocksDB: db.Name, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		log.FromContext(ctx).Error(err, "listing failed primaries")
		return
	}
	type failed struct {
		pod   *corev1.Pod
		epoch int64
	}
	var done []failed
	for i := range pods.Items {
		p := &pods.Items[i]
		e, err := strconv.ParseInt(p.Labels[shalev1.LabelEpoch], 10, 64)
		if err != nil || e >= epoch || p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, db) ||
			(p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded) {
			continue
		}
		done = append(done, failed{p, e})
	}
	if len(done) <= keepFailedPods {
		return
	}
	slices.SortFunc(done, func(a, b failed) int { return cmp.Compare(b.epoch, a.epoch) })
	for _, f := range done[keepFailedPods:] {
		uid := f.pod.UID
		if err := r.Delete(ctx, f.pod, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "deleting a failed primary", "pod", f.pod.Name)
		}
	}
}

// deleteStalePrimaries deletes the Pods of older epochs once the current
// primary is ready (until then they stay, for their logs).
func (r *rocksDBReconciler) deleteStalePrimaries(ctx context.Context, db *shalev1.RocksDB, epoch int64) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(db.Namespace), client.MatchingLabels{shalev1.LabelRocksDB: db.Name, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		log.FromContext(ctx).Error(err, "listing old primaries")
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		e, err := strconv.ParseInt(p.Labels[shalev1.LabelEpoch], 10, 64)
		if err != nil || e >= epoch || p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, db) {
			continue
		}
		uid := p.UID
		if err := r.Delete(ctx, p, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "deleting an old primary", "pod", p.Name)
		}
	}
}

// storageEpoch reads the highest epoch taken in the database's directory;
// known is false when the store could not be listed.
func (r *rocksDBReconciler) storageEpoch(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (uint64, bool) {
	if db.Status.StoragePath == "" {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	st, err := r.stores.database(ctx, store, db.Status.StoragePath)
	if err == nil {
		var highest uint64
		if highest, err = highestEpoch(ctx, st); err == nil {
			return highest, true
		}
	}
	log.FromContext(ctx).Info("cannot read the epochs in storage; choosing from status alone", "error", err.Error())
	return 0, false
}

// epochsRecheck is how soon a failover that could not read the database's
// epochs looks again.
const epochsRecheck = 5 * time.Second

// databaseMarkers reports whether the database's directory holds its owner
// record (_shale/owner) or CURRENT: a listing of its claims that found
// none was then wrong.
func (r *rocksDBReconciler) databaseMarkers(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	st, err := r.stores.database(ctx, store, db.Status.StoragePath)
	if err != nil {
		return false, err
	}
	for _, key := range []string{layout.OwnerKey, layout.CurrentKey} {
		_, err := st.Stat(ctx, key)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return false, err
		}
	}
	return false, nil
}

// ensureOwnerRecord writes the database's owner record unless this process
// already wrote it with the current reclaim policy.
func (r *rocksDBReconciler) ensureOwnerRecord(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	key := client.ObjectKeyFromObject(db)
	want := recordState{uid: db.UID, policy: db.EffectiveReclaimPolicy()}
	r.mu.Lock()
	have, ok := r.records[key]
	r.mu.Unlock()
	if ok && have == want {
		return nil
	}
	if err := r.writeOwnerRecord(ctx, db, store, want.policy); err != nil {
		return err
	}
	r.mu.Lock()
	r.records[key] = want
	r.mu.Unlock()
	return nil
}

func (r *rocksDBReconciler) writeOwnerRecord(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, policy shalev1.ReclaimPolicy) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	hot, err := r.stores.hot(ctx, store)
	if err != nil {
		return fmt.Errorf("writing the owner record: %w", err)
	}
	if policy != shalev1.ReclaimRetain && db.Status.OwnerRecordPolicy == shalev1.ReclaimRetain {
		// Never let status say Retain while the record may say Delete.
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			cur.Status.OwnerRecordPolicy = ""
			return nil
		}); err != nil {
			return fmt.Errorf("writing the owner record: %w", err)
		}
	}
	key, rec := ownerRecordOf(db, r.clusterID, policy, r.now())
	if err := putOwnerRecord(ctx, hot, key, rec); err != nil {
		return fmt.Errorf("writing the owner record: %w", err)
	}
	// What the record says, for a deletion that finds the ObjectStore gone
	// (finalizer.go).
	if db.Status.OwnerRecordPolicy == policy {
		return nil
	}
	return client.IgnoreNotFound(patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		cur.Status.OwnerRecordPolicy = policy
		return nil
	}))
}

// setCondition sets a condition with the object's generation.
func setCondition(db *shalev1.RocksDB, c metav1.Condition) {
	c.ObservedGeneration = db.Generation
	meta.SetStatusCondition(&db.Status.Conditions, c)
}

// objectStoreChecked reports whether the ObjectStore's current spec has
// been checked.
func objectStoreChecked(store *shalev1.ObjectStore) bool {
	c := meta.FindStatusCondition(store.Status.Conditions, shalev1.ConditionReachable)
	return c != nil && c.ObservedGeneration == store.Generation
}
