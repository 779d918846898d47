package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/objstore"
)

// testSecondaries: spec.secondaries.replicas 2 on the samples' RocksDB,
// in its own namespace. envtest has no Deployment controller and no
// garbage collector either: the test writes the Deployment's status, and
// removes the foreground-deletion finalizer, itself.
func testSecondaries(h *harness) {
	t := h.t
	ns := h.namespace("secondaries")
	sec, store, db := h.samples(ns)
	db.Spec.Secondaries.Replicas = 2
	db.Spec.Secondaries.CatchupInterval = &metav1.Duration{Duration: 500 * time.Millisecond}
	// The primary's spec changes below; this test plays failovers by
	// hand, so no update switchover (rolling.go) may replace it first.
	db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateSupervised
	h.create(sec, store, db)

	// NAME-ro at once; the Deployment only once the primary is available
	// (before, the database may not exist and secondaries would crash).
	svc := h.waitService(ns, "orders-ro")
	wantSel := map[string]string{shalev1.LabelRocksDB: "orders", shalev1.LabelRole: shalev1.RoleSecondary}
	if !maps.Equal(svc.Spec.Selector, wantSel) || svc.Spec.Ports[0].Port != portKV || svc.Spec.Ports[0].TargetPort.StrVal != portNameKV {
		t.Errorf("orders-ro: selector %v ports %+v", svc.Spec.Selector, svc.Spec.Ports)
	}
	h.waitDB(ns, "orders", "secondaries wait for the primary", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionFalse, shalev1.ReasonWaitingForPrimary), "want WaitingForPrimary"
	})
	if dep, err := h.deployment(ns, "orders-secondary"); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment %v (err %v) before the primary was available", dep.Name, err)
	}
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())

	dep := h.waitDeployment(ns, "orders-secondary")
	db = h.db(ns, "orders")
	if !metav1.IsControlledBy(dep, db) || !metav1.IsControlledBy(svc, db) {
		t.Errorf("owners: Deployment %v, Service %v; want the RocksDB", dep.OwnerReferences, svc.OwnerReferences)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	if !maps.Equal(dep.Spec.Selector.MatchLabels, wantSel) || dep.Spec.Template.Labels[shalev1.LabelRole] != shalev1.RoleSecondary {
		t.Errorf("selector %v, Pod labels %v", dep.Spec.Selector.MatchLabels, dep.Spec.Template.Labels)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	args := " " + strings.Join(ctr.Args, " ") + " "
	for _, want := range []string{
		" secondary ", " --db s3://shale/" + db.Status.StoragePath + " ", " --listen :7071 ", " --primary orders-rw.secondaries.svc:7070 ",
		" --id $(POD_NAME) ", " --cache-dir /var/cache/shale ", " --catchup-interval 500ms ",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if ctr.Image != "shale.local/shale:test" {
		t.Errorf("image %q, want the operator's default", ctr.Image)
	}
	if p := ctr.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, healthCommand(7071)) {
		t.Errorf("readiness probe %+v, want `shale health` on 7071", p)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	if env[objstore.EnvEndpoint].Value != h.minio.Endpoint {
		t.Errorf("%s = %q, want %q", objstore.EnvEndpoint, env[objstore.EnvEndpoint].Value, h.minio.Endpoint)
	}
	wantSecretAccess(t, "secondary", dep.Spec.Template.Spec, ctr, sec.Name)
	if b, _ := json.Marshal(dep); strings.Contains(string(b), h.minio.SecretKey) || strings.Contains(string(b), h.minio.AccessKey) {
		t.Errorf("the Deployment holds the credentials themselves")
	}
	h.waitEvent(ns, "orders", eventSecondariesScaled)

	// Play the Deployment controller: both ready.
	h.setDeploymentStatus(ns, "orders-secondary", 2)
	db = h.waitDB(ns, "orders", "secondaries ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Secondaries == 2 && db.Status.Phase == shalev1.PhaseReady &&
			condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionTrue, shalev1.ReasonSecondariesReady), fmt.Sprintf("want 2 ready, have %d", db.Status.Secondaries)
	})

	testSecondaryStatus(h, ns)

	// Neither a reconcile for another reason nor a failover touches the
	// Deployment (what an operator restart does too: compute the same
	// spec and find its hash on the Deployment).
	unchanged := func(when string) {
		t.Helper()
		cur := h.waitDeployment(ns, "orders-secondary")
		if cur.Generation != dep.Generation || cur.Annotations[shalev1.AnnotationSpecHash] != dep.Annotations[shalev1.AnnotationSpecHash] {
			t.Errorf("%s: Deployment generation %d hash %s, was %d %s", when, cur.Generation, cur.Annotations[shalev1.AnnotationSpecHash], dep.Generation, dep.Annotations[shalev1.AnnotationSpecHash])
		}
	}
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Annotations = map[string]string{"touched": "1"} })
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Primary.Lease = &metav1.Duration{Duration: 6 * time.Second} })
	h.waitDB(ns, "orders", "new generation reconciled", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.ObservedGeneration == db.Generation, "want observedGeneration current"
	})
	unchanged("after a spec change of the primary")
	if err := h.c.Delete(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-primary-1"}}); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "failed over", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 2, "want epoch 2" })
	h.setPod(ns, "orders-primary-2", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 2, secondaries still ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Epoch == 2 && db.Status.Secondaries == 2 &&
			condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionTrue, ""), "want Ready, 2 secondaries"
	})
	unchanged("after a failover")

	// Scale to 3: replicas only, same spec hash.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 3 })
	eventually(t, "Deployment scaled to 3", func() (bool, string) {
		cur, err := h.deployment(ns, "orders-secondary")
		if err != nil {
			return false, err.Error()
		}
		return *cur.Spec.Replicas == 3, fmt.Sprintf("replicas %d", *cur.Spec.Replicas)
	})
	if cur := h.waitDeployment(ns, "orders-secondary"); cur.Annotations[shalev1.AnnotationSpecHash] != dep.Annotations[shalev1.AnnotationSpecHash] ||
		!slices.Equal(cur.Spec.Template.Spec.Containers[0].Args, ctr.Args) {
		t.Errorf("scaling changed the Pod template")
	}
	h.waitDB(ns, "orders", "3 requested, 2 ready", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating), "want SecondariesUpdating"
	})

	// A change of the secondaries' settings rewrites the template.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.Secondaries.CatchupInterval = &metav1.Duration{Duration: time.Second}
	})
	eventually(t, "template rewritten", func() (bool, string) {
		cur, err := h.deployment(ns, "orders-secondary")
		if err != nil {
			return false, err.Error()
		}
		a := strings.Join(cur.Spec.Template.Spec.Containers[0].Args, " ")
		return strings.Contains(a, "--catchup-interval 1s") && cur.Annotations[shalev1.AnnotationSpecHash] != dep.Annotations[shalev1.AnnotationSpecHash], a
	})
	h.waitEvent(ns, "orders", eventSecondariesUpdated)

	// Replicas 0: the Deployment and NAME-ro go; SecondariesReady is True
	// (nothing requested).
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 0 })
	h.waitGoneObject(&appsv1.Deployment{}, ns, "orders-secondary")
	h.waitGoneObject(&corev1.Service{}, ns, "orders-ro")
	h.waitDB(ns, "orders", "no secondaries", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Secondaries == 0 && condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionTrue, shalev1.ReasonNoSecondaries), "want NoSecondaries"
	})
	if _, err := h.pod(ns, "orders-primary-2"); err != nil {
		t.Errorf("primary after removing the secondaries: %v", err)
	}

	// Back to 1 (the primary is available: at once), then delete the
	// RocksDB: it waits for the secondaries' Deployment, deleted in the
	// foreground, to be gone.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 1 })
	h.waitDeployment(ns, "orders-secondary")
	h.waitService(ns, "orders-ro")
	if err := h.c.Delete(h.ctx, h.db(ns, "orders")); err != nil {
		t.Fatal(err)
	}
	var terminating *appsv1.Deployment
	eventually(t, "Deployment deleted in the foreground", func() (bool, string) {
		cur, err := h.deployment(ns, "orders-secondary")
		if err != nil {
			return false, err.Error()
		}
		terminating = cur
		return cur.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(cur, metav1.FinalizerDeleteDependents), fmt.Sprintf("finalizers %v", cur.Finalizers)
	})
	h.waitEvent(ns, "orders", eventWaitingForPods)
	// The primary is gone; the secondaries hold the deletion.
	db = h.waitDB(ns, "orders", "waiting for the secondaries alone", func(db *shalev1.RocksDB) (bool, string) {
		c := db.Condition(shalev1.ConditionReady)
		return db.Status.Phase == shalev1.PhaseDeleting && c != nil && c.Reason == shalev1.ReasonDeleting &&
			strings.HasSuffix(c.Message, ": waiting for the secondaries to stop"), "want Deleting, waiting for the secondaries"
	})
	if !controllerutil.ContainsFinalizer(db, shalev1.FinalizerStorage) {
		t.Errorf("the RocksDB let go before its secondaries stopped")
	}
	// Play the garbage collector: the ReplicaSets and Pods are gone.
	patch := client.MergeFrom(terminating.DeepCopy())
	controllerutil.RemoveFinalizer(terminating, metav1.FinalizerDeleteDependents)
	if err := h.c.Patch(h.ctx, terminating, patch); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "orders")
}

