package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// indexObjectStoreRef indexes RocksDBs by the ObjectStore they use.
const indexObjectStoreRef = "spec.objectStoreRef.name"

// storeTimeout bounds the store requests of one reconcile step.
const storeTimeout = 30 * time.Second

// rocksDBReconciler runs each RocksDB's primary and secondaries: storage
// path, owner record, primary Pod, NAME-rw Service, failover, the
// secondaries' Deployment and NAME-ro Service, and the reclaim policy on
// deletion.
type rocksDBReconciler struct {
	client.Client
	// ports watches each ready primary's KV port (portwatch.go; nil: off,
	// Options.WatchPrimaryPorts), and portEvents brings a refusal to
	// Reconcile.
	ports      *portWatches
	portEvents chan event.GenericEvent

	apiReader client.Reader
	recorder  record.EventRecorder
	stores    *stores
	opts      Options
	clusterID string
	now       func() time.Time

	mu sync.Mutex
	// records: the owner record this process last wrote per database.
	records map[types.NamespacedName]recordState
	// failoverStarted: when this process decided a database's current
	// failover (more precise than status.lastFailoverTime's seconds).
	failoverStarted map[types.NamespacedName]failoverStart
	// secondaryPolled: when this process last asked a database's
	// secondaries for their Status.
	secondaryPolled map[types.NamespacedName]time.Time
	// secondaryStatus asks one secondary (grpcSecondaryStatus), and the
	// primary for its tiers.
	secondaryStatus secondaryStatusFunc
	// updateSlots: the databases this process started an update
	// switchover for, and when (takeUpdateSlot, rolling.go).
	updateSlots map[types.NamespacedName]time.Time
	// tiersPolled: when this process last asked a database's primary for
	// its tiers (tiering.go).
	tiersPolled map[types.NamespacedName]time.Time
	// coldAfterSeen: the cold-after the primary last reported (or was
	// set to), so that a spec change is applied at once (tiering.go).
	coldAfterSeen map[types.NamespacedName]time.Duration
	// setTiering calls a primary's SetTiering (grpcSetTiering).
	setTiering setTieringFunc
	// stepDown calls a primary's StepDown (grpcStepDown; switchover.go).
	stepDown stepDownFunc
	// kv calls a parent's primary for a clone's checkpoint (clone.go).
	kv checkpointKV
	// issuer issues the database's certificates (certificates.go); creds
	// is the operator's own, for the Status calls.
	issuer *issuer
	creds  *operatorCreds
	// liveness probes the primaries (RFC 0015; nil: off).
	liveness *livenessProber
}

type recordState struct {
	uid    types.UID
	policy shalev1.ReclaimPolicy
}

type failoverStart struct {
	uid   types.UID
	epoch int64
	at    time.Time
}

// refusal is a step the operator will not take as things are (a missing
// ObjectStore, a name taken by someone else's object): reported as an
// Event and a condition, retried when something changes, not with error
// backoff.
type refusal struct {
	reason string
	msg    string
}

func (e *refusal) Error() string { return e.msg }

// +kubebuilder:rbac:groups=shale.rocks,resources=rocksdbs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=rocksdbs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=rocksdbs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

