package operator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// seriesOf flattens state series to "name" or "name/phase" -> value for
// one database.
func seriesOf(t *testing.T, ms []*dto.MetricFamily, ns, name string) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for _, f := range ms {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] != ns || l["rocksdb"] != name {
				continue
			}
			key := f.GetName()
			if ph, ok := l["phase"]; ok {
				key += "/" + ph
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	return got
}

// gatherState scrapes the operator's registry as Prometheus would.
func gatherState(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	ms, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gather the operator's metrics: %v", err)
	}
	return seriesOf(t, ms, ns, name)
}

func TestDatabaseSeries(t *testing.T) {
	ready := shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "orders"}}
	ready.Spec.Secondaries.Replicas = 2
	ready.Status = shalev1.RocksDBStatus{Phase: shalev1.PhaseReady, Epoch: 7, Failovers: 6, Secondaries: 1,
		Conditions: []metav1.Condition{{Type: shalev1.ConditionReady, Status: metav1.ConditionTrue}}}
	down := shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "users"}}
	down.Status = shalev1.RocksDBStatus{Phase: shalev1.PhaseFailingOver, Epoch: 3,
		Conditions: []metav1.Condition{{Type: shalev1.ConditionReady, Status: metav1.ConditionFalse}}}
	fresh := shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "orders"}}

	reg := newTestRegistry(t, databaseSeries([]shalev1.RocksDB{ready, down, fresh}))
	for _, tc := range []struct {
		ns, name string
		want     map[string]float64
	}{
		{"a", "orders", map[string]float64{"shale_rocksdb_ready": 1, "shale_rocksdb_phase/Ready": 1, "shale_rocksdb_epoch": 7,
			"shale_rocksdb_failovers": 6, "shale_rocksdb_secondaries_ready": 1, "shale_rocksdb_secondaries_desired": 2}},
		{"a", "users", map[string]float64{"shale_rocksdb_ready": 0, "shale_rocksdb_phase/FailingOver": 1, "shale_rocksdb_epoch": 3,
			"shale_rocksdb_failovers": 0, "shale_rocksdb_secondaries_ready": 0, "shale_rocksdb_secondaries_desired": 0}},
		// No status yet: not ready, Pending (an alert must see it).
		{"b", "orders", map[string]float64{"shale_rocksdb_ready": 0, "shale_rocksdb_phase/Pending": 1, "shale_rocksdb_epoch": 0,
			"shale_rocksdb_failovers": 0, "shale_rocksdb_secondaries_ready": 0, "shale_rocksdb_secondaries_desired": 0}},
	} {
		got := seriesOf(t, reg, tc.ns, tc.name)
		if len(got) != len(tc.want) {
			t.Errorf("%s/%s: series %v, want %v", tc.ns, tc.name, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s/%s: %s = %v (present %v), want %v", tc.ns, tc.name, k, g, ok, v)
			}
		}
	}
}

// constMetrics gathers fixed metrics through a real registry (which checks
// their labels and names as a scrape would).
type constMetrics []prometheus.Metric

func (c constMetrics) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }
func (c constMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}

func newTestRegistry(t *testing.T, ms []prometheus.Metric) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(constMetrics(ms))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return fams
}
