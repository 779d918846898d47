package operator

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The safety decisions of failover, as pure functions of what the operator
// observed. They decide when a failover happens and with which epoch; what
// makes a failover safe is not here but in the store: a primary started
// with epoch E fences every owner with a lower epoch through conditional
// writes (docs/fencing.md), so two primaries never both make writes
// durable, whatever Kubernetes does with the old Pod. A wrong decision here
// costs availability (a needless failover, or a late one), never data.

// primaryState is what the operator knows about the primary Pod of the
// current epoch.
type primaryState struct {
	// Exists is false when the API server has no such Pod (checked with an
	// uncached read before acting on it).
	Exists bool
	// Terminating: the Pod has a deletion timestamp (kubectl delete, a
	// drain, an eviction).
	Terminating bool
	Phase       corev1.PodPhase
	// Ready is the Pod's Ready condition (the gRPC health check answers
	// SERVING only once the primary has taken over and opened).
	Ready bool
	// EverReady: the operator has seen this Pod ready before (recorded in
	// the RocksDB's PrimaryAvailable condition). A Pod that was never
	// ready is still starting: taking over a database waits out the old
	// owner's lease and replays its logs.
	EverReady bool
	// NotReadySince is when the Pod stopped being ready (for EverReady).
	NotReadySince time.Time
	// Created is the Pod's creation time.
	Created time.Time
	// Unreachable: the operator's own probes of the primary's health have
	// had no SERVING answer for the grace while it reached a server on
	// another node (probeVerdict, RFC 0015); UnreachableSince is the last
	// answer. Kubernetes may still call the Pod Ready: a node that died
	// reports nothing until the node controller's 40 s are up.
	Unreachable      bool
	UnreachableSince time.Time
	// PortRefused: after the Pod was seen ready, a connection to its KV
	// port was refused: nothing listens there any more, its process is
	// gone (portwatch.go), though the kubelet has not said so yet.
	PortRefused bool
}

// failoverAction is what to do about the primary.
type failoverAction int

const (
	// actionNone: the primary is ready, or starting within its grace.
	actionNone failoverAction = iota
	// actionWait: not ready, still within the grace: look again after
	// RecheckAfter.
	actionWait
	// actionFailover: replace the primary with one of a higher epoch.
	actionFailover
)

func (a failoverAction) String() string {
	return [...]string{"none", "wait", "failover"}[a]
}

// failoverDecision is the verdict of decideFailover.
type failoverDecision struct {
	Action failoverAction
	// Reason (a condition and event reason) and Message say why.
	Reason  string
	Message string
	// RecheckAfter is when to look again (actionWait, and actionNone while
	// the Pod starts).
	RecheckAfter time.Duration
}

// decideFailover decides whether the primary must be replaced.
//
//   - Gone (no Pod), terminating, Failed or Succeeded: fail over at once.
//     Nothing can bring such a Pod back: Pods run with restartPolicy Never,
//     so a crashed process leaves a Failed Pod rather than a restarted
//     container (which would reuse its taken epoch and be refused by the
//     store, crash-looping). A terminating Pod is not waited for: its
//     replacement's higher epoch fences it, and waiting out its grace
//     period would only lengthen the outage.
//   - Its port refused a connection after it was ready: fail over at
//     once. Nothing listens there, so its process is gone; a refusal (not
//     a timeout) is never what a partition or a frozen process looks like.
//   - Ready, and not found unreachable by the operator's probes: nothing
//     to do.
//   - Not ready after having been ready (a hung process, a lost node whose
//     Pods the node controller marks not ready): fail over once it has
//     been not ready for grace, so that a blip of the readiness probe does
//     not cost a takeover.
//   - Never ready: the primary is starting (scheduling, image pull, the
//     takeover's lease wait and log replay). Fail over only after
//     startupGrace, which must exceed the longest plausible takeover:
//     failing over a slow but healthy takeover starts another one from
//     scratch.
func decideFailover(p primaryState, now time.Time, grace, startupGrace time.Duration) failoverDecision {
	switch {
	case !p.Exists:
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryGone, Message: "the primary Pod no longer exists"}
	case p.Terminating:
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryDeleted, Message: "the primary Pod is being deleted"}
	case p.Phase == corev1.PodFailed:
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryFailed, Message: "the primary Pod failed (its process exited with an error or was killed)"}
	case p.Phase == corev1.PodSucceeded:
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryExited, Message: "the primary's process exited"}
	case p.PortRefused:
		// Before Ready: the kubelet's report that it is not lags behind.
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryFailed, Message: "the primary's port refuses connections: its process is gone (the kubelet has not reported it yet)"}
	case p.Ready && !(p.Unreachable && p.EverReady):
		return failoverDecision{Action: actionNone, Reason: shalev1.ReasonPrimaryReady}
	case p.EverReady:
		since := p.NotReadySince
		if p.Ready {
			since = time.Time{} // Kubernetes' transition is to Ready: only the probes speak
		}
		reason, what := shalev1.ReasonPrimaryNotReady, "has not been ready"
		if p.Unreachable && !p.UnreachableSince.IsZero() && (since.IsZero() || p.UnreachableSince.Before(since)) {
			since = p.UnreachableSince
			reason, what = shalev1.ReasonPrimaryUnreachable, "has not answered the operator's health probes (while servers on other nodes did)"
		}
		if since.IsZero() || since.After(now) {
			since = now
		}
		if left := since.Add(grace).Sub(now); left > 0 {
			return failoverDecision{Action: actionWait, Reason: shalev1.ReasonPrimaryNotReady,
				Message:      fmt.Sprintf("the primary %s for %s; failing over after %s", what, now.Sub(since).Round(time.Second), grace),
				RecheckAfter: left}
		}
		return failoverDecision{Action: actionFailover, Reason: reason,
			Message: fmt.Sprintf("the primary %s for %s (failover grace %s)", what, now.Sub(since).Round(time.Second), grace)}
	default:
		created := p.Created
		if created.IsZero() || created.After(now) {
			created = now
		}
		if left := created.Add(startupGrace).Sub(now); left > 0 {
			return failoverDecision{Action: actionNone, Reason: shalev1.ReasonPrimaryStarting,
				Message: "the primary is starting", RecheckAfter: left}
		}
		return failoverDecision{Action: actionFailover, Reason: shalev1.ReasonStartTimeout,
			Message: fmt.Sprintf("the primary has not become ready in %s (startup grace)", startupGrace)}
	}
}

