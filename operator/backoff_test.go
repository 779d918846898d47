package operator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestDecideRestart(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	base, max := 10*time.Second, 5*time.Minute
	failures := func(n int32, lastAt time.Time, gen int64) *shalev1.PrimaryFailures {
		return &shalev1.PrimaryFailures{Count: n, Recent: []shalev1.PrimaryFailure{
			{Epoch: 6, Time: metav1.NewTime(lastAt.Add(-time.Minute)), Reason: shalev1.ReasonPrimaryCrashed, Generation: gen},
			{Epoch: 7, Time: metav1.NewTime(lastAt), Reason: shalev1.ReasonOOMKilled, Message: "limit 256Mi", Generation: gen},
		}}
	}
	for _, tc := range []struct {
		name      string
		f         *shalev1.PrimaryFailures
		gen       int64
		reachable bool
		now       time.Time
		start     bool
		notBefore time.Time
		reason    string
		msg       string
	}{
		{name: "no failure: a deleted Pod is replaced at once", reachable: true, now: t0, start: true},
		{name: "first failure: fail over at once", f: failures(1, t0, 1), gen: 1, reachable: true, now: t0, start: true},
		{name: "second failure: wait base", f: failures(2, t0, 1), gen: 1, reachable: true, now: t0.Add(time.Second),
			notBefore: t0.Add(10 * time.Second), reason: shalev1.ReasonOOMKilled, msg: "2 primaries failed in a row, the last (epoch 7) with OOMKilled: limit 256Mi; the next primary starts at 2026-11-25T12:00:10Z (backoff 10s)"},
		{name: "second failure, base waited", f: failures(2, t0, 1), gen: 1, reachable: true, now: t0.Add(10 * time.Second), start: true},
		{name: "third failure: twice base", f: failures(3, t0, 1), gen: 1, reachable: true, now: t0.Add(19 * time.Second),
			notBefore: t0.Add(20 * time.Second), reason: shalev1.ReasonOOMKilled},
		{name: "fifth: 80s", f: failures(5, t0, 1), gen: 1, reachable: true, now: t0, notBefore: t0.Add(80 * time.Second), reason: shalev1.ReasonOOMKilled},
		{name: "capped", f: failures(40, t0, 1), gen: 1, reachable: true, now: t0.Add(4 * time.Minute),
			notBefore: t0.Add(5 * time.Minute), reason: shalev1.ReasonOOMKilled, msg: "(backoff 5m0s)"},
		{name: "capped, waited", f: failures(40, t0, 1), gen: 1, reachable: true, now: t0.Add(5 * time.Minute), start: true},
		{name: "spec changed since the last failure: at once", f: failures(9, t0, 1), gen: 2, reachable: true, now: t0, start: true},
		{name: "store unreachable: never", reachable: false, now: t0, reason: shalev1.ReasonObjectStoreUnreachable, msg: "while the ObjectStore is not reachable"},
		{name: "store unreachable after failures", f: failures(1, t0, 1), gen: 1, reachable: false, now: t0.Add(time.Hour), reason: shalev1.ReasonObjectStoreUnreachable},
		{name: "store unreachable, spec changed", f: failures(3, t0, 1), gen: 5, reachable: false, now: t0, reason: shalev1.ReasonObjectStoreUnreachable},
		{name: "count without recent failures (a hand edit)", f: &shalev1.PrimaryFailures{Count: 4}, reachable: true, now: t0, start: true},
	} {
		d := decideRestart(tc.f, tc.gen, tc.reachable, tc.now, base, max)
		if d.Start != tc.start || !d.NotBefore.Equal(tc.notBefore) || d.Reason != tc.reason || !strings.Contains(d.Message, tc.msg) {
			t.Errorf("%s: decideRestart = %+v; want start %v, not before %v, reason %q, message containing %q", tc.name, d, tc.start, tc.notBefore, tc.reason, tc.msg)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	base, max := 10*time.Second, 5*time.Minute
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, w := range want {
		n := int32(i + 2)
		if got := backoffDelay(n, base, max); got != w {
			t.Errorf("backoffDelay(%d) = %v, want %v", n, got, w)
		}
	}
	if got := backoffDelay(1<<30, base, max); got != max {
		t.Errorf("backoffDelay(2^30) = %v, want the cap %v", got, max)
	}
}

func TestClassifyFailure(t *testing.T) {
	failed := failoverDecision{Action: actionFailover, Reason: shalev1.ReasonPrimaryFailed, Message: "the primary Pod failed"}
	pod := func(state corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Args: []string{"primary", "--block-cache-size", "268435456"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: containerName, State: state}}},
		}
	}
	term := func(code int32, reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}
	}
	wait := func(reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
	}
	logs := "time=... level=INFO msg=\"opening\"\nshale: --db s3://shale/dbs/ns/orders-1: "
	evicted := pod(corev1.ContainerState{})
	evicted.Status.Reason, evicted.Status.Message = "Evicted", "The node was low on resource: ephemeral-storage."
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		d      failoverDecision
		reason string
		msg    string
	}{
		{"no Pod", nil, failed, shalev1.ReasonPrimaryFailed, "the primary Pod failed"},
		{"OOM killed", pod(term(137, "OOMKilled", "")), failed, shalev1.ReasonOOMKilled, "more memory than its limit (128Mi); its block cache is 268435456 bytes: raise spec.primary.resources.limits.memory or lower spec.primary.blockCacheSize"},
		// A limit too low for the container's init: runc's StartError (seen on kind with 4Mi).
		{"OOM killed at start", pod(term(128, "StartError", "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: container init was OOM-killed (memory limit too low?): unknown")), failed, shalev1.ReasonOOMKilled, "more memory than its limit (128Mi)"},
		{"database not found", pod(term(1, "Error", logs+"no database at the location: s3://shale/dbs/ns/orders-1 holds no database, and --existing says ...")), failed,
			shalev1.ReasonDatabaseNotFound, "shale: --db s3://shale/dbs/ns/orders-1: no database at the location"},
		{"invalid key", pod(term(1, "Error", logs+"s3 check bucket s3://shale/dbs: The Access Key Id you provided does not exist (HTTP 403 InvalidAccessKeyId); check AWS_ACCESS_KEY_ID")), failed,
			shalev1.ReasonBadCredentials, "the store refused the ObjectStore's credentials: shale: --db"},
		{"access denied", pod(term(1, "Error", logs+"s3 list: Access Denied. (HTTP 403 AccessDenied)")), failed, shalev1.ReasonBadCredentials, "AccessDenied"},
		{"cold tier refused", pod(term(1, "Error", logs+"--cold-db: the cold location has no marker ...")), failed, shalev1.ReasonColdTierRefused, "--cold-db: the cold location"},
		{"crash", pod(term(2, "Error", "panic: boom\n\ngoroutine 1 [running]:\nmain.main()")), failed, shalev1.ReasonPrimaryCrashed, "the primary exited with status 2: main.main()"},
		{"start error", pod(term(128, "StartError", "exec: \"shale\": executable file not found in $PATH")), failed, shalev1.ReasonPrimaryCrashed, "status 128 (StartError): exec"},
		{"clean exit", pod(term(0, "Completed", "")), failoverDecision{Reason: shalev1.ReasonPrimaryExited, Message: "the primary's process exited"}, shalev1.ReasonPrimaryExited, "exited"},
		{"image pull", pod(wait("ImagePullBackOff", "Back-off pulling image \"shale:typo\"")), failoverDecision{Reason: shalev1.ReasonStartTimeout}, shalev1.ReasonImagePullFailed, "ImagePullBackOff: Back-off pulling image"},
		{"secret without its key", pod(wait("CreateContainerConfigError", "couldn't find key AWS_ACCESS_KEY_ID in Secret ns/minio")), failoverDecision{Reason: shalev1.ReasonStartTimeout},
			shalev1.ReasonBadCredentials, "Secret cannot be used: couldn't find key"},
		{"still creating", pod(wait("ContainerCreating", "")), failoverDecision{Reason: shalev1.ReasonStartTimeout, Message: "not ready in 10m"}, shalev1.ReasonStartTimeout, "not ready in 10m"},
		{"evicted", evicted, failed, shalev1.ReasonPrimaryFailed, "Evicted: The node was low on resource"},
	} {
		reason, msg := classifyFailure(tc.pod, tc.d)
		if reason != tc.reason || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: classifyFailure = %s, %q; want %s, containing %q", tc.name, reason, msg, tc.reason, tc.msg)
		}
	}
}

