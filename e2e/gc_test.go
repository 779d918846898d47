//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const hotBucket = "shale"

// stepGC: what happens to a database's directory in the bucket when its
// RocksDB goes away.
//   - reclaimPolicy Delete: the operator empties it before the RocksDB is
//     gone;
//   - reclaimPolicy Retain: it stays, and the garbage collector never
//     deletes it;
//   - a directory whose RocksDB vanished without its finalizer running (the
//     finalizer removed by hand), with an owner record saying Delete: the
//     garbage collector reports it as an orphan and deletes it once it has
//     been quiet for the (test-shortened) grace period;
//   - the live database's directory is never touched.
func stepGC(t *testing.T, s *suite) {
	mc := s.minio(t)
	live := s.rocksDB(t, s.db)
	liveBefore := listKeys(t, mc, live.Status.StoragePath+"/_shale/epoch/")
	if len(liveBefore) == 0 {
		t.Fatalf("the live database has no epoch records under %s/_shale/epoch/", live.Status.StoragePath)
	}
	if !exists(t, mc, live.Status.StoragePath+".owner.json") {
		t.Fatalf("the live database has no owner record %s.owner.json", live.Status.StoragePath)
	}

	del := s.gcDatabase(t, mc, "gc-delete", shalev1.ReclaimDelete)
	ret := s.gcDatabase(t, mc, "gc-retain", shalev1.ReclaimRetain)
	orphan := s.gcDatabase(t, mc, "gc-orphan", shalev1.ReclaimDelete)

	// Delete: gone with the RocksDB.
	s.deleteRocksDB(t, del.db, false)
	if n := len(listKeys(t, mc, del.path+"/")); n != 0 || exists(t, mc, del.path+".owner.json") {
		t.Fatalf("reclaimPolicy Delete: %d objects are left in %s/ after the RocksDB is gone (owner record there: %v)", n, del.path, exists(t, mc, del.path+".owner.json"))
	}
	s.expectEvent(t, "RocksDB", del.db.Name, del.db.UID, "StorageDeleted")
	t.Logf("reclaimPolicy Delete: %s/ (%d objects) is empty once the RocksDB is gone", del.path, len(del.keys))

	// Retain: stays. What it holds is taken once its primary has stopped
	// (a primary shutting down may still write, e.g. its release).
	s.deleteRocksDB(t, ret.db, false)
	s.expectEvent(t, "RocksDB", ret.db.Name, ret.db.UID, "StorageRetained")
	s.waitNoPods(t, ret.db.Name)
	ret.keys = listKeys(t, mc, ret.path+"/")
	if len(ret.keys) == 0 {
		t.Fatalf("reclaimPolicy Retain: %s/ is empty once the RocksDB is gone", ret.path)
	}
	retainedAt := time.Now()

	// An orphan: the RocksDB goes away while the operator is down and
	// someone removes its finalizer by hand, so its reclaim policy is never
	// applied; only the garbage collector can find the directory.
	s.scaleOperator(t, 0)
	s.deleteRocksDB(t, orphan.db, true)
	s.waitNoPods(t, orphan.db.Name)
	s.scaleOperator(t, 1)
	if n := len(listKeys(t, mc, orphan.path+"/")); n == 0 {
		t.Fatalf("the orphan's directory %s/ is already empty before the garbage collector ran", orphan.path)
	}
	eventually(t, 4*time.Minute, "the garbage collector to delete the orphaned "+orphan.path+"/", func() (bool, string) {
		n := len(listKeys(t, mc, orphan.path+"/"))
		rec := exists(t, mc, orphan.path+".owner.json")
		return n == 0 && !rec, fmt.Sprintf("%d objects left, owner record there: %v", n, rec)
	})
	ev := s.expectEvent(t, "ObjectStore", objectStoreName, "", "OrphanDeleted", orphan.path)
	t.Logf("orphan: %s", ev.Message)

	// By now the retained directory has been quiet for longer than the
	// grace period through many passes (it went quiet before the orphan
	// did): it must be intact.
	if got := listKeys(t, mc, ret.path+"/"); !containsAll(got, ret.keys) {
		t.Fatalf("reclaimPolicy Retain: %s/ lost objects: had %d, has %d", ret.path, len(ret.keys), len(got))
	}
	if !exists(t, mc, ret.path+".owner.json") {
		t.Fatalf("reclaimPolicy Retain: the owner record of %s is gone", ret.path)
	}
	for _, e := range s.events(t, "ObjectStore", objectStoreName) {
		if strings.Contains(e.Message, ret.path) && e.Reason != "OrphanFound" {
			t.Fatalf("the garbage collector acted on the retained %s: %s: %s", ret.path, e.Reason, e.Message)
		}
	}
	t.Logf("reclaimPolicy Retain: %s/ keeps its %d objects %s after its RocksDB went away", ret.path, len(ret.keys), time.Since(retainedAt).Round(time.Second))

	// The live database: untouched and serving.
	if got := listKeys(t, mc, live.Status.StoragePath+"/_shale/epoch/"); !containsAll(got, liveBefore) {
		t.Fatalf("epoch records of the live database disappeared: before %v, now %v", liveBefore, got)
	}
	if !exists(t, mc, live.Status.StoragePath+".owner.json") {
		t.Fatalf("the owner record of the live database is gone")
	}
	for _, e := range s.events(t, "ObjectStore", objectStoreName) {
		if strings.Contains(e.Message, live.Status.StoragePath) {
			t.Fatalf("the garbage collector reported on the live database: %s: %s", e.Reason, e.Message)
		}
	}
	s.verifyLedger(t, s.rwAddr(t))

	// The way back from the delete: a new RocksDB adopts the retained
	// directory (spec.bootstrap.fromExistingPath) and serves every key the
	// deleted one had; deleted with reclaimPolicy Delete, it takes the
	// directory with it.
	s.stepAdoptRetained(t, mc, ret)

	// Clean up what Retain kept, so that a rerun on this cluster starts
	// from an empty bucket.
	for _, k := range listKeys(t, mc, ret.path+"/") {
		mc.RemoveObject(context.Background(), hotBucket, k, minio.RemoveObjectOptions{})
	}
	mc.RemoveObject(context.Background(), hotBucket, ret.path+".owner.json", minio.RemoveObjectOptions{})
}

