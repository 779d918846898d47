package operator

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestDecideUpdate: an update switchover starts only for an outdated,
// unsupervised primary that is ready, after the secondaries rolled out,
// with no hold, switchover or failover running, past the backoff and with
// a slot free; supervised only announces.
func TestDecideUpdate(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	base := func() updateInput {
		return updateInput{Outdated: true, Strategy: shalev1.PrimaryUpdateUnsupervised, SecondariesRolledOut: true,
			PrimaryReady: true, Now: now, SlotFree: true}
	}
	type row struct {
		name    string
		mod     func(*updateInput)
		want    updateAction
		recheck time.Duration
	}
	rows := []row{
		{"up to date", func(in *updateInput) { in.Outdated = false }, updateNone, 0},
		{"up to date, supervised", func(in *updateInput) { in.Outdated = false; in.Strategy = shalev1.PrimaryUpdateSupervised }, updateNone, 0},
		{"outdated, rolled, all clear", func(*updateInput) {}, updateStart, 0},
		{"outdated, empty strategy is unsupervised", func(in *updateInput) { in.Strategy = "" }, updateStart, 0},
		{"outdated, supervised", func(in *updateInput) { in.Strategy = shalev1.PrimaryUpdateSupervised }, updateAnnounce, 0},
		{"outdated, supervised, secondaries rolling", func(in *updateInput) {
			in.Strategy = shalev1.PrimaryUpdateSupervised
			in.SecondariesRolledOut = false
		}, updateAnnounce, 0},
		{"outdated, secondaries rolling", func(in *updateInput) { in.SecondariesRolledOut = false }, updateWait, 0},
		{"outdated, hold", func(in *updateInput) { in.Held = true }, updateWait, 0},
		{"outdated, switchover running", func(in *updateInput) { in.SwitchoverRunning = true }, updateWait, 0},
		{"outdated, failover running", func(in *updateInput) { in.FailoverRunning = true }, updateWait, 0},
		{"outdated, primary not ready", func(in *updateInput) { in.PrimaryReady = false }, updateWait, 0},
		{"outdated, in backoff", func(in *updateInput) { in.NotBefore = now.Add(90 * time.Second) }, updateWait, 90 * time.Second},
		{"outdated, backoff over", func(in *updateInput) { in.NotBefore = now.Add(-time.Second) }, updateStart, 0},
		{"outdated, backoff ends now", func(in *updateInput) { in.NotBefore = now }, updateStart, 0},
		{"outdated, no slot free", func(in *updateInput) { in.SlotFree = false }, updateWait, updateSlotRecheck},
		{"outdated, hold and secondaries rolling", func(in *updateInput) { in.Held = true; in.SecondariesRolledOut = false }, updateWait, 0},
		{"outdated, failover running and in backoff", func(in *updateInput) {
			in.FailoverRunning = true
			in.NotBefore = now.Add(time.Hour)
		}, updateWait, 0},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mod(&in)
			d := decideUpdate(in)
			if d.Action != tc.want || d.RecheckAfter != tc.recheck {
				t.Fatalf("decideUpdate(%+v) = %v (%q, recheck %s), want %v (recheck %s)", in, d.Action, d.Message, d.RecheckAfter, tc.want, tc.recheck)
			}
			if d.Action == updateWait && d.Message == "" {
				t.Errorf("a wait must say why")
			}
		})
	}
}

// TestUpdateSwitchoverReason: an update starts a switchover through the
// annotation's path, after a request or a drain, and never while one
// runs.
func TestUpdateSwitchoverReason(t *testing.T) {
	now := time.Now()
	ready := primaryState{Exists: true, Phase: "Running", Ready: true, EverReady: true}
	for _, tc := range []struct {
		name   string
		in     switchoverInput
		action switchoverAction
		reason string
	}{
		{"update", switchoverInput{Update: true, Created: true, Epoch: 1, Primary: ready, Now: now}, switchoverStart, shalev1.ReasonPrimaryOutdated},
		{"request first", switchoverInput{Update: true, Request: "a", Created: true, Epoch: 1, Primary: ready, Now: now}, switchoverStart, shalev1.ReasonSwitchoverRequested},
		{"drain first", switchoverInput{Update: true, NodeDraining: true, Created: true, Epoch: 1, Primary: ready, Now: now}, switchoverStart, shalev1.ReasonPrimaryNodeDraining},
		{"not created", switchoverInput{Update: true, Epoch: 1, Primary: ready, Now: now}, switchoverNone, shalev1.ReasonPrimaryOutdated},
		{"no update", switchoverInput{Created: true, Epoch: 1, Primary: ready, Now: now}, switchoverNone, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideSwitchover(tc.in)
			if d.Action != tc.action || d.Reason != tc.reason {
				t.Fatalf("decideSwitchover = %v/%q, want %v/%q", d.Action, d.Reason, tc.action, tc.reason)
			}
		})
	}
}

