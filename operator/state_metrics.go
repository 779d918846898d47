package operator

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The state of every RocksDB as series, read from the operator's cache at
// each scrape (as kube-state-metrics does): a deleted database's series
// disappear with it, and the alert rules in the chart need nothing but
// the operator's endpoint to say that a database is down.
var (
	dbReadyDesc = prometheus.NewDesc("shale_rocksdb_ready",
		"1 when the RocksDB's Ready condition is True (its primary serves writes), else 0.", []string{"namespace", "rocksdb"}, nil)
	dbPhaseDesc = prometheus.NewDesc("shale_rocksdb_phase",
		"1 for the RocksDB's current status.phase.", []string{"namespace", "rocksdb", "phase"}, nil)
	dbEpochDesc = prometheus.NewDesc("shale_rocksdb_epoch",
		"The epoch of the RocksDB's current primary (status.epoch).", []string{"namespace", "rocksdb"}, nil)
	dbFailoversDesc = prometheus.NewDesc("shale_rocksdb_failovers",
		"Failovers of the RocksDB since it was created (status.failovers).", []string{"namespace", "rocksdb"}, nil)
	dbSecondariesDesc = prometheus.NewDesc("shale_rocksdb_secondaries_ready",
		"Ready secondaries of the RocksDB (status.secondaries).", []string{"namespace", "rocksdb"}, nil)
	dbSecondariesWantDesc = prometheus.NewDesc("shale_rocksdb_secondaries_desired",
		"Secondaries the RocksDB asks for (spec.secondaries.replicas).", []string{"namespace", "rocksdb"}, nil)
)

// stateCollector exports the RocksDBs the operator's cache holds.
type stateCollector struct {
	mu      sync.Mutex
	c       client.Reader // nil until a manager is set up
	timeout time.Duration
}

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dbReadyDesc, dbPhaseDesc, dbEpochDesc, dbFailoversDesc, dbSecondariesDesc, dbSecondariesWantDesc} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	c := s.c
	s.mu.Unlock()
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var dbs shalev1.RocksDBList
	if err := c.List(ctx, &dbs); err != nil {
		// A scrape during a cache outage shows no databases rather than
		// stale ones; the alert on a missing shale_rocksdb_ready covers it.
		ch <- prometheus.NewInvalidMetric(dbReadyDesc, err)
		return
	}
	for _, m := range databaseSeries(dbs.Items) {
		ch <- m
	}
}

// databaseSeries turns RocksDBs into the state series (pure: the test
// checks it without a registry).
func databaseSeries(dbs []shalev1.RocksDB) []prometheus.Metric {
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	for i := range dbs {
		db := &dbs[i]
		ns, name := db.Namespace, db.Name
		ready := 0.0
		if db.ConditionTrue(shalev1.ConditionReady) {
			ready = 1
		}
		gauge(dbReadyDesc, ready, ns, name)
		phase := string(db.Status.Phase)
		if phase == "" {
			phase = string(shalev1.PhasePending)
		}
		gauge(dbPhaseDesc, 1, ns, name, phase)
		gauge(dbEpochDesc, float64(db.Status.Epoch), ns, name)
		gauge(dbFailoversDesc, float64(db.Status.Failovers), ns, name)
		gauge(dbSecondariesDesc, float64(db.Status.Secondaries), ns, name)
		gauge(dbSecondariesWantDesc, float64(db.Spec.Secondaries.Replicas), ns, name)
	}
	return out
}

// state is registered once (init); each manager the process starts points
// it at its own cache (envtest suites start several in one process).
var state = &stateCollector{timeout: 5 * time.Second}

func init() { metrics.Registry.MustRegister(state) }

func registerStateMetrics(c client.Reader) {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.c = c
}