// gcDB is a database made for the GC step, with some data in it.
type gcDB struct {
	db   *shalev1.RocksDB
	path string
	keys []string
}

func (s *suite) gcDatabase(t *testing.T, mc *minio.Client, name string, policy shalev1.ReclaimPolicy) gcDB {
	t.Helper()
	s.createRocksDB(t, name, policy)
	db := s.waitReady(t, name, 1, 5*time.Minute)
	// Through its Service, which may take a moment to route to the
	// primary that just became ready.
	addr := s.serviceProxy(t, name+"-rw", kvPort)
	callFresh(t, addr, "20 writes to "+name, func(c context.Context, kv kvv1.KVClient) error {
		for i := range 20 {
			key := fmt.Sprintf("%s/%02d", name, i)
			if _, err := kv.Put(c, putReq(key, strings.Repeat("x", 1000))); err != nil {
				return fmt.Errorf("put %s: %w", key, err)
			}
		}
		return nil
	})
	if db.Status.StoragePath == "" {
		t.Fatalf("RocksDB %s is Ready with no status.storagePath", name)
	}
	keys := listKeys(t, mc, db.Status.StoragePath+"/")
	if len(keys) == 0 || !exists(t, mc, db.Status.StoragePath+".owner.json") {
		t.Fatalf("RocksDB %s: %d objects in %s/, owner record: %v", name, len(keys), db.Status.StoragePath, exists(t, mc, db.Status.StoragePath+".owner.json"))
	}
	return gcDB{db: db, path: db.Status.StoragePath, keys: keys}
}

// deleteRocksDB deletes a RocksDB (first removing its finalizers if
// stripFinalizers) and waits until it is gone.
func (s *suite) deleteRocksDB(t *testing.T, db *shalev1.RocksDB, stripFinalizers bool) {
	t.Helper()
	c := ctx(t, 5*time.Minute)
	if stripFinalizers {
		cur := &shalev1.RocksDB{}
		if err := s.kube.Get(c, client.ObjectKeyFromObject(db), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Finalizers = nil
		if err := s.kube.Patch(c, cur, patch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.kube.Delete(c, db); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "RocksDB "+db.Name+" to be gone", func() (bool, string) {
		cur := &shalev1.RocksDB{}
		err := s.kube.Get(c, client.ObjectKeyFromObject(db), cur)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, describe(cur)
	})
}

// scaleOperator sets the operator Deployment's replicas and waits for
// them (and, when up, for a leader).
func (s *suite) scaleOperator(t *testing.T, n int) {
	t.Helper()
	s.kubectl(t, "-n", s.cfg.namespace, "scale", "deployment/"+s.operatorDeployment(), fmt.Sprintf("--replicas=%d", n))
	eventually(t, 3*time.Minute, fmt.Sprintf("%d operator Pods", n), func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return len(pods.Items) == n && ready == n, fmt.Sprintf("%d Pods, %d ready", len(pods.Items), ready)
	})
	if n > 0 {
		s.waitLeader(t)
	}
}

// waitNoPods waits until no Pod of a database is left.
func (s *suite) waitNoPods(t *testing.T, name string) {
	t.Helper()
	eventually(t, 3*time.Minute, "the Pods of "+name+" to be gone", func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: name}); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, p := range running(pods.Items) {
			names = append(names, p.Name+"("+string(p.Status.Phase)+")")
		}
		return len(names) == 0, strings.Join(names, " ")
	})
}

