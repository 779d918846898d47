//go:build bench

package operator

// make bench-operator: the operator at scale against envtest (issue 29).
// OPERATOR_DBS RocksDBs (1,000) are created at once; no Pods run, the
// bench plays the kubelet (as setPod does) and the primaries (their epoch
// claim and CURRENT in a real MinIO). It measures the time until every
// database is Ready, the rocksdb controller's reconcile latency, the
// operator's memory, and the API requests the operator makes at rest and
// while OPERATOR_FAILOVERS (100) databases fail over.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/testenv"
)

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count, such as %s=%d", name, s, name, def)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration, such as %s=%s", name, s, name, def)
	}
	return d
}

// scaleKubelet plays the kubelet and the primaries: a primary Pod that is
// not marked failed becomes Running and Ready, after its epoch claim and
// CURRENT are in the store (the operator looks for them before failing
// over a database that was ready).
type scaleKubelet struct {
	h      *harness
	mu     sync.Mutex
	ready  map[types.NamespacedName]bool // Pods made ready
	failed map[types.NamespacedName]bool // Pods the bench failed
	store  objstore.Store                // the bucket
	errs   atomic.Int64
	last   atomic.Value // the last error
}

func (k *scaleKubelet) run(ctx context.Context, c client.Client) {
	work := make(chan corev1.Pod)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := k.start(ctx, c, &p); err != nil && ctx.Err() == nil {
					k.errs.Add(1)
					k.last.Store(err.Error())
					k.mu.Lock()
					delete(k.ready, client.ObjectKeyFromObject(&p))
					k.mu.Unlock()
				}
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.MatchingLabels{shalev1.LabelRole: shalev1.RolePrimary}); err == nil {
			for _, p := range pods.Items {
				key := client.ObjectKeyFromObject(&p)
				k.mu.Lock()
				skip := k.ready[key] || k.failed[key] || p.DeletionTimestamp != nil
				if !skip {
					k.ready[key] = true
				}
				k.mu.Unlock()
				if !skip {
					select {
					case work <- p:
					case <-ctx.Done():
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (k *scaleKubelet) start(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	db := &shalev1.RocksDB{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[shalev1.LabelRocksDB]}, db); err != nil {
		return err
	}
	if db.Status.StoragePath == "" {
		return fmt.Errorf("RocksDB %s has no storage path", db.Name)
	}
	epoch, err := strconv.ParseUint(pod.Labels[shalev1.LabelEpoch], 10, 64)
	if err != nil {
		return fmt.Errorf("Pod %s: epoch label: %w", pod.Name, err)
	}
	dir := strings.TrimSuffix(db.Status.StoragePath, "/") + "/"
	for key, body := range map[string]string{fmt.Sprintf("_shale/epoch/%020d", epoch): "{}", "CURRENT": "MANIFEST-000001\n"} {
		if _, err := k.store.Put(ctx, dir+key, strings.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
			return err
		}
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	return c.Status().Update(ctx, pod)
}

// fail marks a primary Pod Failed (its process exited), as the kubelet
// would: the operator fails over at once.
func (k *scaleKubelet) fail(ctx context.Context, c client.Client, key types.NamespacedName) error {
	k.mu.Lock()
	k.failed[key] = true
	k.mu.Unlock()
	pod := &corev1.Pod{}
	if err := c.Get(ctx, key, pod); err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	return c.Status().Update(ctx, pod)
}

// reconcileHist is the rocksdb controller's reconcile_time_seconds.
func reconcileHist(t *testing.T) *dto.Histogram {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "rocksdb" {
					return m.GetHistogram()
				}
			}
		}
	}
	return &dto.Histogram{}
}

// histDelta is the histogram of the observations between two snapshots:
// upper bound -> cumulative count.
type histDelta struct {
	bounds []float64
	cum    []uint64
	count  uint64
	sum    float64
}

func deltaOf(before, after *dto.Histogram) histDelta {
	d := histDelta{count: after.GetSampleCount() - before.GetSampleCount(), sum: after.GetSampleSum() - before.GetSampleSum()}
	prev := map[float64]uint64{}
	for _, b := range before.GetBucket() {
		prev[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for _, b := range after.GetBucket() {
		d.bounds = append(d.bounds, b.GetUpperBound())
		d.cum = append(d.cum, b.GetCumulativeCount()-prev[b.GetUpperBound()])
	}
	return d
}

// quantile interpolates linearly within the bucket holding q, as
// Prometheus's histogram_quantile does.
func (d histDelta) quantile(q float64) time.Duration {
	if d.count == 0 {
		return 0
	}
	rank := q * float64(d.count)
	lower, below := 0.0, uint64(0)
	for i, b := range d.bounds {
		if float64(d.cum[i]) >= rank {
			in := float64(d.cum[i] - below)
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / in
			}
			return time.Duration((lower + (b-lower)*frac) * float64(time.Second))
		}
		lower, below = b, d.cum[i]
	}
	return time.Duration(lower * float64(time.Second)) // beyond the last bound
}

func (d histDelta) String() string {
	if d.count == 0 {
		return "no reconciles"
	}
	return fmt.Sprintf("%d reconciles, p50 %s, p99 %s, mean %s", d.count, round(d.quantile(0.5)), round(d.quantile(0.99)),
		round(time.Duration(d.sum/float64(d.count)*float64(time.Second))))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// rss reads the process's resident set from /proc.
func rss() uint64 { return procStatus("VmRSS:") }

// procStatus reads a size in kB of /proc/self/status (VmRSS:, VmHWM:).
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// topKinds formats the commonest request kinds, per minute over d.
func topKinds(m map[string]int, d time.Duration, n int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		if !strings.HasPrefix(k, "WATCH") {
			all = append(all, kv{k, v})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var parts []string
	for i, e := range all {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", e.k, float64(e.v)/d.Minutes()))
	}
	return strings.Join(parts, ", ")
}

// waitAll polls the RocksDBs until cond holds for every one named in want
// (all when want is nil), or fails after limit.
func waitAll(t *testing.T, h *harness, n int, want map[types.NamespacedName]bool, what string, limit time.Duration, cond func(*shalev1.RocksDB) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	lastLog := time.Now()
	for {
		var dbs shalev1.RocksDBList
		if err := h.c.List(h.ctx, &dbs); err != nil {
			t.Fatal(err)
		}
		ok, total := 0, 0
		for i := range dbs.Items {
			db := &dbs.Items[i]
			if want != nil && !want[client.ObjectKeyFromObject(db)] {
				continue
			}
			total++
			if cond(db) {
				ok++
			}
		}
		if want == nil && total < n {
			total = n
		} else if want != nil {
			total = len(want)
		}
		if ok == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %d of %d", limit, what, ok, total)
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("%s: %d of %d", what, ok, total)
			lastLog = time.Now()
		}
		time.Sleep(time.Second)
	}
}

// gauge reads a gauge of metrics.Registry with one label.
func gauge(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// waitQuiet waits until the rocksdb controller's queue is empty and no
// reconcile runs, three polls in a row: the reconciles that follow each
// database's last status write are done.
func waitQuiet(t *testing.T, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for quiet := 0; quiet < 3; {
		if gauge(t, "workqueue_depth", "name", "rocksdb") == 0 && gauge(t, "controller_runtime_active_workers", "controller", "rocksdb") == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rocksdb controller's queue is not empty after %s", limit)
		}
		time.Sleep(time.Second)
	}
}

func isReady(db *shalev1.RocksDB) bool {
	return db.Status.ObservedGeneration == db.Generation && condIs(db, shalev1.ConditionReady, metav1.ConditionTrue, "")
}

func TestOperatorScale(t *testing.T) {
	n := envInt(t, "OPERATOR_DBS", 1000)
	nss := max(1, min(envInt(t, "OPERATOR_NAMESPACES", 10), n))
	failN := min(envInt(t, "OPERATOR_FAILOVERS", 100), n)
	restFor := envDuration(t, "OPERATOR_REST", 3*time.Minute)
	limit := envDuration(t, "OPERATOR_LIMIT", 40*time.Minute)

	// The operator's defaults, as cmd/shale-operator runs it, but for the
	// store check: every minute rather than 5, so that the rest window
	// sees the checks and what they set off.
	opts := DefaultOptions()
	opts.ShaleImage = "shale.local/shale:bench"
	opts.Namespace = operatorNS
	opts.ObjectStoreCheckInterval = envDuration(t, "OPERATOR_STORE_CHECK", time.Minute)
	counter := &requestCounter{counts: map[string]int{}}
	h := startOperatorAs(t, opts, func(env *testenv.Env) *rest.Config {
		cfg := rest.CopyConfig(env.Config)
		// No client-side rate limit, as ctrl.GetConfig sets it for
		// cmd/shale-operator (the API server's priority and fairness
		// limits instead).
		cfg.QPS, cfg.Burst = -1, 0
		cfg.Wrap(counter.wrap)
		return cfg
	}, testenv.WithAPIServerFlag("service-cluster-ip-range", "10.0.0.0/16")) // a NAME-rw Service per database
	// The bench's own client: no client-side limit either.
	bcfg := rest.CopyConfig(h.env.Config)
	bcfg.QPS = -1
	bc, err := client.New(bcfg, client.Options{Scheme: h.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	h.c = bc

	kubelet := &scaleKubelet{h: h, ready: map[types.NamespacedName]bool{}, failed: map[types.NamespacedName]bool{}, store: h.store("")}
	kctx, kcancel := context.WithCancel(h.ctx)
	kdone := make(chan struct{})
	go func() { defer close(kdone); kubelet.run(kctx, bc) }()
	t.Cleanup(func() { kcancel(); <-kdone })

	// Namespaces, each with the samples' Secret and ObjectStore.
	for i := 0; i < nss; i++ {
		ns := h.namespace(fmt.Sprintf("bench-%02d", i))
		sec, store, _ := h.samples(ns)
		h.create(sec, store)
	}
	_, _, sample := h.samples("x")
	counter.reset()
	h0 := reconcileHist(t)

	// Every RocksDB at once (16 writers).
	start := time.Now()
	var wg sync.WaitGroup
	var cerrs atomic.Int64
	names := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				db := sample.DeepCopy()
				db.Name = fmt.Sprintf("db-%04d", i)
				db.Namespace = fmt.Sprintf("bench-%02d", i%nss)
				if err := bc.Create(h.ctx, db); err != nil {
					cerrs.Add(1)
					t.Logf("create %s: %v", db.Name, err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		names <- i
	}
	close(names)
	wg.Wait()
	created := time.Since(start)
	if cerrs.Load() > 0 {
		t.Fatalf("%d creates failed", cerrs.Load())
	}
	waitAll(t, h, n, nil, "all Ready", limit, isReady)
	toReady := time.Since(start)
	waitQuiet(t, limit)
	toQuiet := time.Since(start)
	rampReqs, rampTotal := counter.reset() // until the queue is empty
	h1 := reconcileHist(t)
	ramp := deltaOf(h0, h1)

	// Memory at steady state, after a collection.
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap, resident, peak := ms.HeapInuse, rss(), procStatus("VmHWM:")

	// At rest: nothing changes; every request is the operator's own doing.
	counter.reset()
	time.Sleep(restFor) // a measurement window, not a wait for a condition
	restReqs, restTotal := counter.reset()
	h2 := reconcileHist(t)
	rest := deltaOf(h1, h2)

	// failN primaries fail at once; the bench starts their successors.
	var dbs shalev1.RocksDBList
	if err := bc.List(h.ctx, &dbs); err != nil {
		t.Fatal(err)
	}
	sort.Slice(dbs.Items, func(i, j int) bool { return dbs.Items[i].Name < dbs.Items[j].Name })
	failing := map[types.NamespacedName]bool{}
	epochs := map[types.NamespacedName]int64{}
	fstart := time.Now()
	for i := 0; i < failN; i++ {
		db := &dbs.Items[i*len(dbs.Items)/failN]
		key := client.ObjectKeyFromObject(db)
		failing[key], epochs[key] = true, db.Status.Epoch
		if err := kubelet.fail(h.ctx, bc, types.NamespacedName{Namespace: db.Namespace, Name: db.Status.CurrentPrimary}); err != nil {
			t.Fatal(err)
		}
	}
	waitAll(t, h, n, failing, "failed-over databases Ready", limit, func(db *shalev1.RocksDB) bool {
		return db.Status.Epoch > epochs[client.ObjectKeyFromObject(db)] && isReady(db)
	})
	failTook := time.Since(fstart)
	waitQuiet(t, limit)
	failQuiet := time.Since(fstart)
	failReqs, failTotal := counter.reset()
	h3 := reconcileHist(t)
	fo := deltaOf(h2, h3)

	w := &strings.Builder{}
	fmt.Fprintf(w, "\nOperator at scale: %d RocksDBs in %d namespaces (envtest, MinIO; %d CPUs, GOMAXPROCS %d), store check every %s\n\n",
		n, nss, runtime.NumCPU(), runtime.GOMAXPROCS(0), opts.ObjectStoreCheckInterval)
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| created (%d RocksDBs, 16 writers) | %s |\n", n, created.Round(100*time.Millisecond))
	fmt.Fprintf(w, "| time to steady state (all Ready) | %s |\n", toReady.Round(100*time.Millisecond))
	fmt.Fprintf(w, "| queue empty (no reconcile left) after | %s |\n", toQuiet.Round(100*time.Millisecond))
	fmt.Fprintf(w, "| reconciles until then | %s |\n", ramp)
	fmt.Fprintf(w, "| API requests until then | %d (%.1f per database, %.0f per minute) |\n", rampTotal, float64(rampTotal)/float64(n), float64(rampTotal)/toQuiet.Minutes())
	fmt.Fprintf(w, "| operator heap in use / RSS after GC | %s / %s |\n", mib(heap), mib(resident))
	fmt.Fprintf(w, "| peak RSS until then (the bench process: operator, bench kubelet and client) | %s |\n", mib(peak))
	fmt.Fprintf(w, "| at rest (%s): reconciles | %s |\n", restFor, rest)
	fmt.Fprintf(w, "| at rest: API requests per minute | %.1f |\n", float64(restTotal)/restFor.Minutes())
	fmt.Fprintf(w, "| %d failovers at once: all Ready again after | %s |\n", failN, failTook.Round(100*time.Millisecond))
	fmt.Fprintf(w, "| failovers: reconciles | %s |\n", fo)
	fmt.Fprintf(w, "| failovers: queue empty after | %s |\n", failQuiet.Round(100*time.Millisecond))
	fmt.Fprintf(w, "| failovers: API requests per minute (until the queue is empty) | %.0f (%d in all) |\n", float64(failTotal)/failQuiet.Minutes(), failTotal)
	fmt.Fprintf(w, "\nrequests per minute, until steady: %s\n", topKinds(rampReqs, toQuiet, 8))
	fmt.Fprintf(w, "requests per minute, at rest: %s\n", topKinds(restReqs, restFor, 8))
	fmt.Fprintf(w, "requests per minute, failovers: %s\n", topKinds(failReqs, failQuiet, 8))
	if e := kubelet.errs.Load(); e > 0 {
		fmt.Fprintf(w, "bench kubelet errors (retried): %d, last: %v\n", e, kubelet.last.Load())
	}
	fmt.Println(w.String())
}
