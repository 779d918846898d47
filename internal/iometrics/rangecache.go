package iometrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shale-rocks/shale/internal/shalefs/cache"
)

// RegisterRangeCache exports the range cache of a file system: ranges of
// tables read from the store (--range-cache-size).
func RegisterRangeCache(reg prometheus.Registerer, stats func() cache.RangeStats) {
	g := func(name, help string, v func(s cache.RangeStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(stats())) })
	}
	c := func(name, help string, v func(s cache.RangeStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(stats())) })
	}
	reg.MustRegister(
		g("shale_range_cache_bytes", "Bytes of table ranges held in memory (never above shale_range_cache_budget_bytes).", func(s cache.RangeStats) int64 { return s.Used }),
		g("shale_range_cache_budget_bytes", "The range cache's budget (--range-cache-size).", func(s cache.RangeStats) int64 { return s.Budget }),
		c("shale_range_cache_hits_total", "Ranges of tables read from memory.", func(s cache.RangeStats) int64 { return s.Hits }),
		c("shale_range_cache_misses_total", "Ranges of tables fetched from the store.", func(s cache.RangeStats) int64 { return s.Misses }),
		c("shale_range_cache_gets_total", "Ranged GETs issued for the range cache (one per run of consecutive missing ranges).", func(s cache.RangeStats) int64 { return s.Gets }),
	)
}
