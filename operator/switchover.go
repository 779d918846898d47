package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Switchover (docs/rfcs/0012-switchover.md, steps 5-9): a standby Pod with
// the next epoch warms its cache while the primary serves; the operator
// then asks the primary to step down (KV StepDown), and the standby takes
// over as soon as the primary's release is in the store, without waiting
// out a lease. Like a failover, nothing here makes it safe: the standby's
// claim and seals fence the old primary in the store, and a release is
// written only by a primary that stopped serving. A wrong decision here
// costs availability, never data.

// Event reasons of a switchover.
const (
	eventSwitchoverStarted   = "SwitchoverStarted"
	eventSwitchoverCompleted = shalev1.ReasonSwitchoverCompleted
	eventSwitchoverAbandoned = shalev1.ReasonSwitchoverAbandoned
)

// switchoverInput is what the operator knows about a switchover, wanted or
// running.
type switchoverInput struct {
	// Request is the shale.rocks/switchover annotation's value,
	// LastRequest the last one acted on (status).
	Request, LastRequest string
	// NodeDraining: the primary's node is cordoned (a drain).
	NodeDraining bool
	// Update: the primary is outdated and decideUpdate says to replace
	// it now (rolling.go).
	Update bool
	// Created: the database was ready once (a standby opens an existing
	// database only).
	Created bool
	// Epoch is status.epoch; Primary its Pod.
	Epoch   int64
	Primary primaryState
	// Running is status.switchover; Standby the Pod of its ToEpoch.
	Running *shalev1.SwitchoverStatus
	Standby primaryState
	// Released: _shale/released/<Running.FromEpoch> is in the store.
	Released bool
	Now      time.Time
	// StandbyGrace bounds the warming (the startup grace); a hand-over
	// gets handOverTimeout more.
	StandbyGrace time.Duration
}

type switchoverAction int

const (
	// switchoverNone: nothing to do (none wanted, or it waits for
	// something the failover logic handles).
	switchoverNone switchoverAction = iota
	// switchoverStart: reserve the standby's epoch, record Warming, create
	// the standby Pod.
	switchoverStart
	// switchoverWait: running; look again later (Pod events wake it).
	switchoverWait
	// switchoverCreateStandby: running, and the standby Pod is missing.
	switchoverCreateStandby
	// switchoverStepDown: the standby is warm: record HandingOver, then
	// call StepDown on the primary (again, if it was: it is idempotent).
	switchoverStepDown
	// switchoverComplete: the primary released the database: the standby
	// is the primary of ToEpoch from now on.
	switchoverComplete
	// switchoverAbandon: give up; the primary stays (or the failover
	// logic replaces it), the standby goes.
	switchoverAbandon
)

func (a switchoverAction) String() string {
	return [...]string{"none", "start", "wait", "create-standby", "step-down", "complete", "abandon"}[a]
}

type switchoverDecision struct {
	Action       switchoverAction
	Reason       string // start: SwitchoverRequested or PrimaryNodeDraining
	Message      string
	RecheckAfter time.Duration
}

// handOverTimeout is how long a hand-over may take after the warming's
// grace before it is abandoned (a primary that neither releases nor
// fails: frozen).
const handOverTimeout = 2 * time.Minute

// stepDownRecheck is how soon a hand-over is looked at again.
const stepDownRecheck = time.Second

func gone(p primaryState) bool {
	return !p.Exists || p.Terminating || p.Phase == corev1.PodFailed
}

