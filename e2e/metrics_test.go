//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// stepMetrics: every series the chart's Grafana dashboard queries exists,
// on the primary (scraped as the chart's PodMonitor would: the Pod's
// metrics port) or on the operator (through the chart's metrics Service);
// and the Pod labels the PodMonitor turns into the dashboard's labels are
// there.
func stepMetrics(t *testing.T, s *suite) {
	// Traffic of every kind the dashboard shows.
	kv := s.kvClient(t)
	c := ctx(t, time.Minute)
	for i := range 10 {
		key := fmt.Sprintf("metrics/%d", i)
		if err := s.put(c, kv, key, "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.MultiGet(c, &kvv1.MultiGetRequest{Keys: [][]byte{[]byte("metrics/1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Write(c, &kvv1.WriteRequest{Sync: true, Mutations: []*kvv1.Mutation{{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte("metrics/9")}}}}}); err != nil {
		t.Fatal(err)
	}
	s.ledger.mu.Lock()
	delete(s.ledger.acked, "metrics/9")
	s.ledger.mu.Unlock()

	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	primary := s.pod(t, db.Status.CurrentPrimary)
	for _, l := range []string{"shale.rocks/rocksdb", "shale.rocks/epoch", "shale.rocks/role", "app.kubernetes.io/managed-by"} {
		if primary.Labels[l] == "" {
			t.Errorf("the primary %s has no label %s, which the chart's PodMonitor uses", primary.Name, l)
		}
	}
	have := s.scrape(t, primary.Name, "9090").names()
	op, err := s.scrapeService(ctx(t, time.Minute), s.cfg.release+"-operator-metrics", "metrics")
	if err != nil {
		t.Fatal(err)
	}
	for n := range op.names() {
		have[n] = true
	}
	for n := range s.operatorSeries {
		have[n] = true
	}

	b, err := os.ReadFile(filepath.Join(s.chartDir(), "files", "dashboards", "shale.json"))
	if err != nil {
		t.Fatal(err)
	}
	names := dashboardMetrics(t, b)
	// Counters with labels appear with their first event: these only if
	// the step that causes it ran.
	needs := map[string][]string{
		"shale_operator_failovers_total":              {"failover-delete", "failover-kill", "zombie"},
		"shale_operator_gc_orphans_found_total":       {"gc"},
		"shale_operator_gc_directories_deleted_total": {"gc"},
		// Exported by Pods that only those steps run (noted there).
		"shale_secondary_lag_seconds":      {"secondaries"},
		"shale_compactor_queue_depth":      {"compaction"},
		"shale_compaction_fallbacks_total": {"compaction"},
	}
	var missing, notProduced []string
	for _, n := range names {
		if have[n] {
			continue
		}
		if steps, ok := needs[n]; ok && !slices.ContainsFunc(steps, func(st string) bool { return s.ran[st] }) {
			notProduced = append(notProduced, n)
			continue
		}
		missing = append(missing, n)
	}
	if len(missing) > 0 {
		t.Fatalf("the dashboard queries series that neither the primary nor the operator exports: %v", missing)
	}
	t.Logf("all %d metrics the dashboard queries exist (%d not checked: their steps did not run: %v)", len(names)-len(notProduced), len(notProduced), notProduced)
}

var (
	braces   = regexp.MustCompile(`\{[^}]*\}`)
	grouping = regexp.MustCompile(`\b(by|without)\s*\([^)]*\)`)
	metric   = regexp.MustCompile(`\b(?:grpc|shale|rocksdb)_[a-z0-9_]+`)
)

// dashboardMetrics returns the metric names in the dashboard's queries.
func dashboardMetrics(t *testing.T, dashboard []byte) []string {
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var names []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			e := grouping.ReplaceAllString(braces.ReplaceAllString(tg.Expr, ""), "")
			for _, n := range metric.FindAllString(e, -1) {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the dashboard: %v", len(names), names)
	}
	slices.Sort(names)
	return names
}
