package operator

import (
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestDecideFailover(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	const grace, startup = 5 * time.Second, 10 * time.Minute
	running := func(p primaryState) primaryState {
		p.Exists, p.Phase = true, corev1.PodRunning
		if p.Created.IsZero() {
			p.Created = now.Add(-time.Hour)
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		p      primaryState
		action failoverAction
		reason string
		after  time.Duration
	}{
		{"gone", primaryState{}, actionFailover, shalev1.ReasonPrimaryGone, 0},
		{"terminating-ready", running(primaryState{Terminating: true, Ready: true, EverReady: true}), actionFailover, shalev1.ReasonPrimaryDeleted, 0},
		{"failed", primaryState{Exists: true, Phase: corev1.PodFailed, EverReady: true}, actionFailover, shalev1.ReasonPrimaryFailed, 0},
		{"failed-while-starting", primaryState{Exists: true, Phase: corev1.PodFailed, Created: now}, actionFailover, shalev1.ReasonPrimaryFailed, 0},
		{"succeeded", primaryState{Exists: true, Phase: corev1.PodSucceeded}, actionFailover, shalev1.ReasonPrimaryExited, 0},
		{"ready", running(primaryState{Ready: true, EverReady: true}), actionNone, shalev1.ReasonPrimaryReady, 0},
		// Its port refused a connection: the process is gone, though the
		// kubelet still reports the Pod ready.
		{"port-refused-still-ready", running(primaryState{Ready: true, EverReady: true, PortRefused: true}), actionFailover, shalev1.ReasonPrimaryFailed, 0},
		{"port-refused-not-ready", running(primaryState{EverReady: true, NotReadySince: now, PortRefused: true}), actionFailover, shalev1.ReasonPrimaryFailed, 0},
		{"not-ready-within-grace", running(primaryState{EverReady: true, NotReadySince: now.Add(-2 * time.Second)}), actionWait, shalev1.ReasonPrimaryNotReady, 3 * time.Second},
		{"not-ready-at-grace", running(primaryState{EverReady: true, NotReadySince: now.Add(-grace)}), actionFailover, shalev1.ReasonPrimaryNotReady, 0},
		{"not-ready-past-grace", running(primaryState{EverReady: true, NotReadySince: now.Add(-time.Minute)}), actionFailover, shalev1.ReasonPrimaryNotReady, 0},
		// An unknown start of unreadiness counts from now: wait a grace.
		{"not-ready-since-unknown", running(primaryState{EverReady: true}), actionWait, shalev1.ReasonPrimaryNotReady, grace},
		// Clock skew: a transition in the future counts from now.
		{"not-ready-since-future", running(primaryState{EverReady: true, NotReadySince: now.Add(time.Hour)}), actionWait, shalev1.ReasonPrimaryNotReady, grace},
		// RFC 0015: Kubernetes still says Ready (a dead node reports
		// nothing), the operator's probes say unreachable.
		{"ready-unreachable", running(primaryState{Ready: true, EverReady: true, Unreachable: true, UnreachableSince: now.Add(-grace - time.Second)}), actionFailover, shalev1.ReasonPrimaryUnreachable, 0},
		{"ready-unreachable-within-grace", running(primaryState{Ready: true, EverReady: true, Unreachable: true, UnreachableSince: now.Add(-2 * time.Second)}), actionWait, shalev1.ReasonPrimaryNotReady, 3 * time.Second},
		// A Ready transition of the Pod is not a time it went not ready.
		{"ready-unreachable-since-unknown", running(primaryState{Ready: true, EverReady: true, Unreachable: true, NotReadySince: now.Add(-time.Hour)}), actionWait, shalev1.ReasonPrimaryNotReady, grace},
		// Not ready for Kubernetes too, for longer: its own reason.
		{"not-ready-and-unreachable", running(primaryState{EverReady: true, NotReadySince: now.Add(-time.Minute), Unreachable: true, UnreachableSince: now.Add(-10 * time.Second)}), actionFailover, shalev1.ReasonPrimaryNotReady, 0},
		{"unreachable-before-not-ready", running(primaryState{EverReady: true, NotReadySince: now.Add(-time.Second), Unreachable: true, UnreachableSince: now.Add(-10 * time.Second)}), actionFailover, shalev1.ReasonPrimaryUnreachable, 0},
		// A primary never seen ready is starting: probes do not judge it.
		{"starting-unreachable", running(primaryState{Ready: true, Unreachable: true, UnreachableSince: now.Add(-time.Minute), Created: now.Add(-time.Minute)}), actionNone, shalev1.ReasonPrimaryReady, 0},
		{"starting", running(primaryState{Created: now.Add(-time.Minute)}), actionNone, shalev1.ReasonPrimaryStarting, startup - time.Minute},
		{"pending", primaryState{Exists: true, Phase: corev1.PodPending, Created: now.Add(-time.Minute)}, actionNone, shalev1.ReasonPrimaryStarting, startup - time.Minute},
		// Never ready: the failover grace does not apply, only the startup
		// grace (a takeover waits out the old lease and replays logs).
		{"starting-past-grace", running(primaryState{Created: now.Add(-time.Minute), NotReadySince: now.Add(-time.Minute)}), actionNone, shalev1.ReasonPrimaryStarting, startup - time.Minute},
		{"start-timeout", running(primaryState{Created: now.Add(-startup)}), actionFailover, shalev1.ReasonStartTimeout, 0},
		{"pending-timeout", primaryState{Exists: true, Phase: corev1.PodPending, Created: now.Add(-time.Hour)}, actionFailover, shalev1.ReasonStartTimeout, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFailover(tc.p, now, grace, startup)
			if d.Action != tc.action || d.Reason != tc.reason || d.RecheckAfter != tc.after {
				t.Errorf("decideFailover = %v %s after %v (%q), want %v %s after %v", d.Action, d.Reason, d.RecheckAfter, d.Message, tc.action, tc.reason, tc.after)
			}
			if d.Action == actionFailover && d.Message == "" {
				t.Errorf("a failover without a message")
			}
		})
	}
}

func TestObservePrimary(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	pod := func(phase corev1.PodPhase, ready corev1.ConditionStatus, since time.Time) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}
		p.Status.Phase = phase
		if ready != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}
		}
		return p
	}
	cond := func(s metav1.ConditionStatus, reason string, at time.Time) *metav1.Condition {
		return &metav1.Condition{Type: shalev1.ConditionPrimaryAvailable, Status: s, Reason: reason, LastTransitionTime: metav1.NewTime(at)}
	}
	exited := func(p *corev1.Pod, restart corev1.RestartPolicy, code int32) *corev1.Pod {
		p.Spec.RestartPolicy = restart
		p.Spec.Containers = []corev1.Container{{Name: containerName}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
		return p
	}
	deleting := pod(corev1.PodRunning, corev1.ConditionTrue, t0)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		cond      *metav1.Condition
		seenReady bool
		want      primaryState
	}{
		{"none", nil, cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), false, primaryState{}},
		{"ready", pod(corev1.PodRunning, corev1.ConditionTrue, t0), cond(metav1.ConditionFalse, shalev1.ReasonPrimaryStarting, t0), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, Ready: true, Created: t0}},
		{"starting", pod(corev1.PodRunning, corev1.ConditionFalse, t0), cond(metav1.ConditionFalse, shalev1.ReasonPrimaryStarting, t0), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, Created: t0}},
		{"lost-readiness", pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		{"lost-readiness-seen-before", pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), cond(metav1.ConditionFalse, shalev1.ReasonPrimaryNotReady, t0.Add(2*time.Minute)), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		// No Ready condition on the Pod: the operator's own observation.
		{"no-pod-condition", pod(corev1.PodRunning, "", time.Time{}), cond(metav1.ConditionFalse, shalev1.ReasonPrimaryNotReady, t0.Add(2*time.Minute)), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: t0.Add(2 * time.Minute), Created: t0}},
		// A Ready condition left over on a Pod that is not running.
		{"failed-ready", pod(corev1.PodFailed, corev1.ConditionTrue, t0), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), false,
			primaryState{Exists: true, Phase: corev1.PodFailed, EverReady: true, Created: t0}},
		{"terminating", deleting, nil, false, primaryState{Exists: true, Terminating: true, Phase: corev1.PodRunning, Ready: true, Created: t0}},
		// The process was killed: the kubelet reported the container's
		// exit, not yet the Pod's phase (it tears the sandbox down first).
		{"killed-phase-not-yet-failed", exited(pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), corev1.RestartPolicyNever, 137), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), true,
			primaryState{Exists: true, Phase: corev1.PodFailed, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		{"exited-0-phase-not-yet-succeeded", exited(pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), corev1.RestartPolicyNever, 0), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), true,
			primaryState{Exists: true, Phase: corev1.PodSucceeded, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		// A container the kubelet restarts is not the end of its Pod.
		{"exited-restartable", exited(pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), corev1.RestartPolicyOnFailure, 1), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), true,
			primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		// Only one of two containers exited: still running.
		{"one-of-two-exited", func() *corev1.Pod {
			p := exited(pod(corev1.PodRunning, corev1.ConditionTrue, t0), corev1.RestartPolicyNever, 137)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other"})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "other", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
			return p
		}(), cond(metav1.ConditionTrue, shalev1.ReasonPrimaryReady, t0), true,
			primaryState{Exists: true, Phase: corev1.PodRunning, Ready: true, EverReady: true, Created: t0}},
		// Seen ready (status.readyEpoch), then frozen while a failover was
		// refused, which replaced the condition's reason: not starting.
		{"refused-failover-of-a-ready-primary", pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), cond(metav1.ConditionFalse, shalev1.ReasonDatabaseNotFound, t0.Add(2*time.Minute)), true,
			primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: t0.Add(time.Minute), Created: t0}},
		{"refused-failover-never-seen-ready", pod(corev1.PodRunning, corev1.ConditionFalse, t0.Add(time.Minute)), cond(metav1.ConditionFalse, shalev1.ReasonDatabaseNotFound, t0.Add(2*time.Minute)), false,
			primaryState{Exists: true, Phase: corev1.PodRunning, Created: t0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := observePrimary(tc.pod, tc.cond, tc.seenReady)
			if got.NotReadySince.IsZero() != tc.want.NotReadySince.IsZero() || !got.NotReadySince.Equal(tc.want.NotReadySince) {
				t.Errorf("NotReadySince = %v, want %v", got.NotReadySince, tc.want.NotReadySince)
			}
			got.NotReadySince, tc.want.NotReadySince = time.Time{}, time.Time{}
			if !got.Created.Equal(tc.want.Created) {
				t.Errorf("Created = %v, want %v", got.Created, tc.want.Created)
			}
			got.Created, tc.want.Created = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("observePrimary = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNextEpoch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int64
		storage uint64
		known   bool
		want    int64
		wantErr bool
	}{
		{"first", 0, 0, true, 1, false},
		{"from-status", 4, 4, true, 5, false},
		{"status-ahead", 7, 3, true, 8, false}, // epochs handed out whose primaries never claimed them
		{"storage-ahead", 2, 9, true, 10, false},
		{"status-lost", 0, 5, true, 6, false},
		{"store-unlistable", 4, 0, false, 5, false},
		{"store-unlistable-ignores-value", 4, 100, false, 5, false},
		{"negative-status", -3, 0, true, 1, false},
		{"exhausted", math.MaxInt64, 0, true, 0, true},
		{"storage-exhausted", 1, math.MaxInt64, true, 0, true},
		{"storage-beyond-int64", 1, math.MaxUint64, true, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nextEpoch(tc.status, tc.storage, tc.known)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("nextEpoch(%d, %d, %v) = %d, %v; want %d, error %v", tc.status, tc.storage, tc.known, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
