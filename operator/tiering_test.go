package operator

import (
	"fmt"
	"math/rand"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

func TestPlanTiering(t *testing.T) {
	db := func(tiering bool, coldPath string) *shalev1.RocksDB {
		d := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", UID: "00000000-0000-0000-0000-000000000001"}}
		if tiering {
			d.Spec.Tiering = &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: 24 * time.Hour}}
		}
		d.Status.ColdStoragePath = coldPath
		return d
	}
	store := func(cold bool, endpoint string) *shalev1.ObjectStore {
		s := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "minio"}}
		if cold {
			s.Spec.Cold = &shalev1.ColdTier{Endpoint: endpoint, BucketLocation: shalev1.BucketLocation{Bucket: "cold", Prefix: "tier"}}
		}
		return s
	}
	const path = "tier/ns/orders-00000000-0000-0000-0000-000000000001"
	for _, tc := range []struct {
		name     string
		db       *shalev1.RocksDB
		store    *shalev1.ObjectStore
		setPath  string
		args     []string
		reason   string // of the Tiering condition ("": none)
		refusing bool
	}{
		{"never asked", db(false, ""), store(true, ""), "", nil, "", false},
		{"no ObjectStore", db(true, ""), nil, "", nil, "", false},
		{"first enabled: record the path", db(true, ""), store(true, ""), path,
			[]string{"--cold-db", "s3://cold/" + path, "--cold-after", "24h0m0s"}, shalev1.ReasonColdTierInUse, false},
		{"enabled", db(true, path), store(true, ""), "",
			[]string{"--cold-db", "s3://cold/" + path, "--cold-after", "24h0m0s"}, shalev1.ReasonColdTierInUse, false},
		{"its own endpoint", db(true, path), store(true, "http://hdd:9000"), "",
			[]string{"--cold-db", "s3://cold/" + path, "--cold-endpoint", "http://hdd:9000", "--cold-after", "24h0m0s"}, shalev1.ReasonColdTierInUse, false},
		{"turned off: the cold tables are still read", db(false, path), store(true, ""), "",
			[]string{"--cold-db", "s3://cold/" + path}, shalev1.ReasonTieringOff, false},
		{"asked for without a cold tier", db(true, ""), store(false, ""), "", nil, shalev1.ReasonNoColdTier, false},
		{"the cold tier gone from the ObjectStore", db(true, path), store(false, ""), "", nil, shalev1.ReasonColdTierMissing, true},
		{"gone, tiering off", db(false, path), store(false, ""), "", nil, shalev1.ReasonColdTierMissing, true},
	} {
		p := planTiering(tc.db, tc.store)
		reason := ""
		if p.cond != nil {
			reason = p.cond.Reason
		}
		if p.setColdPath != tc.setPath || !reflect.DeepEqual(p.args, tc.args) || reason != tc.reason || (p.refuse != "") != tc.refusing {
			t.Errorf("%s: plan %+v (condition %q), want path %q, args %v, condition %q, refusing %v", tc.name, p, reason, tc.setPath, tc.args, tc.reason, tc.refusing)
		}
	}
}

func TestDecideColdAfter(t *testing.T) {
	primary := func(coldAfter time.Duration, coldTier bool) *kvv1.StatusResponse {
		st := &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY, ColdTier: coldTier}
		if coldAfter > 0 {
			st.ColdAfter = durationpb.New(coldAfter)
		}
		return st
	}
	for _, tc := range []struct {
		name string
		want time.Duration
		st   *kvv1.StatusResponse
		out  coldAfterAction
	}{
		{"no answer", time.Hour, nil, coldAfterKeep},
		{"the same", time.Hour, primary(time.Hour, true), coldAfterKeep},
		{"off and off", 0, primary(0, true), coldAfterKeep},
		{"off and off, no cold tier", 0, primary(0, false), coldAfterKeep},
		{"changed", 2 * time.Hour, primary(time.Hour, true), coldAfterSet},
		{"turned off", 0, primary(time.Hour, true), coldAfterSet},
		{"turned on", time.Hour, primary(0, true), coldAfterSet},
		{"turned on, no cold tier", time.Hour, primary(0, false), coldAfterNoTier},
		{"a secondary answered", time.Hour, &kvv1.StatusResponse{Role: kvv1.Role_ROLE_SECONDARY}, coldAfterKeep},
	} {
		if got := decideColdAfter(tc.want, tc.st); got != tc.out {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.out)
		}
	}
}

func TestSecondaryColdArgs(t *testing.T) {
	got := secondaryColdArgs([]string{"--cold-db", "s3://c/p", "--cold-endpoint", "http://e", "--cold-after", "1h0m0s"})
	if want := []string{"--cold-db", "s3://c/p", "--cold-endpoint", "http://e"}; !reflect.DeepEqual(got, want) {
		t.Errorf("secondaryColdArgs = %v, want %v", got, want)
	}
	if got := secondaryColdArgs(nil); got != nil {
		t.Errorf("secondaryColdArgs(nil) = %v", got)
	}
}

