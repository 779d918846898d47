package kubectlshale

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestRestart: kubectl shale restart sets shale.rocks/restartedAt (a new
// value each time), refuses a fenced or hibernated database, says that a
// supervised primary waits, and with --wait returns only once the
// secondaries' Deployment and the serving primary carry the new value.
func TestRestart(t *testing.T) {
	const ns = "rs"
	env, db := sampleDB(t, ns, func(d *shalev1.RocksDB) { d.Spec.Secondaries.Replicas = 1 })
	ctx := context.Background()
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := NewCommand(func() (Target, error) { return Target{Config: env.Config, Namespace: ns}, nil })
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	restartedAt := func() string {
		t.Helper()
		var cur shalev1.RocksDB
		must(c.Get(ctx, client.ObjectKeyFromObject(db), &cur))
		return cur.Annotations[shalev1.AnnotationRestartedAt]
	}

	out, err := run("restart", db.Name)
	must(err)
	first := restartedAt()
	if _, perr := time.Parse(time.RFC3339, first); perr != nil || !strings.Contains(out, "restart of rs/"+db.Name+" asked (shale.rocks/restartedAt="+first+")") {
		t.Errorf("restart: annotation %q, output %q", first, out)
	}
	if strings.Contains(out, "supervised") {
		t.Errorf("restart of an unsupervised database talks of supervision: %q", out)
	}
	_, err = run("restart", db.Name)
	must(err)
	if second := restartedAt(); second == first || second == "" {
		t.Errorf("a second restart left the annotation at %q (first %q): the same value rolls nothing", second, first)
	}
	if _, err := run("restart", db.Name, "--wait", "1s"); err == nil || !strings.Contains(err.Error(), "did not finish within 1s (secondaries:") {
		t.Errorf("restart --wait 1s with no operator: %v", err)
	}

	must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
	db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateSupervised
	db.Annotations[shalev1.AnnotationFenced] = "true"
	must(c.Update(ctx, db))
	if _, err := run("restart", db.Name); err == nil || !strings.Contains(err.Error(), "kubectl shale unfence|resume "+db.Name+" first") {
		t.Errorf("restart of a fenced database: %v", err)
	}
	delete(db.Annotations, shalev1.AnnotationFenced)
	must(c.Update(ctx, db))
	if _, err := run("restart"); err == nil {
		t.Error("restart without a name: no error")
	}

	// --wait, with the operator's part played once it sees the request:
	// the Deployment's template and the primary Pod get the value.
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	before := restartedAt()
	go func() { o, e := run("restart", db.Name, "--wait", "1m"); done <- result{o, e} }()
	var token string
	for token = restartedAt(); token == before; token = restartedAt() {
		select {
		case r := <-done:
			t.Fatalf("restart --wait returned before the operator acted: %q, %v", r.out, r.err)
		case <-time.After(50 * time.Millisecond): // polling the API server for the plugin's patch
		}
	}
	labels := db.SecondaryLabels()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.SecondaryDeploymentName()},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: db.SecondarySelector()},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{shalev1.AnnotationRestartedAt: token}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "shale:test"}}}}}}
	must(c.Create(ctx, dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	must(c.Status().Update(ctx, dep))
	r := <-done
	if r.err != nil || !strings.Contains(r.out, "primaryUpdateStrategy is supervised") || !strings.Contains(r.out, "secondaries restarted; the primary waits for `kubectl shale switchover "+db.Name+"` (supervised)") {
		t.Errorf("supervised restart --wait: %q, %v", r.out, r.err)
	}

	// Unsupervised: --wait also waits for the primary.
	must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
	db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateUnsupervised
	must(c.Update(ctx, db))
	db.Status = shalev1.RocksDBStatus{Phase: shalev1.PhaseReady, Epoch: 3, CurrentPrimary: db.PrimaryPodName(3), Conditions: []metav1.Condition{
		{Type: shalev1.ConditionReady, Status: metav1.ConditionTrue, Reason: "PrimaryReady", LastTransitionTime: metav1.Now()},
		{Type: shalev1.ConditionPrimaryUpToDate, Status: metav1.ConditionTrue, Reason: "UpToDate", LastTransitionTime: metav1.Now()},
	}}
	must(c.Status().Update(ctx, db))
	before = restartedAt()
	go func() { o, e := run("restart", db.Name, "--wait", "1m"); done <- result{o, e} }()
	for token = restartedAt(); token == before; token = restartedAt() {
		select {
		case r := <-done:
			t.Fatalf("restart --wait returned before the operator acted: %q, %v", r.out, r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	must(c.Get(ctx, client.ObjectKeyFromObject(dep), dep))
	dep.Spec.Template.Annotations[shalev1.AnnotationRestartedAt] = token
	must(c.Update(ctx, dep))
	dep.Status.ObservedGeneration = dep.Generation
	must(c.Status().Update(ctx, dep))
	// The old primary (no restartedAt) is up to date by the stale
	// condition: --wait must not return on it.
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.PrimaryPodName(3), Labels: db.PrimaryLabels(3)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "shale:test"}}}}
	must(c.Create(ctx, old))
	select {
	case r := <-done:
		t.Fatalf("restart --wait returned while the primary had not restarted: %q, %v", r.out, r.err)
	case <-time.After(2 * time.Second): // a few of the plugin's polls
	}
	must(c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.PrimaryPodName(4), Labels: db.PrimaryLabels(4),
		Annotations: map[string]string{shalev1.AnnotationRestartedAt: token}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "shale:test"}}}}))
	must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
	db.Status.Epoch, db.Status.CurrentPrimary = 4, db.PrimaryPodName(4)
	must(c.Status().Update(ctx, db))
	r = <-done
	if r.err != nil || !strings.Contains(r.out, db.Name+" restarted: primary "+db.PrimaryPodName(4)+" at epoch 4") {
		t.Errorf("restart --wait: %q, %v", r.out, r.err)
	}
}