// observePrimary turns the Pod (nil when it does not exist) and the
// RocksDB's PrimaryAvailable condition into a primaryState. The condition
// says whether this Pod was seen ready: it is set False/PrimaryStarting
// whenever a new primary is created, True when it is seen ready, and
// False/PrimaryNotReady when it stops being ready after that.
func observePrimary(pod *corev1.Pod, available *metav1.Condition, seenReady bool) primaryState {
	if pod == nil {
		return primaryState{}
	}
	p := primaryState{
		Exists:      true,
		Terminating: pod.DeletionTimestamp != nil,
		Phase:       settledPhase(pod),
		Created:     pod.CreationTimestamp.Time,
	}
	var readyCond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			readyCond = &pod.Status.Conditions[i]
		}
	}
	p.Ready = readyCond != nil && readyCond.Status == corev1.ConditionTrue && p.Phase == corev1.PodRunning
	// seenReady (status.readyEpoch is this Pod's epoch) outlives the
	// condition, whose reason a refused failover replaces (DatabaseNotFound,
	// ObjectStoreUnreachable, a backoff): without it a primary that was
	// ready, then frozen while a failover was refused, was taken for one
	// still starting and waited out the 10-minute startup grace.
	p.EverReady = seenReady
	if available != nil {
		p.EverReady = p.EverReady || available.Status == metav1.ConditionTrue || available.Reason == shalev1.ReasonPrimaryNotReady
	}
	if p.EverReady && !p.Ready {
		// The kubelet's (or node controller's) transition time when it
		// has one; else when the operator first saw it not ready.
		switch {
		case readyCond != nil && readyCond.Status != corev1.ConditionTrue && !readyCond.LastTransitionTime.IsZero():
			p.NotReadySince = readyCond.LastTransitionTime.Time
		case available != nil && available.Status != metav1.ConditionTrue:
			p.NotReadySince = available.LastTransitionTime.Time
		}
	}
	return p
}

// settledPhase is the phase the Pod is bound for. With restartPolicy Never
// nothing restarts a container that exited, so once every container has
// terminated the Pod is as good as Failed (an exit code other than 0) or
// Succeeded. The kubelet reports the container's exit at its next relist
// (within a second), but the Pod's phase only after it has torn the Pod's
// sandbox down: 1.3 s later on kind (issue 29), which every failover after
// a crash waited for.
func settledPhase(pod *corev1.Pod) corev1.PodPhase {
	phase := pod.Status.Phase
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || (phase != corev1.PodRunning && phase != corev1.PodPending) ||
		len(pod.Spec.Containers) == 0 || len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return phase
	}
	settled := corev1.PodSucceeded
	for _, c := range pod.Spec.Containers {
		var st *corev1.ContainerStatus
		for i := range pod.Status.ContainerStatuses {
			if pod.Status.ContainerStatuses[i].Name == c.Name {
				st = &pod.Status.ContainerStatuses[i]
			}
		}
		if st == nil || st.State.Terminated == nil {
			return phase
		}
		if st.State.Terminated.ExitCode != 0 {
			settled = corev1.PodFailed
		}
	}
	return settled
}

// nextEpoch chooses the epoch of a new primary: one above both the highest
// epoch the operator handed out (status.epoch) and the highest epoch taken
// in storage, when the store could be listed.
//
// status.epoch alone is not enough: it is lost when a RocksDB's status is
// (a restore from a backup of the API objects writes no status; a
// primary started by hand takes epochs the operator never handed out). A
// primary whose epoch is not above every epoch in storage is refused by
// the store (ErrStaleEpoch) and exits, so a choice from status alone would
// converge too, one failed Pod per missing epoch; reading the store makes
// it one step. If the store cannot be listed, status.epoch+1 is still
// safe: correctness never depends on this choice, only the number of
// attempts.
func nextEpoch(statusEpoch int64, storageHighest uint64, storageKnown bool) (int64, error) {
	highest := uint64(max(statusEpoch, 0))
	if storageKnown && storageHighest > highest {
		highest = storageHighest
	}
	if highest >= math.MaxInt64 {
		return 0, fmt.Errorf("epoch %d is the highest representable: no new primary can be started", highest)
	}
	return int64(highest) + 1, nil
}
