package kubectlshale

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
)

const samples = "../../config/samples/"

// sampleDB starts an API server and creates namespace ns holding the
// sample RocksDB, after adjust (if any) changed it.
func sampleDB(t *testing.T, ns string, adjust func(*shalev1.RocksDB)) (*testenv.Env, *shalev1.RocksDB) {
	t.Helper()
	env := testenv.Start(t, testenv.WithCRDDirs("../../config/crd/bases"), testenv.WithScheme(shalev1.AddToScheme))
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range env.Objects(t, samples+"shale_v1alpha1_rocksdb.yaml") {
		o.SetNamespace(ns)
		if d, ok := o.(*shalev1.RocksDB); ok {
			if adjust != nil {
				adjust(d)
			}
			if err := env.Client.Create(ctx, d); err != nil {
				t.Fatal(err)
			}
			return env, d
		}
	}
	t.Fatal("the sample has no RocksDB")
	return nil, nil
}

// TestPlugin runs the plugin's commands against a real API server holding
// a database as the operator leaves it (the status written here), and
// checks what a user reads: the status screen, the report's files (with no
// Secret in it, even one in the same namespace), and clear errors.
func TestPlugin(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDDirs("../../config/crd/bases"), testenv.WithScheme(shalev1.AddToScheme))
	ctx := context.Background()
	c := env.Client
	const ns = "shop"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	var db *shalev1.RocksDB
	const secretValue = "s3cr3t-value-never-in-a-report"
	for _, o := range env.Objects(t, samples+"objectstore-secret.yaml", samples+"shale_v1alpha1_objectstore.yaml", samples+"shale_v1alpha1_rocksdb.yaml") {
		o.SetNamespace(ns)
		switch o := o.(type) {
		case *corev1.Secret:
			o.StringData = map[string]string{shalev1.SecretKeyAccessKeyID: "AKIA", shalev1.SecretKeySecretAccessKey: secretValue}
		case *shalev1.RocksDB:
			db = o
			db.Spec.Secondaries.Replicas = 2
		}
		must(c.Create(ctx, o))
	}
	now := time.Now()
	db.Status = shalev1.RocksDBStatus{
		Phase: shalev1.PhaseDegraded, Epoch: 4, Failovers: 3, CurrentPrimary: db.Name + "-primary-4",
		LastFailoverTime: &metav1.Time{Time: now.Add(-10 * time.Minute)},
		StoragePath:      "dbs/shop/" + db.Name + "-uid", Secondaries: 1,
		SecondaryStatus: []shalev1.SecondaryStatus{
			{Pod: db.Name + "-secondary-a", AppliedSequence: 1200, LagSequences: 3, Lag: &metav1.Duration{Duration: 250 * time.Millisecond}, CheckedAt: metav1.Now()},
			{Pod: db.Name + "-secondary-b", Error: "connection refused", CheckedAt: metav1.Now()},
		},
		Tiers: []shalev1.TierStatus{{Tier: "hot", Files: 12, Bytes: 3 << 20}},
		Conditions: []metav1.Condition{
			{Type: shalev1.ConditionReady, Status: metav1.ConditionTrue, Reason: shalev1.ReasonPrimaryReady, Message: "primary serves", LastTransitionTime: metav1.Now()},
			{Type: shalev1.ConditionSecondariesReady, Status: metav1.ConditionFalse, Reason: "SecondariesNotReady", Message: "1 of 2 secondaries ready", LastTransitionTime: metav1.Now()},
		},
	}
	must(c.Status().Update(ctx, db))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-primary-4", Labels: db.PrimaryLabels(4)},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "shale", Image: "shale:test"}}}}
	must(c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "shale", RestartCount: 1, Image: "shale:test", ImageID: "x"}}}
	must(c.Status().Update(ctx, pod))
	must(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev1"},
		InvolvedObject: corev1.ObjectReference{Kind: "RocksDB", Namespace: ns, Name: db.Name},
		Reason:         "FailoverCompleted", Message: "epoch 4 serves", Type: corev1.EventTypeNormal, LastTimestamp: metav1.Now()}))
	must(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ev-other"},
		InvolvedObject: corev1.ObjectReference{Kind: "RocksDB", Namespace: ns, Name: "another"},
		Reason:         "SomethingElse", Message: "not this database", Type: corev1.EventTypeNormal, LastTimestamp: metav1.Now()}))
	ck := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"}, Spec: shalev1.CheckpointSpec{Database: db.Name}}
	must(c.Create(ctx, ck))
	ck.Status.Phase, ck.Status.Sequence = shalev1.CheckpointPhase("Ready"), 1150
	must(c.Status().Update(ctx, ck))

	run := func(args ...string) (string, error) {
		cmd := NewCommand(func() (Target, error) { return Target{Config: env.Config, Namespace: ns}, nil })
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}

	out, err := run("status", db.Name)
	must(err)
	t.Logf("status:\n%s", out)
	for _, want := range []string{
		"shop/" + db.Name, "Degraded, epoch 4, 3 failovers (last 10m ago)",
		db.Name + "-primary-4", "Running, ready, node node-a, 1 restarts",
		"dbs/shop/" + db.Name + "-uid", "1 of 2 ready",
		"applied 1200", "behind 3 (250ms)", "error: connection refused",
		"SecondariesReady", "1 of 2 secondaries ready",
		"Tier hot", "12 files", "3Mi",
		"last nightly: Ready, sequence 1150",
		"FailoverCompleted", "epoch 4 serves",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	if strings.Contains(out, "not this database") {
		t.Errorf("status shows another database's event")
	}
	// The condition that is not True comes before the ones that are.
	if i, j := strings.Index(out, "SecondariesReady"), strings.Index(out, "  Ready"); i < 0 || j < 0 || i > j {
		t.Errorf("SecondariesReady (False) should be listed before Ready (True)")
	}

	if _, err := run("status", "missing"); err == nil || !strings.Contains(err.Error(), "RocksDB missing in namespace shop") {
		t.Errorf("status of a missing database: %v, want an error naming it and the namespace", err)
	}
	if _, err := run("logs", db.Name, "--role", "nobody"); err == nil || !strings.Contains(err.Error(), "want primary, secondary or all") {
		t.Errorf("logs --role nobody: %v", err)
	}
	if _, err := run("logs", db.Name, "--role", "secondary"); err == nil || !strings.Contains(err.Error(), "has no secondary Pod now") {
		t.Errorf("logs of absent secondaries: %v", err)
	}

	// A switchover of a database that is not Ready is refused; of a Ready
	// one, asked for through the annotation the operator acts on.
	setReady := func(st metav1.ConditionStatus, phase shalev1.RocksDBPhase) {
		t.Helper()
		must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
		db.Status.Phase = phase
		for i := range db.Status.Conditions {
			if db.Status.Conditions[i].Type == shalev1.ConditionReady {
				db.Status.Conditions[i].Status = st
			}
		}
		must(c.Status().Update(ctx, db))
	}
	setReady(metav1.ConditionFalse, shalev1.PhaseFailingOver)
	if _, err := run("switchover", db.Name, "--wait", "0"); err == nil || !strings.Contains(err.Error(), "is not Ready (phase FailingOver)") {
		t.Errorf("switchover of a database failing over: %v, want a refusal naming the phase", err)
	}
	setReady(metav1.ConditionTrue, shalev1.PhaseReady)
	out, err = run("switchover", db.Name, "--wait", "0")
	must(err)
	var annotated shalev1.RocksDB
	must(c.Get(ctx, client.ObjectKeyFromObject(db), &annotated))
	if tok := annotated.Annotations[shalev1.AnnotationSwitchover]; tok == "" || !strings.Contains(out, "from epoch 4") {
		t.Errorf("switchover: annotation %q, output %q", tok, out)
	}
	// A switchover that never finishes: --wait says so and where to look.
	if _, err := run("switchover", db.Name, "--wait", "1s"); err == nil || !strings.Contains(err.Error(), "did not finish within 1s") {
		t.Errorf("switchover --wait 1s with no operator: %v", err)
	}

	// Fence, unfence, hibernate, resume: the annotations the operator acts
	// on, set and removed; --wait follows status.hold; refusals name why.
	if _, err := run("unfence", db.Name); err == nil || !strings.Contains(err.Error(), "is not fenced (it has no shale.rocks/fenced annotation)") {
		t.Errorf("unfence of a database not fenced: %v", err)
	}
	if _, err := run("resume", db.Name); err == nil || !strings.Contains(err.Error(), "is not hibernated") {
		t.Errorf("resume of a database not hibernated: %v", err)
	}
	if _, err := run("fence"); err == nil {
		t.Errorf("fence without a name: no error")
	}
	out, err = run("fence", db.Name, "--wait", "0")
	must(err)
	must(c.Get(ctx, client.ObjectKeyFromObject(db), &annotated))
	if annotated.Annotations[shalev1.AnnotationFenced] != "true" || !strings.Contains(out, "shale.rocks/fenced=true") {
		t.Errorf("fence: annotations %v, output %q", annotated.Annotations, out)
	}
	if _, err := run("fence", db.Name, "--wait", "1s"); err == nil || !strings.Contains(err.Error(), "fence of "+db.Name+" did not finish within 1s") {
		t.Errorf("fence --wait 1s with no operator: %v", err)
	}
	// The operator's part, played: held at epoch 5.
	must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
	db.Status.Phase, db.Status.Epoch = shalev1.PhaseFenced, 5
	db.Status.Hold = &shalev1.HoldStatus{Phase: shalev1.HoldHeld, Reason: shalev1.ReasonFenceRequested, FromEpoch: 4, Epoch: 5, StartedAt: metav1.Now()}
	must(c.Status().Update(ctx, db))
	out, err = run("fence", db.Name, "--wait", "10s")
	must(err)
	if !strings.Contains(out, "already has shale.rocks/fenced=true") || !strings.Contains(out, db.Name+" is fenced at epoch 5") {
		t.Errorf("fence of a fenced database: %q", out)
	}
	out, err = run("status", db.Name)
	must(err)
	if !strings.Contains(out, "Held") || !strings.Contains(out, "kubectl shale unfence|resume "+db.Name) {
		t.Errorf("status of a fenced database lacks the hold:\n%s", out)
	}
	out, err = run("hibernate", db.Name, "--wait", "0")
	must(err)
	if !strings.Contains(out, "shale.rocks/hibernation=on") {
		t.Errorf("hibernate: %q", out)
	}
	out, err = run("unfence", db.Name, "--wait", "10s")
	must(err)
	must(c.Get(ctx, client.ObjectKeyFromObject(db), &annotated))
	if _, ok := annotated.Annotations[shalev1.AnnotationFenced]; ok || annotated.Annotations[shalev1.AnnotationHibernation] != "on" || !strings.Contains(out, "stays fenced (the other annotation holds it)") {
		t.Errorf("unfence of a hibernated database: annotations %v, output %q", annotated.Annotations, out)
	}
	if _, err := run("resume", db.Name, "--wait", "1s"); err == nil || !strings.Contains(err.Error(), "resume of "+db.Name+" did not finish within 1s") {
		t.Errorf("resume --wait 1s with no operator: %v", err)
	}
	must(c.Get(ctx, client.ObjectKeyFromObject(db), &annotated))
	if _, ok := annotated.Annotations[shalev1.AnnotationHibernation]; ok {
		t.Errorf("resume left the annotation: %v", annotated.Annotations)
	}

	out, err = run("report", db.Name, "-o", "-", "--operator-namespace", "")
	must(err)
	files := untar(t, []byte(out))
	var names []string
	for n := range files {
		names = append(names, n)
	}
	t.Logf("report files: %v", names)
	for _, want := range []string{"rocksdb.yaml", "status.txt", "objectstore.yaml", "checkpoints.yaml", "pods.yaml", "services.yaml", "events.yaml", "README.txt"} {
		if _, ok := files[want]; !ok {
			t.Errorf("report lacks %s", want)
		}
	}
	if !strings.Contains(files["checkpoints.yaml"], "nightly") || !strings.Contains(files["pods.yaml"], db.Name+"-primary-4") ||
		!strings.Contains(files["status.txt"], "epoch 4") || !strings.Contains(files["events.yaml"], "FailoverCompleted") {
		t.Errorf("report files lack their content")
	}
	// No kubelet here: the logs cannot be read, which the report says, per
	// Pod, for the current and (one restart) the previous container.
	for _, f := range []string{"logs/" + db.Name + "-primary-4.log.error.txt", "logs/" + db.Name + "-primary-4.previous.log.error.txt"} {
		if files[f] == "" {
			t.Errorf("report lacks %s", f)
		}
	}
	for n, body := range files {
		if strings.Contains(body, secretValue) || strings.Contains(body, "kind: Secret") {
			t.Errorf("report file %s holds a Secret", n)
		}
	}
	var sec corev1.Secret
	must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shale-objectstore"}, &sec)) // it was there to be leaked
}

func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("report is not gzip: %v", err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(body)
	}
}

func TestOfDatabase(t *testing.T) {
	for _, tc := range []struct {
		kind, name string
		want       bool
	}{
		{"RocksDB", "orders", true},
		{"RocksDB", "orders-archive", false},
		{"Pod", "orders-primary-3", true},
		{"Pod", "orders-secondary-7b5469756d-fxcpn", true},
		{"Pod", "orders-archive-primary-1", false}, // another database's Pod
		{"Pod", "orders-primary-", false},
		{"Service", "orders-rw", true},
		{"Service", "orders-archive-rw", false},
		{"PodDisruptionBudget", "orders-primary", true},
		{"Deployment", "orders-secondary", true},
		{"Secret", "orders-primary-tls", false},
	} {
		if got := ofDatabase("orders", tc.kind, tc.name); got != tc.want {
			t.Errorf("ofDatabase(orders, %s %s) = %v, want %v", tc.kind, tc.name, got, tc.want)
		}
	}
}
