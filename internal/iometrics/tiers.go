package iometrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// tierReads counts table reads per tier (docs/tiering.md): the series that
// shows how much of the read load the cold tier carries and how slow it is.
type tierReads struct {
	reads   *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

func newTierReads(reg prometheus.Registerer) *tierReads {
	t := &tierReads{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_tier_reads_total",
			Help: "Table reads from the object store by tier (hot, cold), activity and result (ok, error): whole-table fetches and ranged reads.",
		}, []string{"tier", "activity", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_tier_read_bytes_total",
			Help: "Table bytes read from the object store by tier.",
		}, []string{"tier"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shale_tier_read_duration_seconds",
			Help:    "Latency of table reads from the object store by tier.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}, []string{"tier"}),
	}
	reg.MustRegister(t.reads, t.bytes, t.latency)
	return t
}

func (t *tierReads) observe(r shalefs.Request) {
	if r.Tier == "" || r.Op != "get" || r.FileType != "sst" {
		return
	}
	result := "ok"
	if r.Err != nil {
		result = "error"
	}
	t.reads.WithLabelValues(r.Tier, r.Activity, result).Inc()
	t.latency.WithLabelValues(r.Tier).Observe(r.Duration.Seconds())
	if r.Bytes > 0 {
		t.bytes.WithLabelValues(r.Tier).Add(float64(r.Bytes))
	}
}

// RegisterTierUsage exports the live tables per tier (usage, read afresh
// on each scrape) and, when ageOut is set, the age-out pass's counters.
func RegisterTierUsage(reg prometheus.Registerer, usage func() []shalefs.TierUsage, ageOut func() engine.AgeOutStats) {
	reg.MustRegister(&tierCollector{usage: usage, ageOut: ageOut})
}

var (
	tierBytesDesc = prometheus.NewDesc("shale_tier_bytes", "Bytes of live tables per tier.", []string{"tier"}, nil)
	tierFilesDesc = prometheus.NewDesc("shale_tier_files", "Live tables per tier.", []string{"tier"}, nil)
	ageOutDesc    = prometheus.NewDesc("shale_tier_ageout_compactions_total",
		"Compactions the age-out pass started to move aged tables into the last (cold) level, by outcome: done, or refused (another compaction had the table, or it failed).",
		[]string{"outcome"}, nil)
	ageOutTablesDesc = prometheus.NewDesc("shale_tier_ageout_tables_total",
		"Tables the age-out pass wrote, by level: last (cold) or penultimate (hot).", []string{"level"}, nil)
)

type tierCollector struct {
	usage  func() []shalefs.TierUsage
	ageOut func() engine.AgeOutStats
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tierBytesDesc
	ch <- tierFilesDesc
	if c.ageOut != nil {
		ch <- ageOutDesc
		ch <- ageOutTablesDesc
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.usage() {
		ch <- prometheus.MustNewConstMetric(tierBytesDesc, prometheus.GaugeValue, float64(u.Bytes), u.Tier)
		ch <- prometheus.MustNewConstMetric(tierFilesDesc, prometheus.GaugeValue, float64(u.Files), u.Tier)
	}
	if c.ageOut == nil {
		return
	}
	st := c.ageOut()
	ch <- prometheus.MustNewConstMetric(ageOutDesc, prometheus.CounterValue, float64(st.Compactions-st.Refused), "done")
	ch <- prometheus.MustNewConstMetric(ageOutDesc, prometheus.CounterValue, float64(st.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(ageOutTablesDesc, prometheus.CounterValue, float64(st.Moved), "last")
	ch <- prometheus.MustNewConstMetric(ageOutTablesDesc, prometheus.CounterValue, float64(st.Kept), "penultimate")
}
