package operator

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestOperatorSafety: what keeps data safe and the operator sane when the
// store moves, a policy changes with the store gone, a namespace is
// deleted, or primaries fail again and again. One manager for all
// subtests, with a backoff of an hour (so a waiting state stays put while
// the test looks at it; a spec change cuts it short).
func TestOperatorSafety(t *testing.T) {
	opts := testOptions()
	opts.FailoverBackoff, opts.FailoverBackoffMax = time.Hour, time.Hour
	h := startOperatorWith(t, opts)
	t.Run("ExistingDatabase", func(t *testing.T) { testExistingDatabase(h.with(t)) })
	t.Run("ColdTierInUse", func(t *testing.T) { testColdTierInUse(h.with(t)) })
	t.Run("RetainWithStaleRecord", func(t *testing.T) { testRetainWithStaleRecord(h.with(t)) })
	t.Run("NamespaceDeletion", func(t *testing.T) { testNamespaceDeletion(h.with(t)) })
	t.Run("FailureBackoff", func(t *testing.T) { testFailureBackoff(h.with(t)) })
}

// testExistingDatabase (issue 22, item 7): once a database was ready, its
// ObjectStore's location cannot be edited, every later primary gets
// --existing, and an ObjectStore created again at another location gets
// no new primary (nor epoch) but a condition saying what changed, until it
// points back.
func testExistingDatabase(h *harness) {
	t := h.t
	ns := h.namespace("moved")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	db = h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.CurrentPrimary == "orders-primary-1", "want epoch 1"
	})
	if args := h.waitPod(ns, "orders-primary-1").Spec.Containers[0].Args; slices.Contains(args, "--existing") {
		t.Errorf("the first primary of a new database got --existing: %v", args)
	}
	// Ready (setPod also writes what the primary leaves in the store: its
	// claim and CURRENT).
	h.setPod(ns, "orders-primary-1", corev1.PodRunning, true, time.Now())
	db = h.waitDB(ns, "orders", "ready, its location recorded", func(db *shalev1.RocksDB) (bool, string) {
		c := db.Status.Created
		return db.Status.Phase == shalev1.PhaseReady && c != nil && c.Endpoint == h.minio.Endpoint && c.Bucket == bucket, "want status.created " + jsonString(c)
	})

	// In use: the endpoint cannot be edited.
	h.waitStore(ns, store.Name, "used by orders", func(os *shalev1.ObjectStore) bool {
		return slices.ContainsFunc(os.Status.UsedBy, func(u shalev1.StoreUser) bool { return u.Name == "orders" })
	})
	cur := &shalev1.ObjectStore{}
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Endpoint = "http://127.0.0.1:1"
	if err := h.c.Update(h.ctx, cur); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot change while RocksDBs keep data in this ObjectStore") {
		t.Errorf("changing the endpoint of an ObjectStore in use: %v; want it refused", err)
	}

	// The ObjectStore is created again at another bucket (a restore, a
	// copy-paste): the database is not there.
	h.recreateStore(store, func(s *shalev1.ObjectStoreSpec) { s.Hot.Bucket = "moved" })
	moved := h.storeAt("moved", db.Status.StoragePath)
	h.setPod(ns, "orders-primary-1", corev1.PodFailed, false, time.Now())
	db = h.waitDB(ns, "orders", "DatabaseNotFound", func(db *shalev1.RocksDB) (bool, string) {
		if db.Status.Epoch != 1 {
			t.Fatalf("epoch %d started on a location without the database (status %s)", db.Status.Epoch, statusString(db))
		}
		return condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonDatabaseNotFound), "want PrimaryAvailable DatabaseNotFound"
	})
	msg := db.Condition(shalev1.ConditionPrimaryAvailable).Message
	for _, want := range []string{"bucket moved (was shale)", "s3://moved/" + db.Status.StoragePath, "create it again with the old values"} {
		if !strings.Contains(msg, want) {
			t.Errorf("condition message %q lacks %q", msg, want)
		}
	}
	if db.Status.Phase != shalev1.PhaseDegraded {
		t.Errorf("phase %s, want Degraded", db.Status.Phase)
	}
	h.waitEvent(ns, "orders", eventDatabaseNotFound)
	if keys := h.keys(moved, ""); len(keys) != 0 {
		t.Errorf("written at the wrong location: %v", keys)
	}
	if p := h.primaries(ns, "orders"); !slices.Equal(p, []string{"orders-primary-1"}) {
		t.Errorf("primary Pods %v, want only the failed orders-primary-1", p)
	}

	// Pointed back: the next primary starts, with --existing.
	h.recreateStore(store, nil)
	h.waitDB(ns, "orders", "failed over to epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 2 && db.Status.CurrentPrimary == "orders-primary-2", "want epoch 2"
	})
	if args := h.waitPod(ns, "orders-primary-2").Spec.Containers[0].Args; !slices.Contains(args, "--existing") {
		t.Errorf("the primary of a database that was ready lacks --existing: %v", args)
	}
}

