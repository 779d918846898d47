package operator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Hibernation and fencing by hand (docs/rfcs/0014-hibernation-and-fencing.md,
// steps 4-7). A hold (status.hold) stops the primary and starts none until
// it is lifted: a fence (shale.rocks/fenced: "true") deletes the primary
// Pod and runs `shale fence` in a Pod, which claims the next epoch in the
// store, seals every earlier owner's logs, waits out their leases and
// releases; a hibernation (shale.rocks/hibernation: "on") asks the primary
// to step down (a clean release, as in a switchover) and fences it when it
// cannot, then scales the secondaries to 0. Lifting starts a primary of the
// next epoch, which waits no lease (the highest claim is released). As for
// failovers, what makes this safe is in the store (claims and seals); a
// wrong decision here costs availability, never data.

// Event reasons of a hold.
const (
	eventFencing           = "Fencing"
	eventFenced            = shalev1.ReasonFenced
	eventFenceFailed       = "FenceFailed"
	eventHibernating       = "Hibernating"
	eventHibernated        = shalev1.ReasonHibernated
	eventHibernationFenced = "HibernationFenced"
	eventResumed           = "Resumed"
)

// fenceRetry is how long after a failed fence Pod's fence began the next
// one starts (with the next epoch: the failed one may have claimed its).
const fenceRetry = 10 * time.Second

// fenceWanted and hibernationWanted read the annotations: only "true" and
// "on" hold; anything else (or nothing) lifts.
func fenceWanted(db *shalev1.RocksDB) bool {
	return strings.EqualFold(strings.TrimSpace(db.Annotations[shalev1.AnnotationFenced]), "true")
}

func hibernationWanted(db *shalev1.RocksDB) bool {
	return strings.EqualFold(strings.TrimSpace(db.Annotations[shalev1.AnnotationHibernation]), "on")
}

// holdInput is what the operator knows about a hold, wanted or in place.
type holdInput struct {
	// Fence and Hibernate: the annotations ask for a hold.
	Fence, Hibernate bool
	Deleting         bool
	// Epoch is status.epoch; Primary the Pod of it (when no hold is in
	// place, or while it steps down).
	Epoch   int64
	Primary primaryState
	// Switchover is status.switchover.
	Switchover *shalev1.SwitchoverStatus
	// Hold is status.hold; FencePod the Pod NAME-fence-<Hold.Epoch> while
	// Fencing; Released: _shale/released/<Hold.Epoch> is in the store
	// (looked up while SteppingDown).
	Hold     *shalev1.HoldStatus
	FencePod primaryState
	Released bool
	Now      time.Time
}

type holdAction int

const (
	// holdNone: no hold wanted and none in place: the normal paths run.
	holdNone holdAction = iota
	// holdWait: look again after RecheckAfter (a fence Pod running, a
	// switchover handing over); nothing else runs meanwhile.
	holdWait
	// holdAbandonSwitchover: a hibernation asked during a switchover's
	// warming: abandon it first (the standby goes).
	holdAbandonSwitchover
	// holdEmpty: no primary ever ran (epoch 0): held at once.
	holdEmpty
	// holdStepDown: record SteppingDown (if not yet) and call StepDown.
	holdStepDown
	// holdSteppedDown: the primary released: held; its Pod goes.
	holdSteppedDown
	// holdFence: abandon any switchover, delete the primary Pod, reserve
	// the fence's epoch, record Fencing, create the fence Pod.
	holdFence
	// holdCreateFencePod: Fencing, and its Pod is missing (an operator
	// restarted between the status patch and the create).
	holdCreateFencePod
	// holdFenced: the fence Pod succeeded: held; the fence Pod goes.
	holdFenced
	// holdHeld: held; nothing runs as the primary.
	holdHeld
	// holdLift: start the primary of the next epoch.
	holdLift
)

func (a holdAction) String() string {
	return [...]string{"none", "wait", "abandon-switchover", "empty", "step-down", "stepped-down", "fence", "create-fence-pod", "fenced", "held", "lift"}[a]
}

type holdDecision struct {
	Action holdAction
	// Reason: FenceRequested or HibernationRequested (holdFence,
	// holdStepDown, holdEmpty).
	Reason       string
	Message      string
	RecheckAfter time.Duration
}

// decideHold decides what to do about a fence or a hibernation (a pure
// function, table-tested in TestDecideHold).
//
//   - Deletion: nothing (the finalizer runs; the fence Pod is owned).
//   - No hold in place: none wanted, nothing. A fence: at once, whatever
//     the primary's state or a switchover's (abandoned). A hibernation: a
//     switchover that is warming is abandoned first, one handing over is
//     waited for (its step-down is under way); then a ready primary is
//     asked to step down, one that is not (starting, failing, failed, in
//     a failover's backoff) is fenced: its process may still run.
//   - SteppingDown: the release in the store, or an exit 0: held. A fence
//     asked meanwhile, the primary gone or failed without a release, or
//     no release within handOverTimeout: fence. Else ask again. A lift
//     asked meanwhile waits: the step-down is under way.
//   - Fencing: the fence Pod succeeded: held; failed or deleted: fence
//     again (next epoch) fenceRetry after this one began; missing: create
//     it; else wait. A lift waits too: a new primary must not race the
//     fence.
//   - Held: still wanted: nothing runs; lifted: the next primary.
func decideHold(in holdInput) holdDecision {
	want := in.Fence || in.Hibernate
	h := in.Hold
	if in.Deleting {
		return holdDecision{Action: holdNone}
	}
	reason := shalev1.ReasonHibernationAsked
	if in.Fence {
		reason = shalev1.ReasonFenceRequested
	}
	if h == nil {
		switch {
		case !want:
			return holdDecision{Action: holdNone}
		case in.Epoch == 0:
			return holdDecision{Action: holdEmpty, Reason: reason, Message: "no primary has run yet: none starts"}
		case in.Fence:
			return holdDecision{Action: holdFence, Reason: reason, Message: "fenced by hand (" + shalev1.AnnotationFenced + ")"}
		case in.Switchover != nil && in.Switchover.Phase == shalev1.SwitchoverHandingOver:
			return holdDecision{Action: holdWait, Message: "a switchover is handing over: hibernating after it", RecheckAfter: stepDownRecheck}
		case in.Switchover != nil:
			return holdDecision{Action: holdAbandonSwitchover, Message: "hibernation requested"}
		case !in.Primary.Exists || in.Primary.Terminating || !in.Primary.Ready:
			return holdDecision{Action: holdFence, Reason: reason, Message: "the primary is not ready and cannot step down: fencing it instead"}
		}
		return holdDecision{Action: holdStepDown, Reason: reason, RecheckAfter: stepDownRecheck}
	}
	started := h.StartedAt.Time
	if started.IsZero() || started.After(in.Now) {
		started = in.Now
	}
	switch h.Phase {
	case shalev1.HoldSteppingDown:
		switch {
		case in.Released || (in.Primary.Exists && in.Primary.Phase == corev1.PodSucceeded):
			return holdDecision{Action: holdSteppedDown, Message: fmt.Sprintf("the primary of epoch %d stepped down and released the database", h.Epoch)}
		case in.Fence:
			return holdDecision{Action: holdFence, Reason: shalev1.ReasonFenceRequested, Message: "fenced by hand while the primary stepped down"}
		case gone(in.Primary):
			return holdDecision{Action: holdFence, Reason: h.Reason, Message: "the primary stopped before it released the database: fencing instead"}
		case in.Now.Sub(started) > handOverTimeout:
			return holdDecision{Action: holdFence, Reason: h.Reason, Message: fmt.Sprintf("the primary did not release the database within %s: fencing it instead", handOverTimeout)}
		}
		return holdDecision{Action: holdStepDown, Reason: h.Reason, RecheckAfter: stepDownRecheck}
	case shalev1.HoldFencing:
		switch {
		case in.FencePod.Exists && in.FencePod.Phase == corev1.PodSucceeded:
			return holdDecision{Action: holdFenced, Message: fmt.Sprintf("the fence claimed and released epoch %d: no earlier primary can write", h.Epoch)}
		case in.FencePod.Exists && (in.FencePod.Phase == corev1.PodFailed || in.FencePod.Terminating):
			// A failed fence may have claimed its epoch: the next one takes
			// the one above (holdFence reserves a new one).
			if left := started.Add(fenceRetry).Sub(in.Now); left > 0 {
				return holdDecision{Action: holdWait, Message: "the fence failed; trying again", RecheckAfter: left}
			}
			return holdDecision{Action: holdFence, Reason: h.Reason, Message: fmt.Sprintf("the fence of epoch %d failed: fencing again with a later epoch", h.Epoch)}
		case !in.FencePod.Exists:
			return holdDecision{Action: holdCreateFencePod, Reason: h.Reason, RecheckAfter: stepDownRecheck}
		}
		return holdDecision{Action: holdWait, Message: fmt.Sprintf("the fence of epoch %d is running", h.Epoch), RecheckAfter: fenceRecheck}
	default: // Held
		if want {
			return holdDecision{Action: holdHeld}
		}
		return holdDecision{Action: holdLift, Message: "the hold was lifted"}
	}
}

// fenceRecheck: how often a running fence Pod is looked at (its Pod's
// events wake the operator anyway).
const fenceRecheck = 5 * time.Second

// fencePodName is the name of the fence Pod of an epoch.
func fencePodName(db *shalev1.RocksDB, epoch int64) string {
	return db.Name + "-fence-" + strconv.FormatInt(epoch, 10)
}

// fenceArgs are the primary's flags `shale fence` takes (with a value,
// or alone).
var (
	fenceValueFlags = map[string]bool{"--db": true, "--epoch": true, "--cache-dir": true, "--lease": true,
		"--read-timeout": true, "--write-timeout": true, "--retry-for": true, "--cold-db": true, "--cold-endpoint": true}
	fenceBoolFlags = map[string]bool{"--existing": true}
)

// fencePod is the Pod that fences the database at epoch: the primary Pod
// of that epoch (image, credentials, scheduling, cache volume) running
// `shale fence` with the primary's store flags, no ports, no probe, and
// the role label fence (no Service selects it, no budget counts it).
func fencePod(db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64, image string) *corev1.Pod {
	pod := primaryPod(db, store, epoch, image)
	c := &pod.Spec.Containers[0]
	args := []string{"fence"}
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		switch {
		case fenceValueFlags[a] && i+1 < len(c.Args):
			args = append(args, a, c.Args[i+1])
			i++
		case fenceBoolFlags[a]:
			args = append(args, a)
		}
	}
	c.Args = args
	c.Ports = nil
	c.ReadinessProbe, c.LivenessProbe, c.StartupProbe = nil, nil, nil
	pod.Name = fencePodName(db, epoch)
	pod.Labels = map[string]string{
		shalev1.LabelRocksDB:      db.Name,
		shalev1.LabelRole:         shalev1.RoleFence,
		shalev1.LabelEpoch:        strconv.FormatInt(epoch, 10),
		shalev1.LabelAppName:      shalev1.AppName,
		shalev1.LabelAppInstance:  db.Name,
		shalev1.LabelAppComponent: shalev1.RoleFence,
		shalev1.LabelAppManagedBy: shalev1.ManagedBy,
	}
	return pod
}

