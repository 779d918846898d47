package backup

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// ArchiveConfig configures the continuous archive of one database (RFC
// 0011 steps 18-23): `shale primary --archive-to`.
type ArchiveConfig struct {
	Source objstore.Store // the database
	To     Location
	Epoch  uint64 // the archiving owner's epoch (names its index objects)
	// Interval between passes when nothing wakes the archiver (250 ms).
	Interval time.Duration
	// Rate bounds the bytes copied per second (64 MiB/s).
	Rate int64
	// CompactAfter: the index objects that make a merge (512).
	CompactAfter int
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	Now          func() time.Time
}

// Archiver copies a database's log objects, claims, opened records and
// log trash markers into its backup location, from the store, as they
// appear.
type Archiver struct {
	cfg  ArchiveConfig
	src  objstore.Store
	dst  objstore.Store
	wake chan struct{}
	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex
	archived map[string]bool              // keys an index names, but log objects (next says)
	next     map[layout.VersionRef]uint64 // first slot the archive lacks
	done_    map[layout.VersionRef]bool   // versions whole in the archive
	gapped   map[layout.VersionRef]bool   // versions with a recorded gap
	pruned   map[layout.VersionRef]bool   // versions a prune took (step 23a)
	pass     uint64
	known    map[string]knownIndex // the archive's index objects this archiver read or wrote
	gaps     int
	objects  int64
	lastErr  error
	caughtUp time.Time
	lastStat time.Time
	stale    bool            // a pass copied something since the status was written
	lags     []time.Duration // for tests and benchmarks: recent lags

	lim       limiter
	lagHist   prometheus.Histogram
	gapsCtr   prometheus.Counter
	caughtUpG prometheus.Gauge
	objsCtr   prometheus.Counter
	bytesCt   prometheus.Counter
}

// knownIndex is an index object an archiver knows: its level, and for a
// pass's index (level 0) its contents, so that a merge reads nothing it
// wrote or read before (a merge of 512 objects read back from a starved
// store stopped the archive for ~50 s in the e2e step pitr).
type knownIndex struct {
	level int
	ix    *ArchiveIndex // nil above level 0 (merged objects are large)
}