func (h *harness) deployment(ns, name string) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, dep)
	return dep, err
}

func (h *harness) waitDeployment(ns, name string) *appsv1.Deployment {
	h.t.Helper()
	var dep *appsv1.Deployment
	eventually(h.t, "Deployment "+name, func() (bool, string) {
		var err error
		dep, err = h.deployment(ns, name)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return dep
}

func (h *harness) waitService(ns, name string) *corev1.Service {
	h.t.Helper()
	svc := &corev1.Service{}
	eventually(h.t, "Service "+name, func() (bool, string) {
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return svc
}

func (h *harness) waitGoneObject(obj client.Object, ns, name string) {
	h.t.Helper()
	eventually(h.t, fmt.Sprintf("%T %s gone", obj, name), func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("get: %v", err)
	})
}

// setDeploymentStatus plays the Deployment controller: n Pods of the
// current spec, all ready.
func (h *harness) setDeploymentStatus(ns, name string, n int32) {
	h.t.Helper()
	dep := h.waitDeployment(ns, name)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	if err := h.c.Status().Update(h.ctx, dep); err != nil {
		h.t.Fatalf("updating the status of Deployment %s: %v", name, err)
	}
}

// updateDB changes a RocksDB's spec or metadata, retrying on conflicts
// (the operator writes it too).
func (h *harness) updateDB(ns, name string, mutate func(*shalev1.RocksDB)) {
	h.t.Helper()
	eventually(h.t, "update "+name, func() (bool, string) {
		db := h.db(ns, name)
		mutate(db)
		if err := h.c.Update(h.ctx, db); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// testSecondaryStatus: the operator asks each running secondary Pod for
// its Status and reports it in status.secondaryStatus. envtest runs no
// Pods: a gRPC server on loopback answers for one Pod, nothing listens for
// the other. (e2e checks the same against real secondaries.)
func testSecondaryStatus(h *harness, ns string) {
	t := h.t
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// It serves as a secondary does: TLS with the secondaries' Secrets,
	// behind the guard, which must let the operator's own certificate in.
	g := h.guardedKV(lis, ns, "orders-secondary-tls", "orders-access", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY, LatestSequence: 90, PrimarySequence: 100, LagSeconds: 0.25})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	for name, port := range map[string]int{"orders-secondary-a": lis.Addr().(*net.TCPAddr).Port, "orders-secondary-b": closedPort} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{shalev1.LabelRocksDB: "orders", shalev1.LabelRole: shalev1.RoleSecondary, shalev1.LabelAppManagedBy: shalev1.ManagedBy}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "x",
				Ports: []corev1.ContainerPort{{Name: portNameKV, ContainerPort: int32(port)}}}}},
		}
		if err := h.c.Create(h.ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = "127.0.0.1"
		if err := h.c.Status().Update(h.ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	db := h.waitDB(ns, "orders", "status.secondaryStatus of both Pods", func(db *shalev1.RocksDB) (bool, string) {
		return len(db.Status.SecondaryStatus) == 2, fmt.Sprintf("secondaryStatus %+v", db.Status.SecondaryStatus)
	})
	a, b := db.Status.SecondaryStatus[0], db.Status.SecondaryStatus[1]
	if a.Pod != "orders-secondary-a" || a.AppliedSequence != 90 || a.LagSequences != 10 || a.Lag == nil || a.Lag.Duration != 250*time.Millisecond || a.Error != "" {
		t.Errorf("the answering secondary: %+v, want applied 90, 10 behind, lag 250ms", a)
	}
	if b.Pod != "orders-secondary-b" || b.Error == "" || b.Lag != nil || b.CheckedAt.IsZero() {
		t.Errorf("the silent secondary: %+v, want an error and no lag", b)
	}
	if callers := g.callers(); len(callers) == 0 || callers[0].Kind != auth.KindOperator || callers[0].Namespace != operatorNS {
		t.Errorf("Status callers %v, want the operator of %s", callers, operatorNS)
	}
	for _, name := range []string{"orders-secondary-a", "orders-secondary-b"} {
		if err := h.c.Delete(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	h.waitDB(ns, "orders", "status.secondaryStatus without the deleted Pods", func(db *shalev1.RocksDB) (bool, string) {
		return len(db.Status.SecondaryStatus) == 0, fmt.Sprintf("secondaryStatus %+v", db.Status.SecondaryStatus)
	})
}

// statusOnly answers Status with a fixed response.
type statusOnly struct {
	kvv1.UnimplementedKVServer
	st *kvv1.StatusResponse
}

func (s statusOnly) Status(context.Context, *kvv1.StatusRequest) (*kvv1.StatusResponse, error) {
	return s.st, nil
}

func TestSecondaryStatusEntry(t *testing.T) {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	ms := func(d int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(d) * time.Millisecond} }
	for _, tc := range []struct {
		name string
		st   *kvv1.StatusResponse
		err  error
		want shalev1.SecondaryStatus
	}{
		{"caught up", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY, LatestSequence: 7, PrimarySequence: 7},
			nil, shalev1.SecondaryStatus{Pod: "p", AppliedSequence: 7, Lag: ms(0), CheckedAt: now}},
		{"behind", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY, LatestSequence: 7, PrimarySequence: 12, LagSeconds: 1.5004},
			nil, shalev1.SecondaryStatus{Pod: "p", AppliedSequence: 7, LagSequences: 5, Lag: ms(1500), CheckedAt: now}},
		{"primary announced nothing yet", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY, LatestSequence: 7},
			nil, shalev1.SecondaryStatus{Pod: "p", AppliedSequence: 7, Lag: ms(0), CheckedAt: now}},
		{"answers as a primary", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY, LatestSequence: 7},
			nil, shalev1.SecondaryStatus{Pod: "p", Error: "it answers as ROLE_PRIMARY, not as a secondary", CheckedAt: now}},
		{"unreachable", nil, fmt.Errorf("connection refused"),
			shalev1.SecondaryStatus{Pod: "p", Error: "connection refused", CheckedAt: now}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := secondaryStatusEntry("p", tc.st, tc.err, now)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
