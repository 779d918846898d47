package operator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestDecideHold is the decision table of hibernation and fencing by hand
// (RFC 0014): annotation x hold phase x Pod states, with a switchover
// running, a failover in backoff, deletion, a fence Pod that failed, and
// lifting.
func TestDecideHold(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ready := primaryState{Exists: true, Phase: corev1.PodRunning, Ready: true, EverReady: true}
	notReady := primaryState{Exists: true, Phase: corev1.PodRunning, EverReady: true, NotReadySince: now.Add(-5 * time.Second)}
	failed := primaryState{Exists: true, Phase: corev1.PodFailed, EverReady: true}
	succeeded := primaryState{Exists: true, Phase: corev1.PodSucceeded}
	terminating := primaryState{Exists: true, Terminating: true, Phase: corev1.PodRunning, Ready: true}
	starting := primaryState{Exists: true, Phase: corev1.PodPending, Created: now.Add(-time.Second)}
	running := primaryState{Exists: true, Phase: corev1.PodRunning}
	warming := &shalev1.SwitchoverStatus{FromEpoch: 4, ToEpoch: 5, Phase: shalev1.SwitchoverWarming}
	handing := &shalev1.SwitchoverStatus{FromEpoch: 4, ToEpoch: 5, Phase: shalev1.SwitchoverHandingOver}
	hold := func(p shalev1.HoldPhase, reason string, epoch int64, ago time.Duration) *shalev1.HoldStatus {
		return &shalev1.HoldStatus{Phase: p, Reason: reason, FromEpoch: 4, Epoch: epoch, StartedAt: metav1.NewTime(now.Add(-ago))}
	}
	fence, hib := shalev1.ReasonFenceRequested, shalev1.ReasonHibernationAsked
	cases := []struct {
		name   string
		in     holdInput
		want   holdAction
		reason string
		msg    string
	}{
		// No hold in place.
		{name: "nothing wanted", in: holdInput{Epoch: 4, Primary: ready}, want: holdNone},
		{name: "deleting, fence asked", in: holdInput{Fence: true, Deleting: true, Epoch: 4, Primary: ready}, want: holdNone},
		{name: "deleting, held", in: holdInput{Fence: true, Deleting: true, Epoch: 6, Hold: hold(shalev1.HoldHeld, fence, 6, time.Hour)}, want: holdNone},
		{name: "fence, ready primary: no step-down, fenced", in: holdInput{Fence: true, Epoch: 4, Primary: ready}, want: holdFence, reason: fence},
		{name: "fence, primary gone", in: holdInput{Fence: true, Epoch: 4}, want: holdFence, reason: fence},
		{name: "fence, failover in backoff (failed primary)", in: holdInput{Fence: true, Epoch: 4, Primary: failed}, want: holdFence, reason: fence},
		{name: "fence, switchover warming: abandoned by the fence", in: holdInput{Fence: true, Epoch: 4, Primary: ready, Switchover: warming}, want: holdFence, reason: fence},
		{name: "fence, switchover handing over: fenced at once", in: holdInput{Fence: true, Epoch: 4, Primary: ready, Switchover: handing}, want: holdFence, reason: fence},
		{name: "fence and hibernation: fenced, never a step-down", in: holdInput{Fence: true, Hibernate: true, Epoch: 4, Primary: ready}, want: holdFence, reason: fence},
		{name: "no primary ever", in: holdInput{Hibernate: true}, want: holdEmpty, reason: hib},
		{name: "hibernate, ready primary: step down", in: holdInput{Hibernate: true, Epoch: 4, Primary: ready}, want: holdStepDown, reason: hib},
		{name: "hibernate, primary not ready: fenced", in: holdInput{Hibernate: true, Epoch: 4, Primary: notReady}, want: holdFence, reason: hib, msg: "cannot step down"},
		{name: "hibernate, primary starting: fenced", in: holdInput{Hibernate: true, Epoch: 4, Primary: starting}, want: holdFence, reason: hib},
		{name: "hibernate, failover in backoff: fenced", in: holdInput{Hibernate: true, Epoch: 4, Primary: failed}, want: holdFence, reason: hib},
		{name: "hibernate, primary gone", in: holdInput{Hibernate: true, Epoch: 4}, want: holdFence, reason: hib},
		{name: "hibernate, primary terminating", in: holdInput{Hibernate: true, Epoch: 4, Primary: terminating}, want: holdFence, reason: hib},
		{name: "hibernate, switchover warming: abandoned first", in: holdInput{Hibernate: true, Epoch: 4, Primary: ready, Switchover: warming}, want: holdAbandonSwitchover},
		{name: "hibernate, switchover handing over: waited for", in: holdInput{Hibernate: true, Epoch: 4, Primary: ready, Switchover: handing}, want: holdWait},

		// Stepping down.
		{name: "stepping down: released", in: holdInput{Hibernate: true, Epoch: 4, Primary: ready, Released: true, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdSteppedDown},
		{name: "stepping down: exited 0", in: holdInput{Hibernate: true, Epoch: 4, Primary: succeeded, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdSteppedDown},
		{name: "stepping down: lifted meanwhile, released", in: holdInput{Epoch: 4, Primary: succeeded, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdSteppedDown},
		{name: "stepping down: lifted meanwhile, still stepping", in: holdInput{Epoch: 4, Primary: ready, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdStepDown},
		{name: "stepping down: asked again", in: holdInput{Hibernate: true, Epoch: 4, Primary: notReady, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdStepDown},
		{name: "stepping down: fence asked meanwhile", in: holdInput{Fence: true, Hibernate: true, Epoch: 4, Primary: ready, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdFence, reason: fence},
		{name: "stepping down: primary failed without release", in: holdInput{Hibernate: true, Epoch: 4, Primary: failed, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdFence, reason: hib, msg: "stopped before it released"},
		{name: "stepping down: primary gone without release", in: holdInput{Hibernate: true, Epoch: 4, Hold: hold(shalev1.HoldSteppingDown, hib, 4, time.Second)}, want: holdFence, reason: hib},
		{name: "stepping down: too long", in: holdInput{Hibernate: true, Epoch: 4, Primary: ready, Hold: hold(shalev1.HoldSteppingDown, hib, 4, handOverTimeout+time.Second)}, want: holdFence, reason: hib, msg: "did not release"},

		// Fencing.
		{name: "fencing: fence Pod running", in: holdInput{Fence: true, Epoch: 6, FencePod: running, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdWait},
		{name: "fencing: fence Pod missing", in: holdInput{Fence: true, Epoch: 6, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdCreateFencePod},
		{name: "fencing: succeeded", in: holdInput{Fence: true, Epoch: 6, FencePod: succeeded, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdFenced},
		{name: "fencing: failed, soon after it began: wait", in: holdInput{Fence: true, Epoch: 6, FencePod: failed, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdWait},
		{name: "fencing: failed: fence again", in: holdInput{Fence: true, Epoch: 6, FencePod: failed, Hold: hold(shalev1.HoldFencing, fence, 6, fenceRetry+time.Second)}, want: holdFence, reason: fence},
		{name: "fencing: fence Pod deleted by someone: fence again", in: holdInput{Fence: true, Epoch: 6, FencePod: terminating, Hold: hold(shalev1.HoldFencing, fence, 6, fenceRetry+time.Second)}, want: holdFence, reason: fence},
		{name: "fencing: lifted while running: the fence finishes first", in: holdInput{Epoch: 6, FencePod: running, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdWait},
		{name: "fencing: lifted, fence done", in: holdInput{Epoch: 6, FencePod: succeeded, Hold: hold(shalev1.HoldFencing, fence, 6, time.Second)}, want: holdFenced},
		{name: "fencing for a hibernation: succeeded", in: holdInput{Hibernate: true, Epoch: 6, FencePod: succeeded, Hold: hold(shalev1.HoldFencing, hib, 6, time.Second)}, want: holdFenced},

		// Held.
		{name: "held, fenced", in: holdInput{Fence: true, Epoch: 6, Hold: hold(shalev1.HoldHeld, fence, 6, time.Hour)}, want: holdHeld},
		{name: "held, hibernated", in: holdInput{Hibernate: true, Epoch: 4, Hold: hold(shalev1.HoldHeld, hib, 4, time.Hour)}, want: holdHeld},
		{name: "held, fenced, now hibernation instead", in: holdInput{Hibernate: true, Epoch: 6, Hold: hold(shalev1.HoldHeld, fence, 6, time.Hour)}, want: holdHeld},
		{name: "held, switchover asked meanwhile: nothing", in: holdInput{Fence: true, Epoch: 6, Hold: hold(shalev1.HoldHeld, fence, 6, time.Hour)}, want: holdHeld},
		{name: "unfenced", in: holdInput{Epoch: 6, Hold: hold(shalev1.HoldHeld, fence, 6, time.Hour)}, want: holdLift},
		{name: "resumed", in: holdInput{Epoch: 4, Hold: hold(shalev1.HoldHeld, hib, 4, time.Hour)}, want: holdLift},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Now = now
			d := decideHold(c.in)
			if d.Action != c.want {
				t.Fatalf("%s: got %s (%s), want %s", c.name, d.Action, d.Message, c.want)
			}
			if c.reason != "" && d.Reason != c.reason {
				t.Errorf("reason %q, want %q", d.Reason, c.reason)
			}
			if c.msg != "" && !strings.Contains(d.Message, c.msg) {
				t.Errorf("message %q lacks %q", d.Message, c.msg)
			}
		})
	}
}

// TestFencePod: the fence Pod runs `shale fence` with the primary's store
// flags only, no port, no probe, and a role no Service selects.
func TestFencePod(t *testing.T) {
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod", UID: "0a1b2c3d"},
		Spec: shalev1.RocksDBSpec{Primary: shalev1.PrimarySpec{
			Lease: &metav1.Duration{Duration: 2 * time.Second}, CacheSize: ptr.To(resource.MustParse("1Gi")),
		}},
		Status: shalev1.RocksDBStatus{StoragePath: "dbs/prod/orders-0a1b2c3d", Created: &shalev1.DatabaseLocation{}},
	}
	store := &shalev1.ObjectStore{Spec: shalev1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Credentials: &shalev1.SecretReference{Name: "creds"},
		Hot: shalev1.BucketLocation{Bucket: "data", Prefix: "dbs"},
	}}
	pod := fencePod(db, store, 7, "shale:test")
	c := pod.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if pod.Name != db.Name+"-fence-7" || pod.Labels[shalev1.LabelRole] != shalev1.RoleFence || c.Args[0] != "fence" {
		t.Fatalf("fence Pod %s, labels %v, args %s", pod.Name, pod.Labels, args)
	}
	for _, want := range []string{"--db ", "--epoch 7", "--existing", "--cache-dir /var/cache/shale", "--lease 2s"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	for _, not := range []string{"--listen", "--metrics-listen", "--cache-size"} {
		if strings.Contains(args, not) {
			t.Errorf("args %q have %q, which shale fence does not take", args, not)
		}
	}
	if c.ReadinessProbe != nil || len(c.Ports) != 0 || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("fence Pod: probe %v, ports %v, restart %s", c.ReadinessProbe, c.Ports, pod.Spec.RestartPolicy)
	}
}