// testColdTierInUse (item 8): once a RocksDB keeps its cold tables in the
// ObjectStore's cold tier, the cold tier cannot be edited.
func testColdTierInUse(h *harness) {
	t := h.t
	ns := h.namespace("tiered")
	h.minio.CreateBucket(t, "cold")
	sec, store, db := h.samples(ns)
	store.Spec.Cold = &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: "cold", Prefix: "dbs"}}
	db.Spec.Tiering = &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: time.Hour}}
	h.create(sec, store, db)
	h.waitDB(ns, "orders", "cold tier recorded", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.ColdStoragePath != "" && db.Status.Epoch == 1, "want coldStoragePath and epoch 1"
	})
	h.waitStore(ns, store.Name, "cold tier used by orders", func(os *shalev1.ObjectStore) bool {
		return slices.Contains(os.Status.UsedBy, shalev1.StoreUser{Name: "orders", ColdTier: true})
	})
	cur := &shalev1.ObjectStore{}
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Cold.Bucket = "colder"
	if err := h.c.Update(h.ctx, cur); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cold cannot change while RocksDBs keep tables in the cold tier") {
		t.Errorf("moving the cold tier of an ObjectStore whose cold tier is in use: %v; want it refused", err)
	}

	// An entry whose RocksDB is gone without its finalizer (removed by
	// hand) goes at the ObjectStore's next check; the live one stays.
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.UsedBy = append(cur.Status.UsedBy, shalev1.StoreUser{Name: "vanished", ColdTier: true})
	if err := h.c.Status().Update(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	h.waitStore(ns, store.Name, "vanished swept", func(os *shalev1.ObjectStore) bool {
		return slices.Equal(os.Status.UsedBy, []shalev1.StoreUser{{Name: "orders", ColdTier: true}})
	})
}

// testRetainWithStaleRecord (item 9): a policy changed to Retain while the
// ObjectStore is gone leaves an owner record saying Delete. Deleting the
// RocksDB then must wait until the record says Retain: else a later
// ObjectStore at the same location lets the garbage collector delete the
// retained data.
func testRetainWithStaleRecord(h *harness) {
	t := h.t
	ns := h.namespace("stale")
	sec, store, db := h.samples(ns)
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	h.create(sec, store, db)
	db = h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
	eventually(t, "owner record says Delete", func() (bool, string) {
		rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
		return rec != nil && rec.ReclaimPolicy == shalev1.ReclaimDelete, "record " + jsonString(rec)
	})
	st := h.store(db.Status.StoragePath)
	h.put(st, "000005.sst/00000000000000000001", "table")
	data := h.keys(st, "")

	h.deleteStore(store)
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.ReclaimPolicy = shalev1.ReclaimRetain })
	cur := h.db(ns, "orders")
	h.waitDB(ns, "orders", "Retain observed", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.ObservedGeneration == cur.Generation, "want the new generation observed"
	})
	if err := h.c.Delete(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	// Held: the record cannot be rewritten without the ObjectStore.
	eventually(t, "deletion held with OwnerRecordStale", func() (bool, string) {
		got := &shalev1.RocksDB{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders"}, got); apierrors.IsNotFound(err) {
			t.Fatalf("the RocksDB was deleted while its owner record still says Delete: %s", jsonString(h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())))
		}
		return h.hasEvent(ns, "orders", eventOwnerRecordStale), "no OwnerRecordStale event yet"
	})

	// A later ObjectStore at the same location: the record is rewritten,
	// the deletion completes, and garbage collection keeps the data.
	again := h.recreateStore(store, nil)
	h.waitGone(ns, "orders")
	if rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); rec == nil || rec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Fatalf("owner record %s after the deletion, want Retain", jsonString(rec))
	}
	h.waitStore(ns, store.Name, "no user left", func(os *shalev1.ObjectStore) bool { return len(os.Status.UsedBy) == 0 })
	g := *h.gc
	g.grace = time.Millisecond
	g.now = func() time.Time { return time.Now().Add(time.Hour) }
	rep, err := g.pass(h.ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if v := rep.Verdicts[ns+"/"+db.DirName()]; v != keepRetained {
		t.Errorf("GC verdict %v, want retained", v)
	}
	if got := h.keys(st, ""); !slices.Equal(got, data) {
		t.Errorf("retained data %v after garbage collection, want %v", got, data)
	}
}