// OpenArchiver reads what the archive holds (its indexes and gaps), checks
// the location is this database's (database.json), and records the
// archive's first start. Start runs it.
func OpenArchiver(ctx context.Context, cfg ArchiveConfig) (*Archiver, error) {
	if cfg.CompactAfter <= 0 {
		cfg.CompactAfter = compactAfter
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Archiver{cfg: cfg, src: cfg.Source, dst: cfg.To.Store, wake: make(chan struct{}, 1), done: make(chan struct{}),
		archived: map[string]bool{}, known: map[string]knownIndex{}, next: map[layout.VersionRef]uint64{}, done_: map[layout.VersionRef]bool{}, gapped: map[layout.VersionRef]bool{},
		lim: limiter{rate: float64(cfg.Rate)}}
	a.lagHist = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shale_backup_archive_lag_seconds",
		Help:    "From a log object stored in the database's store to its copy in the archive (RFC 0011 step 22).",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}})
	a.gapsCtr = prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_backup_archive_gaps_total",
		Help: "Log objects deleted from the store before the archive had them; the recoverable window restarts at the next base backup."})
	a.caughtUpG = prometheus.NewGauge(prometheus.GaugeOpts{Name: "shale_backup_archive_caught_up_timestamp_seconds",
		Help: "Every log object the store held at this time is archived (archive/status.json's caughtUpAt): the end of the point-in-time window; a stuck archive stops it moving."})
	a.objsCtr = prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_backup_archive_objects_total", Help: "Objects copied into the archive."})
	a.bytesCt = prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_backup_archive_bytes_total", Help: "Bytes copied into the archive."})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{a.lagHist, a.gapsCtr, a.objsCtr, a.bytesCt, a.caughtUpG} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register archive metrics: %w", err)
			}
		}
	}

	// Whose location this is: the same check as a backup's (step 5).
	identity, err := sourceIdentity(ctx, a.src)
	if err != nil {
		return nil, err
	}
	db := Database{Database: cfg.To.Database, Source: a.src.URL(), Identity: identity, CreatedAt: cfg.Now().UTC()}
	if err := putOnce(ctx, a.dst, DatabaseKey, Format(db), func(got []byte) error {
		have, err := Parse[Database](DatabaseKey, got)
		if err != nil {
			return err
		}
		return CheckIdentity(&have, cfg.To.Database, a.src.URL(), identity)
	}); err != nil {
		return nil, err
	}
	st := ArchiveStarted{StartedAt: cfg.Now().UTC()}
	if err := putOnce(ctx, a.dst, ArchiveStartedKey, Format(st), func([]byte) error { return nil }); err != nil {
		return nil, err
	}

	// The archive's state is the archive: what the indexes name.
	idxKeys, err := listIndexKeys(ctx, a.dst)
	if err != nil {
		return nil, err
	}
	idx, err := readIndexKeys(ctx, a.dst, idxKeys, 16)
	if err != nil {
		return nil, err
	}
	for i, k := range idxKeys {
		ki := knownIndex{level: idx[i].Level}
		if ki.level == 0 {
			ki.ix = &idx[i]
		}
		a.known[k] = ki
	}
	// Pruned versions (step 23a) are done: never copied again.
	pruned, err := readPruned(ctx, a.dst)
	if err != nil {
		return nil, err
	}
	for ref := range pruned {
		a.done_[ref] = true
	}
	a.pruned = pruned
	segs := map[layout.VersionRef][]protocol.Segment{}
	for _, ix := range idx {
		if ix.Epoch == cfg.Epoch {
			a.pass = max(a.pass, ix.Pass)
		}
		for _, o := range ix.Objects {
			if ref, ok := archivedRef(o.Key); ok && pruned[ref] {
				continue
			}
			name, e, first, last, ok := layout.ParseSegmentKey(o.Key)
			if !ok {
				a.archived[o.Key] = true
			} else {
				ref := layout.VersionRef{Name: name, Epoch: e}
				s := protocol.Segment{Seq: first, Size: o.Size}
				if last > first {
					s.Last = last
				}
				segs[ref] = append(segs[ref], s)
			}
		}
		for _, ref := range ix.Completed {
			a.done_[ref] = true
		}
	}
	for ref, ss := range segs {
		r := ArchiveStep(1, ss, false)
		a.next[ref] = r.Next
		if r.Done {
			a.done_[ref] = true
		}
	}
	gaps, err := ListGaps(ctx, a.dst)
	if err != nil {
		return nil, err
	}
	for _, g := range gaps {
		a.gapped[layout.VersionRef{Name: g.Log, Epoch: g.Epoch}] = true
	}
	a.gaps = len(gaps)
	return a, nil
}

// minPassGap spaces passes a wake-up starts: under a steady write load
// the owner wakes the archiver at every sync, and each pass costs a few
// listings and, when it copied something, an index object.
const minPassGap = 100 * time.Millisecond

// statusEvery spaces the writes of archive/status.json while passes copy.
const statusEvery = time.Second

// compactAfter is how many index objects the archive may hold before an
// archiver merges them into one (a restore and an archiver's start read
// them all).
const compactAfter = 512

// Start runs passes until Stop: after every wake-up (at most every
// minPassGap) and at least every Interval.
func (a *Archiver) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go func() {
		defer close(a.done)
		t := time.NewTicker(a.cfg.Interval)
		defer t.Stop()
		var merging sync.WaitGroup
		defer merging.Wait()
		merged := make(chan struct{}, 1)
		merged <- struct{}{} // a merge may start
		for {
			began := time.Now()
			if err := a.Pass(ctx); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("archive pass", "err", err)
			}
			if a.indexesWritten() >= a.cfg.CompactAfter {
				select {
				case <-merged:
					// Beside the passes, not between them: a merge reads
					// and rewrites every index entry, which takes seconds
					// once the archive is large, and a pass waiting for it
					// lets the folding overtake the archive (the segments
					// it folds are then archived only as one fold, which
					// a time target cannot cut).
					merging.Add(1)
					go func() {
						defer merging.Done()
						defer func() { merged <- struct{}{} }()
						if err := a.mergeIndexes(ctx, false); err != nil && ctx.Err() == nil {
							a.cfg.Logger.Warn("merge the archive's index objects", "err", err)
						}
					}()
				default: // one is running
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-a.wake:
			case <-t.C:
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(began.Add(minPassGap))):
			}
		}
	}()
}

