package engine

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a database's RocksDB statistics (every ticker as a
// counter, every histogram as a summary when the database keeps them) and
// properties (gauges) to Prometheus, read afresh on each scrape.
type Collector struct {
	db         *DB
	tickers    []*prometheus.Desc
	histograms []*prometheus.Desc
	gauges     map[string]*prometheus.Desc
	levelFiles *prometheus.Desc
	groups     *prometheus.Desc
	grouped    *prometheus.Desc
}

// metricName turns "rocksdb.block.cache.miss" into "rocksdb_block_cache_miss".
func metricName(rocksName string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, rocksName)
}

// NewCollector returns a Prometheus collector for db.
func NewCollector(db *DB) *Collector {
	c := &Collector{db: db, gauges: map[string]*prometheus.Desc{}}
	tickers, histograms := db.Statistics()
	for _, t := range tickers {
		c.tickers = append(c.tickers, prometheus.NewDesc(metricName(t.Name)+"_total", "RocksDB ticker "+t.Name+".", nil, nil))
	}
	for _, h := range histograms {
		c.histograms = append(c.histograms, prometheus.NewDesc(metricName(h.Name), "RocksDB histogram "+h.Name+" (quantiles since open).", nil, nil))
	}
	for name, help := range map[string]string{
		"rocksdb_estimated_keys":           "Estimated number of keys (rocksdb.estimate-num-keys).",
		"rocksdb_live_sst_bytes":           "Bytes in live SST files (rocksdb.live-sst-files-size).",
		"rocksdb_memtable_bytes":           "Bytes in all memtables (rocksdb.cur-size-all-mem-tables).",
		"rocksdb_pending_compaction_bytes": "Estimated bytes compaction must rewrite (rocksdb.estimate-pending-compaction-bytes).",
		"rocksdb_running_compactions":      "Compactions running now.",
		"rocksdb_running_flushes":          "Flushes running now.",
		"rocksdb_background_errors":        "Background errors since open (rocksdb.background-errors).",
		"rocksdb_latest_sequence_number":   "Sequence number of the last applied write.",
		"rocksdb_write_stopped":            "1 while RocksDB stops writes (rocksdb.is-write-stopped: too many level-0 files, memtables or pending compaction bytes).",
		"rocksdb_delayed_write_rate":       "Bytes/s RocksDB slows writes to, 0 when it does not (rocksdb.actual-delayed-write-rate).",
	} {
		c.gauges[name] = prometheus.NewDesc(name, help, nil, nil)
	}
	c.levelFiles = prometheus.NewDesc("rocksdb_level_files", "SST files per LSM level.", []string{"level"}, nil)
	c.groups = prometheus.NewDesc("shale_write_groups_total", "Merged writes Shale's engine applied (one RocksDB write each; a durable one is one WAL sync), by sync.", []string{"sync"}, nil)
	c.grouped = prometheus.NewDesc("shale_write_group_members_total", "Writes carried by those groups, by sync: divided by shale_write_groups_total, the mean group size.", []string{"sync"}, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.tickers {
		ch <- d
	}
	for _, d := range c.histograms {
		ch <- d
	}
	for _, d := range c.gauges {
		ch <- d
	}
	ch <- c.levelFiles
	ch <- c.groups
	ch <- c.grouped
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	tickers, histograms := c.db.Statistics()
	if tickers == nil {
		return // closed
	}
	for i, t := range tickers {
		ch <- prometheus.MustNewConstMetric(c.tickers[i], prometheus.CounterValue, float64(t.Value))
	}
	for i, h := range histograms {
		ch <- prometheus.MustNewConstSummary(c.histograms[i], h.Count, h.Sum,
			map[float64]float64{0.5: h.P50, 0.95: h.P95, 0.99: h.P99, 1: h.Max})
	}
	s, err := c.db.Stats()
	if err != nil {
		return
	}
	for name, v := range map[string]uint64{
		"rocksdb_estimated_keys":           s.EstimatedKeys,
		"rocksdb_live_sst_bytes":           s.LiveSSTBytes,
		"rocksdb_memtable_bytes":           s.MemtableBytes,
		"rocksdb_pending_compaction_bytes": s.PendingCompactionBytes,
		"rocksdb_running_compactions":      s.RunningCompactions,
		"rocksdb_running_flushes":          s.RunningFlushes,
		"rocksdb_background_errors":        s.BackgroundErrors,
		"rocksdb_latest_sequence_number":   c.db.LatestSequence(),
		"rocksdb_write_stopped":            s.WriteStopped,
		"rocksdb_delayed_write_rate":       s.DelayedWriteRate,
	} {
		ch <- prometheus.MustNewConstMetric(c.gauges[name], prometheus.GaugeValue, float64(v))
	}
	for l, n := range s.FilesPerLevel {
		ch <- prometheus.MustNewConstMetric(c.levelFiles, prometheus.GaugeValue, float64(n), strconv.Itoa(l))
	}
	for _, g := range []struct {
		sync string
		c    *committer
	}{{"true", &c.db.durable}, {"false", &c.db.commit}} {
		ch <- prometheus.MustNewConstMetric(c.groups, prometheus.CounterValue, float64(g.c.groups.Load()), g.sync)
		ch <- prometheus.MustNewConstMetric(c.grouped, prometheus.CounterValue, float64(g.c.writes.Load()), g.sync)
	}
}
