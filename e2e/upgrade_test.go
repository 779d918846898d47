//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// stepUpgrade: helm upgrade to another operator image. The new operator
// takes over and reconciles the database, and the primary Pod is not
// restarted (same Pod, same container, no restart) and keeps serving: a
// client writing all along sees no failure.
func stepUpgrade(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	primary := s.pod(t, db.Status.CurrentPrimary)
	if primary == nil {
		t.Fatalf("the current primary %s does not exist", db.Status.CurrentPrimary)
	}
	w := s.startWriter(t, addr, "upgrade")
	w.waitAcks(t, time.Now(), uint64(db.Status.Epoch), 10, 2*time.Minute)
	w.mu.Lock()
	errsBefore := w.errs
	w.mu.Unlock()
	oldLeader := s.waitLeader(t)
	minioBefore := s.minioPod(t)

	start := time.Now()
	s.helm(t, "upgrade", s.cfg.release, s.chartDir(), "--namespace", s.cfg.namespace, "--reuse-values",
		"--set-string", "operator.image.tag="+s.cfg.upgradeTag, "--wait", "--timeout", "5m")
	t.Logf("helm upgrade to shale-operator:%s took %s", s.cfg.upgradeTag, time.Since(start).Round(100*time.Millisecond))

	// The leader is an operator Pod of the new image.
	var leaderPod *corev1.Pod
	eventually(t, 3*time.Minute, "an operator Pod of the new image to lead", func() (bool, string) {
		holder := s.waitLeader(t)
		name, _, _ := strings.Cut(holder, "_")
		leaderPod = s.pod(t, name)
		if leaderPod == nil {
			return false, "no Pod " + name
		}
		img := leaderPod.Spec.Containers[0].Image
		return strings.HasSuffix(img, ":"+s.cfg.upgradeTag) && holder != oldLeader, "leader " + holder + " runs " + img
	})

	// It has reconciled the database since: nudge it (an annotation is a
	// change the RocksDB controller reacts to) and wait for its reconcile
	// count to go up.
	reconciled := func() float64 {
		m := s.scrape(t, leaderPod.Name, "8080")
		return m.value("controller_runtime_reconcile_total", map[string]string{"controller": "rocksdb"})
	}
	base := reconciled()
	cur := s.rocksDB(t, s.db)
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations["e2e.shale.rocks/nudge"] = strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := s.kube.Patch(ctx(t, time.Minute), cur, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the new operator to reconcile the RocksDB", func() (bool, string) {
		n := reconciled()
		return n > base, fmt.Sprintf("reconciles %v (before the nudge %v)", n, base)
	})
	// The database is served by the same primary, never restarted.
	w.waitAcks(t, time.Now(), uint64(db.Status.Epoch), 10, 2*time.Minute)
	after := s.waitReady(t, s.db, db.Status.Epoch, time.Minute)
	p := s.pod(t, primary.Name)
	switch {
	case p == nil:
		t.Fatalf("the upgrade deleted the primary %s", primary.Name)
	case p.UID != primary.UID:
		t.Fatalf("the upgrade replaced the primary %s (UID %s -> %s)", primary.Name, primary.UID, p.UID)
	case restarts(p) != restarts(primary):
		t.Fatalf("the primary %s restarted during the upgrade (%d -> %d restarts)", p.Name, restarts(primary), restarts(p))
	case after.Status.Epoch != db.Status.Epoch || after.Status.CurrentPrimary != primary.Name:
		t.Fatalf("the upgrade failed over: epoch %d -> %d, primary %s -> %s", db.Status.Epoch, after.Status.Epoch, primary.Name, after.Status.CurrentPrimary)
	}
	// The demo MinIO kept its generated credentials, so it was not
	// restarted (its data would be gone with its emptyDir).
	if m := s.minioPod(t); m.UID != minioBefore.UID || restarts(m) != restarts(minioBefore) {
		t.Fatalf("the upgrade restarted the demo MinIO (%s -> %s)", minioBefore.Name, m.Name)
	}
	w.mu.Lock()
	errs := w.errs - errsBefore
	w.mu.Unlock()
	if errs > 0 {
		t.Fatalf("%d writes failed during the upgrade: %s", errs, w.state())
	}
	w.halt()
	t.Logf("after the upgrade %s is the same Pod (no restart) and served every write: %s", p.Name, w.state())
	s.verifyLedger(t, addr)
}

// minioPod is the demo MinIO's running Pod.
func (s *suite) minioPod(t *testing.T) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{"app.kubernetes.io/component": "demo-minio"}); err != nil {
		t.Fatal(err)
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		t.Fatalf("%d running demo MinIO Pods, want 1", len(running))
	}
	return &running[0]
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// metrics is a scraped /metrics page.
type metrics struct{ lines []string }

// scrape fetches /metrics of a Pod's port through the API server's proxy.
func (s *suite) scrape(t *testing.T, pod, port string) metrics {
	t.Helper()
	b, err := s.cs.CoreV1().Pods(s.cfg.namespace).ProxyGet("http", pod, port, "/metrics", nil).DoRaw(ctx(t, time.Minute))
	if err != nil {
		t.Fatalf("GET /metrics of %s:%s: %v", pod, port, err)
	}
	return metrics{lines: strings.Split(string(b), "\n")}
}

// scrapeService fetches /metrics through a Service (port name) via the API
// server's proxy.
func (s *suite) scrapeService(ctx context.Context, svc, port string) (metrics, error) {
	b, err := s.cs.CoreV1().Services(s.cfg.namespace).ProxyGet("http", svc, port, "/metrics", nil).DoRaw(ctx)
	if err != nil {
		return metrics{}, fmt.Errorf("GET /metrics of Service %s:%s: %w", svc, port, err)
	}
	return metrics{lines: strings.Split(string(b), "\n")}, nil
}

// noteOperatorMetrics remembers which series the operator exported: its
// counters start again with every new operator process (the upgrade and gc
// steps start new ones), so the metrics step checks what was seen during
// the run.
func (s *suite) noteOperatorMetrics() {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := s.scrapeService(c, s.cfg.release+"-operator-metrics", "metrics")
	if err != nil {
		return // the step's own checks say what is wrong
	}
	for n := range m.names() {
		s.operatorSeries[n] = true
	}
}

// noteSeries remembers the series a Pod exports now (a secondary, a
// compactor scheduler), for the metrics step, which runs after those Pods
// are gone.
func (s *suite) noteSeries(t *testing.T, pod, port string) {
	t.Helper()
	for n := range s.scrape(t, pod, port).names() {
		s.operatorSeries[n] = true
	}
}

var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// value sums the samples of name whose labels include want.
func (m metrics) value(name string, want map[string]string) float64 {
	var sum float64
	for _, l := range m.lines {
		if !strings.HasPrefix(l, name) || strings.HasPrefix(l, "#") {
			continue
		}
		rest := l[len(name):]
		labels := map[string]string{}
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			for _, kv := range labelPair.FindAllStringSubmatch(rest[1:end], -1) {
				labels[kv[1]] = kv[2]
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if f := strings.Fields(rest); match && len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// names are the metric names with at least one sample.
func (m metrics) names() map[string]bool {
	out := map[string]bool{}
	for _, l := range m.lines {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			out[l[:i]] = true
		}
	}
	return out
}