// indexesWritten counts the pass indexes (level 0) this archiver knows
// in the archive: the next merge's work.
func (a *Archiver) indexesWritten() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, k := range a.known {
		if k.level == 0 {
			n++
		}
	}
	return n
}

// CompactIndexes merges every index object of the archive into one, under
// this archiver's epoch, and then deletes the ones it merged. An entry is
// in a merged object before its own is deleted, so a crash (or another
// archiver merging at the same time) leaves entries named twice at worst,
// which readers take once.
func (a *Archiver) CompactIndexes(ctx context.Context) error {
	return a.mergeIndexes(ctx, true)
}

// MergeIndexes is the merge an archiver runs beside its passes once it
// wrote CompactAfter pass indexes (Start runs it; exported for tests).
func (a *Archiver) MergeIndexes(ctx context.Context) error {
	return a.mergeIndexes(ctx, false)
}

// mergeReads bounds the index objects a merge reads at a time: a merge
// runs beside the passes and must not starve them of the store.
const mergeReads = 2

// mergeIndexes merges the pass indexes (level 0) into one object of the
// next level, from memory: it reads only the index objects it does not
// know (another archiver's: a deposed owner's, until it stops). The merged
// objects are merged in turn, reading them, once there are CompactAfter of
// them (all: every object).
func (a *Archiver) mergeIndexes(ctx context.Context, all bool) error {
	a.mu.Lock()
	before := slices.Collect(maps.Keys(a.known))
	a.mu.Unlock()
	keys, err := listIndexKeys(ctx, a.dst)
	if err != nil {
		return err
	}
	listed := make(map[string]bool, len(keys))
	for _, k := range keys {
		listed[k] = true
	}
	have := map[string]knownIndex{}
	var unknown []string
	a.mu.Lock()
	for _, k := range before {
		if !listed[k] {
			delete(a.known, k) // merged by another archiver
		}
	}
	for _, k := range keys {
		if ki, ok := a.known[k]; ok {
			have[k] = ki
		} else {
			unknown = append(unknown, k)
		}
	}
	a.mu.Unlock()
	if len(unknown) > 0 {
		idx, err := readIndexKeys(ctx, a.dst, unknown, mergeReads)
		if err != nil {
			return err
		}
		a.mu.Lock()
		for i, k := range unknown {
			ki := knownIndex{level: idx[i].Level}
			if ki.level == 0 {
				ki.ix = &idx[i]
			}
			a.known[k] = ki
			have[k] = knownIndex{level: idx[i].Level, ix: &idx[i]}
		}
		a.mu.Unlock()
	}
	var take []string
	merged := 0
	for _, k := range keys {
		if have[k].level > 0 {
			merged++
		}
	}
	all = all || merged >= a.cfg.CompactAfter
	level := 0
	for _, k := range keys {
		if all || have[k].level == 0 {
			take = append(take, k)
			level = max(level, have[k].level)
		}
	}
	if len(take) < 2 {
		return nil
	}
	// Merged objects are read again only when merged in turn.
	var toRead []string
	for _, k := range take {
		if have[k].ix == nil {
			toRead = append(toRead, k)
		}
	}
	if len(toRead) > 0 {
		idx, err := readIndexKeys(ctx, a.dst, toRead, mergeReads)
		if err != nil {
			return err
		}
		for i, k := range toRead {
			have[k] = knownIndex{level: idx[i].Level, ix: &idx[i]}
		}
	}
	// Entries of pruned versions leave the indexes here (step 23a); the
	// versions stay Completed, so no archiver copies them again.
	pruned, err := readPruned(ctx, a.dst)
	if err != nil {
		return err
	}
	out := ArchiveIndex{Epoch: a.cfg.Epoch, Level: level + 1}
	seen := map[string]int{}
	done := map[layout.VersionRef]bool{}
	for _, k := range take {
		ix := have[k].ix
		if ix.ListedAt.After(out.ListedAt) {
			out.ListedAt = ix.ListedAt
		}
		for _, o := range ix.Objects {
			if ref, ok := archivedRef(o.Key); ok && pruned[ref] {
				continue
			}
			if i, ok := seen[o.Key]; ok {
				if o.StoredAt.Before(out.Objects[i].StoredAt) {
					out.Objects[i] = o
				}
				continue
			}
			seen[o.Key] = len(out.Objects)
			out.Objects = append(out.Objects, o)
		}
		for _, r := range ix.Completed {
			if !done[r] {
				done[r] = true
				out.Completed = append(out.Completed, r)
			}
		}
	}
	slices.SortFunc(out.Objects, func(x, y IndexEntry) int { return strings.Compare(x.Key, y.Key) })
	a.mu.Lock()
	a.pass++
	out.Pass = a.pass
	a.mu.Unlock()
	b := Format(out)
	key := ArchiveIndexKey(out.Epoch, out.Pass)
	if _, err := a.dst.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		return fmt.Errorf("write the merged archive index: %w", err)
	}
	a.mu.Lock()
	a.known[key] = knownIndex{level: out.Level}
	a.mu.Unlock()
	if err := a.dst.DeleteMany(ctx, take); err != nil {
		return fmt.Errorf("delete merged archive indexes: %w", err)
	}
	a.mu.Lock()
	// Passes may have written more while this merged (they are left for
	// the next merge).
	for _, k := range take {
		delete(a.known, k)
	}
	a.mu.Unlock()
	return nil
}