// heldMessage is what Ready says while held, and the phase.
func heldCondition(db *shalev1.RocksDB) (reason, msg string) {
	h := db.Status.Hold
	if hibernationWanted(db) {
		return shalev1.ReasonHibernated, fmt.Sprintf("hibernated (%s: on): no Pod of the database runs; released at epoch %d", shalev1.AnnotationHibernation, h.Epoch)
	}
	return shalev1.ReasonFenced, fmt.Sprintf("fenced by hand (%s: true) at epoch %d: no primary runs and no earlier one can write; secondaries serve reads", shalev1.AnnotationFenced, h.Epoch)
}

// holdPhase is the phase of a database with a hold: Hibernated when the
// hibernation annotation is on, else Fenced (status.hold.phase says the
// step: it is held once Held).
func holdPhase(db *shalev1.RocksDB) shalev1.RocksDBPhase {
	if hibernationWanted(db) {
		return shalev1.PhaseHibernated
	}
	return shalev1.PhaseFenced
}

// reconcileHold runs the hold logic; done: this reconcile's primary part
// ends here (no switchover, no failover, no primary created).
func (r *rocksDBReconciler) reconcileHold(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (ctrl.Result, bool, error) {
	h := db.Status.Hold
	if h == nil && !fenceWanted(db) && !hibernationWanted(db) {
		return ctrl.Result{}, false, nil
	}
	in := holdInput{Fence: fenceWanted(db), Hibernate: hibernationWanted(db), Deleting: db.DeletionTimestamp != nil,
		Epoch: db.Status.Epoch, Switchover: db.Status.Switchover, Hold: h, Now: r.now()}
	var pod, fence *corev1.Pod
	var err error
	if h == nil || h.Phase == shalev1.HoldSteppingDown {
		if pod, err = r.primaryPod(ctx, db, db.Status.Epoch, false); err != nil {
			return ctrl.Result{}, true, err
		}
		in.Primary = observePrimary(pod, db.Condition(shalev1.ConditionPrimaryAvailable), db.Status.ReadyEpoch == db.Status.Epoch)
	}
	if h != nil && h.Phase == shalev1.HoldSteppingDown && store != nil {
		in.Released = r.released(ctx, db, store, h.Epoch)
	}
	if h != nil && h.Phase == shalev1.HoldFencing {
		if fence, err = r.fencePod(ctx, db, h.Epoch); err != nil {
			return ctrl.Result{}, true, err
		}
		in.FencePod = observePrimary(fence, nil, false)
	}
	d := decideHold(in)
	logger := log.FromContext(ctx)
	switch d.Action {
	case holdNone:
		return ctrl.Result{}, false, nil
	case holdWait:
		reason := shalev1.ReasonHibernated
		if in.Fence || (h != nil && h.Reason == shalev1.ReasonFenceRequested) {
			reason = shalev1.ReasonFenced
		}
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, reason, d.Message)
		return ctrl.Result{RequeueAfter: d.RecheckAfter}, true, nil
	case holdAbandonSwitchover:
		sw := db.Status.Switchover
		standby, err := r.primaryPod(ctx, db, sw.ToEpoch, false)
		if err != nil {
			return ctrl.Result{}, true, err
		}
		return ctrl.Result{Requeue: true}, true, r.abandonSwitchover(ctx, db, standby, d.Message, rep)
	case holdEmpty:
		err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.Epoch != 0 || cur.Status.Hold != nil {
				return errNoChange
			}
			cur.Status.Hold = &shalev1.HoldStatus{Phase: shalev1.HoldHeld, Reason: d.Reason, StartedAt: metav1.NewTime(in.Now), Message: d.Message}
			return nil
		})
		if err != nil && !errors.Is(err, errNoChange) {
			return ctrl.Result{}, true, err
		}
		r.setHeld(db, rep)
		return ctrl.Result{}, true, nil
	case holdStepDown:
		return r.hibernateStepDown(ctx, db, pod, d, rep)
	case holdSteppedDown:
		return ctrl.Result{}, true, r.held(ctx, db, shalev1.HoldSteppingDown, pod, d.Message, rep)
	case holdFence:
		return r.startFence(ctx, db, store, pod, fence, d, rep)
	case holdCreateFencePod:
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonFenced, fmt.Sprintf("fencing: creating %s", fencePodName(db, h.Epoch)))
		return ctrl.Result{RequeueAfter: d.RecheckAfter}, true, r.createFencePod(ctx, db, store, h.Epoch)
	case holdFenced:
		return ctrl.Result{}, true, r.held(ctx, db, shalev1.HoldFencing, fence, d.Message, rep)
	case holdHeld:
		r.setHeld(db, rep)
		return ctrl.Result{}, true, nil
	case holdLift:
		logger.Info("lifting the hold", "epoch", h.Epoch)
		return r.liftHold(ctx, db, store, rep)
	}
	return ctrl.Result{}, true, nil
}

