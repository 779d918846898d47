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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const (
	tieredDB   = "e2e-tier"
	coldBucket = "shale-cold"
)

// stepTiering: a RocksDB with spec.tiering.coldAfter 5s on the ObjectStore
// whose cold tier is the demo MinIO's second bucket. After a load, once the
// data is older than coldAfter and compacted, the cold bucket holds tables
// of the database, status.tiers shows cold files, and every key reads back.
func stepTiering(t *testing.T, s *suite) {
	q := resource.MustParse
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: tieredDB, Namespace: s.cfg.namespace},
		Spec: shalev1.RocksDBSpec{
			Clients:        e2eClients(),
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			ReclaimPolicy:  shalev1.ReclaimDelete,
			Primary: shalev1.PrimarySpec{
				CacheSize: ptrTo(q("256Mi")), BlockCacheSize: ptrTo(q("16Mi")),
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")}},
			},
			Tiering: &shalev1.TieringSpec{ColdAfter: metav1.Duration{Duration: 5 * time.Second}},
		},
	}
	s.recreate(t, db)
	t.Cleanup(func() { s.kube.Delete(context.Background(), db) })
	cur := s.waitReady(t, tieredDB, 1, 5*time.Minute)
	if cur.Status.ColdStoragePath == "" {
		t.Fatalf("%s is Ready with tiering but no status.coldStoragePath: %s", tieredDB, describe(cur))
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionTiering); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("%s: Tiering condition %+v, want True", tieredDB, c)
	}

	addr := s.serviceProxy(t, tieredDB+"-rw", kvPort)
	kvStatus(t, addr)
	want := map[string]string{}
	for round := range 4 {
		var muts []*kvv1.Mutation
		for i := range 2000 {
			key := fmt.Sprintf("tier/%06d", round*2000+i)
			v := fmt.Sprintf("%d-%s", round, strings.Repeat("c", 400))
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
	}
	loaded := time.Now()

	// A live database keeps taking writes. RocksDB 7.8.3 ages a key by the
	// (sequence number, time) samples stored in tables; the last keys of a
	// burst have no sample after them until newer writes are flushed and a
	// compaction merges that table's samples in (docs/tiering.md, "Ageing
	// precision"). A trickle of writes after the load is what moves the
	// burst's tail cold, as it would for a user.
	trickle := startTrickle(t, addr, "tick/", 200*time.Millisecond)

	// Once the data has aged past coldAfter, a compaction into the last
	// level places it cold (the primary's age-out pass does the same on
	// its own, every coldAfter/4). Compact until tables show up cold.
	mc := s.minio(t)
	prefix := cur.Status.ColdStoragePath + "/"
	var cold []string
	eventually(t, 3*time.Minute, "tables of "+tieredDB+" in the cold bucket", func() (bool, string) {
		cold = cold[:0]
		for o := range mc.ListObjects(ctx(t, time.Minute), coldBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				return false, o.Err.Error()
			}
			if strings.Contains(o.Key, ".sst.") {
				cold = append(cold, o.Key)
			}
		}
		if len(cold) > 0 {
			return true, ""
		}
		if time.Since(loaded) > 6*time.Second {
			callFresh(t, addr, "a manual compaction", func(c context.Context, kv kvv1.KVClient) error {
				_, err := kv.Compact(c, &kvv1.CompactRequest{})
				return err
			})
		}
		return false, fmt.Sprintf("no table under %s/%s yet (%s since the load)", coldBucket, prefix, time.Since(loaded).Round(time.Second))
	})
	t.Logf("%d tables of %s in %s/%s %s after the load", len(cold), tieredDB, coldBucket, prefix, time.Since(loaded).Round(time.Second))

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
		t.Fatalf("with tables in the cold tier, of %d keys %d are lost (%v) and %d have another value (%v)", len(keys), len(lost), first(lost, 10), len(wrong), first(wrong, 10))
	}
	t.Logf("all %d keys read back", len(keys))

	// All of the load is older than coldAfter by now: most of its bytes
	// must end cold, not just a table.
	eventually(t, 3*time.Minute, "status.tiers of "+tieredDB+" to show most bytes cold", func() (bool, string) {
		cur = s.rocksDB(t, tieredDB)
		var hot, cold int64
		for _, ts := range cur.Status.Tiers {
			if ts.Tier == "cold" {
				cold += ts.Bytes
			} else {
				hot += ts.Bytes
			}
		}
		if cold > 0 && cold >= hot {
			return true, ""
		}
		callFresh(t, addr, "a manual compaction", func(c context.Context, kv kvv1.KVClient) error {
			_, err := kv.Compact(c, &kvv1.CompactRequest{})
			return err
		})
		return false, fmt.Sprintf("tiers %+v", cur.Status.Tiers)
	})
	t.Logf("status.tiers: %+v", cur.Status.Tiers)
	ticks := trickle.stop(t)
	keys = keys[:0]
	for k := range ticks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for chunk := range slices.Chunk(keys, 500) {
		for i, r := range multiGet(t, addr, chunk) {
			if !r.Found || string(r.Value) != ticks[chunk[i]] {
				t.Fatalf("acknowledged write %s of the trickle reads back found=%v value %q, want %q", chunk[i], r.Found, r.Value, ticks[chunk[i]])
			}
		}
	}
	t.Logf("the trickle's %d acknowledged writes read back", len(ticks))
	s.deleteRocksDB(t, db, false)
	if n := len(listColdKeys(t, mc, prefix)); n != 0 {
		t.Fatalf("reclaimPolicy Delete: %d objects left under %s/%s", n, coldBucket, prefix)
	}
}

func listColdKeys(t *testing.T, mc *minio.Client, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range mc.ListObjects(ctx(t, time.Minute), coldBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// trickle writes one key every interval with sync=true until stopped.
type trickle struct {
	done  chan struct{}
	ended chan struct{}
	acked map[string]string
	fails int
	last  error
}

func startTrickle(t *testing.T, addr, prefix string, every time.Duration) *trickle {
	t.Helper()
	conn, err := newConn(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	tr := &trickle{done: make(chan struct{}), ended: make(chan struct{}), acked: map[string]string{}}
	go func() {
		defer close(tr.ended)
		defer conn.Close()
		kv := kvv1.NewKVClient(conn)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-tr.done:
				return
			case <-tick.C:
			}
			key, value := fmt.Sprintf("%s%06d", prefix, n), fmt.Sprintf("tick-%d", n)
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := kv.Put(c, putReq(key, value))
			cancel()
			if err != nil {
				tr.fails++
				tr.last = err
				continue
			}
			tr.acked[key] = value
		}
	}()
	t.Cleanup(func() {
		select {
		case <-tr.done:
		default:
			close(tr.done)
		}
		<-tr.ended
	})
	return tr
}

// stop ends the trickle and returns its acknowledged writes; it fails t if
// none was acknowledged (the step's premise would not hold).
func (tr *trickle) stop(t *testing.T) map[string]string {
	t.Helper()
	close(tr.done)
	<-tr.ended
	if len(tr.acked) == 0 {
		t.Fatalf("the trickle of writes got no acknowledgement (%d failed, last: %v)", tr.fails, tr.last)
	}
	t.Logf("trickle: %d writes acknowledged, %d failed", len(tr.acked), tr.fails)
	return tr.acked
}