func TestAddFailure(t *testing.T) {
	var f *shalev1.PrimaryFailures
	for e := int64(1); e <= 7; e++ {
		var added bool
		f, added = addFailure(f, shalev1.PrimaryFailure{Epoch: e, Reason: shalev1.ReasonOOMKilled}, false)
		if !added {
			t.Fatalf("epoch %d not added", e)
		}
		// Once per epoch: reconciles of the same failed Pod repeat it.
		if _, again := addFailure(f, shalev1.PrimaryFailure{Epoch: e}, false); again {
			t.Fatalf("epoch %d added twice", e)
		}
	}
	if f.Count != 7 || len(f.Recent) != maxRecentFailures || f.Recent[0].Epoch != 3 || f.Recent[4].Epoch != 7 {
		t.Errorf("after 7 failures: %+v; want count 7, the last %d (epochs 3..7)", f, maxRecentFailures)
	}
	long, _ := addFailure(nil, shalev1.PrimaryFailure{Epoch: 1, Message: strings.Repeat("x", 5000)}, false)
	if n := len(long.Recent[0].Message); n > 1024 {
		t.Errorf("message of %d bytes kept; the CRD allows 1024", n)
	}
	// A new row restarts the count, and keeps the history.
	row, _ := addFailure(f, shalev1.PrimaryFailure{Epoch: 8, Reason: shalev1.ReasonPrimaryCrashed}, true)
	if row.Count != 1 || len(row.Recent) != maxRecentFailures || row.Recent[4].Epoch != 8 {
		t.Errorf("new row: %+v; want count 1, epoch 8 last", row)
	}
}

