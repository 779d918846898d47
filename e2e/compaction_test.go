//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const (
	poolName    = "e2e-pool"
	compactedDB = "e2e-compact"
)

// stepCompaction: a CompactorPool (a scheduler and two workers) runs the
// compactions of a RocksDB with compaction mode Remote. After a load (with
// flushes and a manual compaction) the pool's status shows jobs of that
// database completed by the compactor Pods; a worker Pod deleted in the
// middle of the load loses nothing; every key written reads back.
func stepCompaction(t *testing.T, s *suite) {
	q := resource.MustParse
	pool := &shalev1.CompactorPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: s.cfg.namespace},
		Spec: shalev1.CompactorPoolSpec{
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			Scheduler: shalev1.CompactorSchedulerSpec{Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("20m"), corev1.ResourceMemory: q("32Mi")}}},
			Workers: shalev1.CompactorWorkersSpec{MinReplicas: ptrTo[int32](2), MaxReplicas: 2, Concurrency: 1,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}}},
		},
	}
	s.recreate(t, pool)
	eventually(t, 4*time.Minute, "CompactorPool "+poolName+" to be Ready with 2 workers", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(pool.Status.Conditions, shalev1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && pool.Status.ReadyWorkers == 2, fmt.Sprintf("ready workers %d, conditions %+v", pool.Status.ReadyWorkers, pool.Status.Conditions)
	})

	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: compactedDB, Namespace: s.cfg.namespace},
		Spec: shalev1.RocksDBSpec{
			Clients:        e2eClients(),
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			ReclaimPolicy:  shalev1.ReclaimDelete,
			Primary: shalev1.PrimarySpec{
				CacheSize: ptrTo(q("256Mi")), BlockCacheSize: ptrTo(q("16Mi")),
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}},
			},
			Compaction: shalev1.CompactionSpec{Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{Name: poolName}},
		},
	}
	s.recreate(t, db)
	t.Cleanup(func() { s.kube.Delete(context.Background(), db) })
	s.waitReady(t, compactedDB, 1, 5*time.Minute)
	eventually(t, 2*time.Minute, compactedDB+" to see its CompactorPool ready", func() (bool, string) {
		cur := s.rocksDB(t, compactedDB)
		c := meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionCompactorPoolReady)
		return c != nil && c.Status == metav1.ConditionTrue, describe(cur)
	})
	primary := s.pod(t, s.rocksDB(t, compactedDB).Status.CurrentPrimary)
	if args := strings.Join(primary.Spec.Containers[0].Args, " "); !strings.Contains(args, "--compaction remote") {
		t.Fatalf("the primary of %s runs without --compaction remote: %s", compactedDB, args)
	}

	// The load: rounds of a batch and a flush, so level 0 fills and
	// compactions start; one worker Pod deleted after the second round.
	addr := s.serviceProxy(t, compactedDB+"-rw", kvPort)
	kvStatus(t, addr)
	want := map[string]string{}
	value := strings.Repeat("v", 400)
	for round := range 8 {
		var muts []*kvv1.Mutation
		for i := range 2000 {
			// Every round overwrites half of the previous one's keys, so
			// compactions have something to drop.
			key := fmt.Sprintf("compact/%06d", round*1000+i)
			v := fmt.Sprintf("%d-%s", round, value)
			muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(key), Value: []byte(v)}}})
			want[key] = v
		}
		callFresh(t, addr, fmt.Sprintf("round %d of the load", round), func(c context.Context, kv kvv1.KVClient) error {
			if _, err := kv.Write(c, &kvv1.WriteRequest{Mutations: muts, Sync: true}); err != nil {
				return err
			}
			_, err := kv.Flush(c, &kvv1.FlushRequest{})
			return err
		})
		if round == 2 {
			workers := s.podsWith(t, pool.Selector(shalev1.ComponentWorker))
			if len(workers) == 0 {
				t.Fatalf("no worker Pods of %s", poolName)
			}
			if err := s.kube.Delete(ctx(t, time.Minute), &workers[0]); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			t.Logf("deleted worker Pod %s in the middle of the load", workers[0].Name)
		}
	}
	callFresh(t, addr, "a full manual compaction", func(c context.Context, kv kvv1.KVClient) error {
		_, err := kv.Compact(c, &kvv1.CompactRequest{})
		return err
	})

	var line *shalev1.CompactionStats
	eventually(t, 3*time.Minute, "the pool's status to show jobs of "+compactedDB+" completed", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err.Error()
		}
		for i := range pool.Status.Databases {
			if strings.Contains(pool.Status.Databases[i].DB, compactedDB) {
				line = &pool.Status.Databases[i]
			}
		}
		return line != nil && line.Completed > 0, fmt.Sprintf("pool status %+v", pool.Status)
	})
	t.Logf("CompactorPool %s: %d jobs of %s completed by its workers, %d failed, %d fallbacks to local; pool totals: completed %d, failed %d, queue %d",
		poolName, line.Completed, compactedDB, line.Failed, line.Fallbacks, pool.Status.Completed, pool.Status.Failed, pool.Status.QueueDepth)

	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var lost, wrong []string
	for chunk := range slices.Chunk(keys, 500) {
		for i, r := range multiGet(t, addr, chunk) {
			switch {
			case !r.Found:
				lost = append(lost, chunk[i])
			case string(r.Value) != want[chunk[i]]:
				wrong = append(wrong, chunk[i])
			}
		}
	}
	if len(lost) > 0 || len(wrong) > 0 {
		t.Fatalf("after remote compactions, of %d keys %d are lost (%v) and %d have another value (%v)", len(keys), len(lost), first(lost, 10), len(wrong), first(wrong, 10))
	}
	t.Logf("all %d keys read back with their last values", len(keys))

	// The series the chart's dashboard and alerts read, for the metrics
	// step (the pool is gone by then).
	for _, sched := range s.podsWith(t, map[string]string{shalev1.LabelCompactorPool: poolName, shalev1.LabelAppComponent: shalev1.ComponentScheduler}) {
		s.noteSeries(t, sched.Name, "9080")
	}
	s.noteSeries(t, s.rocksDB(t, compactedDB).Status.CurrentPrimary, "9090")

	s.attackScheduler(t, poolName, compactedDB)

	s.deleteRocksDB(t, db, false)
	if err := s.kube.Delete(ctx(t, time.Minute), pool); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// recreate deletes obj if it exists (a kept cluster's earlier run), waits
// until it is gone, and creates it.
func (s *suite) recreate(t *testing.T, obj client.Object) {
	t.Helper()
	c := ctx(t, 5*time.Minute)
	if err := s.kube.Delete(c, obj.DeepCopyObject().(client.Object)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "an earlier "+obj.GetName()+" to be gone", func() (bool, string) {
		err := s.kube.Get(c, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := s.kube.Create(c, obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

// podsWith lists the running Pods with the labels.
func (s *suite) podsWith(t *testing.T, labels map[string]string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}
