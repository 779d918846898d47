package operator

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// TestOperator runs the controllers once (one API server, one MinIO, one
// manager) for all its subtests, which run in order.
func TestOperator(t *testing.T) {
	h := startOperator(t)
	t.Run("Samples", func(t *testing.T) { testSamples(h.with(t)) })
	t.Run("Failover", func(t *testing.T) { testFailover(h.with(t)) })
	t.Run("ReclaimRetain", func(t *testing.T) { testReclaimRetain(h.with(t)) })
	t.Run("ReclaimDelete", func(t *testing.T) { testReclaimDelete(h.with(t)) })
	t.Run("ObjectStoreProblems", func(t *testing.T) { testObjectStoreProblems(h.with(t)) })
	t.Run("Secondaries", func(t *testing.T) { testSecondaries(h.with(t)) })
	t.Run("CompactorPool", func(t *testing.T) { testCompactorPool(h.with(t)) })
	t.Run("GC", func(t *testing.T) { testGC(h.with(t)) })
	t.Run("Tiering", func(t *testing.T) { testTiering(h.with(t)) })
	t.Run("GCColdTier", func(t *testing.T) { testGCColdTier(h.with(t)) })
	t.Run("Certificates", func(t *testing.T) { testCertificates(h.with(t)) })
	t.Run("CompactorPoolCertificates", func(t *testing.T) { testCompactorPoolCertificates(h.with(t)) })
	t.Run("NetworkPolicies", func(t *testing.T) { testNetworkPolicies(h.with(t)) })
	t.Run("Disruptions", func(t *testing.T) { testDisruptions(h.with(t)) })
	t.Run("Switchover", func(t *testing.T) { testSwitchover(h.with(t)) })
	t.Run("Hold", func(t *testing.T) { testHold(h.with(t)) })
}

const samplesNS = "samples"