// Archived says whether the archive has every slot up to through of a log
// version (an index names them, or the version is finished): the owner
// keeps a fold's segments until then (RFC 0011 step 22a).
func (a *Archiver) Archived(name string, epoch, through uint64) bool {
	ref := layout.VersionRef{Name: name, Epoch: epoch}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done_[ref] || a.gapped[ref] || a.next[ref] > through
}

// Wake asks for a pass soon (the owner stored something).
func (a *Archiver) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Stop ends the archiver (a pass under way is cancelled: what it copied
// and did not index is copied again by the next archiver).
func (a *Archiver) Stop() {
	if a.stop != nil {
		a.stop()
		<-a.done
	}
}

// ArchiverStatus is what an archiver reports.
type ArchiverStatus struct {
	Objects    int64
	Gaps       int
	CaughtUpAt time.Time
	LastError  error
}

// Status reports the archiver's progress.
func (a *Archiver) Status() ArchiverStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return ArchiverStatus{Objects: a.objects, Gaps: a.gaps, CaughtUpAt: a.caughtUp, LastError: a.lastErr}
}

// Lags returns the lag of every object archived so far (the last 1<<20).
func (a *Archiver) Lags() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.lags)
}

// copyJob is one object a pass copies.
type copyJob struct {
	info objstore.ObjectInfo // in the source (a seal: Size 0)
	seal bool
}