// testNamespaceDeletion (item 11): deleting a namespace deletes the
// ObjectStore and Secret beside the RocksDB at the same time; the deletion
// must finish. envtest runs no namespace controller, so the namespace
// stays Terminating and the test deletes what it would. As docs/operator.md
// says: the finalizer lets go without the store, the directory stays with
// its owner record (Delete), and the garbage collector of any ObjectStore
// at that location collects it after --gc-grace.
func testNamespaceDeletion(h *harness) {
	t := h.t
	ns := h.namespace("doomed")
	sec, store, db := h.samples(ns)
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	h.create(sec, store, db)
	db = h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
	h.waitPod(ns, "orders-primary-1")
	eventually(t, "owner record says Delete", func() (bool, string) {
		rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName())
		return rec != nil && rec.ReclaimPolicy == shalev1.ReclaimDelete, "record " + jsonString(rec)
	})
	st := h.store(db.Status.StoragePath)
	h.put(st, "000005.sst/00000000000000000001", "table")

	nsObj := &corev1.Namespace{}
	if err := h.c.Get(h.ctx, types.NamespacedName{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(h.ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace terminating", func() (bool, string) {
		if err := h.c.Get(h.ctx, types.NamespacedName{Name: ns}, nsObj); err != nil {
			return false, err.Error()
		}
		return nsObj.DeletionTimestamp != nil, "phase " + string(nsObj.Status.Phase)
	})
	for _, o := range []client.Object{store, sec, h.db(ns, "orders")} {
		if err := h.c.Delete(h.ctx, o); err != nil {
			t.Fatalf("delete %T %s: %v", o, o.GetName(), err)
		}
	}
	h.waitGone(ns, "orders")
	if p := h.primaries(ns, "orders"); len(p) != 0 {
		t.Errorf("primary Pods %v left", p)
	}
	if keys := h.keys(st, ""); len(keys) == 0 {
		t.Fatalf("the data is gone; docs/operator.md says a namespace deletion leaves it to the garbage collector")
	}
	if rec := h.ownerRecord(store.Spec.Hot.Prefix, ns, db.DirName()); rec == nil || rec.ReclaimPolicy != shalev1.ReclaimDelete {
		t.Fatalf("owner record %s, want Delete", jsonString(rec))
	}

	// Collected by the garbage collector of an ObjectStore at the same
	// location, here in another namespace.
	other := h.namespace("survivor")
	sec2, store2, _ := h.samples(other)
	h.create(sec2, store2)
	h.waitStore(other, store2.Name, "reachable", func(os *shalev1.ObjectStore) bool { return os.IsReachable() })
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store2), store2); err != nil {
		t.Fatal(err)
	}
	g := *h.gc
	g.grace = time.Millisecond
	g.now = func() time.Time { return time.Now().Add(time.Hour) }
	rep, err := g.pass(h.ctx, store2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Deleted, ns+"/"+db.DirName()) {
		t.Errorf("GC deleted %v, want %s (verdicts %v)", rep.Deleted, ns+"/"+db.DirName(), rep.Verdicts)
	}
	if keys := h.keys(st, ""); len(keys) != 0 {
		t.Errorf("left after garbage collection: %v", keys)
	}
}

