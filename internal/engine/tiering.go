package engine

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// Tiering (docs/tiering.md). RocksDB with leveled compaction marks
// last-level tables cold and, with preclude_last_level_data_seconds, keeps
// keys younger than ColdAfter out of the last level: a compaction into the
// last level writes old keys to cold tables there and recent keys to hot
// tables in the level above it (the penultimate level). Its own compactions
// reach the last level only when the penultimate level outgrows its size
// target, so in a database that is small or quiet old data would stay hot
// for good. The age-out pass below compacts penultimate-level tables that
// hold keys older than ColdAfter into the last level, a few at a time.

// ageOut is the age-out pass of one open primary. Every primary has one;
// it idles while ColdAfter is 0 (tiering off), and SetColdAfter changes
// ColdAfter while the database is open.
type ageOut struct {
	stop     chan struct{}
	done     chan struct{}
	changed  chan struct{} // coldAfter changed (buffered, one)
	stopOnce sync.Once
	setMu    sync.Mutex // one SetColdAfter at a time

	mu        sync.Mutex
	coldAfter time.Duration // 0: tiering off
	samples   []seqSample   // sequence number by time, oldest first
	stats     AgeOutStats
	// After a pass that moved nothing, the next passes only sample until
	// idleUntil (see ageOutBackoff).
	backoff   time.Duration
	idleUntil time.Time
}

// AgeOutStats count the age-out pass's work since open.
type AgeOutStats struct {
	Compactions uint64 // CompactFiles started
	Refused     uint64 // refused or failed (a table taken by another compaction, ...)
	Moved       uint64 // tables written to the last level (cold)
	Kept        uint64 // tables written back to the penultimate level (hot)
}

// seqSample: every key with a sequence number up to seq was written at or
// before at.
type seqSample struct {
	at  time.Time
	seq uint64
}

// ageOutTick is how often the pass looks: a quarter of ColdAfter, within
// [500ms, 5m]. A table becomes a candidate at most one tick after its
// oldest key turned ColdAfter old.
func ageOutTick(coldAfter time.Duration) time.Duration {
	return min(max(coldAfter/4, 500*time.Millisecond), 5*time.Minute)
}

// ageOutBatch bounds the compactions of one pass: aging data out is
// background work and must not crowd out RocksDB's own compactions.
const ageOutBatch = 4

// cutoffSeq is the highest sequence number known to be at least coldAfter
// old at now: that of the latest sample taken at or before now-coldAfter
// (false: no sample is that old yet, so nothing is known to be old).
func cutoffSeq(samples []seqSample, now time.Time, coldAfter time.Duration) (uint64, bool) {
	limit := now.Add(-coldAfter)
	var seq uint64
	ok := false
	for _, s := range samples {
		if s.at.After(limit) {
			break
		}
		seq, ok = s.seq, true
	}
	return seq, ok
}

// pruneSamples drops the samples cutoffSeq can no longer choose: all but
// the latest one at or before now-coldAfter.
func pruneSamples(samples []seqSample, now time.Time, coldAfter time.Duration) []seqSample {
	limit := now.Add(-coldAfter)
	i := 0
	for i+1 < len(samples) && !samples[i+1].at.After(limit) {
		i++
	}
	return samples[i:]
}