// decideSwitchover decides what to do about a switchover (a pure
// function, table-tested in TestDecideSwitchover).
//
//   - None running: start one when the annotation has a value not acted
//     on, or the primary's node is cordoned, or the primary is outdated
//     and decideUpdate says to replace it; only once the database was
//     ready (a standby opens an existing one) and while the primary is
//     ready (else the failover logic acts, and a drain evicts a primary
//     that is not ready: its budget lets unhealthy Pods go).
//   - The release is in the store, or the primary exited 0 (it does so
//     only after its release): complete, whatever else happened; a
//     standby that died after that is replaced by the failover logic.
//   - A failover replaced the primary meanwhile (status.epoch moved):
//     abandon. A failover wins over a switchover.
//   - Warming: the primary gone, deleted or failed: abandon (the failover
//     logic replaces it with an epoch above the standby's); the standby
//     failed or deleted: abandon; missing: create it; ready: step down;
//     not ready within the grace: abandon.
//   - HandingOver: the primary gone or failed without a release, or the
//     standby gone before it, or the hand-over past its time: abandon;
//     otherwise step down (again).
func decideSwitchover(in switchoverInput) switchoverDecision {
	sw := in.Running
	if sw == nil {
		reason := ""
		switch {
		case in.Request != "" && in.Request != in.LastRequest:
			reason = shalev1.ReasonSwitchoverRequested
		case in.NodeDraining:
			reason = shalev1.ReasonPrimaryNodeDraining
		case in.Update:
			reason = shalev1.ReasonPrimaryOutdated
		default:
			return switchoverDecision{Action: switchoverNone}
		}
		switch {
		case !in.Created:
			return switchoverDecision{Action: switchoverNone, Reason: reason, Message: "a switchover waits until the database's first primary was ready"}
		case gone(in.Primary) || in.Primary.Phase == corev1.PodSucceeded || !in.Primary.Ready:
			return switchoverDecision{Action: switchoverNone, Reason: reason, Message: "a switchover waits for the primary to be ready"}
		}
		return switchoverDecision{Action: switchoverStart, Reason: reason}
	}
	if in.Released || (in.Primary.Exists && in.Primary.Phase == corev1.PodSucceeded && in.Epoch == sw.FromEpoch) {
		return switchoverDecision{Action: switchoverComplete, Message: fmt.Sprintf("the primary of epoch %d released the database", sw.FromEpoch)}
	}
	if in.Epoch != sw.FromEpoch {
		return switchoverDecision{Action: switchoverAbandon, Message: fmt.Sprintf("a failover replaced the primary of epoch %d with epoch %d", sw.FromEpoch, in.Epoch)}
	}
	started := sw.StartedAt.Time
	if started.IsZero() || started.After(in.Now) {
		started = in.Now
	}
	switch sw.Phase {
	case shalev1.SwitchoverHandingOver:
		switch {
		case gone(in.Primary):
			return switchoverDecision{Action: switchoverAbandon, Message: "the primary stopped before it released the database: failing over instead"}
		case gone(in.Standby) || in.Standby.Phase == corev1.PodSucceeded:
			return switchoverDecision{Action: switchoverAbandon, Message: "the standby stopped before the primary released the database"}
		case in.Now.Sub(started) > in.StandbyGrace+handOverTimeout:
			return switchoverDecision{Action: switchoverAbandon, Message: fmt.Sprintf("the primary did not release the database within %s", (in.StandbyGrace + handOverTimeout).Round(time.Second))}
		}
		return switchoverDecision{Action: switchoverStepDown, RecheckAfter: stepDownRecheck}
	default: // Warming
		switch {
		case gone(in.Primary) || in.Primary.Phase == corev1.PodSucceeded:
			return switchoverDecision{Action: switchoverAbandon, Message: "the primary stopped while the standby warmed: failing over instead"}
		case in.Standby.Exists && (in.Standby.Terminating || in.Standby.Phase == corev1.PodFailed || in.Standby.Phase == corev1.PodSucceeded):
			return switchoverDecision{Action: switchoverAbandon, Message: "the standby stopped while it warmed"}
		case !in.Standby.Exists:
			return switchoverDecision{Action: switchoverCreateStandby}
		case in.Standby.Ready:
			return switchoverDecision{Action: switchoverStepDown, RecheckAfter: stepDownRecheck}
		}
		if left := started.Add(in.StandbyGrace).Sub(in.Now); left > 0 {
			return switchoverDecision{Action: switchoverWait, Message: "the standby is warming", RecheckAfter: left}
		}
		return switchoverDecision{Action: switchoverAbandon, Message: fmt.Sprintf("the standby did not become ready within %s", in.StandbyGrace.Round(time.Second))}
	}
}

// stepDownFunc calls a primary's StepDown.
type stepDownFunc func(ctx context.Context, addr string, dial grpc.DialOption, epoch uint64) (*kvv1.StepDownResponse, error)

// grpcStepDown dials addr and calls StepDown.
func grpcStepDown(ctx context.Context, addr string, dial grpc.DialOption, epoch uint64) (*kvv1.StepDownResponse, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return kvv1.NewKVClient(conn).StepDown(ctx, &kvv1.StepDownRequest{Epoch: epoch})
}

// stepDownTimeout bounds one StepDown call (a flush, a close and one PUT).
const stepDownCallTimeout = 30 * time.Second