// TestNextUpdateBackoff: 1 min after the first abandoned update
// switchover, doubling, at most 30 min.
func TestNextUpdateBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var st *shalev1.PrimaryUpdateStatus
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute} {
		st = nextUpdateBackoff(st, now)
		if st.Failures != int32(i+1) || st.NotBefore.Sub(now) != want {
			t.Fatalf("after %d abandoned: failures %d, wait %s; want %d, %s", i+1, st.Failures, st.NotBefore.Sub(now), i+1, want)
		}
	}
}

// TestPodSpecHash: the hash changes with what comes from the spec and the
// operator's image, not with the epoch, --existing or --standby.
func TestPodSpecHash(t *testing.T) {
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "ns"}}
	db.Status.StoragePath = "ns/orders-uid"
	store := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}}
	store.Spec.Endpoint, store.Spec.Hot.Bucket = "http://minio:9000", "b"
	h := func(db *shalev1.RocksDB, epoch int64, image string) string {
		return primaryPod(db, store, epoch, image).Annotations[shalev1.AnnotationPodSpecHash]
	}
	base := h(db, 1, "img:1")
	if base == "" {
		t.Fatal("no hash annotation on the primary Pod")
	}
	if got := h(db, 7, "img:1"); got != base {
		t.Errorf("the epoch changed the hash: %s vs %s", got, base)
	}
	created := db.DeepCopy()
	created.Status.Created = &shalev1.DatabaseLocation{}
	if got := h(created, 2, "img:1"); got != base {
		t.Errorf("--existing changed the hash: %s vs %s", got, base)
	}
	if got := standbyPod(created, store, 3, "img:1").Annotations[shalev1.AnnotationPodSpecHash]; got != base {
		t.Errorf("a standby's hash %s, want the primary's %s", got, base)
	}
	if got := h(db, 1, "img:2"); got == base {
		t.Error("a new operator image did not change the hash")
	}
	res := db.DeepCopy()
	res.Spec.Primary.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	if got := h(res, 1, "img:1"); got == base {
		t.Error("new resources did not change the hash")
	}
	// Tiering: the cold tier is in the hash, --cold-after (applied to
	// the running primary by SetTiering) is not.
	cold := store.DeepCopy()
	cold.Spec.Cold = &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: "cold"}}
	tiered := db.DeepCopy()
	tiered.Spec.Tiering = &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: time.Hour}}
	hc := func(db *shalev1.RocksDB) string {
		return primaryPod(db, cold, 1, "img:1").Annotations[shalev1.AnnotationPodSpecHash]
	}
	if hc(tiered) == hc(db) {
		t.Error("turning tiering on did not change the hash")
	}
	later := tiered.DeepCopy()
	later.Spec.Tiering.ColdAfter.Duration = 2 * time.Hour
	if hc(later) != hc(tiered) {
		t.Error("a new coldAfter changed the hash (SetTiering applies it without a switchover)")
	}
	// Where the database is does not count: an ObjectStore pointed
	// elsewhere is the failover's DatabaseNotFound, not an update.
	moved := store.DeepCopy()
	moved.Spec.Hot.Bucket = "elsewhere"
	if got := primaryPod(db, moved, 1, "img:1").Annotations[shalev1.AnnotationPodSpecHash]; got != base {
		t.Error("another bucket changed the hash")
	}
	gen := db.DeepCopy()
	gen.Generation = 9
	if got := h(gen, 1, "img:1"); got != base {
		t.Error("the generation alone changed the hash")
	}
}

