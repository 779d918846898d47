package operator

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The Checkpoint resource (docs/rfcs/0010-checkpoints-and-clones.md, step
// 23): the operator asks the database's current primary for a checkpoint
// named as the resource, with the resource's UID as the request id, so a
// retry after an answer that may hide a create ("outcome unknown", a lost
// reply) gets that same checkpoint back instead of a second one. What each
// answer means is decided by pure functions (planCheckpoint,
// checkpointOutcome, planCheckpointDelete; table-tested). The finalizer
// deletes the checkpoint in its database, but only one this resource
// created (its request id, read back with ListCheckpoints): a name taken by
// someone else's checkpoint is never deleted.

// Retry intervals of a Checkpoint waiting on its database.
const (
	// checkpointRetry: a request to try again (a new primary coming, an
	// outcome unknown).
	checkpointRetry = 5 * time.Second
	// checkpointWait: the database missing or without a ready primary
	// (changes to the RocksDB wake the Checkpoint up sooner).
	checkpointWait = 30 * time.Second
	// checkpointRPCTimeout bounds one call: a create flushes a memtable.
	checkpointRPCTimeout = 2 * time.Minute
)

// Event reasons of a Checkpoint.
const (
	eventCheckpointCreated  = "CheckpointCreated"
	eventCheckpointPending  = "CheckpointPending"
	eventCheckpointFailed   = "CheckpointFailed"
	eventCheckpointExpired  = "CheckpointExpired"
	eventCheckpointDeleted  = "CheckpointDeleted"
	eventCheckpointDeleting = "CheckpointDeleteWaiting"
)

// checkpointKV calls a primary's checkpoint RPCs.
type checkpointKV interface {
	Checkpoint(ctx context.Context, addr string, dial grpc.DialOption, req *kvv1.CheckpointRequest) (*kvv1.CheckpointInfo, error)
	ListCheckpoints(ctx context.Context, addr string, dial grpc.DialOption) ([]*kvv1.CheckpointInfo, error)
	DeleteCheckpoint(ctx context.Context, addr string, dial grpc.DialOption, name string) error
}

// grpcCheckpointKV dials the primary for each call, as grpcSetTiering.
type grpcCheckpointKV struct{}

func (grpcCheckpointKV) call(addr string, dial grpc.DialOption, f func(kvv1.KVClient) error) error {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(kvv1.NewKVClient(conn))
}

func (g grpcCheckpointKV) Checkpoint(ctx context.Context, addr string, dial grpc.DialOption, req *kvv1.CheckpointRequest) (*kvv1.CheckpointInfo, error) {
	var info *kvv1.CheckpointInfo
	err := g.call(addr, dial, func(c kvv1.KVClient) error {
		resp, err := c.Checkpoint(ctx, req)
		info = resp.GetCheckpoint()
		return err
	})
	return info, err
}

func (g grpcCheckpointKV) ListCheckpoints(ctx context.Context, addr string, dial grpc.DialOption) ([]*kvv1.CheckpointInfo, error) {
	var list []*kvv1.CheckpointInfo
	err := g.call(addr, dial, func(c kvv1.KVClient) error {
		resp, err := c.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
		list = resp.GetCheckpoints()
		return err
	})
	return list, err
}

func (g grpcCheckpointKV) DeleteCheckpoint(ctx context.Context, addr string, dial grpc.DialOption, name string) error {
	return g.call(addr, dial, func(c kvv1.KVClient) error {
		_, err := c.DeleteCheckpoint(ctx, &kvv1.DeleteCheckpointRequest{Name: name})
		return err
	})
}

// checkpointStep is what a reconcile of a Checkpoint does next.
type checkpointStep struct {
	// Call: ask the primary for the checkpoint now.
	Call bool
	// Phase and Message for status (Phase "" keeps the current one).
	Phase   shalev1.CheckpointPhase
	Message string
	// Retry: look again after this long (0: only on a change).
	Retry time.Duration
	// Event: its reason ("" for none) and whether it is a warning.
	Event   string
	Warning bool
}

// primaryView is what a Checkpoint's controller knows of its database.
type primaryView struct {
	// Exists: the RocksDB exists; Deleting: it is being deleted.
	Exists, Deleting bool
	// Ready: its current primary is available; Pod and Epoch name it;
	// Why says why not.
	Ready bool
	Pod   string
	Epoch int64
	Why   string
}

// planCheckpoint decides, before any request, what a Checkpoint that is
// not being deleted needs.
func planCheckpoint(ck *shalev1.Checkpoint, db primaryView, now time.Time) checkpointStep {
	st := ck.Status
	expired := st.ExpiresAt != nil && !now.Before(st.ExpiresAt.Time)
	switch st.Phase {
	case shalev1.CheckpointFailed, shalev1.CheckpointExpired:
		return checkpointStep{}
	case shalev1.CheckpointReady:
		if expired {
			return checkpointStep{Phase: shalev1.CheckpointExpired, Message: fmt.Sprintf("expired at %s; the primary deletes it", st.ExpiresAt.UTC().Format(time.RFC3339)), Event: eventCheckpointExpired}
		}
		if st.ExpiresAt != nil {
			return checkpointStep{Retry: st.ExpiresAt.Sub(now)}
		}
		return checkpointStep{}
	}
	// Pending (or new).
	switch {
	case expired:
		return checkpointStep{Phase: shalev1.CheckpointExpired, Message: fmt.Sprintf("expired at %s before the primary reported it created (if it was, the primary deletes it)", st.ExpiresAt.UTC().Format(time.RFC3339)), Event: eventCheckpointExpired, Warning: true}
	case !db.Exists:
		return checkpointStep{Phase: shalev1.CheckpointPending, Message: fmt.Sprintf("RocksDB %s does not exist in namespace %s: create it, or fix spec.database (then create a new Checkpoint)", ck.Spec.Database, ck.Namespace), Retry: checkpointWait, Event: eventCheckpointPending, Warning: true}
	case db.Deleting:
		return checkpointStep{Phase: shalev1.CheckpointFailed, Message: fmt.Sprintf("RocksDB %s is being deleted: no checkpoint of it is taken", ck.Spec.Database), Event: eventCheckpointFailed, Warning: true}
	case !db.Ready:
		return checkpointStep{Phase: shalev1.CheckpointPending, Message: fmt.Sprintf("waiting for a ready primary of RocksDB %s: %s", ck.Spec.Database, db.Why), Retry: checkpointWait}
	}
	return checkpointStep{Call: true}
}

// checkpointOutcome decides what the primary's answer to Checkpoint means
// (RFC 0010: FAILED_PRECONDITION is never created, UNAVAILABLE may be
// "outcome unknown": both are retried with the same request id, the first
// on whichever primary is current by then).
func checkpointOutcome(ck *shalev1.Checkpoint, db primaryView, info *kvv1.CheckpointInfo, err error) checkpointStep {
	who := fmt.Sprintf("primary %s (epoch %d)", db.Pod, db.Epoch)
	if err == nil {
		if info == nil {
			return checkpointStep{Phase: shalev1.CheckpointPending, Message: who + " answered without a checkpoint; asking again", Retry: checkpointRetry}
		}
		return checkpointStep{Phase: shalev1.CheckpointReady, Message: fmt.Sprintf("created by %s at sequence %d", who, info.GetSequence()), Event: eventCheckpointCreated}
	}
	s := status.Convert(err)
	msg := s.Message()
	switch s.Code() {
	case codes.AlreadyExists:
		return checkpointStep{Phase: shalev1.CheckpointFailed, Warning: true, Event: eventCheckpointFailed,
			Message: fmt.Sprintf("RocksDB %s already has a checkpoint named %s, not made for this Checkpoint: delete that one (shale admin checkpoint delete) or give this Checkpoint another name", ck.Spec.Database, ck.Name)}
	case codes.InvalidArgument:
		return checkpointStep{Phase: shalev1.CheckpointFailed, Warning: true, Event: eventCheckpointFailed, Message: fmt.Sprintf("%s refused it: %s", who, msg)}
	case codes.FailedPrecondition:
		return checkpointStep{Phase: shalev1.CheckpointPending, Retry: checkpointRetry, Event: eventCheckpointPending, Warning: true,
			Message: fmt.Sprintf("%s no longer owns the database (%s): nothing was created; asking the next primary", who, msg)}
	case codes.Unimplemented:
		return checkpointStep{Phase: shalev1.CheckpointPending, Retry: checkpointWait, Event: eventCheckpointPending, Warning: true,
			Message: fmt.Sprintf("%s does not implement Checkpoint (an image older than the operator): set spec.primary.image to a newer shale; asking again", who)}
	case codes.PermissionDenied, codes.Unauthenticated:
		return checkpointStep{Phase: shalev1.CheckpointPending, Retry: checkpointWait, Event: eventCheckpointPending, Warning: true,
			Message: fmt.Sprintf("%s does not let the operator create checkpoints (%s): check its access list; asking again", who, msg)}
	}
	// UNAVAILABLE, DEADLINE_EXCEEDED, a lost connection...: it may have
	// been created; the same request id finds out.
	return checkpointStep{Phase: shalev1.CheckpointPending, Retry: checkpointRetry, Event: eventCheckpointPending, Warning: true,
		Message: fmt.Sprintf("%s: %s (%s): it may or may not have been created; asking again with the same request id", who, msg, s.Code())}
}

// deleteStep is what the finalizer of a Checkpoint does next.
type deleteStep struct {
	// Release: remove the finalizer (nothing, or nothing more, to delete).
	Release bool
	// Ask: list the primary's checkpoints and delete this one's, if any.
	Ask bool
	// Message says why (an Event).
	Message string
	Retry   time.Duration
}

// planCheckpointDelete decides what deleting a Checkpoint takes.
func planCheckpointDelete(ck *shalev1.Checkpoint, db primaryView) deleteStep {
	st := ck.Status
	switch {
	case st.RequestedAt == nil:
		return deleteStep{Release: true, Message: "never requested: nothing to delete"}
	case st.Phase == shalev1.CheckpointFailed:
		// Refused for good: none was created (the name may be someone
		// else's checkpoint, which stays).
		return deleteStep{Release: true, Message: "the primary refused it: nothing to delete"}
	case !db.Exists:
		return deleteStep{Release: true, Message: fmt.Sprintf("RocksDB %s is gone: its checkpoints went with its directory (reclaimPolicy Delete) or stay in it (Retain)", ck.Spec.Database)}
	case db.Deleting:
		return deleteStep{Release: true, Message: fmt.Sprintf("RocksDB %s is being deleted: its checkpoints go with its directory (reclaimPolicy Delete) or stay in it (Retain)", ck.Spec.Database)}
	case !db.Ready:
		return deleteStep{Retry: checkpointWait, Message: fmt.Sprintf("waiting for a ready primary of RocksDB %s to delete checkpoint %s (%s); remove the finalizer %s to leave it in the database", ck.Spec.Database, ck.Name, db.Why, shalev1.FinalizerCheckpoint)}
	}
	return deleteStep{Ask: true}
}

// checkpointReconciler runs Checkpoints.
type checkpointReconciler struct {
	client.Client
	apiReader client.Reader
	recorder  record.EventRecorder
	now       func() time.Time
	kv        checkpointKV
	// dbs dials a database's primary with the operator's identity.
	dbs *rocksDBReconciler
}

// indexCheckpointDatabase indexes Checkpoints by their database.
const indexCheckpointDatabase = "spec.database"

// +kubebuilder:rbac:groups=shale.rocks,resources=checkpoints,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=checkpoints/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=checkpoints/finalizers,verbs=update

func (r *checkpointReconciler) setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &shalev1.Checkpoint{}, indexCheckpointDatabase, func(o client.Object) []string {
		return []string{o.(*shalev1.Checkpoint).Spec.Database}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("checkpoint").
		For(&shalev1.Checkpoint{}).
		Watches(&shalev1.RocksDB{}, handler.EnqueueRequestsFromMapFunc(r.forRocksDB)).
		Complete(r)
}

// forRocksDB maps a RocksDB to its Checkpoints (a primary becoming ready
// wakes those waiting for it).
func (r *checkpointReconciler) forRocksDB(ctx context.Context, o client.Object) []reconcile.Request {
	var cks shalev1.CheckpointList
	if err := r.List(ctx, &cks, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexCheckpointDatabase: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(cks.Items))
	for _, ck := range cks.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ck)})
	}
	return reqs
}