func (r *rocksDBReconciler) setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &shalev1.RocksDB{}, indexObjectStoreRef, func(o client.Object) []string {
		return []string{o.(*shalev1.RocksDB).Spec.ObjectStoreRef.Name}
	}); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &shalev1.RocksDB{}, indexCompactorPoolRef, compactorPoolOf); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.liveness != nil {
		// A primary found unreachable wakes its database at once.
		b = b.WatchesRawSource(source.Channel(r.liveness.events, &handler.EnqueueRequestForObject{}))
	}
	return b.
		Named("rocksdb").
		For(&shalev1.RocksDB{}).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Secret{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&shalev1.ObjectStore{}, r.objectStoreHandler()).
		Watches(&shalev1.CompactorPool{}, handler.EnqueueRequestsFromMapFunc(r.forCompactorPool)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.forCASecret)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.forCordonedNode), builder.WithPredicates(cordonChanged)).
		Watches(&shalev1.RocksDB{}, handler.EnqueueRequestsFromMapFunc(r.forBootstrapSource)).
		Watches(&shalev1.Checkpoint{}, handler.EnqueueRequestsFromMapFunc(r.forBootstrapSource)).
		// A primary's port found refused (liveness.go).
		WatchesRawSource(source.Channel(r.portEvents, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// forCASecret maps a change of the CA Secret to every RocksDB: their
// certificates are checked against the CA at once.
func (r *rocksDBReconciler) forCASecret(ctx context.Context, o client.Object) []reconcile.Request {
	if client.ObjectKeyFromObject(o) != r.issuer.ca.key {
		// A credential Secret cert-manager wrote for a database (its
		// secretTemplate carries the database's label) is not owned yet:
		// Owns does not see it, and the database adopts it.
		if db := o.GetLabels()[shalev1.LabelRocksDB]; db != "" && o.GetLabels()[shalev1.LabelCredential] != "" && metav1.GetControllerOf(o) == nil {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: db}}}
		}
		return nil
	}
	r.issuer.ca.invalidate()
	var dbs shalev1.RocksDBList
	if err := r.List(ctx, &dbs); err != nil {
		log.FromContext(ctx).Error(err, "listing the RocksDBs after a change of the CA")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(dbs.Items))
	for _, db := range dbs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
	}
	return reqs
}

// forObjectStore maps an ObjectStore to the RocksDBs that use it.
func (r *rocksDBReconciler) forObjectStore(ctx context.Context, o client.Object) []reconcile.Request {
	var dbs shalev1.RocksDBList
	if err := r.List(ctx, &dbs, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexObjectStoreRef: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the RocksDBs of an ObjectStore", "objectstore", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(dbs.Items))
	for _, db := range dbs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
	}
	return reqs
}

// report collects the conditions a reconcile observed; they are written,
// with observedGeneration and the phase, on every return path.
type report struct {
	conds []metav1.Condition
	// failoverCompleted is set by the final status write when it ends a
	// failover.
	failoverCompleted bool
	// secondaries: the ready secondaries, when the reconcile looked.
	secondaries *int32
	// secondaryStatus: each secondary's Status, when the reconcile asked.
	secondaryStatus *[]shalev1.SecondaryStatus
	// compaction: the database's line of its pool's status; compactionSet
	// when the reconcile looked (nil then clears it).
	compaction    *shalev1.CompactionStats
	compactionSet bool
	// tiers: the primary's tables per tier, when the reconcile asked.
	tiers []shalev1.TierStatus
}

// get returns the condition of a type the reconcile observed, or nil.
func (rep *report) get(t string) *metav1.Condition {
	for i := range rep.conds {
		if rep.conds[i].Type == t {
			return &rep.conds[i]
		}
	}
	return nil
}

// setSecondaries records status.secondaries and SecondariesReady.
func (rep *report) setSecondaries(ready int32, s metav1.ConditionStatus, reason, msg string) {
	rep.secondaries = &ready
	rep.set(shalev1.ConditionSecondariesReady, s, reason, msg)
}

func (rep *report) set(t string, s metav1.ConditionStatus, reason, msg string) {
	for i := range rep.conds {
		if rep.conds[i].Type == t {
			rep.conds[i] = metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
			return
		}
	}
	rep.conds = append(rep.conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg})
}