// setHeld reports the held database's conditions.
func (r *rocksDBReconciler) setHeld(db *shalev1.RocksDB, rep *report) {
	reason, msg := heldCondition(db)
	rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, reason, msg)
}

// fencePod returns the fence Pod of an epoch (nil if none), from the API
// server when the cache misses it.
func (r *rocksDBReconciler) fencePod(ctx context.Context, db *shalev1.RocksDB, epoch int64) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: db.Namespace, Name: fencePodName(db, epoch)}
	pod := &corev1.Pod{}
	err := r.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.apiReader.Get(ctx, key, pod)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return pod, nil
}

// hibernateStepDown records SteppingDown (before the call: an operator
// restarted after it calls again) and asks the primary to step down; its
// answer holds the database at once.
func (r *rocksDBReconciler) hibernateStepDown(ctx context.Context, db *shalev1.RocksDB, pod *corev1.Pod, d holdDecision, rep *report) (ctrl.Result, bool, error) {
	epoch := db.Status.Epoch
	if db.Status.Hold == nil {
		hold := &shalev1.HoldStatus{Phase: shalev1.HoldSteppingDown, Reason: d.Reason, FromEpoch: epoch, Epoch: epoch, StartedAt: metav1.NewTime(r.now())}
		err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.Epoch != epoch || cur.Status.Hold != nil || cur.Status.Switchover != nil {
				return errNoChange
			}
			cur.Status.Hold = hold
			return nil
		})
		if errors.Is(err, errNoChange) {
			return ctrl.Result{Requeue: true}, true, nil
		}
		if err != nil {
			return ctrl.Result{}, true, err
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventHibernating, "hibernating: the primary %s (epoch %d) steps down and releases the database", pod.Name, epoch)
	}
	rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonHibernated, fmt.Sprintf("hibernating: the primary %s (epoch %d) is stepping down", db.PrimaryPodName(epoch), epoch))
	if pod == nil {
		return ctrl.Result{RequeueAfter: stepDownRecheck}, true, nil
	}
	addr, why := secondaryAddr(pod)
	if why != "" {
		return ctrl.Result{RequeueAfter: stepDownRecheck}, true, nil
	}
	dial, err := r.kvDial(ctx, db, db.ServiceName())
	if err != nil {
		return ctrl.Result{RequeueAfter: stepDownRecheck}, true, err
	}
	c, cancel := context.WithTimeout(ctx, stepDownCallTimeout)
	resp, err := r.stepDown(c, addr, dial, uint64(epoch))
	cancel()
	if err != nil {
		log.FromContext(ctx).Info("StepDown did not answer yet; asking again", "pod", pod.Name, "error", err.Error())
		return ctrl.Result{RequeueAfter: stepDownRecheck}, true, nil
	}
	msg := fmt.Sprintf("the primary of epoch %d stepped down", epoch)
	if resp.GetTook() != nil {
		msg += fmt.Sprintf(" (writes refused for %s before its release)", resp.GetTook().AsDuration().Round(time.Millisecond))
	}
	return ctrl.Result{}, true, r.held(ctx, db, shalev1.HoldSteppingDown, pod, msg, rep)
}