func TestStartsNewRow(t *testing.T) {
	for _, tc := range []struct {
		wasReady bool
		reason   string
		want     bool
	}{
		{true, shalev1.ReasonPrimaryCrashed, true},  // a serving primary killed or crashed: fail over at once
		{true, shalev1.ReasonPrimaryNotReady, true}, // its node lost
		{true, shalev1.ReasonPrimaryFailed, true},
		{true, shalev1.ReasonOOMKilled, false}, // the next one exceeds the limit too
		// The operator's probes (RFC 0015): ready, but a row all the same,
		// so a recurring partial partition waits the backoff.
		{true, shalev1.ReasonPrimaryUnreachable, false},
		{false, shalev1.ReasonPrimaryCrashed, false},
		{false, shalev1.ReasonImagePullFailed, false},
		{false, shalev1.ReasonBadCredentials, false},
		{false, shalev1.ReasonStartTimeout, false},
	} {
		if got := startsNewRow(tc.wasReady, tc.reason); got != tc.want {
			t.Errorf("startsNewRow(%v, %s) = %v, want %v", tc.wasReady, tc.reason, got, tc.want)
		}
	}
}

func TestCountsAsFailure(t *testing.T) {
	for reason, want := range map[string]bool{
		shalev1.ReasonPrimaryFailed: true, shalev1.ReasonPrimaryExited: true, shalev1.ReasonPrimaryNotReady: true, shalev1.ReasonStartTimeout: true,
		shalev1.ReasonPrimaryGone: false, shalev1.ReasonPrimaryDeleted: false,
	} {
		if got := countsAsFailure(reason); got != want {
			t.Errorf("countsAsFailure(%s) = %v, want %v", reason, got, want)
		}
	}
}

func TestDescribeLocationChange(t *testing.T) {
	created := &shalev1.DatabaseLocation{Time: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), Endpoint: "http://minio:9000", Region: "us-east-1", Bucket: "shale"}
	store := func(endpoint, region, bucket string) *shalev1.ObjectStore {
		return &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "minio"}, Spec: shalev1.ObjectStoreSpec{
			Endpoint: endpoint, Region: region, Hot: shalev1.BucketLocation{Bucket: bucket, Prefix: "dbs"}, Credentials: &shalev1.SecretReference{Name: "creds"}}}
	}
	db := &shalev1.RocksDB{Status: shalev1.RocksDBStatus{StoragePath: "dbs/ns/orders-1", Created: created}}
	for _, tc := range []struct {
		name  string
		store *shalev1.ObjectStore
		want  []string
	}{
		{"endpoint", store("http://minio-2:9000", "us-east-1", "shale"), []string{"is not at s3://shale/dbs/ns/orders-1 at http://minio-2:9000", "ObjectStore minio now has endpoint http://minio-2:9000 (was http://minio:9000)", "created 2026-01-02T03:04:05Z", "delete the ObjectStore and create it again", "delete this RocksDB and create it again"}},
		{"bucket and region", store("http://minio:9000", "eu-west-1", "other"), []string{`region "eu-west-1" (was "us-east-1"), bucket other (was shale)`}},
		{"nothing changed", store("http://minio:9000", "us-east-1", "shale"), []string{"points where it was created: its data there was deleted, or the credentials of Secret creds reach another account"}},
	} {
		got := describeLocationChange(db, tc.store)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
}

// With the operator's default backoff, a primary that fails at once every
// time (a memory limit below what it needs at start) makes at most 5
// epochs in any 10 minutes (issue 22): each failure is recorded as the
// operator does and decideRestart says when the next primary starts.
func TestBackoffBoundsEpochs(t *testing.T) {
	o := DefaultOptions()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now := t0
	var f *shalev1.PrimaryFailures
	var starts []time.Time
	for epoch := int64(1); now.Before(t0.Add(time.Hour)); epoch++ {
		starts = append(starts, now)
		now = now.Add(time.Millisecond) // it fails as soon as it starts
		f, _ = addFailure(f, shalev1.PrimaryFailure{Epoch: epoch, Time: metav1.NewTime(now), Reason: shalev1.ReasonOOMKilled, Generation: 1}, false)
		if d := decideRestart(f, 1, true, now, o.FailoverBackoff, o.FailoverBackoffMax); !d.Start {
			now = d.NotBefore
		}
	}
	for i := range starts {
		j := i
		for j < len(starts) && starts[j].Sub(starts[i]) < 10*time.Minute {
			j++
		}
		if j-i > 5 {
			t.Fatalf("%d epochs in the 10 minutes from %s: %v", j-i, starts[i].Sub(t0), starts[i:j])
		}
	}
}
