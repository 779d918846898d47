package operator

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's metrics, on controller-runtime's registry (served by the
// manager's metrics endpoint beside the controllers' own).
var (
	failoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_failovers_total",
		Help: "Failovers started (epoch bumps that replace a primary), by reason.",
	}, []string{"reason"})
	switchoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_switchovers_total",
		Help: "Switchovers that ended, by how: completed or abandoned.",
	}, []string{"result"})
	failoverDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shale_operator_failover_duration_seconds",
		Help:    "Time from a failover decision to the new primary being ready.",
		Buckets: []float64{1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600},
	})
	gcOrphansFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_orphans_found_total",
		Help: "Orphaned database directories found by garbage-collection passes (counted every pass that finds them; dry runs included).",
	}, []string{"objectstore"})
	gcDirsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_directories_deleted_total",
		Help: "Orphaned database directories deleted.",
	}, []string{"objectstore"})
	gcBytesReclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_bytes_reclaimed_total",
		Help: "Bytes of orphaned database directories deleted.",
	}, []string{"objectstore"})
	gcPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_passes_total",
		Help: "Garbage-collection passes over an ObjectStore, by result (ok, error).",
	}, []string{"objectstore", "result"})
)

func init() {
	metrics.Registry.MustRegister(failoversTotal, switchoversTotal, failoverDuration, gcOrphansFound, gcDirsDeleted, gcBytesReclaimed, gcPasses)
}