// reconcileSwitchover runs the switchover logic for the primary of
// status.epoch (pod, nil when it does not exist). done: this reconcile
// ends here (the failover logic must not see the primary stepping down);
// otherwise the failover logic runs after it, and res says when to look
// again.
func (r *rocksDBReconciler) reconcileSwitchover(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod *corev1.Pod, rep *report) (res time.Duration, done bool, err error) {
	sw := db.Status.Switchover
	epoch := db.Status.Epoch
	in := switchoverInput{
		Request: db.Annotations[shalev1.AnnotationSwitchover], LastRequest: db.Status.LastSwitchoverRequest,
		Created: db.Status.Created != nil, Epoch: epoch, Running: sw, Now: r.now(), StandbyGrace: r.opts.StartupGrace,
		Primary: observePrimary(pod, db.Condition(shalev1.ConditionPrimaryAvailable), db.Status.ReadyEpoch == epoch),
	}
	if sw == nil && in.Request == in.LastRequest {
		in.NodeDraining = r.primaryNodeCordoned(ctx, pod)
	}
	// Whether the primary is up to date is reported whatever runs; an
	// update switchover starts only when nothing else is wanted.
	update, updateRecheck := r.reconcileUpdate(ctx, db, store, pod, in, rep)
	if update && (in.NodeDraining || in.Request != in.LastRequest) {
		// A switchover for another reason comes first, and replaces the
		// primary with one built from the current spec all the same.
		update = false
		r.releaseUpdateSlot(client.ObjectKeyFromObject(db))
	}
	in.Update = update
	var standby *corev1.Pod
	if sw != nil {
		if standby, err = r.primaryPod(ctx, db, sw.ToEpoch, false); err != nil {
			return 0, false, err
		}
		in.Standby = observePrimary(standby, nil, false)
		if sw.Phase == shalev1.SwitchoverHandingOver && store != nil {
			in.Released = r.released(ctx, db, store, sw.FromEpoch)
		}
	}
	d := decideSwitchover(in)
	logger := log.FromContext(ctx)
	switch d.Action {
	case switchoverNone:
		if d.Message != "" {
			logger.Info("switchover wanted, not started", "reason", d.Reason, "why", d.Message)
		}
		if update {
			// Started nothing: give the slot back.
			r.releaseUpdateSlot(client.ObjectKeyFromObject(db))
		}
		return updateRecheck, false, nil
	case switchoverStart:
		return 0, true, r.startSwitchover(ctx, db, store, pod, d.Reason, rep)
	case switchoverCreateStandby:
		rep.set(shalev1.ConditionSwitchover, metav1.ConditionTrue, string(shalev1.SwitchoverWarming), fmt.Sprintf("standby %s (epoch %d) is starting", db.PrimaryPodName(sw.ToEpoch), sw.ToEpoch))
		return stepDownRecheck, false, r.createStandby(ctx, db, store, sw.ToEpoch)
	case switchoverWait:
		rep.set(shalev1.ConditionSwitchover, metav1.ConditionTrue, string(shalev1.SwitchoverWarming), fmt.Sprintf("standby %s (epoch %d) is warming its cache", db.PrimaryPodName(sw.ToEpoch), sw.ToEpoch))
		return d.RecheckAfter, false, nil
	case switchoverStepDown:
		return r.handOver(ctx, db, pod, rep)
	case switchoverComplete:
		return 0, true, r.completeSwitchover(ctx, db, d.Message, rep)
	case switchoverAbandon:
		return 0, false, r.abandonSwitchover(ctx, db, standby, d.Message, rep)
	}
	return 0, false, nil
}