// view reads the Checkpoint's database.
func (r *checkpointReconciler) view(ctx context.Context, ck *shalev1.Checkpoint) (primaryView, *shalev1.RocksDB, error) {
	db := &shalev1.RocksDB{}
	err := r.Get(ctx, types.NamespacedName{Namespace: ck.Namespace, Name: ck.Spec.Database}, db)
	if apierrors.IsNotFound(err) {
		return primaryView{}, nil, nil
	}
	if err != nil {
		return primaryView{}, nil, err
	}
	v := primaryView{Exists: true, Deleting: db.DeletionTimestamp != nil, Pod: db.Status.CurrentPrimary, Epoch: db.Status.Epoch}
	if c := db.Condition(shalev1.ConditionPrimaryAvailable); c != nil && c.Status == metav1.ConditionTrue && db.Status.CurrentPrimary != "" {
		v.Ready = true
	} else if c != nil {
		v.Why = c.Message
	} else {
		v.Why = "no primary yet"
	}
	return v, db, nil
}

// primaryAddr is the address of the database's current primary and the
// dial option with the operator's identity.
func (r *checkpointReconciler) primaryAddr(ctx context.Context, db *shalev1.RocksDB) (string, grpc.DialOption, error) {
	return r.dbs.primaryKVAddr(ctx, db)
}

