package engine

import (
	"fmt"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// NumLevels is RocksDB's default number of LSM levels.
const NumLevels = 7

// Stats are point-in-time database properties.
type Stats struct {
	EstimatedKeys          uint64
	LiveSSTBytes           uint64
	MemtableBytes          uint64
	SSTFiles               uint64
	FilesPerLevel          []uint64
	PendingCompactionBytes uint64
	RunningCompactions     uint64
	RunningFlushes         uint64
	BackgroundErrors       uint64
	// WriteStopped is 1 while RocksDB stops writes (too many L0 files,
	// memtables or pending compaction bytes); DelayedWriteRate is the rate
	// in bytes/s it slows them to, 0 when it does not.
	WriteStopped     uint64
	DelayedWriteRate uint64
}

// Stats reads the database's properties.
func (d *DB) Stats() (Stats, error) {
	if err := d.enter(); err != nil {
		return Stats{}, err
	}
	defer d.leave()
	prop := func(name string) uint64 {
		v, _ := d.db.GetIntProperty(name)
		return v
	}
	s := Stats{
		EstimatedKeys:          prop("rocksdb.estimate-num-keys"),
		LiveSSTBytes:           prop("rocksdb.live-sst-files-size"),
		MemtableBytes:          prop("rocksdb.cur-size-all-mem-tables"),
		PendingCompactionBytes: prop("rocksdb.estimate-pending-compaction-bytes"),
		RunningCompactions:     prop("rocksdb.num-running-compactions"),
		RunningFlushes:         prop("rocksdb.num-running-flushes"),
		BackgroundErrors:       prop("rocksdb.background-errors"),
		WriteStopped:           prop("rocksdb.is-write-stopped"),
		DelayedWriteRate:       prop("rocksdb.actual-delayed-write-rate"),
	}
	for l := 0; l < NumLevels; l++ {
		var n uint64
		fmt.Sscan(d.db.GetProperty(fmt.Sprintf("rocksdb.num-files-at-level%d", l)), &n)
		s.FilesPerLevel = append(s.FilesPerLevel, n)
		s.SSTFiles += n
	}
	return s, nil
}

// Statistics returns RocksDB's tickers and histograms (nil without
// Tuning.RocksDBHistograms), or nil after Close.
func (d *DB) Statistics() ([]rocksshim.Ticker, []rocksshim.Histogram) {
	if err := d.enter(); err != nil {
		return nil, nil
	}
	defer d.leave()
	return d.stats.Tickers(), d.stats.Histograms()
}