// held records that the database is held (from the phase it was in), and
// deletes the Pod that got it there (the stepped-down primary, or the
// fence Pod, both done).
func (r *rocksDBReconciler) held(ctx context.Context, db *shalev1.RocksDB, from shalev1.HoldPhase, pod *corev1.Pod, why string, rep *report) error {
	h := db.Status.Hold
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Hold == nil || cur.Status.Hold.Phase != from || cur.Status.Hold.Epoch != h.Epoch {
			return errNoChange
		}
		cur.Status.Hold.Phase = shalev1.HoldHeld
		cur.Status.Hold.StartedAt = metav1.NewTime(r.now())
		cur.Status.Hold.Message = why
		cur.Status.CurrentPrimary = ""
		return nil
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err != nil {
		return err
	}
	r.deletePod(ctx, pod, nil)
	r.setHeld(db, rep)
	reason, msg := heldCondition(db)
	r.recorder.Event(db, corev1.EventTypeNormal, reason, why+"; "+msg)
	log.FromContext(ctx).Info("held", "reason", reason, "epoch", h.Epoch)
	return nil
}

// deletePod deletes a Pod (nil: none) unless it is already going; grace
// nil is the Pod's own.
func (r *rocksDBReconciler) deletePod(ctx context.Context, pod *corev1.Pod, grace *int64) {
	if pod == nil || pod.DeletionTimestamp != nil {
		return
	}
	uid := pod.UID
	opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
	if grace != nil {
		opts = append(opts, client.GracePeriodSeconds(*grace))
	}
	if err := r.Delete(ctx, pod, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		log.FromContext(ctx).Error(err, "deleting a Pod", "pod", pod.Name)
	}
}

