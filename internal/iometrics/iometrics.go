// Package iometrics counts the Shale FileSystem's object-store requests by
// operation, file type and activity (paper §4.4.3): the view that tells a
// slow WAL sync from a compaction saturating the store.
package iometrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shale-rocks/shale/internal/shalefs"
)

// Metrics are the object-store I/O series of one process.
type Metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	tiers    *tierReads
}

// New registers the series with reg.
func New(reg prometheus.Registerer) *Metrics {
	labels := []string{"op", "file_type", "activity"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_objstore_requests_total",
			Help: "Object-store requests by operation (put, get, list, delete), file type (sst, wal, manifest, other), activity, i.e. purpose (foreground_read, foreground_write, wal, flush, compaction, open, lease: ownership confirmation, trash: deferred deletes, fold: folding log segments, background) and result (ok, error).",
		}, append(labels, "result")),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_objstore_bytes_total",
			Help: "Bytes moved to (put) or from (get) the object store.",
		}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shale_objstore_request_duration_seconds",
			Help:    "Latency of object-store requests.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}, labels),
	}
	reg.MustRegister(m.requests, m.bytes, m.latency)
	m.tiers = newTierReads(reg)
	return m
}

// Observe records one request; it is shalefs.Config.Observe.
func (m *Metrics) Observe(r shalefs.Request) {
	result := "ok"
	if r.Err != nil {
		result = "error"
	}
	m.requests.WithLabelValues(r.Op, r.FileType, r.Activity, result).Inc()
	m.latency.WithLabelValues(r.Op, r.FileType, r.Activity).Observe(r.Duration.Seconds())
	if r.Bytes > 0 {
		m.bytes.WithLabelValues(r.Op, r.FileType, r.Activity).Add(float64(r.Bytes))
	}
	m.tiers.observe(r)
}