// startSwitchover reserves the standby's epoch above every epoch handed
// out or taken, records the switchover, and creates the standby.
func (r *rocksDBReconciler) startSwitchover(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod *corev1.Pod, reason string, rep *report) error {
	if store == nil {
		return nil
	}
	from := db.Status.Epoch
	highest, known := r.storageEpoch(ctx, db, store)
	to, err := nextEpoch(max(from, db.Status.ReservedEpoch), highest, known)
	if err != nil {
		return &refusal{eventEpochExhausted, err.Error()}
	}
	request := db.Annotations[shalev1.AnnotationSwitchover]
	sw := &shalev1.SwitchoverStatus{Reason: reason, FromEpoch: from, ToEpoch: to, Phase: shalev1.SwitchoverWarming, StartedAt: metav1.NewTime(r.now())}
	if reason == shalev1.ReasonSwitchoverRequested {
		sw.Request = request
	}
	msg := fmt.Sprintf("switching the primary over from %s (epoch %d) to a standby, %s (epoch %d), which warms its cache first", pod.Name, from, db.PrimaryPodName(to), to)
	err = patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != from || cur.Status.Switchover != nil || cur.Status.ReservedEpoch >= to {
			return errNoChange
		}
		cur.Status.ReservedEpoch = to
		cur.Status.Switchover = sw
		if sw.Request != "" {
			cur.Status.LastSwitchoverRequest = sw.Request
		}
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nil // someone else moved on; the next reconcile looks again
	}
	if err != nil {
		return err
	}
	rep.set(shalev1.ConditionSwitchover, metav1.ConditionTrue, string(shalev1.SwitchoverWarming), msg)
	r.recorder.Event(db, corev1.EventTypeNormal, eventSwitchoverStarted, msg+" ("+reason+")")
	log.FromContext(ctx).Info("switchover", "reason", reason, "from", from, "to", to)
	return r.createStandby(ctx, db, store, to)
}

// standbyPod is the primary Pod of epoch started with --standby: it warms
// and waits for the release of the current primary (RFC 0012).
func standbyPod(db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64, image string) *corev1.Pod {
	pod := primaryPod(db, store, epoch, image)
	c := &pod.Spec.Containers[0]
	c.Args = append(c.Args, "--standby")
	return pod
}

// createStandby creates the standby Pod (if it does not exist).
func (r *rocksDBReconciler) createStandby(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64) error {
	if store == nil {
		return nil
	}
	if err := tieringRefusal(db, store); err != nil {
		return err
	}
	pod := standbyPod(db, store, epoch, r.opts.ShaleImage)
	if err := controllerutil.SetControllerReference(db, pod, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// handOver records HandingOver (before the call: an operator restarted
// after it calls again) and asks the primary to step down; its answer
// completes the switchover at once.
func (r *rocksDBReconciler) handOver(ctx context.Context, db *shalev1.RocksDB, pod *corev1.Pod, rep *report) (time.Duration, bool, error) {
	sw := db.Status.Switchover
	if sw.Phase != shalev1.SwitchoverHandingOver {
		err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.Switchover == nil || cur.Status.Switchover.ToEpoch != sw.ToEpoch {
				return errNoChange
			}
			cur.Status.Switchover.Phase = shalev1.SwitchoverHandingOver
			return nil
		})
		if errors.Is(err, errNoChange) {
			return stepDownRecheck, true, nil
		}
		if err != nil {
			return 0, true, err
		}
		sw = db.Status.Switchover
	}
	rep.set(shalev1.ConditionSwitchover, metav1.ConditionTrue, string(shalev1.SwitchoverHandingOver),
		fmt.Sprintf("the standby %s (epoch %d) is warm; the primary %s (epoch %d) is stepping down", db.PrimaryPodName(sw.ToEpoch), sw.ToEpoch, db.PrimaryPodName(sw.FromEpoch), sw.FromEpoch))
	addr, why := secondaryAddr(pod)
	if why != "" {
		return stepDownRecheck, true, nil
	}
	dial, err := r.kvDial(ctx, db, db.ServiceName())
	if err != nil {
		return stepDownRecheck, true, err
	}
	c, cancel := context.WithTimeout(ctx, stepDownCallTimeout)
	resp, err := r.stepDown(c, addr, dial, uint64(sw.FromEpoch))
	cancel()
	if err != nil {
		log.FromContext(ctx).Info("StepDown did not answer yet; asking again", "pod", pod.Name, "error", err.Error())
		return stepDownRecheck, true, nil
	}
	msg := fmt.Sprintf("the primary of epoch %d stepped down", sw.FromEpoch)
	if resp.GetTook() != nil {
		msg += fmt.Sprintf(" (writes refused for %s before its release)", resp.GetTook().AsDuration().Round(time.Millisecond))
	}
	return 0, true, r.completeSwitchover(ctx, db, msg, rep)
}