func (r *rocksDBReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &shalev1.RocksDB{}
	if err := r.Get(ctx, req.NamespacedName, db); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if db.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, db)
	}
	if !controllerutil.ContainsFinalizer(db, shalev1.FinalizerStorage) {
		patch := client.MergeFromWithOptions(db.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(db, shalev1.FinalizerStorage)
		if err := r.Patch(ctx, db, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}

	generation := db.Generation
	rep := &report{}
	res, err := r.reconcileDB(ctx, db, rep)
	var ref *refusal
	if errors.As(err, &ref) {
		r.recorder.Event(db, corev1.EventTypeWarning, ref.reason, ref.msg)
		err = nil
	}
	if serr := r.writeStatus(ctx, db, generation, rep); serr != nil {
		if apierrors.IsNotFound(serr) {
			return ctrl.Result{}, nil
		}
		if err == nil {
			err = serr
		}
	}
	return res, err
}

// reconcileDB does everything but the final status write.
func (r *rocksDBReconciler) reconcileDB(ctx context.Context, db *shalev1.RocksDB, rep *report) (ctrl.Result, error) {
	// The NetworkPolicy first, so that the first primary already runs
	// behind it. A failure does not hold back the primary: it is
	// reported and retried.
	npErr := r.reconcileNetworkPolicy(ctx, db)
	// The budgets too: they exist before the Pods they protect.
	pdbErr := r.reconcileDisruptionBudgets(ctx, db)
	res, err := r.reconcileWorkloads(ctx, db, rep)
	return res, firstErr(err, npErr, pdbErr)
}

// reconcileWorkloads is everything of reconcileDB but the NetworkPolicy.
func (r *rocksDBReconciler) reconcileWorkloads(ctx context.Context, db *shalev1.RocksDB, rep *report) (ctrl.Result, error) {
	store, err := r.objectStore(ctx, db, rep)
	if err != nil {
		return ctrl.Result{}, err
	}
	if store != nil {
		// Before anything of the database exists in the store: from here
		// on the ObjectStore's location cannot be edited (usage.go).
		if err := r.registerUse(ctx, db, store); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording the use of ObjectStore %s: %w", store.Name, err)
		}
	}
	if store != nil && db.Status.StoragePath == "" && adopts(db) {
		// A retained directory (bootstrap.go), claimed once the store can
		// be read; until then startFirstPrimary waits.
		if store.IsReachable() {
			if err := r.adopt(ctx, db, store, rep); err != nil {
				return ctrl.Result{RequeueAfter: bootstrapRecheck}, err
			}
		}
	} else if store != nil && db.Status.StoragePath == "" && clones(db) {
		// A clone (clone.go): its directory is set once the parent and
		// the checkpoint were checked (and, for cloneFrom, made); until
		// then startFirstPrimary waits.
		if store.IsReachable() {
			if res, err := r.clone(ctx, db, store, rep); err != nil || res.RequeueAfter > 0 {
				return res, err
			}
		}
	} else if store != nil && db.Status.StoragePath == "" && recovers(db) {
		// A restore (recovery.go): its directory is set once the backup
		// was found in the backup store; until then startFirstPrimary
		// waits.
		if store.IsReachable() {
			if err := r.recover(ctx, db, store, rep); err != nil {
				return ctrl.Result{RequeueAfter: bootstrapRecheck}, err
			}
		}
	} else if store != nil && db.Status.StoragePath == "" {
		path := db.StoragePathUnder(store.Spec.Hot.Prefix)
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.StoragePath == "" {
				cur.Status.StoragePath = path
			}
			return nil
		}); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.reconcileTiering(ctx, db, store, rep); err != nil {
		return ctrl.Result{}, err
	}
	// Before the primary: its Pod is built from status.archive (archive.go).
	archiveAfter, err := r.reconcileArchive(ctx, db, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Before the primary: its Pod mounts the Secrets. A failure is
	// reported and the rest goes on (the Secrets issued before serve; a
	// new Pod waits for a missing one).
	renewAt, certErr := r.reconcileCertificates(ctx, db, store, rep)
	res, err := r.reconcilePrimary(ctx, db, store, rep)
	if err == nil {
		err = certErr
	}
	res.RequeueAfter = requeueBy(res.RequeueAfter, renewAt, r.now())
	if archiveAfter > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > archiveAfter) {
		// Come back to read the archive's window.
		res.RequeueAfter = archiveAfter
	}
	if again := certManagerRecheck + time.Second; failReason(certErr) == shalev1.ReasonCertificateManagerMissing && (res.RequeueAfter == 0 || res.RequeueAfter > again) {
		// Nothing the operator watches changes when cert-manager is
		// installed (its CRD): look again once the remembered "missing"
		// expired (the ObjectStore's checks used to wake every database;
		// they no longer do).
		res.RequeueAfter = again
	}
	if c := db.Status.Clone; c != nil && clonesFromNew(db) && !c.CheckpointReleased && db.Status.Created != nil && err == nil {
		// The clone was ready: its pin holds the parent's tables, and
		// the checkpoint made for it goes.
		rres, rerr := r.releaseCloneCheckpoint(ctx, db)
		err = rerr
		if rres.RequeueAfter > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > rres.RequeueAfter) {
			res.RequeueAfter = rres.RequeueAfter
		}
	}
	if c := db.Status.Clone; c != nil && c.ObjectStore != "" && c.CopiedObjects == 0 && db.Status.Created != nil && err == nil {
		// A copied clone was ready: say what it copied (RFC 0010 step 20).
		err = r.reportCloneCopied(ctx, db, store)
	}
	if db.Spec.Tiering != nil || db.Status.ColdStoragePath != "" {
		rep.tiers = r.pollTiers(ctx, db)
		if res.RequeueAfter == 0 || res.RequeueAfter > r.opts.SecondaryStatusInterval {
			// Come back to ask the primary again.
			res.RequeueAfter = r.opts.SecondaryStatusInterval
		}
	}
	if serr := r.ensureService(ctx, db); serr != nil && err == nil {
		err = serr
	}
	if serr := r.reconcileSecondaries(ctx, db, store, rep); serr != nil && err == nil {
		err = serr
	}
	if serr := r.reconcileCompaction(ctx, db, store, rep); serr != nil && err == nil {
		err = serr
	}
	if db.Spec.Secondaries.Replicas > 0 && (res.RequeueAfter == 0 || res.RequeueAfter > r.opts.SecondaryStatusInterval) {
		// Come back to ask the secondaries again.
		res.RequeueAfter = r.opts.SecondaryStatusInterval
	}
	if store != nil && db.Status.Epoch > 0 {
		// Keep the owner record's reclaim policy current (one write per
		// change, and one per database when the operator starts).
		if rerr := r.ensureOwnerRecord(ctx, db, store); rerr != nil {
			r.recorder.Event(db, corev1.EventTypeWarning, eventOwnerRecordFailed, rerr.Error())
			if err == nil {
				err = rerr
			}
		}
	}
	return res, err
}

