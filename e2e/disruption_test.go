//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepOperatorKilledMidFailover: the primary's Pod is deleted, and once
// the operator has started the failover (the RocksDB is FailingOver or
// names the next epoch) the operator's Pod is killed too (no grace). The
// operator that comes back must finish that failover, not start another:
// exactly one new primary, the epoch up by exactly one, and every
// acknowledged write still there.
func stepOperatorKilledMidFailover(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch, old := db.Status.Epoch, db.Status.CurrentPrimary
	w := s.startWriter(t, addr, "operator-killed")
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	t0 := time.Now()
	if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the operator to start the failover", func() (bool, string) {
		cur := s.rocksDB(t, s.db)
		return cur.Status.Phase == shalev1.PhaseFailingOver || cur.Status.Epoch > epoch, describe(cur)
	})
	var ops corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &ops, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	for _, p := range ops.Items {
		if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("killed %d operator Pod(s) %s after the primary's deletion, with the RocksDB %s", len(ops.Items), time.Since(t0).Round(time.Millisecond), describe(s.rocksDB(t, s.db)))
	s.waitLeader(t)

	w.waitAcks(t, t0, uint64(epoch+1), 10, 4*time.Minute)
	after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
	if after.Status.Epoch != epoch+1 {
		t.Fatalf("the epoch went from %d to %d across a failover the operator was killed in: want exactly one more", epoch, after.Status.Epoch)
	}
	var prims corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &prims, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range prims.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			live = append(live, fmt.Sprintf("%s (epoch %s)", p.Name, p.Labels[shalev1.LabelEpoch]))
		}
	}
	if len(live) != 1 {
		t.Fatalf("running primaries after the failover: %v; want exactly one", live)
	}
	w.halt()
	t.Logf("epoch %d -> %d with the operator killed mid-failover; primary %s; writer: %s", epoch, after.Status.Epoch, live[0], w.state())
	s.verifyLedger(t, addr)
}

// stepStoreOutage: the demo MinIO is scaled to zero for 60 s while a
// client writes. Writes stall or fail meanwhile (never acknowledged
// without the store); once MinIO is back they resume, no acknowledged
// write is lost, and the operator does not churn through epochs (at most
// one failover, and no pile of failed primary Pods).
func stepStoreOutage(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch := db.Status.Epoch
	w := s.startWriter(t, addr, "store-outage")
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	minioDeployment := s.cfg.release + "-minio"
	s.kubectl(t, "-n", s.cfg.namespace, "scale", "deployment/"+minioDeployment, "--replicas=0")
	eventually(t, 3*time.Minute, "the demo MinIO to stop", func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "demo-minio"}); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d MinIO Pods", len(pods.Items))
	})
	down := time.Now()
	// The outage itself: a fixed length is what is being tested.
	time.Sleep(60 * time.Second)
	s.kubectl(t, "-n", s.cfg.namespace, "scale", "deployment/"+minioDeployment, "--replicas=1")
	s.kubectl(t, "-n", s.cfg.namespace, "rollout", "status", "deployment/"+minioDeployment, "--timeout=3m")
	up := time.Now()
	t.Logf("MinIO was down for %s; during it: %s", up.Sub(down).Round(time.Second), describe(s.rocksDB(t, s.db)))

	eventually(t, 5*time.Minute, "writes to resume after the outage", func() (bool, string) {
		return len(w.since(up)) >= 10, w.state()
	})
	after := s.waitReady(t, s.db, epoch, 5*time.Minute)
	if after.Status.Epoch > epoch+1 {
		t.Fatalf("the epoch went from %d to %d over a 60 s store outage: a failover storm", epoch, after.Status.Epoch)
	}
	var prims corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &prims, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	if len(prims.Items) > 3 {
		t.Fatalf("%d primary Pods after the outage: failed ones pile up", len(prims.Items))
	}
	first := w.since(up)[0]
	w.halt()
	t.Logf("writes resumed %s after MinIO came back (epoch %d -> %d, %d primary Pods); writer: %s",
		first.at.Sub(up).Round(time.Millisecond), epoch, after.Status.Epoch, len(prims.Items), w.state())
	s.verifyLedger(t, addr)
}