// completeSwitchover makes the standby the primary: status.epoch and
// currentPrimary move to it, so the -rw Service's selector does.
func (r *rocksDBReconciler) completeSwitchover(ctx context.Context, db *shalev1.RocksDB, why string, rep *report) error {
	sw := db.Status.Switchover
	to := db.PrimaryPodName(sw.ToEpoch)
	took := r.now().Sub(sw.StartedAt.Time).Round(time.Second)
	msg := fmt.Sprintf("%s: %s (epoch %d) is the primary now, %s after the switchover began", why, to, sw.ToEpoch, took)
	starting := metav1.Condition{Type: shalev1.ConditionPrimaryAvailable, Status: metav1.ConditionFalse, Reason: shalev1.ReasonPrimaryStarting,
		Message: "the standby " + to + " takes over"}
	done := metav1.Condition{Type: shalev1.ConditionSwitchover, Status: metav1.ConditionFalse, Reason: shalev1.ReasonSwitchoverCompleted, Message: msg}
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Switchover == nil || cur.Status.Switchover.ToEpoch != sw.ToEpoch || cur.Status.Epoch != sw.FromEpoch {
			return errNoChange
		}
		cur.Status.Epoch = sw.ToEpoch
		cur.Status.CurrentPrimary = to
		cur.Status.Switchover = nil
		cur.Status.Switchovers++
		if sw.Reason == shalev1.ReasonPrimaryOutdated {
			cur.Status.PrimaryUpdate = nil
		}
		setCondition(cur, starting)
		setCondition(cur, done)
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	rep.set(starting.Type, starting.Status, starting.Reason, starting.Message)
	rep.set(done.Type, done.Status, done.Reason, done.Message)
	r.releaseUpdateSlot(client.ObjectKeyFromObject(db))
	switchoversTotal.WithLabelValues("completed").Inc()
	r.recorder.Event(db, corev1.EventTypeNormal, eventSwitchoverCompleted, msg)
	log.FromContext(ctx).Info("switchover completed", "from", sw.FromEpoch, "to", sw.ToEpoch)
	return nil
}

// abandonSwitchover forgets the switchover and deletes the standby (it
// claimed nothing: it claims only after a release, and a released
// switchover completes instead). Its epoch stays reserved.
func (r *rocksDBReconciler) abandonSwitchover(ctx context.Context, db *shalev1.RocksDB, standby *corev1.Pod, why string, rep *report) error {
	sw := db.Status.Switchover
	msg := fmt.Sprintf("switchover to epoch %d abandoned: %s", sw.ToEpoch, why)
	c := metav1.Condition{Type: shalev1.ConditionSwitchover, Status: metav1.ConditionFalse, Reason: shalev1.ReasonSwitchoverAbandoned, Message: msg}
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Switchover == nil || cur.Status.Switchover.ToEpoch != sw.ToEpoch {
			return errNoChange
		}
		cur.Status.Switchover = nil
		if sw.Reason == shalev1.ReasonPrimaryOutdated {
			// Not again at once: an update that cannot complete must not
			// switch over in a loop (1 min, doubling; rolling.go).
			cur.Status.PrimaryUpdate = nextUpdateBackoff(cur.Status.PrimaryUpdate, r.now())
		}
		setCondition(cur, c)
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	rep.set(c.Type, c.Status, c.Reason, c.Message)
	r.releaseUpdateSlot(client.ObjectKeyFromObject(db))
	if standby != nil && standby.DeletionTimestamp == nil {
		uid := standby.UID
		if err := r.Delete(ctx, standby, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "deleting the abandoned standby", "pod", standby.Name)
		}
	}
	switchoversTotal.WithLabelValues("abandoned").Inc()
	r.recorder.Event(db, corev1.EventTypeWarning, eventSwitchoverAbandoned, msg)
	return nil
}

// released reports whether _shale/released/<epoch> is in the database's
// directory (false when it cannot be read).
func (r *rocksDBReconciler) released(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64) bool {
	if db.Status.StoragePath == "" || epoch <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	st, err := r.stores.database(ctx, store, db.Status.StoragePath)
	if err != nil {
		return false
	}
	_, err = st.Stat(ctx, layout.ReleasedKey(uint64(epoch)))
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		log.FromContext(ctx).Info("cannot read the primary's release", "epoch", epoch, "error", err.Error())
	}
	return err == nil
}

// primaryNodeCordoned reports whether the primary Pod's node is cordoned
// (a drain; the PrimaryNodeDraining detection).
func (r *rocksDBReconciler) primaryNodeCordoned(ctx context.Context, pod *corev1.Pod) bool {
	if pod == nil || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, nodeListTimeout)
	defer cancel()
	node := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
		return false
	}
	return node.Spec.Unschedulable
}