// Pass lists the source once and copies what the archive lacks (RFC 0011
// steps 18-21). Exported for tests, which drive passes by hand.
func (a *Archiver) Pass(ctx context.Context) (err error) {
	defer func() {
		a.mu.Lock()
		a.lastErr = err
		a.mu.Unlock()
	}()
	listedAt := a.cfg.Now().UTC()
	var jobs []copyJob
	// Trash markers of logs, listed before the logs: a version marked
	// here and listed with its segment 1 below is listed whole.
	trashed := map[layout.VersionRef]bool{}
	err = a.src.List(ctx, layout.TrashPrefix, func(o objstore.ObjectInfo) error {
		name, e, ok := layout.ParseTrashKey(o.Key)
		if !ok || layout.KindOf(name) != layout.KindLog {
			return nil
		}
		trashed[layout.VersionRef{Name: name, Epoch: e}] = true
		if !a.isArchived(o.Key) {
			jobs = append(jobs, copyJob{info: o})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", layout.TrashPrefix, err)
	}
	for _, p := range []string{layout.EpochPrefix, layout.OpenedPrefix, layout.ReleasedPrefix} {
		err := a.src.List(ctx, p, func(o objstore.ObjectInfo) error {
			if !a.isArchived(o.Key) {
				jobs = append(jobs, copyJob{info: o})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list %s: %w", p, err)
		}
	}
	names := map[string]bool{}
	err = a.src.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
		if name, ok := strings.CutSuffix(o.Key, "/"); ok && layout.KindOf(name) == layout.KindLog {
			names[name] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", a.src.URL(), err)
	}
	a.mu.Lock()
	for ref := range a.next {
		if !a.done_[ref] && !a.gapped[ref] {
			names[ref.Name] = true // tracked: a version gone whole is a gap
		}
	}
	a.mu.Unlock()
	var completed []layout.VersionRef
	var gaps []Gap
	nexts := map[layout.VersionRef]uint64{} // applied once the copies are indexed
	copiesOf := map[layout.VersionRef][]string{}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		versions := map[uint64][]objstore.ObjectInfo{}
		err := a.src.List(ctx, layout.LogPrefix(name), func(o objstore.ObjectInfo) error {
			if n, e, _, _, ok := layout.ParseSegmentKey(o.Key); ok && n == name {
				versions[e] = append(versions[e], o)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list %s: %w", layout.LogPrefix(name), err)
		}
		a.mu.Lock()
		for ref := range a.next {
			if ref.Name == name {
				if _, ok := versions[ref.Epoch]; !ok {
					versions[ref.Epoch] = nil
				}
			}
		}
		a.mu.Unlock()
		for e, objs := range versions {
			ref := layout.VersionRef{Name: name, Epoch: e}
			a.mu.Lock()
			skip := a.done_[ref] || a.gapped[ref]
			next := max(a.next[ref], 1)
			a.mu.Unlock()
			if skip {
				continue
			}
			segs := make([]protocol.Segment, 0, len(objs))
			byKey := map[string]objstore.ObjectInfo{}
			for _, o := range objs {
				_, _, first, last, _ := layout.ParseSegmentKey(o.Key)
				s := protocol.Segment{Seq: first, Size: o.Size}
				if last > first {
					s.Last = last
				}
				segs = append(segs, s)
				byKey[o.Key] = o
			}
			r := ArchiveStep(next, segs, trashed[ref])
			for _, s := range r.Copy {
				key := layout.SegmentKey(name, e, s.Seq)
				if s.Fold() {
					key = layout.FoldKey(name, e, s.Seq, s.Last)
				}
				o := byKey[key]
				jobs = append(jobs, copyJob{info: o, seal: s.Size == 0 && !s.Fold()})
				copiesOf[ref] = append(copiesOf[ref], key)
			}
			nexts[ref] = r.Next
			if r.Done {
				completed = append(completed, ref)
			}
			if r.Gap {
				gaps = append(gaps, Gap{Log: name, Epoch: e, Slot: r.Next, DetectedAt: a.cfg.Now().UTC(), Reason: gapReason(objs, trashed[ref])})
			}
		}
	}

	// Copy, then index what was copied (an index never names a missing
	// object), then record gaps and status.
	var mu sync.Mutex
	var entries []IndexEntry
	byKey := map[string]copyJob{}
	keys := make([]string, 0, len(jobs))
	for _, j := range jobs {
		if _, dup := byKey[j.info.Key]; !dup {
			keys = append(keys, j.info.Key)
		}
		byKey[j.info.Key] = j
	}
	copyErr := parallel(ctx, 8, keys, func(ctx context.Context, key string) error {
		j := byKey[key]
		if err := a.lim.wait(ctx, j.info.Size); err != nil {
			return err
		}
		if err := a.copyOne(ctx, j); err != nil {
			return err
		}
		now := a.cfg.Now()
		lag := now.Sub(j.info.ModTime)
		a.lagHist.Observe(lag.Seconds())
		a.objsCtr.Inc()
		a.bytesCt.Add(float64(j.info.Size))
		mu.Lock()
		entries = append(entries, IndexEntry{Key: key, Size: j.info.Size, StoredAt: j.info.ModTime.UTC()})
		mu.Unlock()
		a.mu.Lock()
		if len(a.lags) < 1<<20 {
			a.lags = append(a.lags, lag)
		}
		a.mu.Unlock()
		return nil
	})
	if copyErr != nil {
		completed = nil // finished only if everything listed was copied
	}
	if len(entries) > 0 || len(completed) > 0 {
		slices.SortFunc(entries, func(x, y IndexEntry) int { return strings.Compare(x.Key, y.Key) })
		a.mu.Lock()
		a.pass++
		ix := ArchiveIndex{Epoch: a.cfg.Epoch, Pass: a.pass, ListedAt: listedAt, Objects: entries, Completed: completed}
		a.mu.Unlock()
		b := Format(ix)
		if _, err := a.dst.Put(ctx, ArchiveIndexKey(ix.Epoch, ix.Pass), bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			return fmt.Errorf("write the archive index: %w", err)
		}
		a.mu.Lock()
		a.known[ArchiveIndexKey(ix.Epoch, ix.Pass)] = knownIndex{ix: &ix}
		for _, e := range entries {
			// Log objects are tracked by the next slot per version
			// (a.next), not by key: a long-lived primary stores millions.
			if _, _, _, _, isLog := layout.ParseSegmentKey(e.Key); !isLog {
				a.archived[e.Key] = true
			}
		}
		for _, ref := range completed {
			a.done_[ref] = true
		}
		a.objects += int64(len(entries))
		a.mu.Unlock()
	}
	// A version goes on from its new next slot once every copy of it in
	// this pass is indexed (after a failed copy, the others stay done).
	indexed := map[string]bool{}
	for _, e := range entries {
		indexed[e.Key] = true
	}
	a.mu.Lock()
	for ref, n := range nexts {
		ok := true
		for _, k := range copiesOf[ref] {
			ok = ok && indexed[k]
		}
		if ok {
			a.next[ref] = n
		}
	}
	a.mu.Unlock()
	for _, g := range gaps {
		b := Format(g)
		if _, err := a.dst.Put(ctx, GapKey(g), bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			return fmt.Errorf("record an archive gap: %w", err)
		}
		a.cfg.Logger.Error("archive gap: log objects were deleted before the archive had them; point-in-time restores need a base backup taken after now",
			"log", g.Log, "epoch", g.Epoch, "slot", g.Slot, "reason", g.Reason)
		a.gapsCtr.Inc()
		a.mu.Lock()
		a.gapped[layout.VersionRef{Name: g.Log, Epoch: g.Epoch}] = true
		a.gaps++
		a.mu.Unlock()
	}
	if copyErr != nil {
		return copyErr
	}
	a.mu.Lock()
	a.caughtUp = listedAt
	a.caughtUpG.Set(float64(listedAt.UnixNano()) / 1e9)
	// At most once a second while passes copy (under load a pass runs
	// every 100 ms: the status was half of the archive's PUTs), at once
	// for a gap, and every 5 s when idle.
	a.stale = a.stale || len(entries) > 0
	since := a.cfg.Now().Sub(a.lastStat)
	due := len(gaps) > 0 || since >= 5*time.Second || a.stale && since >= statusEvery
	st := ArchiveStatus{CaughtUpAt: listedAt, Epoch: a.cfg.Epoch, Objects: a.objects, Gaps: a.gaps}
	a.mu.Unlock()
	if due {
		b := Format(st)
		if _, err := a.dst.Put(ctx, ArchiveStatusKey, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
			return fmt.Errorf("write the archive status: %w", err)
		}
		a.mu.Lock()
		a.lastStat, a.stale = a.cfg.Now(), false
		a.mu.Unlock()
	}
	return nil
}

func gapReason(objs []objstore.ObjectInfo, trashed bool) string {
	switch {
	case len(objs) == 0:
		return "the log version was deleted before the archive had all of it"
	case trashed:
		return "the log version is being deleted and lacks a segment the archive does not have"
	default:
		return "the log version's first segment was deleted before the archive had it"
	}
}

func (a *Archiver) isArchived(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.archived[key] {
		return true
	}
	// A pruned version's trash marker, still in the source (step 23a).
	ref, ok := archivedRef(key)
	return ok && a.pruned[ref]
}

// copyOne copies one source object into the archive under the same key
// (seals are empty: written, not copied).
func (a *Archiver) copyOne(ctx context.Context, j copyJob) error {
	dst := ArchivedKey(j.info.Key)
	if j.seal {
		_, err := a.dst.Put(ctx, dst, bytes.NewReader(nil), 0, objstore.PutOptions{})
		return err
	}
	if !a.cfg.To.Stream && objstore.CopiesServerSide(a.src, a.dst) {
		_, _, err := objstore.CopyAcross(ctx, a.src, j.info.Key, a.dst, dst, objstore.PutOptions{})
		if err != nil {
			return fmt.Errorf("archive %s: %w", j.info.Key, err)
		}
		return nil
	}
	r, info, err := a.src.Get(ctx, j.info.Key, 0, -1)
	if err != nil {
		return fmt.Errorf("archive %s: %w", j.info.Key, err)
	}
	defer r.Close()
	if _, err := a.dst.Put(ctx, dst, r, info.Size, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("archive %s: %w", j.info.Key, err)
	}
	return nil
}

// readIndexes reads every index object of an archive.
func readIndexes(ctx context.Context, s objstore.Store) ([]ArchiveIndex, error) {
	keys, err := listIndexKeys(ctx, s)
	if err != nil {
		return nil, err
	}
	return readIndexKeys(ctx, s, keys, 16)
}

func listIndexKeys(ctx context.Context, s objstore.Store) ([]string, error) {
	var keys []string
	if err := s.List(ctx, ArchiveIndexPrefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", ArchiveIndexPrefix, err)
	}
	return keys, nil
}

// readIndexKeys reads index objects, at most reads at a time.
func readIndexKeys(ctx context.Context, s objstore.Store, keys []string, reads int) ([]ArchiveIndex, error) {
	out := make([]ArchiveIndex, len(keys))
	at := make(map[string]int, len(keys))
	for i, k := range keys {
		at[k] = i
	}
	err := parallel(ctx, reads, keys, func(ctx context.Context, key string) error {
		b, err := get(ctx, s, key)
		if err != nil {
			return err
		}
		ix, err := Parse[ArchiveIndex](key, b)
		if err != nil {
			return err
		}
		out[at[key]] = ix
		return nil
	})
	return out, err
}

// ListGaps reads the archive's recorded gaps, oldest first.
func ListGaps(ctx context.Context, s objstore.Store) ([]Gap, error) {
	var out []Gap
	var keys []string
	if err := s.List(ctx, ArchiveGapsPrefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", ArchiveGapsPrefix, err)
	}
	for _, k := range keys {
		b, err := get(ctx, s, k)
		if err != nil {
			return nil, err
		}
		g, err := Parse[Gap](k, b)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// limiter bounds a copy rate: each copy of n bytes waits until the bytes
// before it, at rate bytes/s, are due (with one second of burst).
type limiter struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (l *limiter) wait(ctx context.Context, n int64) error {
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now.Add(-time.Second)) {
		l.next = now.Add(-time.Second)
	}
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	d := l.next.Sub(now)
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
