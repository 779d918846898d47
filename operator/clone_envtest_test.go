package operator

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// standInParent creates the sample RocksDB "orders" in ns, its primary a
// stand-in answering the checkpoint RPCs behind the real guard, and waits
// until it is Ready.
func (h *harness) standInParent(ns string) (*shalev1.RocksDB, *checkpointStandIn) {
	h.t.Helper()
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
	if err != nil {
		h.t.Fatal(err)
	}
	kv := &checkpointStandIn{guardedStatus: guardedStatus{st: &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY}}, cps: map[string]*kvv1.CheckpointInfo{}}
	h.waitPod(ns, "orders-primary-1")
	h.serveGuarded(lis, ns, "orders-primary-tls", "orders-access", kv)
	pod := h.waitPod(ns, "orders-primary-1")
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	h.primaryOpened(pod)
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	db = h.waitDB(ns, "orders", "ready", func(d *shalev1.RocksDB) (bool, string) { return d.Status.Phase == shalev1.PhaseReady, "want Ready" })
	return db, kv
}

// noCloneWritten: a refused clone has no directory, epoch, status.clone
// or Pod.
func (h *harness) noCloneWritten(ns, name string) {
	h.t.Helper()
	d := h.db(ns, name)
	if d.Status.StoragePath != "" || d.Status.Epoch != 0 || d.Status.Clone != nil || len(h.primaries(ns, name)) != 0 {
		h.t.Errorf("refused clone %s: storagePath %q, epoch %d, status.clone %s, Pods %v; want none", name, d.Status.StoragePath, d.Status.Epoch, jsonString(d.Status.Clone), h.primaries(ns, name))
	}
}

