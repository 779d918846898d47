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

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const scalePool = "scale-pool"

// scaleDB is one database of the scale step and its writer.
type scaleDB struct {
	name       string
	addr       string
	ledger     *ledger
	w          *writer
	epoch0     int64
	failovers0 int64
	kills      int
}

// scaleKill is one primary the scale step killed.
type scaleKill struct {
	db    *scaleDB
	kind  failoverKind
	epoch int64
	at    time.Time
}

// stepScale (label scale; only when E2E_FOCUS names it; issue 29):
// E2E_SCALE_DBS (20) small databases, each with one secondary and its
// compactions on one shared CompactorPool, each with a writer of a few
// synced puts a second. Every 10 s for E2E_SCALE_DURATION (5m) the primary
// of the next database in turn is lost (Pod deletion and SIGKILL
// alternately). Then every database must be Ready at exactly one epoch per
// kill, with one failover counted per kill, and every write acknowledged
// to any of them must read back. Prints the operator's CPU and memory
// (its leader's process_cpu_seconds_total and resident memory) at rest and
// during the kills, and the time until each database acknowledged writes
// again.
func stepScale(t *testing.T, s *suite) {
	q := resource.MustParse
	n := s.cfg.scaleDBs
	// Small requests, so 2n Pods fit a 2-core kind node: the scheduler
	// counts requests, and 40 Pods at the suite's usual 50m would not.
	small := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q(cpu), corev1.ResourceMemory: q(mem)}}
	}
	pool := &shalev1.CompactorPool{
		ObjectMeta: metav1.ObjectMeta{Name: scalePool, Namespace: s.cfg.namespace},
		Spec: shalev1.CompactorPoolSpec{
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			Scheduler:      shalev1.CompactorSchedulerSpec{Resources: small("10m", "32Mi")},
			Workers: shalev1.CompactorWorkersSpec{MinReplicas: ptrTo[int32](1), MaxReplicas: 1, Concurrency: 1,
				Resources: small("20m", "96Mi")},
		},
	}
	s.recreate(t, pool)
	t.Cleanup(func() { s.kube.Delete(context.Background(), pool) })
	eventually(t, 4*time.Minute, "CompactorPool "+scalePool+" to be Ready with 1 worker", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(pool), pool); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(pool.Status.Conditions, shalev1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && pool.Status.ReadyWorkers == 1, fmt.Sprintf("ready workers %d, conditions %+v", pool.Status.ReadyWorkers, pool.Status.Conditions)
	})

	leader, _, _ := strings.Cut(s.waitLeader(t), "_")
	restarts0 := restarts(s.pod(t, leader))
	created := time.Now()
	dbs := make([]*scaleDB, n)
	for i := range n {
		name := fmt.Sprintf("scale-%02d", i)
		db := &shalev1.RocksDB{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.namespace},
			Spec: shalev1.RocksDBSpec{
				Clients:        e2eClients(),
				ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
				ReclaimPolicy:  shalev1.ReclaimDelete,
				Primary: shalev1.PrimarySpec{
					CacheSize: ptrTo(q("128Mi")), BlockCacheSize: ptrTo(q("8Mi")), Resources: small("20m", "64Mi"),
				},
				Secondaries: shalev1.SecondariesSpec{Replicas: 1,
					CacheSize: ptrTo(q("128Mi")), BlockCacheSize: ptrTo(q("8Mi")), Resources: small("10m", "48Mi"),
				},
				Compaction: shalev1.CompactionSpec{Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{Name: scalePool}},
			},
		}
		s.recreate(t, db)
		t.Cleanup(func() { s.kube.Delete(context.Background(), db) })
		dbs[i] = &scaleDB{name: name, ledger: newLedger()}
	}
	for _, d := range dbs {
		db := s.waitScaleReady(t, d.name, 1)
		d.epoch0, d.failovers0 = db.Status.Epoch, db.Status.Failovers
	}
	t.Logf("%d databases Ready with a secondary each %s after they were created", n, time.Since(created).Round(time.Second))

	for _, d := range dbs {
		d.addr = s.serviceProxy(t, d.name+"-rw", kvPort)
		// 250 ms between writes: a few synced puts a second each.
		d.w = s.startWriterTo(t, d.addr, "scale", d.ledger, 250*time.Millisecond)
	}
	for _, d := range dbs {
		d.w.waitAcks(t, created, uint64(d.epoch0), 3, 3*time.Minute)
	}

	// The operator at rest (n databases, their writers running), then
	// while primaries are killed.
	rest := s.operatorProcess(t, leader)
	restWindow := 30 * time.Second
	time.Sleep(restWindow) // a measuring window, not a wait for a condition
	before := s.operatorProcess(t, leader)

	var kills []scaleKill
	var skipped []string
	maxRSS := before.rss
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	chaos := time.Now()
	for i := 0; time.Since(chaos) < s.cfg.scaleDuration; i++ {
		if i > 0 {
			<-tick.C
		}
		d := dbs[i%n]
		kind := failoverPodDelete
		if i%2 == 1 {
			kind = failoverSIGKILL
		}
		cur := s.rocksDB(t, d.name)
		old := s.pod(t, cur.Status.CurrentPrimary)
		if !isReady(cur) || old == nil {
			// Its last failover has not completed 10 s x n later: counted,
			// and the check below says which.
			skipped = append(skipped, fmt.Sprintf("%s (%s)", d.name, describe(cur)))
			continue
		}
		at := time.Now()
		switch kind {
		case failoverPodDelete:
			if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), old.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		case failoverSIGKILL:
			s.signal(t, old, "KILL")
		}
		kills = append(kills, scaleKill{db: d, kind: kind, epoch: cur.Status.Epoch, at: at})
		d.kills++
		if p, err := s.operatorProcessErr(leader); err == nil {
			maxRSS = max(maxRSS, p.rss)
		}
	}
	chaosTook := time.Since(chaos)
	after := s.operatorProcess(t, leader)
	maxRSS = max(maxRSS, after.rss)

	// Every failover completes: exactly one epoch and one failover per kill.
	completed := 0
	for _, d := range dbs {
		want := d.epoch0 + int64(d.kills)
		db := s.waitScaleReady(t, d.name, want)
		done := db.Status.Failovers - d.failovers0
		completed += int(min(done, int64(d.kills)))
		if db.Status.Epoch != want || done != int64(d.kills) {
			t.Errorf("%s: %d primaries killed, but the epoch went from %d to %d and status.failovers from %d to %d", d.name, d.kills, d.epoch0, db.Status.Epoch, d.failovers0, db.Status.Failovers)
		}
	}
	// Each database acknowledges writes again at the next epoch: the time
	// from the kill to that, per kind.
	recovery := map[failoverKind][]time.Duration{}
	for _, k := range kills {
		a := k.db.w.waitAcks(t, k.at, uint64(k.epoch+1), 1, 3*time.Minute)
		recovery[k.kind] = append(recovery[k.kind], a.at.Sub(k.at))
	}
	acked, failed := 0, 0
	for _, d := range dbs {
		d.w.halt()
		a, f := d.w.counts()
		acked, failed = acked+a, failed+f
	}
	for _, d := range dbs {
		verifyLedgerOf(t, d.addr, d.ledger)
	}
	if r := restarts(s.pod(t, leader)); r != restarts0 {
		t.Errorf("the operator %s restarted %d times during the step", leader, r-restarts0)
	}
	if cur, _, _ := strings.Cut(s.waitLeader(t), "_"); cur != leader {
		t.Errorf("the operator's leader changed from %s to %s during the step", leader, cur)
	}

	var parts []string
	for _, kind := range []failoverKind{failoverPodDelete, failoverSIGKILL} {
		d := recovery[kind]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		parts = append(parts, fmt.Sprintf("%s x%d p50 %s max %s", kind, len(d), p50(d), d[len(d)-1].Round(time.Millisecond)))
	}
	t.Logf("scale: %d databases (1 secondary each, compactions on CompactorPool %s), a primary killed every 10 s for %s: %d failovers started, %d completed (exactly one epoch and one status.failovers each), %d kills skipped (database not Ready)%s",
		n, scalePool, chaosTook.Round(time.Second), len(kills), completed, len(skipped), firstSkipped(skipped))
	t.Logf("scale: writes acknowledged again after the kill: %s; writers: %d acknowledged, %d failed; every acknowledged write of every database read back",
		strings.Join(parts, "; "), acked, failed)
	t.Logf("scale: operator %s CPU %.1f%% of a core at rest (%s, %d databases), %.1f%% during the kills (%s); resident memory %.0f MiB at rest, max %.0f MiB sampled during the kills, %.0f MiB after",
		leader, 100*before.cpuRate(rest), restWindow, n, 100*after.cpuRate(before), chaosTook.Round(time.Second),
		rest.rss/(1<<20), maxRSS/(1<<20), after.rss/(1<<20))

	for _, d := range dbs {
		if err := s.kube.Delete(ctx(t, time.Minute), &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: d.name, Namespace: s.cfg.namespace}}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	if err := s.kube.Delete(ctx(t, time.Minute), pool); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func firstSkipped(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return ": " + strings.Join(first(skipped, 5), "; ")
}