// objectStore fetches the RocksDB's ObjectStore and reports whether it is
// reachable; nil (and a condition) when it does not exist.
func (r *rocksDBReconciler) objectStore(ctx context.Context, db *shalev1.RocksDB, rep *report) (*shalev1.ObjectStore, error) {
	store := &shalev1.ObjectStore{}
	err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.ObjectStoreRef.Name}, store)
	if apierrors.IsNotFound(err) {
		rep.set(shalev1.ConditionObjectStoreReachable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing,
			fmt.Sprintf("ObjectStore %s does not exist in namespace %s", db.Spec.ObjectStoreRef.Name, db.Namespace))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c := meta.FindStatusCondition(store.Status.Conditions, shalev1.ConditionReachable)
	switch {
	case c == nil || c.ObservedGeneration != store.Generation:
		rep.set(shalev1.ConditionObjectStoreReachable, metav1.ConditionUnknown, shalev1.ReasonNotChecked,
			fmt.Sprintf("ObjectStore %s has not been checked yet", store.Name))
	default:
		rep.set(shalev1.ConditionObjectStoreReachable, c.Status, c.Reason, c.Message)
	}
	return store, nil
}

// writeStatus writes what the reconcile observed, the phase derived from
// it, and the generation it reconciled.
func (r *rocksDBReconciler) writeStatus(ctx context.Context, db *shalev1.RocksDB, generation int64, rep *report) error {
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		rep.failoverCompleted = false
		wasFailingOver := meta.IsStatusConditionTrue(cur.Status.Conditions, shalev1.ConditionFailover)
		for _, c := range rep.conds {
			c.ObservedGeneration = generation
			meta.SetStatusCondition(&cur.Status.Conditions, c)
		}
		st := &cur.Status
		available := meta.FindStatusCondition(st.Conditions, shalev1.ConditionPrimaryAvailable)
		if available != nil && available.Status == metav1.ConditionTrue && wasFailingOver {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{
				Type: shalev1.ConditionFailover, Status: metav1.ConditionFalse, Reason: shalev1.ReasonFailoverCompleted,
				Message:            fmt.Sprintf("the primary of epoch %d is ready", st.Epoch),
				ObservedGeneration: generation,
			})
			rep.failoverCompleted = true
		}
		if meta.FindStatusCondition(st.Conditions, shalev1.ConditionFailover) == nil {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{
				Type: shalev1.ConditionFailover, Status: metav1.ConditionFalse, Reason: shalev1.ReasonNoFailover,
				Message: "no failover has happened", ObservedGeneration: generation,
			})
		}
		ready := metav1.Condition{Type: shalev1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}
		if available != nil && available.Status == metav1.ConditionTrue {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, shalev1.ReasonPrimaryReady, fmt.Sprintf("primary %s (epoch %d) serves", st.CurrentPrimary, st.Epoch)
		} else if available != nil {
			ready.Reason, ready.Message = available.Reason, available.Message
		} else {
			ready.Reason, ready.Message = shalev1.ReasonPrimaryStarting, "no primary yet"
		}
		meta.SetStatusCondition(&st.Conditions, ready)
		if rep.secondaries != nil {
			st.Secondaries = *rep.secondaries
		}
		if rep.secondaryStatus != nil {
			st.SecondaryStatus = *rep.secondaryStatus
		}
		if rep.compactionSet {
			st.Compaction = rep.compaction
		}
		if rep.tiers != nil {
			st.Tiers = rep.tiers
		}
		st.Phase = phaseOf(st)
		if st.Hold != nil {
			st.Phase = holdPhase(cur)
		}
		st.ObservedGeneration = generation
		return nil
	})
	if err != nil {
		return err
	}
	if rep.failoverCompleted {
		r.completeFailover(db)
	}
	return nil
}