// primaryKVAddr is the address of the database's current primary and the
// dial option with the operator's identity (its checkpoint RPCs: the
// Checkpoint resource, and a clone's checkpoint in its parent).
func (r *rocksDBReconciler) primaryKVAddr(ctx context.Context, db *shalev1.RocksDB) (string, grpc.DialOption, error) {
	pod, err := r.primaryPod(ctx, db, db.Status.Epoch, false)
	if err != nil {
		return "", nil, err
	}
	if pod == nil {
		return "", nil, fmt.Errorf("primary %s not found", db.PrimaryPodName(db.Status.Epoch))
	}
	addr, why := secondaryAddr(pod)
	if why != "" {
		return "", nil, fmt.Errorf("primary %s: %s", pod.Name, why)
	}
	dial, err := r.kvDial(ctx, db, db.ServiceName())
	if err != nil {
		return "", nil, err
	}
	return addr, dial, nil
}

func (r *checkpointReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ck := &shalev1.Checkpoint{}
	if err := r.Get(ctx, req.NamespacedName, ck); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	view, db, err := r.view(ctx, ck)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ck.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, ck, view, db)
	}
	if !controllerutil.ContainsFinalizer(ck, shalev1.FinalizerCheckpoint) {
		patch := client.MergeFromWithOptions(ck.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(ck, shalev1.FinalizerCheckpoint)
		if err := r.Patch(ctx, ck, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	now := r.now()
	step := planCheckpoint(ck, view, now)
	var info *kvv1.CheckpointInfo
	if step.Call {
		// Before the request: from here on a checkpoint may exist (the
		// finalizer then asks the primary), and the expiry is fixed, so
		// every retry sends the same one.
		if err := patchStatus(ctx, r.Client, r.apiReader, ck, func(cur *shalev1.Checkpoint) error {
			if cur.Status.RequestedAt == nil {
				cur.Status.RequestedAt = &metav1.Time{Time: now}
				if cur.Spec.Expires != nil {
					cur.Status.ExpiresAt = &metav1.Time{Time: now.Add(cur.Spec.Expires.Duration)}
				}
			}
			if cur.Status.Phase == "" {
				cur.Status.Phase = shalev1.CheckpointPending
				cur.Status.Message = "asking primary " + view.Pod
			}
			return nil
		}); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		addr, dial, aerr := r.primaryAddr(ctx, db)
		if aerr != nil {
			step = checkpointStep{Phase: shalev1.CheckpointPending, Message: fmt.Sprintf("cannot reach RocksDB %s's primary: %v", db.Name, aerr), Retry: checkpointRetry}
		} else {
			creq := &kvv1.CheckpointRequest{Name: ck.Name, RequestId: string(ck.UID)}
			if ck.Status.ExpiresAt != nil {
				creq.Expires = timestamppb.New(ck.Status.ExpiresAt.Time)
			}
			c, cancel := context.WithTimeout(ctx, checkpointRPCTimeout)
			info, err = r.kv.Checkpoint(c, addr, dial, creq)
			cancel()
			step = checkpointOutcome(ck, view, info, err)
		}
	}
	if step.Event != "" && (step.Phase != ck.Status.Phase || step.Message != ck.Status.Message) {
		typ := corev1.EventTypeNormal
		if step.Warning {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Event(ck, typ, step.Event, step.Message)
	}
	if err := patchStatus(ctx, r.Client, r.apiReader, ck, func(cur *shalev1.Checkpoint) error {
		cur.Status.ObservedGeneration = cur.Generation
		if step.Phase != "" {
			cur.Status.Phase, cur.Status.Message = step.Phase, step.Message
		}
		if cur.Status.Phase == "" {
			cur.Status.Phase = shalev1.CheckpointPending
		}
		if info != nil && step.Phase == shalev1.CheckpointReady {
			cur.Status.ID = info.GetId()
			cur.Status.Epoch = int64(min(info.GetEpoch(), 1<<62))
			cur.Status.Sequence = int64(min(info.GetSequence(), 1<<62))
			cur.Status.Tables = int64(min(info.GetTables(), 1<<62))
			cur.Status.Bytes = int64(min(info.GetBytes(), 1<<62))
			if info.GetCreated() != nil {
				cur.Status.Time = &metav1.Time{Time: info.GetCreated().AsTime()}
			}
			if info.GetExpires() != nil {
				cur.Status.ExpiresAt = &metav1.Time{Time: info.GetExpires().AsTime()}
			}
		}
		return nil
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if step.Phase == shalev1.CheckpointReady && ck.Status.ExpiresAt != nil {
		step.Retry = max(ck.Status.ExpiresAt.Sub(r.now()), time.Second)
	}
	return ctrl.Result{RequeueAfter: step.Retry}, nil
}

// reconcileDelete deletes the checkpoint in its database, if this resource
// created it, then releases the Checkpoint.
func (r *checkpointReconciler) reconcileDelete(ctx context.Context, ck *shalev1.Checkpoint, view primaryView, db *shalev1.RocksDB) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ck, shalev1.FinalizerCheckpoint) {
		return ctrl.Result{}, nil
	}
	step := planCheckpointDelete(ck, view)
	if step.Ask {
		deleted, err := r.deleteInDatabase(ctx, ck, db)
		if err != nil {
			msg := fmt.Sprintf("deleting checkpoint %s in RocksDB %s: %v; trying again (remove the finalizer %s to leave it in the database)", ck.Name, ck.Spec.Database, err, shalev1.FinalizerCheckpoint)
			r.recorder.Event(ck, corev1.EventTypeWarning, eventCheckpointDeleting, msg)
			return ctrl.Result{RequeueAfter: checkpointRetry}, nil
		}
		step = deleteStep{Release: true, Message: fmt.Sprintf("no checkpoint %s of this Checkpoint's in RocksDB %s", ck.Name, ck.Spec.Database)}
		if deleted {
			step.Message = fmt.Sprintf("deleted checkpoint %s in RocksDB %s; the next trash pass removes what only it held", ck.Name, ck.Spec.Database)
		}
	}
	if !step.Release {
		r.recorder.Event(ck, corev1.EventTypeWarning, eventCheckpointDeleting, step.Message)
		return ctrl.Result{RequeueAfter: step.Retry}, nil
	}
	r.recorder.Event(ck, corev1.EventTypeNormal, eventCheckpointDeleted, step.Message)
	patch := client.MergeFromWithOptions(ck.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ck, shalev1.FinalizerCheckpoint)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, ck, patch))
}

// deleteInDatabase deletes the checkpoint named as ck if its request id is
// ck's UID (never someone else's of the same name); NotFound is done.
func (r *checkpointReconciler) deleteInDatabase(ctx context.Context, ck *shalev1.Checkpoint, db *shalev1.RocksDB) (bool, error) {
	addr, dial, err := r.primaryAddr(ctx, db)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointRPCTimeout)
	defer cancel()
	list, err := r.kv.ListCheckpoints(ctx, addr, dial)
	if err != nil {
		return false, err
	}
	ours := false
	for _, c := range list {
		if c.GetName() == ck.Name && c.GetRequestId() == string(ck.UID) {
			ours = true
		}
	}
	if !ours {
		return false, nil
	}
	err = r.kv.DeleteCheckpoint(ctx, addr, dial, ck.Name)
	if status.Code(err) == codes.NotFound {
		return false, nil
	}
	return err == nil, err
}