// waitScaleReady waits until a database of the scale step is Ready at
// epoch >= minEpoch with its secondary ready.
func (s *suite) waitScaleReady(t *testing.T, name string, minEpoch int64) *shalev1.RocksDB {
	t.Helper()
	var db *shalev1.RocksDB
	eventually(t, 10*time.Minute, fmt.Sprintf("RocksDB %s to be Ready at epoch >= %d with its secondary", name, minEpoch), func() (bool, string) {
		db = s.rocksDB(t, name)
		c := meta.FindStatusCondition(db.Status.Conditions, shalev1.ConditionSecondariesReady)
		ok := isReady(db) && db.Status.Epoch >= minEpoch && db.Status.CurrentPrimary != "" &&
			db.Status.Secondaries == db.Spec.Secondaries.Replicas && c != nil && c.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("secondaries %d; %s", db.Status.Secondaries, describe(db))
	})
	return db
}

// operatorSample is the operator process's CPU seconds and resident memory
// at a time, from its /metrics.
type operatorSample struct {
	at       time.Time
	cpu, rss float64
}

// cpuRate is the share of one core the process used since an earlier sample.
func (o operatorSample) cpuRate(since operatorSample) float64 {
	return (o.cpu - since.cpu) / o.at.Sub(since.at).Seconds()
}

func (s *suite) operatorProcess(t *testing.T, pod string) operatorSample {
	t.Helper()
	o, err := s.operatorProcessErr(pod)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (s *suite) operatorProcessErr(pod string) (operatorSample, error) {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s.cs.CoreV1().Pods(s.cfg.namespace).ProxyGet("http", pod, "8080", "/metrics", nil).DoRaw(c)
	if err != nil {
		return operatorSample{}, fmt.Errorf("GET /metrics of the operator %s: %w", pod, err)
	}
	m := metrics{lines: strings.Split(string(b), "\n")}
	o := operatorSample{at: time.Now(), cpu: m.value("process_cpu_seconds_total", nil), rss: m.value("process_resident_memory_bytes", nil)}
	if o.cpu == 0 || o.rss == 0 {
		return o, fmt.Errorf("the operator %s exports no process_cpu_seconds_total or process_resident_memory_bytes", pod)
	}
	return o, nil
}