// testSamples applies config/samples and checks what the operator builds.
func testSamples(h *harness) {
	t := h.t
	ns := h.namespace(samplesNS)
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)

	eventually(t, "ObjectStore reachable", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		c := os.Status.Conditions
		return os.IsReachable() && os.Status.LastCheckTime != nil && os.Status.ObservedGeneration == os.Generation, statusOf(c)
	})

	db = h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.CurrentPrimary == "orders-primary-1" && db.Status.Phase == shalev1.PhaseStarting &&
			db.Status.ObservedGeneration == db.Generation &&
			condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionTrue, shalev1.ReasonReachable) &&
			condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryStarting) &&
			condIs(db, shalev1.ConditionReady, metav1.ConditionFalse, "") &&
			condIs(db, shalev1.ConditionFailover, metav1.ConditionFalse, shalev1.ReasonNoFailover) &&
			condIs(db, shalev1.ConditionSecondariesReady, metav1.ConditionTrue, shalev1.ReasonNoSecondaries), "want epoch 1, Starting"
	})
	if !controllerutil.ContainsFinalizer(db, shalev1.FinalizerStorage) {
		t.Errorf("finalizers %v lack %s", db.Finalizers, shalev1.FinalizerStorage)
	}
	wantPath := "dbs/" + ns + "/orders-" + string(db.UID)
	if db.Status.StoragePath != wantPath {
		t.Errorf("storagePath = %q, want %q", db.Status.StoragePath, wantPath)
	}

	pod := h.waitPod(ns, "orders-primary-1")
	if !metav1.IsControlledBy(pod, db) {
		t.Errorf("Pod owner references %v: not controlled by the RocksDB", pod.OwnerReferences)
	}
	if pod.Labels[shalev1.LabelEpoch] != "1" || pod.Labels[shalev1.LabelRole] != shalev1.RolePrimary || pod.Labels[shalev1.LabelRocksDB] != "orders" {
		t.Errorf("Pod labels %v", pod.Labels)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s, want Never (a restarted container would reuse its epoch)", pod.Spec.RestartPolicy)
	}
	ctr := pod.Spec.Containers[0]
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{
		"primary", "--db s3://shale/" + wantPath, "--epoch 1", "--cache-size 1073741824", "--block-cache-size 134217728", "--lease 5s", "--listen :7070",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if sc := ctr.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("primary container security context %+v: want readOnlyRootFilesystem", sc)
	}
	if ctr.Image != "shale.local/shale:test" {
		t.Errorf("image %q, want the operator's default", ctr.Image)
	}
	if ctr.ReadinessProbe == nil || ctr.ReadinessProbe.Exec == nil {
		t.Errorf("no exec readiness probe (`shale health` over TLS)")
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	if env[objstore.EnvEndpoint].Value != h.minio.Endpoint {
		t.Errorf("%s = %q, want %q", objstore.EnvEndpoint, env[objstore.EnvEndpoint].Value, h.minio.Endpoint)
	}
	wantSecretAccess(t, "primary", pod.Spec, ctr, sec.Name)
	if spec, _ := json.Marshal(pod); strings.Contains(string(spec), h.minio.SecretKey) || strings.Contains(string(spec), h.minio.AccessKey) {
		t.Errorf("the Pod spec holds the credentials themselves")
	}

	var svc corev1.Service
	eventually(t, "Service orders-rw", func() (bool, string) {
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-rw"}, &svc); err != nil {
			return false, err.Error()
		}
		return svc.Spec.Selector[shalev1.LabelEpoch] == "1", "selector " + mapString(svc.Spec.Selector)
	})
	if !metav1.IsControlledBy(&svc, db) {
		t.Errorf("Service not controlled by the RocksDB")
	}
	for name, o := range map[string]client.Object{"orders-ro": &corev1.Service{}, "orders-secondary": &appsv1.Deployment{}} {
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s without secondaries: %v", o, name, err)
		}
	}

	// The owner record, before any primary ran.
	rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
	if rec == nil || rec.Cluster != h.cluster || rec.UID != db.UID || rec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Errorf("owner record %+v, want cluster %s, uid %s, Retain", rec, h.cluster, db.UID)
	}
	h.waitEvent(ns, "orders", eventPrimaryCreated)

	// The kubelet reports it ready.
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionReady, metav1.ConditionTrue, shalev1.ReasonPrimaryReady) &&
			condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionTrue, shalev1.ReasonPrimaryReady), "want Ready"
	})
	// The operator's endpoint says so (what the chart's ShaleDatabaseNotReady alert reads).
	eventually(t, "shale_rocksdb_ready 1", func() (bool, string) {
		got := gatherState(t, ns, "orders")
		return got["shale_rocksdb_ready"] == 1 && got["shale_rocksdb_phase/Ready"] == 1 && got["shale_rocksdb_epoch"] == 1, fmt.Sprint(got)
	})

	// A spec change is observed (observedGeneration on status and conditions).
	cur := h.db(ns, "orders")
	cur.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	if err := h.c.Update(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "generation 2 observed", func(db *shalev1.RocksDB) (bool, string) {
		return db.Generation == 2 && db.Status.ObservedGeneration == 2 && condIs(db, shalev1.ConditionReady, metav1.ConditionTrue, ""), "want observedGeneration 2"
	})
	eventually(t, "owner record says Delete", func() (bool, string) {
		rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
		return rec != nil && rec.ReclaimPolicy == shalev1.ReclaimDelete, "record " + jsonString(rec)
	})
	cur = h.db(ns, "orders")
	cur.Spec.ReclaimPolicy = shalev1.ReclaimRetain
	if err := h.c.Update(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "owner record says Retain again", func() (bool, string) {
		rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
		return rec != nil && rec.ReclaimPolicy == shalev1.ReclaimRetain, "record " + jsonString(rec)
	})
}

