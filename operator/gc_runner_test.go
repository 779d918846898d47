package operator

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// testGC runs garbage-collection passes against MinIO: orphans deleted
// only past the grace period and never in a dry run; live, young,
// retained and unclaimed directories kept; a RocksDB created while a pass
// lists keeps its directory.
func testGC(h *harness) {
	t := h.t
	ns := h.namespace("gcns")
	sec, store, _ := h.samples(ns)
	store.Name = "gcstore"
	store.Spec.Hot.Prefix = "gc"
	h.create(sec, store)
	eventually(t, "gcstore reachable", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		return os.IsReachable(), statusOf(os.Status.Conditions)
	})
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), store); err != nil {
		t.Fatal(err)
	}
	label := ns + "/gcstore"
	hot := h.store("gc")

	// A live database, with data.
	live := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"},
		Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "gcstore"}, ReclaimPolicy: shalev1.ReclaimDelete}}
	h.create(live)
	live = h.waitDB(ns, "live", "started", func(db *shalev1.RocksDB) (bool, string) { return db.Status.Epoch == 1, "want epoch 1" })
	h.put(hot, dbDirKey(ns, live.DirName())+"000005.sst/00000000000000000001", "live table")

	// Directories of no RocksDB.
	dir := func(name string, policy shalev1.ReclaimPolicy, cluster string, objects ...string) string {
		d := name + "-" + uuid.NewString()
		for _, o := range objects {
			h.put(hot, dbDirKey(ns, d)+o, "data of "+o)
		}
		if policy != "" {
			_, uid, _ := parseDirName(d)
			if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(ns, d), dirOwnerRecord{Cluster: cluster, Namespace: ns, Name: name, UID: uid, ReclaimPolicy: policy}); err != nil {
				t.Fatal(err)
			}
		}
		return ns + "/" + d
	}
	ghost := dir("ghost", shalev1.ReclaimDelete, h.cluster, "CURRENT", "000004.log/00000000000000000001/00000000000000000001", "000005.sst/00000000000000000001")
	empty := dir("empty", shalev1.ReclaimDelete, h.cluster) // a record, no data
	kept := dir("kept", shalev1.ReclaimRetain, h.cluster, "000005.sst/00000000000000000001")
	byHand := dir("byhand", "", "", "000005.sst/00000000000000000001")
	foreign := dir("foreign", shalev1.ReclaimDelete, "another-cluster", "000005.sst/00000000000000000001")
	h.put(hot, ns+"/not-a-database/x", "someone else's")
	h.put(hot, "README", "someone else's")
	ghostBytes := int64(0)
	for _, k := range h.keys(hot, ghost+"/") {
		info, err := hot.Stat(h.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ghostBytes += info.Size
	}
	snapshot := func() []string { return h.keys(hot, "") }
	all := snapshot()

	g := *h.gc
	g.grace = time.Hour
	later := func() time.Time { return time.Now().Add(48 * time.Hour) }
	liveDir := ns + "/" + live.DirName()
	want := map[string]verdict{liveDir: keepLive, ghost: orphan, empty: orphan, kept: keepRetained, byHand: keepUnclaimed, foreign: keepUnclaimed}
	checkVerdicts := func(what string, got map[string]verdict, want map[string]verdict) {
		t.Helper()
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s is %v, want %v", what, k, got[k], v)
			}
		}
	}

	// Dry run, everything old: orphans reported, nothing deleted.
	found := testutil.ToFloat64(gcOrphansFound.WithLabelValues(label))
	g.dryRun, g.now = true, later
	rep, err := g.pass(h.ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdicts("dry run", rep.Verdicts, want)
	if len(rep.Deleted) != 0 || !slices.Equal(snapshot(), all) {
		t.Errorf("dry run deleted %v", rep.Deleted)
	}
	if got := testutil.ToFloat64(gcOrphansFound.WithLabelValues(label)) - found; got != 2 {
		t.Errorf("orphans found rose by %v, want 2", got)
	}
	h.waitEvent(ns, "gcstore", eventOrphanFound)

	// Young: nothing changed for an hour yet.
	g.dryRun, g.now = false, time.Now
	rep, err = g.pass(h.ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	checkVerdicts("young", rep.Verdicts, map[string]verdict{ghost: keepYoung, empty: keepYoung, liveDir: keepLive})
	if len(rep.Deleted) != 0 || !slices.Equal(snapshot(), all) {
		t.Errorf("deleted young directories: %v", rep.Deleted)
	}

	// Past the grace period, with a RocksDB created while the pass lists:
	// its directory (already written, as if its primary had run) is kept.
	var newcomer *shalev1.RocksDB
	var once sync.Once
	g.now = later
	g.testHookBeforeDirList = func(ctx context.Context, namespace string) {
		once.Do(func() {
			newcomer = &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "newcomer"},
				Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "gcstore"}, ReclaimPolicy: shalev1.ReclaimDelete}}
			h.create(newcomer)
			h.put(hot, dbDirKey(ns, newcomer.DirName())+"000005.sst/00000000000000000001", "newcomer table")
			if err := putOwnerRecord(ctx, hot, ownerRecordKey(ns, newcomer.DirName()),
				dirOwnerRecord{Cluster: h.cluster, Namespace: ns, Name: "newcomer", UID: newcomer.UID, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
				t.Error(err)
			}
		})
	}
	bytesBefore := testutil.ToFloat64(gcBytesReclaimed.WithLabelValues(label))
	rep, err = g.pass(h.ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	newDir := ns + "/" + newcomer.DirName()
	want[newDir] = keepLive
	checkVerdicts("past grace", rep.Verdicts, want)
	slices.Sort(rep.Deleted)
	if wantDeleted := []string{empty, ghost}; !slices.Equal(rep.Deleted, wantDeleted) {
		t.Errorf("deleted %v, want %v", rep.Deleted, wantDeleted)
	}
	for _, d := range []string{ghost, empty} {
		if left := h.keys(hot, d); len(left) != 0 {
			t.Errorf("left of orphan %s: %v", d, left)
		}
	}
	for _, d := range []string{liveDir, kept, byHand, newDir} {
		if len(h.keys(hot, d+"/")) == 0 {
			t.Errorf("directory %s was deleted", d)
		}
	}
	for _, k := range []string{ns + "/not-a-database/x", "README", ownerRecordKey(ns, live.DirName()), kept + ownerRecordSuffix, foreign + ownerRecordSuffix} {
		if _, err := hot.Stat(h.ctx, k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if got := testutil.ToFloat64(gcBytesReclaimed.WithLabelValues(label)) - bytesBefore; got != float64(ghostBytes) {
		t.Errorf("bytes reclaimed rose by %v, want %d", got, ghostBytes)
	}
	h.waitEvent(ns, "gcstore", eventOrphanDeleted)

	// The periodic collector with a short real grace period: a new orphan
	// goes once it has been quiet for 2 s; the rest stays.
	late := dir("late", shalev1.ReclaimDelete, h.cluster, "000009.sst/00000000000000000001")
	loop := *h.gc
	loop.interval, loop.grace, loop.dryRun, loop.now = 200*time.Millisecond, 2*time.Second, false, time.Now
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Start(ctx) }()
	start := time.Now()
	eventually(t, "late orphan collected", func() (bool, string) {
		left := h.keys(hot, late)
		return len(left) == 0, "left: " + jsonString(left)
	})
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Errorf("late orphan collected after %v, before its 2 s grace", d)
	}
	for _, d := range []string{liveDir, kept, byHand, foreign, newDir} {
		if len(h.keys(hot, d+"/")) == 0 {
			t.Errorf("periodic collector deleted %s", d)
		}
	}
}