// startFence fences the database: the switchover (if any) is abandoned,
// the primary Pod deleted at once (a primary not trusted is not asked to
// flush), the fence's epoch reserved above every epoch handed out or
// taken, the hold recorded as Fencing, and the fence Pod created. A failed
// fence Pod (failed) is deleted first.
func (r *rocksDBReconciler) startFence(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod, failed *corev1.Pod, d holdDecision, rep *report) (ctrl.Result, bool, error) {
	if store == nil {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, "cannot fence: the ObjectStore does not exist")
		return ctrl.Result{}, true, &refusal{eventObjectStoreMissing, fmt.Sprintf("cannot fence: ObjectStore %s does not exist", db.Spec.ObjectStoreRef.Name)}
	}
	if sw := db.Status.Switchover; sw != nil {
		standby, err := r.primaryPod(ctx, db, sw.ToEpoch, false)
		if err != nil {
			return ctrl.Result{}, true, err
		}
		if err := r.abandonSwitchover(ctx, db, standby, "the database is being fenced", rep); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	r.deletePod(ctx, pod, ptr.To[int64](0))
	if failed != nil {
		if msg := terminationMessage(failed); msg != "" || failed.Status.Phase == corev1.PodFailed {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventFenceFailed, "fence Pod %s failed: %s", failed.Name, msg)
		}
		r.deletePod(ctx, failed, nil)
	}
	old := db.Status.Hold
	observed := db.Status.Epoch
	highest, known := r.storageEpoch(ctx, db, store)
	f, err := nextEpoch(max(observed, db.Status.ReservedEpoch), highest, known)
	if err != nil {
		return ctrl.Result{}, true, &refusal{eventEpochExhausted, err.Error()}
	}
	from := observed
	if old != nil {
		from = old.FromEpoch
	}
	hold := &shalev1.HoldStatus{Phase: shalev1.HoldFencing, Reason: d.Reason, FromEpoch: from, Epoch: f, StartedAt: metav1.NewTime(r.now()), Message: d.Message}
	err = patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != observed || !sameHold(cur.Status.Hold, old) {
			return errNoChange
		}
		cur.Status.Epoch = f
		cur.Status.ReservedEpoch = max(cur.Status.ReservedEpoch, f)
		cur.Status.CurrentPrimary = ""
		cur.Status.Hold = hold
		return nil
	})
	if errors.Is(err, errNoChange) {
		return ctrl.Result{Requeue: true}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, err
	}
	msg := fmt.Sprintf("%s: %s claims epoch %d (the primary %s of epoch %d is deleted; no primary starts until the hold is lifted)", d.Message, fencePodName(db, f), f, db.PrimaryPodName(observed), observed)
	event := eventFencing
	if d.Reason == shalev1.ReasonHibernationAsked {
		event = eventHibernationFenced
	}
	r.recorder.Event(db, corev1.EventTypeWarning, event, msg)
	log.FromContext(ctx).Info("fencing", "from", observed, "epoch", f, "why", d.Message)
	rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonFenced, msg)
	return ctrl.Result{RequeueAfter: fenceRecheck}, true, r.createFencePod(ctx, db, store, f)
}

