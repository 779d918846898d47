package operator

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestDecideSwitchover(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Minute
	ready := primaryState{Exists: true, Phase: corev1.PodRunning, Ready: true, EverReady: true}
	warming := primaryState{Exists: true, Phase: corev1.PodRunning}
	failed := primaryState{Exists: true, Phase: corev1.PodFailed}
	exited := primaryState{Exists: true, Phase: corev1.PodSucceeded}
	deleting := primaryState{Exists: true, Phase: corev1.PodRunning, Ready: true, Terminating: true}
	steppingDown := primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true} // NOT_SERVING while it steps down
	run := func(phase shalev1.SwitchoverPhase, ago time.Duration) *shalev1.SwitchoverStatus {
		return &shalev1.SwitchoverStatus{Reason: shalev1.ReasonSwitchoverRequested, Request: "r1", FromEpoch: 3, ToEpoch: 4, Phase: phase, StartedAt: metav1.NewTime(now.Add(-ago))}
	}
	base := switchoverInput{Created: true, Epoch: 3, Primary: ready, LastRequest: "r0", Now: now, StandbyGrace: grace}
	for _, tc := range []struct {
		name   string
		in     func(in *switchoverInput)
		want   switchoverAction
		reason string
	}{
		// Triggers.
		{"nothing asked", func(in *switchoverInput) {}, switchoverNone, ""},
		{"annotation already acted on", func(in *switchoverInput) { in.Request = "r0" }, switchoverNone, ""},
		{"new annotation value", func(in *switchoverInput) { in.Request = "r1" }, switchoverStart, shalev1.ReasonSwitchoverRequested},
		{"first annotation", func(in *switchoverInput) { in.Request, in.LastRequest = "now", "" }, switchoverStart, shalev1.ReasonSwitchoverRequested},
		{"node cordoned", func(in *switchoverInput) { in.NodeDraining = true }, switchoverStart, shalev1.ReasonPrimaryNodeDraining},
		{"asked before the database was ever ready", func(in *switchoverInput) { in.Request, in.Created = "r1", false }, switchoverNone, shalev1.ReasonSwitchoverRequested},
		{"asked while the primary is not ready: the failover logic acts", func(in *switchoverInput) { in.Request, in.Primary = "r1", steppingDown }, switchoverNone, shalev1.ReasonSwitchoverRequested},
		{"drain of a failed primary: failover, not switchover", func(in *switchoverInput) { in.NodeDraining, in.Primary = true, failed }, switchoverNone, shalev1.ReasonPrimaryNodeDraining},
		{"drain of a primary being deleted", func(in *switchoverInput) { in.NodeDraining, in.Primary = true, deleting }, switchoverNone, shalev1.ReasonPrimaryNodeDraining},

		// Warming.
		{"standby Pod not there yet", func(in *switchoverInput) { in.Running = run(shalev1.SwitchoverWarming, time.Second) }, switchoverCreateStandby, ""},
		{"standby warming", func(in *switchoverInput) {
			in.Running, in.Standby = run(shalev1.SwitchoverWarming, time.Minute), warming
		}, switchoverWait, ""},
		{"standby warm: step down", func(in *switchoverInput) {
			in.Running, in.Standby = run(shalev1.SwitchoverWarming, time.Minute), ready
		}, switchoverStepDown, ""},
		{"standby not warm within the grace", func(in *switchoverInput) {
			in.Running, in.Standby = run(shalev1.SwitchoverWarming, grace+time.Second), warming
		}, switchoverAbandon, ""},
		{"standby failed while warming", func(in *switchoverInput) {
			in.Running, in.Standby = run(shalev1.SwitchoverWarming, time.Minute), failed
		}, switchoverAbandon, ""},
		{"standby deleted while warming", func(in *switchoverInput) {
			in.Running, in.Standby = run(shalev1.SwitchoverWarming, time.Minute), deleting
		}, switchoverAbandon, ""},
		{"primary failed while the standby warms: failover wins", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverWarming, time.Minute), ready, failed
		}, switchoverAbandon, ""},
		{"primary deleted while the standby warms", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverWarming, time.Minute), warming, deleting
		}, switchoverAbandon, ""},
		{"primary gone while the standby warms", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverWarming, time.Minute), warming, primaryState{}
		}, switchoverAbandon, ""},
		{"a failover moved the epoch meanwhile", func(in *switchoverInput) {
			in.Running, in.Standby, in.Epoch = run(shalev1.SwitchoverWarming, time.Minute), warming, 5
		}, switchoverAbandon, ""},
		{"a new annotation value while one runs: the running one goes on", func(in *switchoverInput) {
			in.Running, in.Standby, in.Request = run(shalev1.SwitchoverWarming, time.Minute), warming, "r2"
		}, switchoverWait, ""},

		// Handing over.
		{"stepping down: ask again", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), ready, steppingDown
		}, switchoverStepDown, ""},
		{"released: complete", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary, in.Released = run(shalev1.SwitchoverHandingOver, time.Minute), ready, steppingDown, true
		}, switchoverComplete, ""},
		{"the old primary exited 0 (after its release)", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), ready, exited
		}, switchoverComplete, ""},
		{"released, then the standby died: complete (the failover logic replaces it)", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary, in.Released = run(shalev1.SwitchoverHandingOver, time.Minute), failed, exited, true
		}, switchoverComplete, ""},
		{"released and the old Pod deleted (a drain's eviction)", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary, in.Released = run(shalev1.SwitchoverHandingOver, time.Minute), ready, deleting, true
		}, switchoverComplete, ""},
		{"old primary killed before its release", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), ready, failed
		}, switchoverAbandon, ""},
		{"old primary deleted before its release", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), ready, deleting
		}, switchoverAbandon, ""},
		{"standby died before the release", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), failed, steppingDown
		}, switchoverAbandon, ""},
		{"standby gone before the release", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, time.Minute), primaryState{}, steppingDown
		}, switchoverAbandon, ""},
		{"a frozen primary never releases", func(in *switchoverInput) {
			in.Running, in.Standby, in.Primary = run(shalev1.SwitchoverHandingOver, grace+handOverTimeout+time.Second), ready, steppingDown
		}, switchoverAbandon, ""},
	} {
		in := base
		tc.in(&in)
		d := decideSwitchover(in)
		if d.Action != tc.want || (tc.reason != "" && d.Reason != tc.reason) {
			t.Errorf("%s: %s (%s: %s), want %s %s", tc.name, d.Action, d.Reason, d.Message, tc.want, tc.reason)
		}
		if d.Action == switchoverAbandon && d.Message == "" {
			t.Errorf("%s: abandoned without saying why", tc.name)
		}
	}
}