// TestDeploymentRolledOut: the secondaries count as rolled out only with
// the current spec, observed, and every replica updated and available.
func TestDeploymentRolledOut(t *testing.T) {
	dep := func(hash string, gen, observed int64, replicas, updated, available int32) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen, Annotations: map[string]string{shalev1.AnnotationSpecHash: hash}}}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}
		return d
	}
	for _, tc := range []struct {
		d    *appsv1.Deployment
		want bool
	}{
		{dep("h", 2, 2, 3, 3, 3), true},
		{dep("old", 2, 2, 3, 3, 3), false},
		{dep("h", 3, 2, 3, 3, 3), false},
		{dep("h", 2, 2, 4, 3, 3), false}, // an old Pod still there
		{dep("h", 2, 2, 3, 2, 3), false},
		{dep("h", 2, 2, 3, 3, 2), false},
	} {
		if got, why := deploymentRolledOut(tc.d, "h", 3); got != tc.want {
			t.Errorf("%s: rolled out %v (%s), want %v", fmt.Sprintf("%+v %+v", tc.d.Annotations, tc.d.Status), got, why, tc.want)
		}
	}
}

// TestRestartedAtHash: kubectl shale restart's annotation rolls the
// primary and the secondaries (their hashes change with each new value)
// and changes nothing else: same args, env, resources, same Pod spec; no
// annotation (or another annotation) leaves both hashes as they were, so
// upgrading the operator rolls nothing.
func TestRestartedAtHash(t *testing.T) {
	db, store := secondaryFixture()
	with := func(v string, extra ...string) *shalev1.RocksDB {
		d := db.DeepCopy()
		d.Annotations = map[string]string{}
		for i := 0; i+1 < len(extra); i += 2 {
			d.Annotations[extra[i]] = extra[i+1]
		}
		if v != "" {
			d.Annotations[shalev1.AnnotationRestartedAt] = v
		}
		return d
	}
	prim := func(d *shalev1.RocksDB) *corev1.Pod { return primaryPod(d, store, 3, "img:1") }
	sec := func(d *shalev1.RocksDB) *appsv1.Deployment { return secondaryDeployment(d, store, "img:1") }
	ph := func(d *shalev1.RocksDB) string { return prim(d).Annotations[shalev1.AnnotationPodSpecHash] }
	sh := func(d *shalev1.RocksDB) string { return sec(d).Annotations[shalev1.AnnotationSpecHash] }

	base, sbase := ph(db), sh(db)
	other := with("", shalev1.AnnotationSwitchover, "2026-01-01T00:00:00Z", "team", "a")
	if ph(other) != base || sh(other) != sbase {
		t.Errorf("other annotations changed a hash: primary %s vs %s, secondaries %s vs %s", ph(other), base, sh(other), sbase)
	}
	r1, r2 := with("2026-11-26T10:00:00Z"), with("2026-11-26T11:00:00Z")
	if ph(r1) == base || ph(r2) == ph(r1) {
		t.Errorf("restartedAt did not change the primary's hash: none %s, first %s, second %s", base, ph(r1), ph(r2))
	}
	if sh(r1) == sbase || sh(r2) == sh(r1) {
		t.Errorf("restartedAt did not change the secondaries' hash: none %s, first %s, second %s", sbase, sh(r1), sh(r2))
	}
	if got := standbyPod(r1, store, 4, "img:1").Annotations[shalev1.AnnotationPodSpecHash]; got != ph(r1) {
		t.Errorf("a standby's hash %s, want the restarted primary's %s (else the switchover's Pod is outdated too)", got, ph(r1))
	}
	// Nothing else: the Pod specs are the same, only the annotation differs.
	p0, p1 := prim(db), prim(r1)
	if !equality.Semantic.DeepEqual(p0.Spec, p1.Spec) || !equality.Semantic.DeepEqual(p0.Labels, p1.Labels) {
		t.Error("restartedAt changed the primary Pod's spec or labels, want only its annotation")
	}
	if got := p1.Annotations[shalev1.AnnotationRestartedAt]; got != "2026-11-26T10:00:00Z" {
		t.Errorf("primary Pod annotation %s=%q, want the RocksDB's", shalev1.AnnotationRestartedAt, got)
	}
	s0, s1 := sec(db), sec(r1)
	if !equality.Semantic.DeepEqual(s0.Spec.Template.Spec, s1.Spec.Template.Spec) || !equality.Semantic.DeepEqual(s0.Spec.Template.Labels, s1.Spec.Template.Labels) {
		t.Error("restartedAt changed the secondaries' Pod template spec or labels, want only its annotation")
	}
	if len(s0.Spec.Template.Annotations) != 0 {
		t.Errorf("secondaries' template annotations %v without a restart, want none", s0.Spec.Template.Annotations)
	}
	if got := s1.Spec.Template.Annotations[shalev1.AnnotationRestartedAt]; got != "2026-11-26T10:00:00Z" {
		t.Errorf("secondaries' template annotation %q, want the RocksDB's", got)
	}
}