// pickAgeOut chooses the tables to compact into the last level: tables of
// the penultimate level (lastLevel-1) that hold at least one key known to
// be old (smallest sequence number up to cutoff; a zeroed sequence number
// is old by definition), that no compaction is using, and that were not
// written in the last minAge (a table this pass wrote keeps the keys that
// RocksDB judged recent: looking at it again at once would only rewrite
// it). Tables with the oldest keys go first; at most limit of them.
//
// Only the penultimate level: a compaction that starts there cannot
// overlap the penultimate-level output of a running compaction without
// sharing an input with it (CompactFiles then refuses), which 7.8.3's
// CompactFiles did not check by itself (fixed upstream in #12628, which
// 9.11 has). The restriction stays for another reason: tables above it
// reach it through RocksDB's own compactions, which the pass would
// otherwise compete with for L0-L4 tables (docs/tiering.md, "What RocksDB
// 9.11 changed").
func pickAgeOut(files []rocksshim.LiveFile, lastLevel int, cutoff uint64, now time.Time, minAge time.Duration, limit int) []string {
	var cands []rocksshim.LiveFile
	for _, f := range files {
		if lastLevel < 2 || f.Level != lastLevel-1 || f.BeingCompacted || f.SmallestSeqno > cutoff {
			continue
		}
		if !f.CreationTime.IsZero() && now.Sub(f.CreationTime) < minAge {
			continue
		}
		cands = append(cands, f)
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].SmallestSeqno != cands[j].SmallestSeqno {
			return cands[i].SmallestSeqno < cands[j].SmallestSeqno
		}
		return cands[i].Name < cands[j].Name
	})
	var names []string
	for _, f := range cands {
		if len(names) == limit {
			break
		}
		names = append(names, f.Name)
	}
	return names
}

// ageOutBackoff is how long the pass rests after one that compacted
// tables: not at all if some of it went to the last level, else twice as
// long as the last rest, from one tick up to coldAfter. RocksDB ages
// keys by (sequence number, time) samples stored in the tables, which can
// trail Shale's own samples: while the database is idle the last sample's
// time keeps moving forward, and a table flushed right after its writes
// has no sample after its newest key until a later compaction merges one
// in. Until then RocksDB keeps keys hot that Shale knows are old, and
// compacting the table again would only rewrite it.
func ageOutBackoff(prev, tick, coldAfter time.Duration, moved bool) time.Duration {
	if moved {
		return 0
	}
	return min(max(2*prev, tick), max(coldAfter, tick))
}

// KeepCompactionLocal tells a CompactionService to run a compaction
// locally: RocksDB 9.11, as 7.8.3, installs every output of a remote
// compaction in its output level (compaction_service_job.cc adds each
// result file to SubcompactionState::Current(), the output level's
// outputs; CompactionServiceOutputFile carries no level), so a compaction
// into the last level with per-key placement on (its recent keys go to the
// level above) must not run remotely; upstream fixed this in 10.1. numLevels counts levels (7 by
// default) and outputLevel is the compaction's output level.
func KeepCompactionLocal(outputLevel, numLevels int, coldAfter time.Duration) bool {
	return coldAfter > 0 && outputLevel == numLevels-1
}

func (d *DB) startAgeOut(coldAfter time.Duration) {
	a := &ageOut{coldAfter: coldAfter, stop: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{}, 1)}
	a.samples = []seqSample{{at: time.Now(), seq: d.db.GetLatestSequenceNumber()}}
	d.tier = a
	go d.ageOutLoop(a)
}

// stopAgeOut ends the pass, cancelling a compaction it is running (every
// manual compaction stops: the database is closing).
func (d *DB) stopAgeOut() {
	a := d.tier
	if a == nil {
		return
	}
	a.stopOnce.Do(func() {
		close(a.stop)
		d.mu.RLock()
		if !d.closed {
			d.db.DisableManualCompaction()
		}
		d.mu.RUnlock()
		<-a.done
	})
}

func (d *DB) ageOutLoop(a *ageOut) {
	defer close(a.done)
	for {
		a.mu.Lock()
		coldAfter := a.coldAfter
		a.mu.Unlock()
		if !d.ageOutRun(a, coldAfter) {
			return
		}
	}
}

// ageOutRun runs passes for one ColdAfter (none when it is 0) until it
// changes (true) or the pass stops (false).
func (d *DB) ageOutRun(a *ageOut, coldAfter time.Duration) bool {
	var tickC <-chan time.Time
	tick := ageOutTick(coldAfter)
	if coldAfter > 0 {
		t := time.NewTicker(tick)
		defer t.Stop()
		tickC = t.C
	}
	for {
		select {
		case <-a.stop:
			return false
		case <-a.changed:
			return true
		case <-tickC:
		}
		d.ageOutOnce(a, coldAfter, time.Now(), tick)
	}
}