// testFailureBackoff (item 10): primaries that fail again and again. The
// first failure is failed over at once; the next waits out the backoff
// (an hour here) with the cause in a condition; a changed spec is tried at
// once; failed Pods pile up no further than keepFailedPods; no primary
// starts while the ObjectStore is unreachable; an image that cannot be
// pulled is named while the primary starts.
func testFailureBackoff(h *harness) {
	t := h.t
	ns := h.namespace("flaky")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	h.waitDB(ns, "orders", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })

	// 1. The first failure: failed over at once, recorded with its cause.
	h.terminatePod(ns, "orders-primary-1", 137, "OOMKilled", "")
	db = h.waitDB(ns, "orders", "failed over once", func(db *shalev1.RocksDB) (bool, string) {
		f := db.Status.PrimaryFailures
		return db.Status.Epoch == 2 && f != nil && f.Count == 1 && len(f.Recent) == 1 && f.Recent[0].Reason == shalev1.ReasonOOMKilled, "want epoch 2, one OOMKilled failure: " + jsonString(f)
	})
	if m := db.Status.PrimaryFailures.Recent[0].Message; !strings.Contains(m, "more memory than its limit") {
		t.Errorf("failure message %q", m)
	}
	h.waitEvent(ns, "orders", eventPrimaryFailed)

	// 2. The second in a row: no new primary within the backoff; the
	// cause is in the condition.
	h.terminatePod(ns, "orders-primary-2", 137, "OOMKilled", "")
	db = h.waitDB(ns, "orders", "backing off", func(db *shalev1.RocksDB) (bool, string) {
		if db.Status.Epoch > 2 {
			t.Fatalf("a second failure in a row was replaced at once: %s", statusString(db))
		}
		f := db.Status.PrimaryFailures
		return f != nil && f.Count == 2 && condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonOOMKilled), "want 2 failures, PrimaryAvailable OOMKilled: " + jsonString(f)
	})
	if c := db.Condition(shalev1.ConditionPrimaryAvailable); !strings.Contains(c.Message, "2 primaries failed in a row") || !strings.Contains(c.Message, "the next primary starts at") {
		t.Errorf("condition message %q", c.Message)
	}
	if c := db.Condition(shalev1.ConditionReady); c == nil || c.Reason != shalev1.ReasonOOMKilled {
		t.Errorf("Ready condition %+v, want reason OOMKilled", c)
	}
	if db.Status.Phase != shalev1.PhaseDegraded {
		t.Errorf("phase %s, want Degraded", db.Status.Phase)
	}

	// 3. A changed spec (the memory limit raised) is tried at once; so
	// are the next ones, until failed Pods would pile up.
	for e := int64(2); e <= 6; e++ {
		if e > 2 {
			h.terminatePod(ns, db.PrimaryPodName(e), 1, "Error", "panic: boom")
			h.waitDB(ns, "orders", "failure recorded", func(db *shalev1.RocksDB) (bool, string) {
				f := db.Status.PrimaryFailures
				return f != nil && f.Count == int32(e) && condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonPrimaryCrashed), "failures " + jsonString(f)
			})
		}
		h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
			db.Spec.Primary.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(itoa(uint64(e)) + "Gi")}
		})
		h.waitDB(ns, "orders", "the fix tried at once", func(db *shalev1.RocksDB) (bool, string) {
			return db.Status.Epoch == e+1, "want the next epoch"
		})
	}
	eventually(t, "failed Pods pruned", func() (bool, string) {
		p := h.primaries(ns, "orders")
		slices.Sort(p)
		return slices.Equal(p, []string{"orders-primary-4", "orders-primary-5", "orders-primary-6", "orders-primary-7"}), "primary Pods " + jsonString(p)
	})

	// 4. The ObjectStore unreachable (its key revoked): no new primary,
	// whatever the backoff says, until it is reachable again.
	var secret corev1.Secret
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(sec), &secret); err != nil {
		t.Fatal(err)
	}
	secret.Data[shalev1.SecretKeySecretAccessKey] = []byte("revoked")
	if err := h.c.Update(h.ctx, &secret); err != nil {
		t.Fatal(err)
	}
	h.waitStore(ns, store.Name, "unreachable", func(os *shalev1.ObjectStore) bool {
		c := findCond(os.Status.Conditions, shalev1.ConditionReachable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	h.terminatePod(ns, "orders-primary-7", 1, "Error", "shale: --db s3://shale/x: s3 check bucket: The request signature we calculated does not match (HTTP 403 SignatureDoesNotMatch)")
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.Primary.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}
	})
	db = h.waitDB(ns, "orders", "waiting for the store", func(db *shalev1.RocksDB) (bool, string) {
		if db.Status.Epoch > 7 {
			t.Fatalf("a primary was started while the ObjectStore is unreachable: %s", statusString(db))
		}
		f := db.Status.PrimaryFailures
		return db.Status.ObservedGeneration == db.Generation && f != nil && f.Recent[len(f.Recent)-1].Reason == shalev1.ReasonBadCredentials &&
			condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonObjectStoreUnreachable), "want PrimaryAvailable ObjectStoreUnreachable, last failure BadCredentials: " + jsonString(f)
	})
	secret.Data[shalev1.SecretKeySecretAccessKey] = []byte(h.minio.SecretKey)
	if err := h.c.Update(h.ctx, &secret); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "started once the store is reachable", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 8, "want epoch 8"
	})

	// 5. An image that cannot be pulled: said while the primary starts.
	h.waitingPod(ns, "orders-primary-8", "ImagePullBackOff", `Back-off pulling image "shale.local/shale:typo"`)
	db = h.waitDB(ns, "orders", "image pull failure named", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonImagePullFailed), "want PrimaryAvailable ImagePullFailed"
	})
	if c := db.Condition(shalev1.ConditionPrimaryAvailable); !strings.Contains(c.Message, "shale:typo") {
		t.Errorf("condition message %q lacks the image", c.Message)
	}

	// 6. A primary that was ready and is then killed (a chaos test, a
	// node's OOM killer for another process) is replaced at once,
	// whatever failed before: that is what failover is for. One killed for
	// its own memory limit after being ready is not: the next one would
	// exceed it too.
	h.setPod(ns, "orders-primary-8", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 8", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Phase == shalev1.PhaseReady, "want Ready" })
	h.terminatePod(ns, "orders-primary-8", 137, "Error", "")
	h.waitDB(ns, "orders", "killed after ready: failed over at once", func(db *shalev1.RocksDB) (bool, string) {
		f := db.Status.PrimaryFailures
		return db.Status.Epoch == 9 && f != nil && f.Count == 1, "want epoch 9, a new row of failures: " + jsonString(f)
	})
	h.setPod(ns, "orders-primary-9", corev1.PodRunning, true, time.Now())
	h.waitDB(ns, "orders", "ready at epoch 9", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Phase == shalev1.PhaseReady, "want Ready" })
	h.terminatePod(ns, "orders-primary-9", 137, "OOMKilled", "")
	h.waitDB(ns, "orders", "OOM killed after ready: backing off", func(db *shalev1.RocksDB) (bool, string) {
		if db.Status.Epoch > 9 {
			t.Fatalf("a primary OOM killed again was replaced at once: %s", statusString(db))
		}
		f := db.Status.PrimaryFailures
		return f != nil && f.Count == 2 && condIs(db, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonOOMKilled), "failures " + jsonString(f)
	})
}

