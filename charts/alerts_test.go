package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestAlertRules checks the chart's PrometheusRule as Prometheus would load
// it, without a Prometheus: it is rendered only where the API is served;
// every expression parses as PromQL; every series it reads is one Shale
// exports (named in Go source, or asserted on a real primary's /metrics by
// primary/primary_test.go: RocksDB's tickers); every alert has a severity,
// a summary and a runbook section that exists in docs/alerts.md.
func TestAlertRules(t *testing.T) {
	if n := kinds(render(t, "shale", "shale-system"))["PrometheusRule"]; n != 0 {
		t.Errorf("a PrometheusRule is rendered for a cluster without monitoring.coreos.com/v1")
	}
	if n := kinds(render(t, "shale", "shale-system", "--api-versions", "monitoring.coreos.com/v1", "--set", "metrics.prometheusRule.enabled=false"))["PrometheusRule"]; n != 0 {
		t.Errorf("metrics.prometheusRule.enabled=false renders a PrometheusRule")
	}
	objs := render(t, "shale", "shale-system", "--api-versions", "monitoring.coreos.com/v1", "--set", "metrics.prometheusRule.labels.release=prom")
	rule := find(objs, "PrometheusRule", "-alerts")
	if rule == nil {
		t.Fatalf("no PrometheusRule with monitoring.coreos.com/v1 (kinds %v)", kinds(objs))
	}
	if rule.GetLabels()["release"] != "prom" {
		t.Errorf("PrometheusRule labels %v lack metrics.prometheusRule.labels", rule.GetLabels())
	}

	runbook, err := os.ReadFile(filepath.Join("..", "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(runbook), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	exported := exportedSeries(t)

	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	var alerts []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			r := r.(map[string]any)
			name, _ := r["alert"].(string)
			alerts = append(alerts, name)
			expr, _ := r["expr"].(string)
			e, err := parser.ParseExpr(expr)
			if err != nil {
				t.Errorf("%s: expr does not parse: %v\n%s", name, err, expr)
				continue
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && !exported[vs.Name] {
					t.Errorf("%s reads %s, which nothing in Shale exports (renamed?)", name, vs.Name)
				}
				return nil
			})
			labels, _, _ := unstructured.NestedStringMap(r, "labels")
			if s := labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", name, s)
			}
			ann, _, _ := unstructured.NestedStringMap(r, "annotations")
			if ann["summary"] == "" || ann["description"] == "" {
				t.Errorf("%s: annotations %v lack a summary or description", name, ann)
			}
			url, anchor, _ := strings.Cut(ann["runbook_url"], "#")
			if !strings.HasSuffix(url, "/docs/alerts.md") || anchor != strings.ToLower(name) || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q, want docs/alerts.md#%s with a section \"## %s\" there", name, ann["runbook_url"], strings.ToLower(name), name)
			}
		}
	}
	for _, want := range []string{"ShaleDatabaseNotReady", "ShaleFailoverLoop", "ShaleSecondaryLagging", "ShaleCompactionBacklog",
		"ShaleCompactionFallbacks", "ShaleObjectStoreErrors", "ShaleWritesStopped", "ShaleWritesStalling",
		"ShaleBackupMissing", "ShaleArchiveLagging", "ShaleArchiveGap"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}
	// Every runbook section belongs to an alert (none left behind by a rename).
	for a := range anchors {
		if strings.HasPrefix(a, "shale") && !slices.ContainsFunc(alerts, func(n string) bool { return strings.ToLower(n) == a }) {
			t.Errorf("docs/alerts.md has a section %q for no alert", a)
		}
	}
}

// exportedSeries is every series name Shale's code registers (a quoted
// name in non-test Go source; histograms add _bucket, _count, _sum) plus
// the RocksDB series a primary test reads off a real /metrics.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	name := regexp.MustCompile(`"((?:shale|rocksdb)_[a-z0-9_]+)"`)
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "e2e") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(b), -1) {
			for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
				seen[m[1]+suffix] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "primary", "primary_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`(rocksdb_[a-z0-9_]+)[ {]").FindAllStringSubmatch(string(b), -1) {
		seen[m[1]] = true
	}
	return seen
}

// TestDashboardQueries parses every panel's query of the Grafana dashboard
// (Grafana's variables replaced by values) and checks the Shale and RocksDB
// series it reads exist, as for the alerts.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "dashboards", "shale.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	exported := exportedSeries(t)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$namespace", ".*", "$rocksdb", ".*")
	n := 0
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			n++
			e, err := parser.ParseExpr(vars.Replace(q.Expr))
			if err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, q.Expr)
				continue
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok && !strings.HasPrefix(vs.Name, "grpc_") && !exported[vs.Name] {
					t.Errorf("panel %q reads %s, which nothing in Shale exports", p.Title, vs.Name)
				}
				return nil
			})
		}
	}
	if n < 20 {
		t.Errorf("the dashboard has %d queries", n)
	}
}