// ageOutOnce samples the sequence number and compacts what pickAgeOut
// chooses, one table per CompactFiles (RocksDB adds the last-level
// tables it overlaps).
func (d *DB) ageOutOnce(a *ageOut, coldAfter time.Duration, now time.Time, minAge time.Duration) {
	if err := d.enter(); err != nil {
		return
	}
	defer d.leave()
	a.mu.Lock()
	a.samples = append(a.samples, seqSample{at: now, seq: d.db.GetLatestSequenceNumber()})
	a.samples = pruneSamples(a.samples, now, coldAfter)
	cutoff, ok := cutoffSeq(a.samples, now, coldAfter)
	resting := now.Before(a.idleUntil)
	a.mu.Unlock()
	if !ok || resting {
		return
	}
	last := rocksshim.NumLevels(d.opts) - 1
	names := pickAgeOut(rocksshim.LiveFiles(d.db), last, cutoff, now, minAge, ageOutBatch)
	if len(names) == 0 {
		return
	}
	moved := false
	for _, name := range names {
		select {
		case <-a.stop:
			return
		default:
		}
		// A table taken meanwhile by another compaction is refused; the
		// next pass looks again.
		res, err := rocksshim.CompactFiles(d.db, []string{name}, last)
		moved = moved || res.AtOutputLevel > 0
		a.mu.Lock()
		a.stats.Compactions++
		a.stats.Moved += uint64(res.AtOutputLevel)
		a.stats.Kept += uint64(res.Outputs - res.AtOutputLevel)
		if err != nil {
			a.stats.Refused++
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.backoff = ageOutBackoff(a.backoff, minAge, coldAfter, moved)
	a.idleUntil = now.Add(a.backoff)
	a.mu.Unlock()
}

// SetColdAfter changes ColdAfter of an open primary: RocksDB's tiering
// options (mutable since 9.x: SetOptions) and the age-out pass's. 0 turns
// tiering off: new last-level tables are hot again and no key is kept out
// of the last level; the tables already cold stay where they are.
// Turning it on places data written before by the samples from now on:
// it counts as old once now is coldAfter past. The FileSystem must have a
// cold tier for cold tables to go anywhere but the hot store (the caller
// checks).
func (d *DB) SetColdAfter(coldAfter time.Duration) error {
	if coldAfter < 0 {
		return fmt.Errorf("cold-after %s is negative: want 0 (off) or a duration of at least 1s", coldAfter)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	a := d.tier
	if a == nil {
		return errors.New("a secondary places no data: change cold-after on the primary")
	}
	a.setMu.Lock()
	defer a.setMu.Unlock()
	keys, values := rocksshim.TieringOptions(coldAfter)
	if err := d.db.SetOptions(keys, values); err != nil {
		return fmt.Errorf("set RocksDB's tiering options: %w", err)
	}
	now := time.Now()
	a.mu.Lock()
	if a.coldAfter == 0 {
		// Nothing sampled while off: what is in the database now was
		// written by now.
		a.samples = append(a.samples, seqSample{at: now, seq: d.db.GetLatestSequenceNumber()})
	}
	a.coldAfter = coldAfter
	a.backoff, a.idleUntil = 0, time.Time{}
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
	return nil
}

// ColdAfter is the current ColdAfter (0: tiering off or a secondary).
func (d *DB) ColdAfter() time.Duration {
	if d.tier == nil {
		return 0
	}
	d.tier.mu.Lock()
	defer d.tier.mu.Unlock()
	return d.tier.coldAfter
}

// AgeOutStats reports the age-out pass's work since open (zero without
// tiering).
func (d *DB) AgeOutStats() AgeOutStats {
	if d.tier == nil {
		return AgeOutStats{}
	}
	d.tier.mu.Lock()
	defer d.tier.mu.Unlock()
	return d.tier.stats
}

// LiveFiles lists the live SST files with their levels and temperatures.
func (d *DB) LiveFiles() []rocksshim.LiveFile {
	if err := d.enter(); err != nil {
		return nil
	}
	defer d.leave()
	return rocksshim.LiveFiles(d.db)
}