// stepUnstartablePrimary: a database whose primary cannot start (a 4 MiB
// memory limit: the container's init is OOM-killed; 12 MiB was enough for
// an idle primary to start) must not churn
// through epochs: the operator backs off (at most 5 epochs in 10 minutes;
// observed here for 4 minutes, in which the schedule allows at most 4),
// says why in PrimaryAvailable (OOMKilled) with the phase Degraded, keeps
// only the last few failed Pods, and starts a primary at once when the
// spec is fixed.
func stepUnstartablePrimary(t *testing.T, s *suite) {
	const name = "unstartable"
	q := resource.MustParse
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.namespace},
		Spec: shalev1.RocksDBSpec{
			Clients:        e2eClients(),
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			ReclaimPolicy:  shalev1.ReclaimDelete,
			Primary: shalev1.PrimarySpec{
				CacheSize:      ptrTo(q("256Mi")),
				BlockCacheSize: ptrTo(q("32Mi")),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("4Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: q("4Mi")},
				},
			},
		},
	}
	if err := s.kube.Create(ctx(t, time.Minute), db); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var cur *shalev1.RocksDB
	eventually(t, 4*time.Minute, "the operator to say why no primary runs", func() (bool, string) {
		cur = s.rocksDB(t, name)
		c := meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionPrimaryAvailable)
		return c != nil && c.Reason == shalev1.ReasonOOMKilled && cur.Status.Phase == shalev1.PhaseDegraded, describe(cur)
	})
	// The backoff schedule: epochs 1 and 2 at once, then 45 s, 90 s, 180 s
	// after a failure; in the first 4 minutes there is room for 4.
	time.Sleep(time.Until(start.Add(4 * time.Minute)))
	cur = s.rocksDB(t, name)
	if cur.Status.Epoch > 4 {
		t.Fatalf("a primary that cannot start made %d epochs in 4 minutes: %s", cur.Status.Epoch, describe(cur))
	}
	// Still saying why no primary runs. runc sometimes reports the OOM kill
	// of a container's init as a bare StartError ("error during container
	// init: %!w(<nil>)"), which the operator cannot tell from a crash: the
	// OOM diagnosis itself was required above.
	c := meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionPrimaryAvailable)
	if c == nil || c.Status != metav1.ConditionFalse || (c.Reason != shalev1.ReasonOOMKilled && c.Reason != shalev1.ReasonPrimaryCrashed) {
		t.Fatalf("PrimaryAvailable after 4 minutes: %+v", c)
	}
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: name, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) > 4 {
		t.Fatalf("%d primary Pods of a database whose primaries fail: failed ones pile up", len(pods.Items))
	}
	t.Logf("after 4 minutes: epoch %d, %d primary Pods, PrimaryAvailable %s: %s", cur.Status.Epoch, len(pods.Items), c.Reason, c.Message)

	// Fixed: a raised limit is tried at once, without waiting out the backoff.
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Primary.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}
	cur.Spec.Primary.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}
	if err := s.kube.Patch(ctx(t, time.Minute), cur, patch); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	ready := s.waitReady(t, name, 1, 4*time.Minute)
	t.Logf("with the limit raised, ready at epoch %d %s later", ready.Status.Epoch, time.Since(fixed).Round(time.Second))
	s.deleteRocksDB(t, ready, false)
}

// stepNamespaceDeletion: a namespace holding an ObjectStore, its Secret and
// a RocksDB with reclaimPolicy Delete is deleted. Everything in it is
// deleted at once, in no particular order (the ObjectStore and Secret may
// go before the RocksDB's finalizer runs), and the deletion must finish.
// What happens to the data is what docs/operator.md says: the reclaim
// policy is applied if the store can still be reached, otherwise the
// directory stays with its owner record (saying Delete, for the garbage
// collector of any ObjectStore at that location).
func stepNamespaceDeletion(t *testing.T, s *suite) {
	ns := s.cfg.namespace + "-nsdel"
	c := ctx(t, 10*time.Minute)
	if err := s.kube.Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := s.kube.Get(c, client.ObjectKey{Namespace: s.cfg.namespace, Name: "shale-objectstore"}, &sec); err != nil {
		t.Fatal(err)
	}
	copySec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec.Name, Namespace: ns}, Data: sec.Data}
	store := &shalev1.ObjectStore{
		ObjectMeta: metav1.ObjectMeta{Name: objectStoreName, Namespace: ns},
		Spec: shalev1.ObjectStoreSpec{
			Endpoint:    s.objectStoreEndpoint(),
			Credentials: &shalev1.SecretReference{Name: sec.Name},
			Hot:         shalev1.BucketLocation{Bucket: hotBucket, Prefix: "nsdel"},
		},
	}
	q := resource.MustParse
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: ns},
		Spec: shalev1.RocksDBSpec{
			Clients:        e2eClients(),
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			ReclaimPolicy:  shalev1.ReclaimDelete,
			Primary: shalev1.PrimarySpec{
				CacheSize:      ptrTo(q("256Mi")),
				BlockCacheSize: ptrTo(q("32Mi")),
				Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}},
			},
		},
	}
	for _, o := range []client.Object{copySec, store, db} {
		if err := s.kube.Create(c, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Minute, "RocksDB "+ns+"/doomed to be Ready", func() (bool, string) {
		if err := s.kube.Get(c, client.ObjectKeyFromObject(db), db); err != nil {
			return false, err.Error()
		}
		return isReady(db), describe(db)
	})
	path := db.Status.StoragePath
	mc := s.minio(t)
	before := len(listKeys(t, mc, path+"/"))

	deleted := time.Now()
	if err := s.kube.Delete(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "namespace "+ns+" to be gone", func() (bool, string) {
		var n corev1.Namespace
		err := s.kube.Get(c, client.ObjectKey{Name: ns}, &n)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		var rdb shalev1.RocksDB
		state := fmt.Sprint(err)
		if gerr := s.kube.Get(c, client.ObjectKeyFromObject(db), &rdb); gerr == nil {
			state = describe(&rdb)
		}
		return false, state
	})
	after := len(listKeys(t, mc, path+"/"))
	owner := exists(t, mc, path+".owner.json")
	if after != 0 && !owner {
		t.Fatalf("the namespace is gone, and %s/ keeps %d objects with no owner record: nothing will ever collect them", path, after)
	}
	t.Logf("namespace %s gone %s after its deletion; %s/: %d objects before, %d after (owner record left: %v)",
		ns, time.Since(deleted).Round(time.Second), path, before, after, owner)
	for _, k := range listKeys(t, mc, path+"/") {
		mc.RemoveObject(context.Background(), hotBucket, k, minio.RemoveObjectOptions{})
	}
	mc.RemoveObject(context.Background(), hotBucket, path+".owner.json", minio.RemoveObjectOptions{})
}