// testFailover kills the samples' primary in each way a primary dies.
func testFailover(h *harness) {
	t := h.t
	ns := samplesNS
	histBefore := histogramCount(t)

	// 1. kubectl delete pod: exactly one epoch bump and a new Pod.
	gone := testutil.ToFloat64(failoversTotal.WithLabelValues(shalev1.ReasonPrimaryGone))
	deleted := testutil.ToFloat64(failoversTotal.WithLabelValues(shalev1.ReasonPrimaryDeleted))
	old, err := h.pod(ns, "orders-primary-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	db := h.waitDB(ns, "orders", "failed over to epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 2 && db.Status.CurrentPrimary == "orders-primary-2", "want epoch 2"
	})
	if db.Status.Failovers != 1 || db.Status.LastFailoverTime == nil {
		t.Errorf("failovers %d, lastFailoverTime %v; want 1 and set", db.Status.Failovers, db.Status.LastFailoverTime)
	}
	if c := db.Condition(shalev1.ConditionFailover); c == nil || c.Status != metav1.ConditionTrue || (c.Reason != shalev1.ReasonPrimaryGone && c.Reason != shalev1.ReasonPrimaryDeleted) {
		t.Errorf("Failover condition %+v, want True PrimaryGone or PrimaryDeleted", c)
	}
	if db.Status.Phase != shalev1.PhaseFailingOver {
		t.Errorf("phase %s, want FailingOver", db.Status.Phase)
	}
	pod := h.waitPod(ns, "orders-primary-2")
	if !slices.Contains(pod.Spec.Containers[0].Args, "2") || pod.Labels[shalev1.LabelEpoch] != "2" || !strings.Contains(strings.Join(pod.Spec.Containers[0].Args, " "), "--epoch 2") {
		t.Errorf("new primary: args %v labels %v, want epoch 2", pod.Spec.Containers[0].Args, pod.Labels)
	}
	h.waitEvent(ns, "orders", eventFailover)
	eventually(t, "Service follows epoch 2", func() (bool, string) {
		var svc corev1.Service
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-rw"}, &svc); err != nil {
			return false, err.Error()
		}
		return svc.Spec.Selector[shalev1.LabelEpoch] == "2", mapString(svc.Spec.Selector)
	})
	h.setPod(ns, "orders-primary-2", corev1.PodRunning, true, time.Now())
	db = h.waitDB(ns, "orders", "failover completed", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionFailover, metav1.ConditionFalse, shalev1.ReasonFailoverCompleted), "want Ready, FailoverCompleted"
	})
	// Exactly one bump: reconciles after the new primary's readiness found
	// no reason for another.
	if db.Status.Epoch != 2 || db.Status.Failovers != 1 {
		t.Errorf("after one deleted Pod: epoch %d, failovers %d; want 2 and 1", db.Status.Epoch, db.Status.Failovers)
	}
	if got := testutil.ToFloat64(failoversTotal.WithLabelValues(shalev1.ReasonPrimaryGone)) + testutil.ToFloat64(failoversTotal.WithLabelValues(shalev1.ReasonPrimaryDeleted)); got != gone+deleted+1 {
		t.Errorf("shale_operator_failovers_total rose by %v, want 1", got-gone-deleted)
	}
	eventually(t, "failover duration observed", func() (bool, string) {
		n := histogramCount(t)
		return n == histBefore+1, "histogram count " + itoa(n)
	})
	h.waitEvent(ns, "orders", eventFailoverCompleted)
	if p := h.primaries(ns, "orders"); !slices.Equal(p, []string{"orders-primary-2"}) {
		t.Errorf("primary Pods %v, want only orders-primary-2", p)
	}

	// 2. The process crashes: the Pod (restartPolicy Never) fails.
	h.setPod(ns, "orders-primary-2", corev1.PodFailed, false, time.Now())
	db = h.waitDB(ns, "orders", "failed over to epoch 3", func(db *shalev1.RocksDB) (bool, string) {
		c := db.Condition(shalev1.ConditionFailover)
		return db.Status.Epoch == 3 && db.Status.CurrentPrimary == "orders-primary-3" && c != nil && c.Reason == shalev1.ReasonPrimaryFailed, "want epoch 3, PrimaryFailed"
	})
	h.waitPod(ns, "orders-primary-3")
	// The failed Pod is kept, for its logs, until its replacement is ready.
	if p := h.primaries(ns, "orders"); !slices.Contains(p, "orders-primary-2") {
		t.Errorf("primary Pods %v while orders-primary-3 starts, want orders-primary-2 kept", p)
	}
	h.setPod(ns, "orders-primary-3", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 3", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Epoch == 3, "want Ready"
	})
	h.waitPodGone(ns, "orders-primary-2")

	// 3. Not ready for longer than the failover grace (1 s in tests).
	h.setPod(ns, "orders-primary-3", corev1.PodRunning, false, time.Now())
	db = h.waitDB(ns, "orders", "failed over to epoch 4", func(db *shalev1.RocksDB) (bool, string) {
		c := db.Condition(shalev1.ConditionFailover)
		return db.Status.Epoch == 4 && c != nil && c.Reason == shalev1.ReasonPrimaryNotReady, "want epoch 4, PrimaryNotReady"
	})
	if db.Status.Failovers != 3 {
		t.Errorf("failovers %d, want 3", db.Status.Failovers)
	}
	// A primary that is only not ready (slow, frozen) is left running
	// until its replacement is ready: the store fences it meanwhile.
	h.waitPod(ns, "orders-primary-4")
	if p := h.primaries(ns, "orders"); !slices.Contains(p, "orders-primary-3") {
		t.Errorf("primary Pods %v while orders-primary-4 starts, want orders-primary-3 kept", p)
	}
	h.setPod(ns, "orders-primary-4", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 4", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Epoch == 4, "want Ready"
	})
	h.waitPodGone(ns, "orders-primary-3")

	// 4. The store holds a higher epoch than status (a primary started by
	// hand, or a status lost in a restore): the next epoch is above it.
	st := h.store(db.Status.StoragePath)
	h.put(st, "_shale/epoch/00000000000000000009", "{}")
	h.setPod(ns, "orders-primary-4", corev1.PodFailed, false, time.Now())
	db = h.waitDB(ns, "orders", "failed over to epoch 10", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 10 && db.Status.CurrentPrimary == "orders-primary-10", "want epoch 10"
	})
	h.setPod(ns, "orders-primary-10", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 10", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.Failovers == 4, "want Ready after 4 failovers"
	})
	if err := st.Delete(h.ctx, "_shale/epoch/00000000000000000009"); err != nil {
		t.Fatal(err)
	}
}