// phaseOf summarises a status.
func phaseOf(st *shalev1.RocksDBStatus) shalev1.RocksDBPhase {
	available := meta.FindStatusCondition(st.Conditions, shalev1.ConditionPrimaryAvailable)
	switch {
	case st.Epoch == 0:
		return shalev1.PhasePending
	case available != nil && available.Status == metav1.ConditionTrue && st.Switchover != nil && st.Switchover.Reason == shalev1.ReasonPrimaryOutdated:
		return shalev1.PhaseUpgrading
	case available != nil && available.Status == metav1.ConditionTrue && st.Switchover != nil:
		return shalev1.PhaseSwitchingOver
	case available != nil && available.Status == metav1.ConditionTrue:
		return shalev1.PhaseReady
	case isFailureReason(available):
		// No primary can run as things are (failures in a row, the
		// store unreachable, the database not found, an image that
		// cannot be pulled): whatever failover started, none is running.
		return shalev1.PhaseDegraded
	case meta.IsStatusConditionTrue(st.Conditions, shalev1.ConditionFailover):
		return shalev1.PhaseFailingOver
	case available != nil && available.Reason == shalev1.ReasonPrimaryNotReady:
		return shalev1.PhaseDegraded
	}
	return shalev1.PhaseStarting
}

// completeFailover records the failover's duration and an Event.
func (r *rocksDBReconciler) completeFailover(db *shalev1.RocksDB) {
	key := client.ObjectKeyFromObject(db)
	r.mu.Lock()
	start, ok := r.failoverStarted[key]
	delete(r.failoverStarted, key)
	r.mu.Unlock()
	var d time.Duration
	switch {
	case ok && start.uid == db.UID && start.epoch == db.Status.Epoch:
		d = r.now().Sub(start.at)
	case db.Status.LastFailoverTime != nil:
		// Decided by an earlier process (the operator restarted).
		d = r.now().Sub(db.Status.LastFailoverTime.Time)
	}
	if d > 0 {
		failoverDuration.Observe(d.Seconds())
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventFailoverCompleted, "primary %s (epoch %d) is ready %s after the failover decision",
		db.Status.CurrentPrimary, db.Status.Epoch, d.Round(time.Millisecond))
}

func (r *rocksDBReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, key)
	delete(r.failoverStarted, key)
	delete(r.secondaryPolled, key)
	delete(r.tiersPolled, key)
	delete(r.coldAfterSeen, key)
	r.ports.forget(key)
}