// sameHold: the hold a patch was decided on is still the one in place.
func sameHold(a, b *shalev1.HoldStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Phase == b.Phase && a.Epoch == b.Epoch
}

// createFencePod creates the fence Pod of an epoch (if it does not exist).
func (r *rocksDBReconciler) createFencePod(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64) error {
	if store == nil {
		return nil
	}
	pod := fencePod(db, store, epoch, r.opts.ShaleImage)
	if err := controllerutil.SetControllerReference(db, pod, r.Scheme()); err != nil {
		return err
	}
	if err := r.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// liftHold starts the primary of the next epoch (with --existing once the
// database was ready: it opens without a lease wait, the highest claim
// being released) and forgets the hold.
func (r *rocksDBReconciler) liftHold(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (ctrl.Result, bool, error) {
	h := db.Status.Hold
	observed := db.Status.Epoch
	if observed == 0 {
		err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.Epoch != 0 || !sameHold(cur.Status.Hold, h) {
				return errNoChange
			}
			cur.Status.Hold = nil
			return nil
		})
		if err != nil && !errors.Is(err, errNoChange) {
			return ctrl.Result{}, true, err
		}
		return ctrl.Result{Requeue: true}, true, nil
	}
	if store == nil {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, "cannot resume: the ObjectStore does not exist")
		return ctrl.Result{}, true, &refusal{eventObjectStoreMissing, fmt.Sprintf("cannot resume: ObjectStore %s does not exist", db.Spec.ObjectStoreRef.Name)}
	}
	highest, known := r.storageEpoch(ctx, db, store)
	next, err := nextEpoch(max(observed, db.Status.ReservedEpoch), highest, known)
	if err != nil {
		return ctrl.Result{}, true, &refusal{eventEpochExhausted, err.Error()}
	}
	starting := metav1.Condition{Type: shalev1.ConditionPrimaryAvailable, Status: metav1.ConditionFalse, Reason: shalev1.ReasonPrimaryStarting,
		Message: "resuming: creating the primary Pod " + db.PrimaryPodName(next)}
	err = patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Epoch != observed || !sameHold(cur.Status.Hold, h) {
			return errNoChange
		}
		cur.Status.Epoch = next
		cur.Status.ReservedEpoch = max(cur.Status.ReservedEpoch, next)
		cur.Status.CurrentPrimary = ""
		cur.Status.Hold = nil
		setCondition(cur, starting)
		return nil
	})
	if errors.Is(err, errNoChange) {
		return ctrl.Result{Requeue: true}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, err
	}
	rep.set(starting.Type, starting.Status, starting.Reason, starting.Message)
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventResumed, "resumed: the primary %s (epoch %d) takes over the database released at epoch %d", db.PrimaryPodName(next), next, h.Epoch)
	return ctrl.Result{}, true, r.createPrimary(ctx, db, store, next)
}

// terminationMessage is a Pod's container's termination message ("" if
// none).
func terminationMessage(pod *corev1.Pod) string {
	for _, s := range pod.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil && t.Message != "" {
			return strings.TrimSpace(t.Message)
		}
	}
	return ""
}