// testTiering: spec.tiering on an ObjectStore with a cold tier records
// status.coldStoragePath and gives the primary and the secondaries the
// cold tier (the secondaries without --cold-after); the primary's tiers
// reach status.tiers; without spec.tiering the cold tier is still given;
// an ObjectStore without a cold tier is reported; CEL refuses a sub-second
// coldAfter; reclaimPolicy Delete empties the cold directory too.
func testTiering(h *harness) {
	t := h.t
	ns := h.namespace("tiering")
	sec, store, db := h.samples(ns)
	store.Spec.Cold = &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: bucket, Prefix: "cold"}}
	db.Name = "tiered"
	db.Spec.ReclaimPolicy = shalev1.ReclaimDelete
	db.Spec.Tiering = &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: time.Hour}}
	h.create(sec, store, db)

	db = h.waitDB(ns, "tiered", "coldStoragePath and Tiering", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.ColdStoragePath != "" && condIs(db, shalev1.ConditionTiering, metav1.ConditionTrue, shalev1.ReasonColdTierInUse) && db.Status.Epoch == 1,
			fmt.Sprintf("coldStoragePath %q, conditions %s", db.Status.ColdStoragePath, statusOf(db.Status.Conditions))
	})
	coldPath := "cold/" + ns + "/tiered-" + string(db.UID)
	if db.Status.ColdStoragePath != coldPath {
		t.Errorf("coldStoragePath %q, want %q", db.Status.ColdStoragePath, coldPath)
	}
	pod := h.waitPod(ns, "tiered-primary-1")
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--cold-db s3://shale/" + coldPath, "--cold-after 1h0m0s"} {
		if !strings.Contains(args, want) {
			t.Errorf("primary args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--cold-endpoint") {
		t.Errorf("primary args %q: a cold tier on the hot endpoint needs no --cold-endpoint", args)
	}

	// The primary reports its tiers: a gRPC server on a loopback address
	// answers for the Pod (envtest runs none).
	ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
	if err != nil {
		t.Fatal(err)
	}
	g := h.guardedKV(lis, ns, "tiered-primary-tls", "tiered-access", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY, Tiers: []*kvv1.TierUsage{
		{Tier: "hot", Files: 3, Bytes: 3000}, {Tier: "cold", Files: 7, Bytes: 70000}},
		ColdAfter: durationpb.New(time.Hour), ColdTier: true})
	pod = h.waitPod(ns, "tiered-primary-1")
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "tiered", "status.tiers", func(db *shalev1.RocksDB) (bool, string) {
		want := []shalev1.TierStatus{{Tier: "hot", Files: 3, Bytes: 3000}, {Tier: "cold", Files: 7, Bytes: 70000}}
		return reflect.DeepEqual(db.Status.Tiers, want), fmt.Sprintf("tiers %+v", db.Status.Tiers)
	})
	if calls := g.tieringCalls(); len(calls) != 0 {
		t.Errorf("SetTiering calls %+v while the primary had spec's cold-after", calls)
	}

	// A new coldAfter reaches the running primary through SetTiering, with
	// the operator's own certificate, and no new primary starts.
	h.updateDB(ns, "tiered", func(db *shalev1.RocksDB) { db.Spec.Tiering.ColdAfter.Duration = 2 * time.Hour })
	eventually(t, "SetTiering(2h)", func() (bool, string) {
		calls := g.tieringCalls()
		return len(calls) > 0 && calls[len(calls)-1].coldAfter == 2*time.Hour, fmt.Sprintf("calls %+v", calls)
	})
	for _, c := range g.tieringCalls() {
		if c.id.Kind != auth.KindOperator || c.coldAfter != 2*time.Hour {
			t.Errorf("SetTiering call %+v: want the operator asking for 2h", c)
		}
	}
	if db := h.db(ns, "tiered"); db.Status.Epoch != 1 || db.Status.CurrentPrimary != "tiered-primary-1" {
		t.Errorf("epoch %d, primary %s after a coldAfter change: want the same primary", db.Status.Epoch, db.Status.CurrentPrimary)
	}
	var pods corev1.PodList
	if err := h.c.List(h.ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Name != "tiered-primary-1" {
			t.Errorf("Pod %s exists after a coldAfter change: want no new Pod", p.Name)
		}
	}

	// Secondaries get the cold tier but never --cold-after; so do they
	// once tiering is off.
	h.updateDB(ns, "tiered", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 1 })
	dep := h.waitDeployment(ns, "tiered-secondary")
	sargs := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(sargs, "--cold-db s3://shale/"+coldPath) || strings.Contains(sargs, "--cold-after") {
		t.Errorf("secondary args %q: want --cold-db and no --cold-after", sargs)
	}
	h.updateDB(ns, "tiered", func(db *shalev1.RocksDB) { db.Spec.Tiering = nil })
	h.waitDB(ns, "tiered", "Tiering off", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionTiering, metav1.ConditionFalse, shalev1.ReasonTieringOff) && db.Status.ColdStoragePath == coldPath,
			statusOf(db.Status.Conditions)
	})
	dep = h.waitDeployment(ns, "tiered-secondary")
	if sargs := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(sargs, "--cold-db s3://shale/"+coldPath) {
		t.Errorf("secondary args %q after tiering was turned off: the cold tables must still be read", sargs)
	}
	// Turning tiering off reaches the running primary too.
	eventually(t, "SetTiering(off)", func() (bool, string) {
		calls := g.tieringCalls()
		return len(calls) > 0 && calls[len(calls)-1].coldAfter == 0, fmt.Sprintf("calls %+v", calls)
	})

	// CEL: coldAfter is a duration of at least a second.
	for _, bad := range []string{"500ms", "0s", "soon"} {
		err := h.c.Patch(h.ctx, &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tiered"}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"tiering":{"coldAfter":%q}}}`, bad))))
		if err == nil || !strings.Contains(err.Error(), "coldAfter must be a duration of at least 1s") {
			t.Errorf("coldAfter %q: %v, want the CEL message", bad, err)
		}
	}

	// An ObjectStore without a cold tier: reported, and the primary runs
	// without one.
	flat := store.DeepCopy()
	flat.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "flat"}
	flat.Spec.Cold = nil
	flatDB := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "flatdb"},
		Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "flat"}, Tiering: &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: time.Hour}}}}
	h.create(flat, flatDB)
	h.waitDB(ns, "flatdb", "no cold tier", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionTiering, metav1.ConditionFalse, shalev1.ReasonNoColdTier) && db.Status.Epoch == 1 && db.Status.ColdStoragePath == "",
			statusOf(db.Status.Conditions)
	})
	if args := strings.Join(h.waitPod(ns, "flatdb-primary-1").Spec.Containers[0].Args, " "); strings.Contains(args, "--cold") {
		t.Errorf("primary args %q without a cold tier", args)
	}

	// reclaimPolicy Delete empties the cold directory too.
	cold := h.store(coldPath)
	h.put(cold, "000012.sst.00000000000000000001", "a cold table")
	h.put(cold, "_shale/tier", `{"id":"x"}`)
	// (No secondaries first: envtest has no garbage collector to remove
	// their Deployment's Pods.)
	h.updateDB(ns, "tiered", func(db *shalev1.RocksDB) { db.Spec.Secondaries.Replicas = 0 })
	h.waitGoneObject(&appsv1.Deployment{}, ns, "tiered-secondary")
	if err := h.c.Delete(h.ctx, db); err != nil {
		t.Fatal(err)
	}
	h.waitGone(ns, "tiered")
	if left := h.keys(cold, ""); len(left) != 0 {
		t.Errorf("left in the cold tier after reclaimPolicy Delete: %v", left)
	}
}