// TestBootstrapFromCheckpoint: clones on envtest, the parent's primary a
// stand-in behind the real guard (the clone's own primary process is the
// storage layer's, tested in primary/clone_test.go). fromCheckpoint: refused
// with an Event and a condition, nothing written, while its Checkpoint does
// not exist; started once it is Ready, its first primary with the clone
// flags (the parent's URL, the checkpoint, its UID), then Ready. cloneFrom:
// the checkpoint clone-UID is asked of the parent's primary with the
// operator's identity and the clone's UID as request id, expiring in an
// hour, the clone's primary gets it, and once the clone is Ready the
// checkpoint is deleted in the parent. A parent that does not exist:
// refused, nothing written.
func TestBootstrapFromCheckpoint(t *testing.T) {
	h := startOperator(t)
	ns := h.namespace("clones")
	db, kv := h.standInParent(ns)
	store := &shalev1.ObjectStore{}
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: db.Spec.ObjectStoreRef.Name}, store); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: store.Spec.Credentials.Name}}
	parentURL := "s3://shale/" + db.Status.StoragePath
	nothingWritten := func(name string) { t.Helper(); h.noCloneWritten(ns, name) }
	argsOf := func(pod *corev1.Pod) string { return " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " " }

	// fromCheckpoint before its Checkpoint exists: refused, nothing written.
	fromCk := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-ck"}, Spec: *db.Spec.DeepCopy()}
	fromCk.Spec.Bootstrap = &shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}}
	h.create(fromCk)
	ev := h.waitEvent(ns, "orders-ck", shalev1.ReasonBootstrapRefused)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "Checkpoint c1 does not exist in namespace "+ns) {
		t.Errorf("event %s %q: want a warning saying Checkpoint c1 does not exist", ev.Type, ev.Message)
	}
	h.waitDB(ns, "orders-ck", "refused", func(d *shalev1.RocksDB) (bool, string) {
		return condIs(d, shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused), "want Ready False BootstrapRefused"
	})
	nothingWritten("orders-ck")

	// The Checkpoint made and Ready: the clone starts from it (the
	// Checkpoint becoming Ready wakes it up).
	h.create(&shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c1"}, Spec: shalev1.CheckpointSpec{Database: "orders"}})
	h.waitCheckpoint(ns, "c1", "Ready", func(c *shalev1.Checkpoint) bool { return c.Status.Phase == shalev1.CheckpointReady })
	fromCk = h.waitDB(ns, "orders-ck", "started as a clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.CurrentPrimary == "orders-ck-primary-1", "want its first primary"
	})
	if c := fromCk.Status.Clone; c == nil || c.Database != "orders" || c.UID != db.UID || c.URL != parentURL || c.Checkpoint != "c1" || c.CheckpointExpiresAt != nil {
		t.Errorf("status.clone %s: want orders %s at %s, checkpoint c1", jsonString(c), db.UID, parentURL)
	}
	if want := "dbs/" + ns + "/" + fromCk.DirName(); fromCk.Status.StoragePath != want {
		t.Errorf("clone's storagePath %q, want its own %q", fromCk.Status.StoragePath, want)
	}
	ev = h.waitEvent(ns, "orders-ck", eventBootstrapCloning)
	if !strings.Contains(ev.Message, "cloning RocksDB orders ("+parentURL+") at its checkpoint c1") {
		t.Errorf("event %q", ev.Message)
	}
	args := argsOf(h.waitPod(ns, "orders-ck-primary-1"))
	for _, want := range []string{" --db s3://shale/" + fromCk.Status.StoragePath + " ", " --clone-from " + parentURL + " ", " --clone-checkpoint c1 ", " --clone-id " + string(fromCk.UID) + " "} {
		if !strings.Contains(args, want) {
			t.Errorf("clone's first primary's args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--existing") {
		t.Errorf("clone's first primary's args %q: --existing (the CLI refuses it with --clone-from)", args)
	}
	h.setPod(ns, "orders-ck-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders-ck", "ready", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Phase == shalev1.PhaseReady && d.Status.Created != nil, "want Ready"
	})

	// cloneFrom: the operator's checkpoint in the parent.
	fromNew := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-new"}, Spec: *db.Spec.DeepCopy()}
	fromNew.Spec.Bootstrap = &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}}
	h.create(fromNew)
	fromNew = h.waitDB(ns, "orders-new", "started as a clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.CurrentPrimary == "orders-new-primary-1", "want its first primary"
	})
	ckName := "clone-" + string(fromNew.UID)
	if !kv.has(ckName) {
		t.Fatalf("no checkpoint %s in the parent", ckName)
	}
	kv.cmu.Lock()
	var calls []checkpointCall
	for _, c := range kv.creates {
		if c.req.Name == ckName {
			calls = append(calls, c)
		}
	}
	kv.cmu.Unlock()
	c := fromNew.Status.Clone
	if c == nil || c.Checkpoint != ckName || c.URL != parentURL || c.UID != db.UID || c.CheckpointExpiresAt == nil || c.CheckpointReleased {
		t.Fatalf("status.clone %s", jsonString(c))
	}
	if left := time.Until(c.CheckpointExpiresAt.Time); left < 55*time.Minute || left > time.Hour {
		t.Errorf("the clone's checkpoint expires in %v, want about an hour", left)
	}
	for _, call := range calls {
		if call.id.Kind != auth.KindOperator || call.req.RequestId != string(fromNew.UID) || call.req.Expires == nil || !call.req.Expires.AsTime().Equal(c.CheckpointExpiresAt.Time) {
			t.Errorf("Checkpoint call %+v by %+v: want the operator, request id %s, expiry %v", call.req, call.id, fromNew.UID, c.CheckpointExpiresAt)
		}
	}
	if len(calls) == 0 {
		t.Errorf("no Checkpoint call for %s", ckName)
	}
	args = argsOf(h.waitPod(ns, "orders-new-primary-1"))
	if want := " --clone-from " + parentURL + " --clone-checkpoint " + ckName + " --clone-id " + string(fromNew.UID) + " "; !strings.Contains(args, want) || strings.Contains(args, "--existing") {
		t.Errorf("cloneFrom's first primary's args %q, want %q and no --existing", args, want)
	}
	// Not deleted before the clone's primary opened.
	kv.cmu.Lock()
	early := slices.Contains(kv.deletes, ckName)
	kv.cmu.Unlock()
	if early {
		t.Errorf("checkpoint %s deleted before the clone was ready", ckName)
	}
	h.setPod(ns, "orders-new-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders-new", "ready, its checkpoint released", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Phase == shalev1.PhaseReady && d.Status.Clone != nil && d.Status.Clone.CheckpointReleased, "want Ready and checkpointReleased"
	})
	if kv.has(ckName) {
		t.Errorf("checkpoint %s still in the parent after the clone was ready", ckName)
	}
	ev = h.waitEvent(ns, "orders-new", eventBootstrapCheckpointDeleted)
	if !strings.Contains(ev.Message, "deleted the checkpoint "+ckName+" in RocksDB orders") {
		t.Errorf("event %q", ev.Message)
	}
	if !kv.has("c1") {
		t.Errorf("the user's Checkpoint c1 went with the clone's")
	}

	// A parent in another ObjectStore (RFC 0010 step 20): a second bucket
	// with its own Secret. The clone's first primary copies from the
	// parent's endpoint with the parent store's Secret mounted; once it is
	// Ready the operator reports what its _shale/copy record says.
	h.minio.CreateBucket(t, "other")
	otherSec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-keys"}, StringData: map[string]string{
		shalev1.SecretKeyAccessKeyID: h.minio.AccessKey, shalev1.SecretKeySecretAccessKey: h.minio.SecretKey}}
	other := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, Spec: *store.Spec.DeepCopy()}
	other.Spec.Hot.Bucket, other.Spec.Credentials = "other", &shalev1.SecretReference{Name: "other-keys"}
	copied := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-copy"}, Spec: *db.Spec.DeepCopy()}
	copied.Spec.ObjectStoreRef.Name = "other"
	copied.Spec.Bootstrap = &shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}}
	h.create(otherSec, other, copied)
	copied = h.waitDB(ns, "orders-copy", "started as a copied clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.CurrentPrimary == "orders-copy-primary-1", "want its first primary"
	})
	if c := copied.Status.Clone; c == nil || c.URL != parentURL || c.ObjectStore != store.Name || c.Endpoint != store.Spec.Endpoint || c.CredentialsSecret != sec.Name {
		t.Errorf("copied clone's status.clone %s: want the parent %s in ObjectStore %s (%s, Secret %s)", jsonString(c), parentURL, store.Name, store.Spec.Endpoint, sec.Name)
	}
	cpod := h.waitPod(ns, "orders-copy-primary-1")
	args = argsOf(cpod)
	if want := " --clone-from " + parentURL + " --clone-checkpoint c1 --clone-id " + string(copied.UID) + " --clone-copy --clone-endpoint " + store.Spec.Endpoint + " --clone-credentials-dir " + cloneCredentialsDir + " "; !strings.Contains(args, want) ||
		!strings.Contains(args, " --db s3://other/"+copied.Status.StoragePath+" ") {
		t.Errorf("copied clone's first primary's args %q, want %q and --db in bucket other", args, want)
	}
	if !slices.ContainsFunc(cpod.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == sec.Name }) {
		t.Errorf("copied clone's Pod does not mount the parent store's Secret %s: %s", sec.Name, jsonString(cpod.Spec.Volumes))
	}
	// What the storage layer writes first when it copies (the primary
	// here is a stand-in): the checkpoint's MANIFEST and one table.
	rec := layout.CopyRecord{Copy: true, OriginRecord: layout.OriginRecord{CloneID: string(copied.UID), Parent: parentURL, Checkpoint: "c1", CheckpointID: "1-abc",
		Current: "MANIFEST-000005\n", Manifest: layout.CheckpointManifest{Name: "MANIFEST-000005", Size: 100},
		Origins: []layout.Origin{{URL: parentURL, Pin: layout.PinKey(string(copied.UID))}}, Files: []layout.OriginFile{{Name: "000007.sst", Epoch: 1, Size: 1000}}}}
	cst := h.storeAt("other", copied.Status.StoragePath)
	if _, err := cst.Put(h.ctx, layout.CopyKey, bytes.NewReader(rec.Format()), int64(len(rec.Format())), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	h.setPod(ns, "orders-copy-primary-1", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders-copy", "ready, the copy reported", func(d *shalev1.RocksDB) (bool, string) {
		c := d.Status.Clone
		return d.Status.Phase == shalev1.PhaseReady && c != nil && c.CopiedObjects == 2 && c.CopiedBytes == 1100, "want Ready and copiedObjects 2, copiedBytes 1100"
	})
	ev = h.waitEvent(ns, "orders-copy", eventCloneCopied)
	if !strings.Contains(ev.Message, "copied 2 objects (1100 bytes") || !strings.Contains(ev.Message, "in ObjectStore "+store.Name) {
		t.Errorf("event %q", ev.Message)
	}

	// A copied clone deleted before its copy finished: the pin its
	// bootstrap wrote in the parent (in the parent's ObjectStore) goes with
	// it, or the parent would keep those tables for good.
	interrupted := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-copy-interrupted"}, Spec: *copied.Spec.DeepCopy()}
	interrupted.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	h.create(interrupted)
	interrupted = h.waitDB(ns, interrupted.Name, "started as a copied clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.Clone != nil && d.Status.Clone.ObjectStore == store.Name, "want its first primary"
	})
	parentDir := h.storeAt("shale", db.Status.StoragePath)
	pin := layout.PinKey(string(interrupted.UID))
	h.put(parentDir, pin, `{"cloneID":"`+string(interrupted.UID)+`"}`)
	if err := h.c.Delete(h.ctx, interrupted); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the interrupted copy's pin released in the parent", func() (bool, string) {
		_, err := parentDir.Stat(h.ctx, pin)
		return errors.Is(err, objstore.ErrNotFound), fmt.Sprintf("stat %s: %v", pin, err)
	})

	// A parent that does not exist: refused, nothing written.
	orphan := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"}, Spec: *db.Spec.DeepCopy()}
	orphan.Spec.Bootstrap = &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "invoices"}}
	h.create(orphan)
	ev = h.waitEvent(ns, "orphan", shalev1.ReasonBootstrapRefused)
	if !strings.Contains(ev.Message, "RocksDB invoices (spec.bootstrap.cloneFrom.database) does not exist") {
		t.Errorf("event %q", ev.Message)
	}
	h.waitDB(ns, "orphan", "refused", func(d *shalev1.RocksDB) (bool, string) {
		return condIs(d, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused), "want PrimaryAvailable False BootstrapRefused"
	})
	nothingWritten("orphan")
}

