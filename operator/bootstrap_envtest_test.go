package operator

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestAdoptRetainedPath: a RocksDB deleted with reclaimPolicy Retain is
// brought back by a new RocksDB with spec.bootstrap.fromExistingPath. The
// operator tests run no primary process (envtest has no kubelet; tests
// play it), so this checks what the operator writes and starts: the
// adopter's status.storagePath, its first primary's flags (the old
// directory, --existing, an epoch above every claim there), its owner
// record in MinIO (adoptedBy, If-Match claim), the directory's objects
// untouched, the garbage collector keeping it, and the refusals of a
// second adopter and of a directory a live RocksDB owns, with Events.
func TestAdoptRetainedPath(t *testing.T) {
	h := startOperator(t)
	ns := h.namespace("adopt")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)

	// The database, with data, ready once, then with a failover's claim.
	h.waitPod(ns, "orders-primary-1")
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	db = h.waitDB(ns, "orders", "ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady, "want Ready"
	})
	oldPath := db.Status.StoragePath
	dir := h.store(oldPath)
	for _, k := range []string{"000004.log/00000000000000000001/00000000000000000001", "000005.sst/00000000000000000001", "MANIFEST-000001/00000000000000000001/00000000000000000001", "_shale/epoch/00000000000000000004"} {
		h.put(dir, k, "data of "+k)
	}
	before := h.keys(dir, "")

	// Deleted with Retain: the directory stays, its record says Retain.
	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "orders")
	if rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); rec == nil || rec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Fatalf("owner record after the Retain deletion: %s", jsonString(rec))
	}

	// Brought back.
	adopter := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-back"}, Spec: *db.Spec.DeepCopy()}
	adopter.Spec.Bootstrap = &shalev1.BootstrapSpec{FromExistingPath: &shalev1.ExistingPathSource{Path: oldPath}}
	h.create(adopter)
	adopter = h.waitDB(ns, "orders-back", "started on the retained directory", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.StoragePath == oldPath && d.Status.Epoch == 5 && d.Status.CurrentPrimary == "orders-back-primary-5", "want storagePath " + oldPath + " and epoch 5 (above the claim of 4)"
	})
	h.waitEvent(ns, "orders-back", eventBootstrapAdopted)
	pod := h.waitPod(ns, "orders-back-primary-5")
	args := " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " "
	for _, want := range []string{" --db s3://shale/" + oldPath + " ", " --epoch 5 ", " --existing "} {
		if !strings.Contains(args, want) {
			t.Errorf("first primary's args %q lack %q", args, want)
		}
	}
	rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
	if rec == nil || rec.UID != db.UID || rec.Name != "orders" || rec.AdoptedBy == nil || rec.AdoptedBy.UID != adopter.UID || rec.AdoptedBy.Name != "orders-back" || rec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Errorf("owner record %s: want orders' UID %s, adoptedBy orders-back %s, Retain", jsonString(rec), db.UID, adopter.UID)
	}
	if r := h.ownerRecord(store.Spec.Hot.Prefix, ns, adopter.DirName()); r != nil {
		t.Errorf("the adopter wrote a record of a directory of its own: %s", jsonString(r))
	}
	if left := h.keys(h.store(adopter.StoragePathUnder(store.Spec.Hot.Prefix)), ""); len(left) != 0 {
		t.Errorf("objects under the adopter's own NAME-UID: %v", left)
	}
	h.setPod(ns, "orders-back-primary-5", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders-back", "ready", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Phase == shalev1.PhaseReady && condIs(d, shalev1.ConditionReady, metav1.ConditionTrue, shalev1.ReasonPrimaryReady), "want Ready"
	})
	after := h.keys(dir, "")
	for _, k := range before {
		if !slices.Contains(after, k) {
			t.Errorf("%s gone from the adopted directory", k)
		}
	}

	// A second adopter of the same directory: refused, nothing written.
	second := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-again"}, Spec: *adopter.Spec.DeepCopy()}
	h.create(second)
	ev := h.waitEvent(ns, "orders-again", shalev1.ReasonBootstrapRefused)
	if !strings.Contains(ev.Message, "orders-back") || ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %s %q: want a warning naming orders-back", ev.Type, ev.Message)
	}
	second = h.waitDB(ns, "orders-again", "refused", func(d *shalev1.RocksDB) (bool, string) {
		return condIs(d, shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused), "want Ready False BootstrapRefused"
	})
	if second.Status.StoragePath != "" || second.Status.Epoch != 0 || len(h.primaries(ns, "orders-again")) != 0 {
		t.Errorf("refused adopter: storagePath %q, epoch %d, Pods %v; want none", second.Status.StoragePath, second.Status.Epoch, h.primaries(ns, "orders-again"))
	}
	if r := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); r == nil || r.AdoptedBy == nil || r.AdoptedBy.UID != adopter.UID {
		t.Errorf("owner record after a refused adoption: %s", jsonString(r))
	}

	// The directory of a live RocksDB: refused.
	live := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"}, Spec: *db.Spec.DeepCopy()}
	h.create(live)
	live = h.waitDB(ns, "live", "started", func(d *shalev1.RocksDB) (bool, string) { return d.Status.Epoch == 1, "want epoch 1" })
	h.setPod(ns, "live-primary-1", corev1.PodRunning, true, time.Now())
	thief := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief"}, Spec: *db.Spec.DeepCopy()}
	thief.Spec.Bootstrap = &shalev1.BootstrapSpec{FromExistingPath: &shalev1.ExistingPathSource{Path: live.Status.StoragePath}}
	h.create(thief)
	ev = h.waitEvent(ns, "thief", shalev1.ReasonBootstrapRefused)
	if !strings.Contains(ev.Message, "belongs to RocksDB live, which exists") {
		t.Errorf("event %q: want it to name RocksDB live", ev.Message)
	}
	if r := h.ownerRecord(store.Spec.Hot.Prefix, ns, live.DirName()); r == nil || r.AdoptedBy != nil {
		t.Errorf("live's owner record after a refused adoption: %s", jsonString(r))
	}

	// The garbage collector counts the adopted directory as live, even
	// with the adopter's reclaimPolicy Delete and long past the grace.
	cur := h.db(ns, "orders-back")
	cur.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	if err := h.c.Update(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the adopted directory's record says Delete", func() (bool, string) {
		r := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
		return r != nil && r.ReclaimPolicy == shalev1.ReclaimDelete && r.AdoptedBy != nil && r.AdoptedBy.UID == adopter.UID, "record " + jsonString(r)
	})
	var os shalev1.ObjectStore
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
		t.Fatal(err)
	}
	g := *h.gc
	g.grace, g.now = time.Second, func() time.Time { return time.Now().Add(48 * time.Hour) }
	gcRep, err := g.pass(h.ctx, &os)
	if err != nil {
		t.Fatal(err)
	}
	if v := gcRep.Verdicts[ns+"/"+db.DirName()]; v != keepLive {
		t.Errorf("GC verdict on the adopted directory: %v, want live", v)
	}
	if len(h.keys(dir, "")) < len(before) {
		t.Errorf("the GC deleted from the adopted directory")
	}

	// The adopter deleted with Delete: the adopted directory and its
	// record go.
	if err := h.c.Delete(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "orders-back")
	if left := h.keys(dir, ""); len(left) != 0 {
		t.Errorf("left after the adopter's reclaimPolicy Delete: %v", left)
	}
	if r := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); r != nil {
		t.Errorf("owner record left after the adopter's reclaimPolicy Delete: %s", jsonString(r))
	}
}
