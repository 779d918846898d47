package compactor

import (
	"github.com/prometheus/client_golang/prometheus"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
)

// StatsCollector exports a scheduler's Stats as Prometheus series, read
// from one snapshot per scrape so the series agree with `shale compactor
// stats`.
type StatsCollector struct {
	snapshot func() *compactorv1.StatsResponse
}

// NewStatsCollector collects from snapshot.
func NewStatsCollector(snapshot func() *compactorv1.StatsResponse) *StatsCollector {
	return &StatsCollector{snapshot: snapshot}
}

var (
	descQueued   = prometheus.NewDesc("shale_compactor_queue_depth", "Compaction jobs waiting for a worker.", []string{"db"}, nil)
	descRunning  = prometheus.NewDesc("shale_compactor_running", "Compaction jobs running on workers.", []string{"db"}, nil)
	descJobs     = prometheus.NewDesc("shale_compactor_jobs_total", "Compaction jobs by outcome: completed, failed, requeued (a worker lost or failed it), cancelled (its primary gave up).", []string{"db", "outcome"}, nil)
	descFallback = prometheus.NewDesc("shale_compactor_fallbacks_total", "Compactions primaries ran locally because remote compaction failed, as they reported them.", []string{"db"}, nil)
	descBytes    = prometheus.NewDesc("shale_compactor_bytes_total", "Bytes compaction jobs read and wrote on workers.", []string{"db", "direction"}, nil)
	descPrio     = prometheus.NewDesc("shale_compactor_priority", "Scheduling priority of each database.", []string{"db"}, nil)
	descWorkers  = prometheus.NewDesc("shale_compactor_workers", "Workers seen recently.", nil, nil)
	descSlots    = prometheus.NewDesc("shale_compactor_worker_slots", "Jobs the workers seen recently can run at once.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descRunning, descJobs, descFallback, descBytes, descPrio, descWorkers, descSlots} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, d := range s.Dbs {
		k := d.Counters
		gauge(descQueued, k.Queued, d.Db)
		gauge(descRunning, k.Running, d.Db)
		counter(descJobs, k.Completed, d.Db, "completed")
		counter(descJobs, k.Failed, d.Db, "failed")
		counter(descJobs, k.Requeued, d.Db, "requeued")
		counter(descJobs, k.Cancelled, d.Db, "cancelled")
		counter(descFallback, k.Fallbacks, d.Db)
		counter(descBytes, k.BytesRead, d.Db, "read")
		counter(descBytes, k.BytesWritten, d.Db, "written")
		gauge(descPrio, uint64(d.Priority), d.Db)
	}
	var slots uint64
	for _, w := range s.Workers {
		slots += uint64(w.Slots)
	}
	gauge(descWorkers, uint64(len(s.Workers)))
	gauge(descSlots, slots)
}