// TestCloneParentRecordAndEarlyDelete (RFC 0010 step 22, and step 21's
// checkpoint of a clone that never became ready): a parent whose owner
// record in the store says another cluster refuses the clone with an
// Event naming the record and the cluster, and nothing is written (no
// checkpoint asked of the parent either); with the record back, a
// cloneFrom clone deleted before it was Ready deletes the checkpoint
// clone-<UID> it asked the parent for, in its finalizer; with the
// parent's primary unreachable, its deletion still completes, and a
// Warning says the checkpoint stays until its expiry.
func TestCloneParentRecordAndEarlyDelete(t *testing.T) {
	h := startOperator(t)
	ns := h.namespace("clone-early")
	parent, kv := h.standInParent(ns)
	hot := h.store("dbs")
	key := ownerRecordKey(ns, parent.DirName())
	rec := h.ownerRecord("dbs", ns, parent.DirName())
	if rec == nil {
		t.Fatalf("no owner record %s for the parent", key)
	}
	newClone := func(name string) *shalev1.RocksDB {
		c := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: *parent.Spec.DeepCopy()}
		c.Spec.Bootstrap = &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}}
		h.create(c)
		return c
	}
	deleteDB := func(name string) {
		t.Helper()
		if err := h.c.Delete(h.ctx, h.db(ns, name)); err != nil {
			t.Fatal(err)
		}
		h.waitGone(ns, name)
	}

	// The parent's record says another cluster: refused, nothing written.
	foreign := *rec
	foreign.Cluster = "another-cluster"
	if err := putOwnerRecord(h.ctx, hot, key, foreign); err != nil {
		t.Fatal(err)
	}
	refused := newClone("refused")
	ev := h.waitEvent(ns, "refused", shalev1.ReasonBootstrapRefused)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "its owner record "+key+" says another cluster (another-cluster") {
		t.Errorf("event %s %q: want a warning naming the record and the other cluster", ev.Type, ev.Message)
	}
	h.noCloneWritten(ns, "refused")
	refused = h.db(ns, "refused")
	if ck := "clone-" + string(refused.UID); kv.has(ck) {
		t.Errorf("checkpoint %s asked of the parent for a refused clone", ck)
	}
	deleteDB("refused")
	if err := putOwnerRecord(h.ctx, hot, key, *rec); err != nil {
		t.Fatal(err)
	}

	// Deleted before it was Ready: its checkpoint goes in the finalizer.
	early := newClone("early")
	early = h.waitDB(ns, "early", "started as a clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.Clone != nil && d.Status.Clone.CheckpointExpiresAt != nil, "want its first primary"
	})
	ck := "clone-" + string(early.UID)
	if !kv.has(ck) {
		t.Fatalf("no checkpoint %s in the parent", ck)
	}
	deleteDB("early")
	if kv.has(ck) {
		t.Errorf("checkpoint %s still in the parent after its clone was deleted", ck)
	}
	ev = h.waitEvent(ns, "early", eventBootstrapCheckpointDeleted)
	if !strings.Contains(ev.Message, "deleted the checkpoint "+ck+" in RocksDB orders: the clone is deleted before it was released") {
		t.Errorf("event %q", ev.Message)
	}

	// The parent's primary unreachable: the deletion completes all the
	// same, and says the checkpoint stays until it expires.
	late := newClone("unreachable")
	late = h.waitDB(ns, "unreachable", "started as a clone", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 1 && d.Status.Clone != nil && d.Status.Clone.CheckpointExpiresAt != nil, "want its first primary"
	})
	ck = "clone-" + string(late.UID)
	if !kv.has(ck) {
		t.Fatalf("no checkpoint %s in the parent", ck)
	}
	kv.cmu.Lock()
	kv.down = true
	kv.cmu.Unlock()
	deleteDB("unreachable")
	ev = h.waitEvent(ns, "unreachable", eventCloneCheckpointLeft)
	expires := late.Status.Clone.CheckpointExpiresAt.UTC().Format(time.RFC3339)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "checkpoint "+ck+" in RocksDB orders") || !strings.Contains(ev.Message, "stays there until it expires at "+expires) {
		t.Errorf("event %s %q: want a warning naming the checkpoint and its expiry %s", ev.Type, ev.Message, expires)
	}
	if !kv.has(ck) {
		t.Errorf("checkpoint %s gone from a parent whose primary was down", ck)
	}
}