// terminatePod plays the kubelet for a primary whose process ended:
// phase Failed, the container terminated with code, reason and message
// (the end of its log).
func (h *harness) terminatePod(ns, name string, code int32, reason, msg string) {
	h.t.Helper()
	pod := h.waitPod(ns, name)
	now := metav1.Now()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: now, FinishedAt: now}}}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatalf("updating the status of Pod %s: %v", name, err)
	}
}

// waitingPod plays the kubelet for a primary whose container cannot start.
func (h *harness) waitingPod(ns, name, reason, msg string) {
	h.t.Helper()
	pod := h.waitPod(ns, name)
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatalf("updating the status of Pod %s: %v", name, err)
	}
}

// waitStore waits until cond holds for the ObjectStore.
func (h *harness) waitStore(ns, name, what string, cond func(*shalev1.ObjectStore) bool) *shalev1.ObjectStore {
	h.t.Helper()
	os := &shalev1.ObjectStore{}
	eventually(h.t, "ObjectStore "+name+": "+what, func() (bool, string) {
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, os); err != nil {
			return false, err.Error()
		}
		return cond(os), "status " + jsonString(os.Status)
	})
	return os
}

// deleteStore deletes an ObjectStore and waits until it is gone.
func (h *harness) deleteStore(store *shalev1.ObjectStore) {
	h.t.Helper()
	if err := h.c.Delete(h.ctx, &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: store.Name}}); err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	eventually(h.t, "ObjectStore "+store.Name+" gone", func() (bool, string) {
		err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &shalev1.ObjectStore{})
		return apierrors.IsNotFound(err), "get: " + errString(err)
	})
}

// recreateStore deletes the ObjectStore and creates it again with the
// spec of store, changed by mutate, and waits until it is reachable (a
// new bucket is created first).
func (h *harness) recreateStore(store *shalev1.ObjectStore, mutate func(*shalev1.ObjectStoreSpec)) *shalev1.ObjectStore {
	h.t.Helper()
	h.deleteStore(store)
	o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: store.Name}, Spec: *store.Spec.DeepCopy()}
	if mutate != nil {
		mutate(&o.Spec)
	}
	if o.Spec.Hot.Bucket != bucket {
		h.minio.CreateBucket(h.t, o.Spec.Hot.Bucket)
	}
	h.create(o)
	return h.waitStore(o.Namespace, o.Name, "reachable", func(os *shalev1.ObjectStore) bool { return os.IsReachable() })
}

// hasEvent reports whether an Event with reason exists on the object.
func (h *harness) hasEvent(ns, object, reason string) bool {
	var evs corev1.EventList
	if err := h.c.List(h.ctx, &evs, client.InNamespace(ns)); err != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == object && e.Reason == reason {
			return true
		}
	}
	return false
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