// testReclaimRetain deletes the samples' RocksDB (Retain): its data stays,
// and the owner record keeps the garbage collector off it.
func testReclaimRetain(h *harness) {
	t := h.t
	ns := samplesNS
	db := h.db(ns, "orders")
	st := h.store(db.Status.StoragePath)
	h.put(st, "000007.sst/00000000000000000010", "table")
	before := h.keys(st, "")
	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "orders")
	if after := h.keys(st, ""); !slices.Equal(before, after) {
		t.Errorf("objects %v after deleting a Retain RocksDB, want %v", after, before)
	}
	rec := h.ownerRecord("dbs", ns, db.DirName())
	if rec == nil || rec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Errorf("owner record %s, want Retain", jsonString(rec))
	}
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primary Pods %v left", p)
	}
	h.waitEvent(ns, "orders", eventStorageRetained)
}

// testReclaimDelete creates a RocksDB with reclaimPolicy Delete, gives it
// data, and deletes it.
func testReclaimDelete(h *harness) {
	t := h.t
	ns := h.namespace("reclaim")
	sec, store, db := h.samples(ns)
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	db.Name = "scratch"
	h.create(sec, store, db)
	db = h.waitDB(ns, "scratch", "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.CurrentPrimary != "", "want epoch 1"
	})
	h.waitPod(ns, "scratch-primary-1")
	st := h.store(db.Status.StoragePath)
	for _, k := range []string{"CURRENT", "_shale/epoch/00000000000000000001", "000004.log/00000000000000000001/00000000000000000001", "000005.sst/00000000000000000001"} {
		h.put(st, k, "data of "+k)
	}
	// A neighbour whose name extends this one's must survive.
	neighbour := h.store("dbs/" + ns)
	h.put(neighbour, db.DirName()+"x/keep", "not this database's")

	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "scratch")
	if left := h.keys(st, ""); len(left) != 0 {
		t.Errorf("left after reclaimPolicy Delete: %v", left)
	}
	if rec := h.ownerRecord("dbs", ns, db.DirName()); rec != nil {
		t.Errorf("owner record left: %s", jsonString(rec))
	}
	if left := h.keys(neighbour, db.DirName()+"x/"); len(left) != 1 {
		t.Errorf("neighbour directory: %v, want its one object", left)
	}
	h.waitEvent(ns, "scratch", eventStorageDeleted)
}