// testGCColdTier: the garbage collector deletes an orphan's directory in
// the cold tier with its hot one, and keeps a live database's.
func testGCColdTier(h *harness) {
	t := h.t
	ns := h.namespace("gccold")
	sec, store, _ := h.samples(ns)
	store.Name = "gccold"
	store.Spec.Hot.Prefix = "gccold-hot"
	store.Spec.Cold = &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: bucket, Prefix: "gccold-cold"}}
	h.create(sec, store)
	eventually(t, "gccold reachable", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		return os.IsReachable(), statusOf(os.Status.Conditions)
	})
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), store); err != nil {
		t.Fatal(err)
	}
	hot, cold := h.store("gccold-hot"), h.store("gccold-cold")
	live := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"},
		Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "gccold"}, ReclaimPolicy: shalev1.ReclaimDelete}}
	h.create(live)
	live = h.waitDB(ns, "live", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
	h.put(cold, dbDirKey(ns, live.DirName())+"000007.sst.00000000000000000001", "live cold table")

	ghost := "ghost-" + "00000000-0000-0000-0000-0000000000aa"
	_, uid, _ := parseDirName(ghost)
	h.put(hot, dbDirKey(ns, ghost)+"CURRENT", "MANIFEST-000005")
	h.put(cold, dbDirKey(ns, ghost)+"000012.sst.00000000000000000001", "ghost cold table")
	h.put(cold, dbDirKey(ns, ghost)+"_shale/tier", `{"id":"x"}`)
	if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(ns, ghost), dirOwnerRecord{Cluster: h.cluster, Namespace: ns, Name: "ghost", UID: uid, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
		t.Fatal(err)
	}
	g := *h.gc
	g.grace = time.Hour
	g.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	rep, err := g.pass(h.ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if v := rep.Verdicts[ns+"/"+ghost]; v != orphan {
		t.Fatalf("ghost: %v, want orphan", v)
	}
	if left := h.keys(cold, dbDirKey(ns, ghost)); len(left) != 0 {
		t.Errorf("left in the orphan's cold directory: %v", left)
	}
	if left := h.keys(cold, dbDirKey(ns, live.DirName())); len(left) != 1 {
		t.Errorf("the live database's cold directory: %v, want its table", left)
	}
	if left := h.keys(hot, ownerRecordKey(ns, ghost)); len(left) != 0 {
		t.Errorf("owner record left: %v", left)
	}
}