// running leaves out the Pods that finished (a Backup's Job Pods carry the
// database's label and stay Succeeded until their Job's TTL): they run
// nothing and reach no store.
func running(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// expectEvent waits for an Event with reason about an object (and, if
// given, whose message contains text).
func (s *suite) expectEvent(t *testing.T, kind, name string, uid any, reason string, text ...string) corev1.Event {
	t.Helper()
	var found corev1.Event
	eventually(t, 2*time.Minute, fmt.Sprintf("a %s event about %s %s", reason, kind, name), func() (bool, string) {
		var seen []string
		for _, e := range s.events(t, kind, name) {
			seen = append(seen, e.Reason)
			if e.Reason != reason || (uid != nil && fmt.Sprint(uid) != "" && fmt.Sprint(e.InvolvedObject.UID) != fmt.Sprint(uid)) {
				continue
			}
			ok := true
			for _, x := range text {
				ok = ok && strings.Contains(e.Message, x)
			}
			if ok {
				found = e
				return true, ""
			}
		}
		return false, "events: " + strings.Join(seen, ", ")
	})
	return found
}

// minio is a client of the demo MinIO (through its Service) with the
// credentials of the chart's Secret.
func (s *suite) minio(t *testing.T) *minio.Client {
	t.Helper()
	var sec corev1.Secret
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: "shale-objectstore"}, &sec); err != nil {
		t.Fatal(err)
	}
	addr := s.serviceProxy(t, "minio", 9000)
	mc, err := minio.New(addr, &minio.Options{
		Creds:  credentials.NewStaticV4(string(sec.Data["AWS_ACCESS_KEY_ID"]), string(sec.Data["AWS_SECRET_ACCESS_KEY"]), ""),
		Region: "us-east-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

func listKeys(t *testing.T, mc *minio.Client, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range mc.ListObjects(ctx(t, time.Minute), hotBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("listing %s/%s: %v", hotBucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

func exists(t *testing.T, mc *minio.Client, key string) bool {
	t.Helper()
	_, err := mc.StatObject(ctx(t, time.Minute), hotBucket, key, minio.StatObjectOptions{})
	if err == nil {
		return true
	}
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return false
	}
	t.Fatalf("stat %s/%s: %v", hotBucket, key, err)
	return false
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// stepAdoptRetained brings back the retained database ret with a new
// RocksDB whose spec.bootstrap.fromExistingPath names its directory: Ready,
// every key ret had reads back with its value, and the adopter's
// reclaimPolicy Delete empties the directory when it goes.
func (s *suite) stepAdoptRetained(t *testing.T, mc *minio.Client, ret gcDB) {
	t.Helper()
	name := "gc-adopt"
	db := s.createRocksDBWith(t, name, shalev1.ReclaimDelete, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap = &shalev1.BootstrapSpec{FromExistingPath: &shalev1.ExistingPathSource{Path: ret.path}}
	})
	adopted := s.waitReady(t, name, 1, 5*time.Minute)
	if adopted.Status.StoragePath != ret.path {
		t.Fatalf("the adopter's status.storagePath is %q, want the retained %q", adopted.Status.StoragePath, ret.path)
	}
	addr := s.serviceProxy(t, name+"-rw", kvPort)
	callFresh(t, addr, "every key of "+ret.db.Name+" read through "+name, func(c context.Context, kv kvv1.KVClient) error {
		for i := range 20 {
			key := fmt.Sprintf("%s/%02d", ret.db.Name, i)
			r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			if string(r.Value) != strings.Repeat("x", 1000) {
				return fmt.Errorf("get %s: %d bytes, not the value written", key, len(r.Value))
			}
		}
		return nil
	})
	t.Logf("fromExistingPath: %s adopted %s/ and serves all 20 keys of %s", name, ret.path, ret.db.Name)
	s.deleteRocksDB(t, db, false)
	if n := len(listKeys(t, mc, ret.path+"/")); n != 0 || exists(t, mc, ret.path+".owner.json") {
		t.Fatalf("the adopter went with reclaimPolicy Delete but %d objects are left in %s/ (owner record there: %v)", n, ret.path, exists(t, mc, ret.path+".owner.json"))
	}
}