// testObjectStoreProblems: a missing Secret, wrong credentials, a missing
// ObjectStore; each refused with a condition and an Event, and recovered
// from once fixed.
func testObjectStoreProblems(h *harness) {
	t := h.t
	ns := h.namespace("problems")
	sec, store, db := h.samples(ns)
	h.create(store, db)
	eventually(t, "ObjectStore unreachable: no Secret", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		c := findCond(os.Status.Conditions, shalev1.ConditionReachable)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == shalev1.ReasonSecretMissing, statusOf(os.Status.Conditions)
	})
	h.waitEvent(ns, store.Name, eventStoreUnreachable)
	h.waitDB(ns, "orders", "pending", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhasePending && db.Status.Epoch == 0 &&
			condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionFalse, shalev1.ReasonSecretMissing), "want Pending"
	})
	h.waitEvent(ns, "orders", eventObjectStoreUnreachable)
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primary Pods %v before the store is reachable", p)
	}

	// Wrong credentials.
	sec.StringData[shalev1.SecretKeySecretAccessKey] = "wrong-" + h.minio.SecretKey
	h.create(sec)
	eventually(t, "ObjectStore unreachable: wrong credentials", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		c := findCond(os.Status.Conditions, shalev1.ConditionReachable)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == shalev1.ReasonListFailed, statusOf(os.Status.Conditions)
	})
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primary Pods %v before the store is reachable", p)
	}

	// Fixed: the RocksDB starts.
	var cur corev1.Secret
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(sec), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Data[shalev1.SecretKeySecretAccessKey] = []byte(h.minio.SecretKey)
	if err := h.c.Update(h.ctx, &cur); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "started once the store is reachable", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionTrue, ""), "want epoch 1"
	})

	// A RocksDB naming no existing ObjectStore.
	lost := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost"}, Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "nowhere"}}}
	h.create(lost)
	h.waitDB(ns, "lost", "pending", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhasePending && condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing), "want ObjectStoreMissing"
	})
	h.waitEvent(ns, "lost", eventObjectStoreMissing)
	// Deleting it needs no store (it never had storage).
	if err := h.c.Delete(h.ctx, lost); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "lost")
}

func (h *harness) waitGone(ns, name string) {
	h.t.Helper()
	eventually(h.t, name+" deleted", func() (bool, string) {
		db := &shalev1.RocksDB{}
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, db)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, "still there: " + statusString(db)
	})
}

func (h *harness) ownerRecord(prefix, ns, dir string) *dirOwnerRecord {
	h.t.Helper()
	rec, _, err := readOwnerRecord(h.ctx, h.store(prefix), ownerRecordKey(ns, dir))
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

func findCond(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func statusOf(cs []metav1.Condition) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Type + "=" + string(c.Status) + "(" + c.Reason + ": " + c.Message + ") ")
	}
	return b.String()
}

func mapString(m map[string]string) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
