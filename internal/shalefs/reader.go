package shalefs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// A reader is a read-only FS on a database that another process owns: what
// a secondary opens RocksDB on (design §5). It claims no epoch, seals
// nothing and writes nothing to the store but its lease. It sees the
// database as the next owner would, without sealing: per name the highest
// epoch's version that the last takeover admitted, minus trashed ones, and
// each log up to its last contiguous segment (folds included).
//
// Refresh brings that view up to date before each RocksDB catch-up. What a
// catch-up needs from the view (docs/secondary.md, "What a refresh
// guarantees"):
//
//   - every table the MANIFEST bytes it will read name: tables are listed
//     after the MANIFEST, since the primary uploads a table before it writes
//     the edit that names it. RocksDB's catch-up (7.8.3 and 9.11: its
//     ManifestTailer is a VersionEditHandlerPointInTime) takes a table it
//     cannot find for missing and freezes its version there until that
//     table is deleted again;
//   - the MANIFEST that CURRENT names, else the catch-up fails with TryAgain;
//   - a local copy of every WAL and of that MANIFEST, holding every byte
//     listed: the catch-up then reads nothing from the store, so a WAL the
//     primary deletes meanwhile cannot fail it halfway (after RocksDB applied
//     the MANIFEST but before it installed the new version). Logs grow in
//     place (same inode): RocksDB keeps reading a WAL or MANIFEST from where
//     it stopped.
//
// Refreshes are incremental: a log the view has is listed only after its
// last known object, CURRENT is read only when its etag changed, the owner
// record (one GET) says whether a takeover happened, and the trash is
// listed every ReaderTTL/3. A takeover, an expired lease or the first
// refresh lists everything.

// ErrReadOnly is the error of a write to a reader.
var ErrReadOnly = errors.New("read-only replica: writes go to the primary")

// ErrTakeoverInProgress: a new owner raised the owner record but has not
// recorded its takeover yet (it is sealing or waiting out the old owner's
// lease). What the old owner stored meanwhile may not be in the new
// owner's database (a log it created after the new owner's listing is
// never replayed), so the reader keeps its last view, which is all
// durable, until the new owner's opened record exists (issue 22, item 1).
var ErrTakeoverInProgress = errors.New("a takeover is in progress: the replica keeps its last view until the new primary has opened")

// errManifestGone: CURRENT names a MANIFEST the store no longer has; it
// rolled over again while the refresh ran, so refresh again.
var errManifestGone = errors.New("CURRENT names a MANIFEST that is gone from the store (it rolled over during the refresh)")

// readerState is what a reader keeps between refreshes (under refreshMu).
type readerState struct {
	full       bool          // the next refresh lists everything
	opened     *openedRecord // the last completed takeover's record (nil: none)
	ownerEpoch uint64        // _shale/owner when opened was read
	currentTag string        // etag of the CURRENT last read
	trashed    map[versionRef]bool
	trashAt    time.Time // when the last trash listing began
	fullAt     time.Time // when the last full refresh began
	// trashSoon: the MANIFEST grew lately, so files were probably
	// deleted: the next refreshes list the trash (a marker follows its
	// edit closely), and the view lets go of them early.
	trashSoon int
}

// readerFullEvery bounds how long a reader goes without listing
// everything: incremental refreshes skip log names with a trashed version
// (a deleted WAL stays in the store for the delete grace), and this is
// when it would see a new version of such a name all the same (only a
// deposed owner's log number reused by its successor makes one).
const readerFullEvery = 10 * time.Minute

// OpenReader opens a read-only view of the database in cfg.Store and
// prepares cfg.CacheDir (a directory of its own, never the primary's).
func OpenReader(ctx context.Context, cfg Config) (*FS, error) {
	cfg.defaults()
	f := &FS{cfg: cfg, store: cfg.Store, files: map[string]*file{}, fencedCh: make(chan struct{}), stop: make(chan struct{}), trashSeen: map[string]*trashEntry{}}
	f.cache = tableCache{budget: cfg.CacheBytes, tables: map[string]*cachedTable{}}
	f.readOnly = true
	if f.cfg.ReaderID == "" {
		f.cfg.ReaderID = defaultReaderID()
	}
	f.epoch = math.MaxUint64 // sees every epoch as its past
	var top []objstore.ObjectInfo
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		top, err = f.listDir(ctx, "", "open")
		return err
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
	}
	if err := recognize(top); err != nil {
		return nil, err
	}
	if len(top) == 0 {
		return nil, fmt.Errorf("%s holds no database yet: start its primary first", cfg.Store.URL())
	}
	if err := f.checkTiers(ctx, false); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	// The listing first, then the cache is made to agree with it (stale
	// local logs dropped), then the logs are fetched. During a takeover
	// there is no view to open on yet: wait for it to complete.
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		f.rs.full = true
		err := f.refresh(ctx, "open", false)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTakeoverInProgress) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (epoch %d has not opened): %w", err, f.rs.ownerEpoch, ctx.Err())
		case <-time.After(wait):
		}
	}
	if _, ok := f.files["CURRENT"]; !ok {
		return nil, fmt.Errorf("%s has no CURRENT yet (its primary has not finished creating it); retry", cfg.Store.URL())
	}
	if err := f.prepareCache(); err != nil {
		return nil, err
	}
	if err := f.writeCurrent(); err != nil {
		return nil, err
	}
	if err := f.bringLogsLocal(ctx, "open"); err != nil {
		return nil, err
	}
	return f, nil
}

// retiredFile is a table a reader's listing dropped, kept (and named in the
// reader's lease) for ReaderTTL: RocksDB reads it until its next catch-up,
// and a scan that started before that may read it a little longer.
type retiredFile struct {
	file  *file
	since time.Time
}

// ReadOnly reports whether this FS is a reader.
func (f *FS) ReadOnly() bool { return f.readOnly }

// Refresh lists the store again and brings the reader's view and the local
// copies of logs up to date. Call it before RocksDB's TryCatchUp, never
// concurrently with it.
func (f *FS) Refresh(ctx context.Context) error {
	return f.RefreshHinted(ctx, nil)
}

// RefreshHinted is Refresh guided by what the owner announced (tails.go):
// it fetches just the segments the hint names, and lists the store only
// for what a hint cannot say (new tables after a MANIFEST edit, the
// trash). When the hint falls short it refreshes as Refresh does.
func (f *FS) RefreshHinted(ctx context.Context, h *Hint) error {
	if !f.readOnly {
		return errors.New("refresh: not a reader")
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	if err := f.adoptPendingCold(ctx); err != nil {
		return err
	}
	if h != nil {
		err := f.refreshHinted(ctx, h)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errHintShort) {
			f.rs.full = true
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		err := f.refresh(ctx, "catchup", true)
		if err == nil || !errors.Is(err, errManifestGone) || attempt == 3 {
			if err != nil {
				f.rs.full = true // start from a clean listing next time
			}
			return err
		}
	}
}

// refresh is one pass of Refresh (refreshMu held); prefetch brings new
// logs into the local cache.
func (f *FS) refresh(ctx context.Context, activity string, prefetch bool) error {
	rs := &f.rs
	// A reader whose lease lapsed may have lost files to the deleter: it
	// trusts nothing it knew, and serves no read until RocksDB caught up.
	if !f.readerLeaseFresh() {
		f.lapsed.Store(true)
	}
	full := rs.full || !f.readerLeaseFresh() || time.Since(rs.fullAt) >= readerFullEvery
	// Which takeover's record admits log versions. The closing read of
	// the owner record (below) checks it again after the listings, so a
	// refresh that follows a confirmed one skips this read.
	last, changed := rs.opened, false
	readOpened := full || last == nil || rs.ownerEpoch != last.Epoch
	if readOpened {
		var err error
		if last, changed, err = f.readerOpened(ctx, activity); err != nil {
			return err
		}
		if last == nil || rs.ownerEpoch != last.Epoch {
			return f.takeoverInProgress(ctx)
		}
	}
	full = full || changed // a takeover sealed logs and may admit others
	start := time.Now()
	if err := f.listTrashIfDue(ctx, full, activity); err != nil {
		return err
	}
	trashed := rs.trashed
	f.mu.Lock()
	old := f.files
	f.mu.Unlock()

	// 1. The logs the view has, from their last known object on.
	logs := map[string]*file{}
	if !full {
		var names []string
		for name, of := range old {
			if of.kind == KindLog && !trashed[versionRef{name, of.epoch}] {
				names = append(names, name)
			}
		}
		tails := make([]*file, len(names))
		if err := parallel(ctx, len(names), openParallelism, func(ctx context.Context, i int) (err error) {
			tails[i], err = f.listTail(ctx, names[i], old[names[i]], activity)
			return err
		}); err != nil {
			return err
		}
		for i, st := range tails {
			logs[names[i]] = st
		}
	}

	// 2. The top level: tables, objects, new logs, CURRENT's etag.
	top, err := f.readerList(ctx, "", true, activity)
	if err != nil {
		return err
	}
	// A log name with a trashed version that the view does not have is a
	// deleted log waiting out its grace: not listed again until the next
	// full refresh.
	trashedNames := map[string]bool{}
	for r := range trashed {
		trashedNames[r.Name] = true
	}
	present := map[string]bool{}
	var newLogs []string
	currentTag, currentListed := "", false
	if err := f.refuseLegacyDirs(ctx, top, activity); err != nil {
		return err
	}
	for _, o := range top {
		if name, isDir := strings.CutSuffix(o.Key, "/"); isDir && KindOf(name) == KindLog {
			if f.cfg.SkipWALs && FileType(name) == "wal" {
				continue // RocksDB opens without them (a compaction worker)
			}
			present[name] = true
			if _, ok := logs[name]; !ok && (full || !trashedNames[name]) {
				newLogs = append(newLogs, name)
			}
		} else if o.Key == "CURRENT" {
			currentTag, currentListed = o.ETag, true
		}
	}
	for name := range logs {
		if !present[name] {
			delete(logs, name) // deleted from the store
		}
	}

	// 3. Logs new to the view.
	manifestAfterTop := false
	found := make([]*file, len(newLogs))
	if err := parallel(ctx, len(newLogs), openParallelism, func(ctx context.Context, i int) (err error) {
		found[i], err = f.listLog(ctx, newLogs[i], trashed, last, full, activity)
		return err
	}); err != nil {
		return err
	}
	for i, st := range found {
		if st != nil {
			logs[newLogs[i]] = st
			manifestAfterTop = manifestAfterTop || isManifest(newLogs[i])
		}
	}

	// 4. CURRENT, when it changed, and the MANIFEST it names.
	current, tag := f.current, rs.currentTag
	if currentListed && (full || current == nil || currentTag != rs.currentTag) {
		var b []byte
		var info objstore.ObjectInfo
		err := f.background().do(ctx, func(ctx context.Context) (err error) {
			b, info, err = f.get(ctx, "CURRENT", "CURRENT", activity)
			return err
		})
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read CURRENT: %w", err)
		default:
			current, tag = currentContent(b), info.ETag
		}
	}
	if m := manifestOf(current); m != "" && logs[m] == nil {
		// Created after the listing above (it rolled over meanwhile).
		st, err := f.listLog(ctx, m, trashed, last, full, activity)
		if err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("%s: %w", m, errManifestGone)
		}
		logs[m] = st
		manifestAfterTop = true
	}

	// 5. Tables: listed after every MANIFEST listing, so the view holds
	// every table the MANIFEST bytes RocksDB reads name.
	if manifestAfterTop {
		if top, err = f.readerList(ctx, "", true, activity); err != nil {
			return err
		}
	}
	files := map[string]*file{}
	for name, st := range logs {
		files[name] = st
	}
	for _, o := range top {
		name, e, ok := parseObjectKey(o.Key)
		if !ok || trashed[versionRef{name, e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: KindOf(name), epoch: e, size: o.Size}
		}
	}
	// Cold tables too, also listed after every MANIFEST listing.
	if err := f.listColdTables(ctx, files, trashed); err != nil {
		return err
	}
	if current != nil {
		files["CURRENT"] = &file{kind: KindCurrent, size: int64(len(current))}
	}

	// The closing read: the view is durable only if no newer owner had
	// raised the owner record when the listings ended. Then any later
	// owner lists the store after this read, so after every segment seen
	// here, and seals each log after them: all of it is in its database.
	// A segment listed while a new owner was taking over may be one the
	// old owner stored in a log created after that owner's listing (never
	// acknowledged, never replayed): not served, not even for a moment.
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		rs.ownerEpoch, err = f.ownerEpoch(ctx, activity)
		return err
	}); err != nil {
		return fmt.Errorf("read %s: %w", ownerKey, err)
	}
	if rs.ownerEpoch != last.Epoch {
		if !readOpened {
			// A newer owner since the last refresh: list everything
			// again under its record, if it has written one.
			rs.full = true
			return f.refresh(ctx, activity, prefetch)
		}
		return f.takeoverInProgress(ctx)
	}
	return f.install(ctx, old, files, nil, current, tag, full, start, false, activity, prefetch)
}

// takeoverInProgress keeps the reader's view (no new bytes are served)
// and renews its lease on that view, so that the owner's deleter spares
// its files while the takeover completes; the next refresh lists
// everything. It returns ErrTakeoverInProgress.
func (f *FS) takeoverInProgress(ctx context.Context) error {
	f.rs.full = true
	if len(f.files) > 0 {
		if err := f.publishLease(ctx); err != nil {
			return err
		}
	}
	return ErrTakeoverInProgress
}

// install makes files (with CURRENT's content current and etag tag) the
// view: versions the old view had keep their state and local copies, logs
// grow in place, logs new to it get their bytes in fresh as local copies
// (or lose stale ones, to be fetched), tables that left are retired, the
// lease is published, and with prefetch the logs RocksDB will read are
// brought local.
func (f *FS) install(ctx context.Context, old, files map[string]*file, fresh map[string][]byte, current []byte, tag string, full bool, start time.Time, manifestGrew bool, activity string, prefetch bool) error {
	rs := &f.rs
	for name, nf := range files {
		of := old[name]
		if isManifest(name) && (of == nil || of.epoch != nf.epoch || nf.size > of.size) {
			manifestGrew = true
		}
		switch {
		case of == nil && nf.kind == KindLog:
			if b, ok := fresh[name]; ok {
				if err := writeFileAtomic(f.localPath(name), b); err != nil {
					return err
				}
			} else {
				os.Remove(f.localPath(name)) // a stale copy: fetched again
			}
		case of == nil:
		case nf.kind == KindLog && of.epoch == nf.epoch:
			if nf != of {
				if err := f.extendLog(ctx, name, of, nf, activity); err != nil {
					return err
				}
			}
			files[name] = of
		case nf.kind == KindLog:
			// Another epoch's version of the name (rare: a log a deposed
			// owner created): the local copy is of the wrong one.
			os.Remove(f.localPath(name))
		case nf.kind == KindTable && of.epoch == nf.epoch:
			files[name] = of
		}
	}

	now := time.Now()
	f.mu.Lock()
	if f.retired == nil {
		f.retired = map[string]retiredFile{}
	}
	for name, of := range old {
		if _, ok := files[name]; !ok && of.kind == KindTable {
			f.retired[name] = retiredFile{file: of, since: now}
		}
	}
	for name, r := range f.retired {
		if _, live := files[name]; live || now.Sub(r.since) > f.cfg.ReaderTTL {
			delete(f.retired, name)
		}
	}
	f.files = files
	f.mu.Unlock()
	for name, of := range old {
		if of.kind == KindLog && files[name] == nil {
			// Gone from the store's view (flushed, trashed): RocksDB may
			// still hold it open, which unlinking does not disturb.
			os.Remove(f.localPath(name))
		}
	}
	if full {
		rs.fullAt = start
	}
	if manifestGrew && !full {
		rs.trashSoon = 2
	}
	rs.full = false
	rs.currentTag = tag
	if current != nil && !bytes.Equal(current, f.current) {
		f.current = current
		if err := f.writeCurrent(); err != nil {
			return err
		}
	}
	// Published before RocksDB catches up to the new view (and before the
	// new logs are fetched), so the owner never deletes a file it uses.
	if err := f.publishLease(ctx); err != nil {
		return err
	}
	if prefetch {
		return f.bringLogsLocal(ctx, activity)
	}
	return nil
}

// listTrashIfDue lists the trash markers when the view's knowledge of them
// is due: at a full refresh, every ReaderTTL/3, and just after the
// MANIFEST changed (files were probably deleted). Before the MANIFEST is
// listed: a marker is written after the edit that deleted its file, so
// the view never drops a table RocksDB has not read the deletion of.
// Between listings the view may keep a trashed file a little longer,
// which only delays its delete.
func (f *FS) listTrashIfDue(ctx context.Context, full bool, activity string) error {
	rs := &f.rs
	if !full && rs.trashed != nil && rs.trashSoon == 0 && time.Since(rs.trashAt) < f.cfg.ReaderTTL/3 {
		return nil
	}
	rs.trashSoon = max(rs.trashSoon-1, 0)
	start := time.Now()
	markers, err := f.readerList(ctx, trashPrefix, false, activity)
	if err != nil {
		return err
	}
	trashed := map[versionRef]bool{}
	for _, m := range markers {
		if name, e, ok := parseTrashKey(m.Key); ok {
			trashed[versionRef{name, e}] = true
		}
	}
	rs.trashed, rs.trashAt = trashed, start
	return nil
}

// readerOpened returns the record of the last completed takeover, and
// whether it changed since the last refresh. The owner record (one GET)
// says when there may be a new one: an owner raises it before it writes
// its record.
func (f *FS) readerOpened(ctx context.Context, activity string) (*openedRecord, bool, error) {
	rs := &f.rs
	var owner uint64
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		owner, err = f.ownerEpoch(ctx, activity)
		return err
	}); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", ownerKey, err)
	}
	if rs.opened != nil && owner == rs.ownerEpoch && rs.opened.Epoch == owner {
		return rs.opened, false, nil
	}
	objs, err := f.readerList(ctx, openedPrefix, false, activity)
	if err != nil {
		return nil, false, err
	}
	var highest uint64
	for _, o := range objs {
		if e, ok := parseEpochPart(strings.TrimPrefix(o.Key, openedPrefix)); ok {
			highest = max(highest, e)
		}
	}
	var rec *openedRecord
	switch {
	case highest == 0:
	case rs.opened != nil && rs.opened.Epoch == highest:
		rec = rs.opened
	default:
		var r openedRecord
		err := f.background().do(ctx, func(ctx context.Context) error {
			b, _, err := f.get(ctx, openedKey(highest), "", activity)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(b, &r); err != nil || r.Epoch != highest {
				return fmt.Errorf("%s is unreadable (%v)", openedKey(highest), err)
			}
			return nil
		})
		if err != nil {
			return nil, false, err
		}
		rec = &r
	}
	changed := (rec == nil) != (rs.opened == nil) || (rec != nil && rec.Epoch != rs.opened.Epoch)
	rs.opened, rs.ownerEpoch = rec, owner
	return rec, changed, nil
}

// readerList lists prefix (one level of it with dir), retrying failures.
func (f *FS) readerList(ctx context.Context, prefix string, dir bool, activity string) (out []objstore.ObjectInfo, err error) {
	err = f.background().do(ctx, func(ctx context.Context) error {
		if dir {
			out, err = f.listDir(ctx, prefix, activity)
		} else {
			out, err = f.list(ctx, prefix, activity)
		}
		return err
	})
	return out, err
}

// listTail lists the objects of a log version the view has after the last
// one it knows and returns the log they make (of itself when it did not
// grow). Listings return keys in order, and a fold sorts right after the
// last segment it covers, so every object that extends the log is there.
func (f *FS) listTail(ctx context.Context, name string, of *file, activity string) (*file, error) {
	of.mu.Lock()
	known := append([]segment(nil), of.segments...)
	size := of.size
	of.mu.Unlock()
	after := ""
	if len(known) > 0 {
		after = segmentObjectKey(name, of.epoch, known[len(known)-1])
	}
	objs, err := f.readerList(ctx, segmentPrefix(name, of.epoch), false, activity)
	if err != nil {
		return nil, err
	}
	segs := known
	for _, o := range objs {
		if o.Key <= after {
			continue
		}
		if _, _, first, last, ok := parseSegmentKey(o.Key); ok {
			segs = append(segs, segment{seq: first, last: last, size: o.Size})
		}
	}
	if len(segs) == len(known) {
		return of, nil
	}
	v := buildLogVersion(of.epoch, segs)
	if v.size <= size {
		return of, nil // nothing new it can reach (a seal, or a gap not filled yet)
	}
	return &file{kind: KindLog, epoch: of.epoch, size: v.size, segments: v.segments, nextSeq: v.lastSeq + 1}, nil
}

// segmentObjectKey is the key of one object of a log version.
func segmentObjectKey(name string, epoch uint64, s segment) string {
	if s.fold() {
		return foldKey(name, epoch, s.seq, s.last)
	}
	return segmentKey(name, epoch, s.seq)
}

// listLog finds the live version of a log name new to the view (nil if
// none): the highest admitted epoch's version with data, minus trashed and
// deleted ones, as a takeover would choose without sealing. byEpoch lists
// the name's epochs first and skips trashed versions unlisted (a full
// refresh meets every deleted log still in its grace); otherwise one
// listing reads every version.
func (f *FS) listLog(ctx context.Context, name string, trashed map[versionRef]bool, last *openedRecord, byEpoch bool, activity string) (*file, error) {
	var objs []objstore.ObjectInfo
	if byEpoch {
		dirs, err := f.readerList(ctx, name+"/", true, activity)
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			es, _ := strings.CutSuffix(strings.TrimPrefix(d.Key, name+"/"), "/")
			e, ok := parseEpochPart(es)
			if !ok || trashed[versionRef{name, e}] || !admitLogVersion(name, e, last) {
				continue
			}
			more, err := f.readerList(ctx, segmentPrefix(name, e), false, activity)
			if err != nil {
				return nil, err
			}
			objs = append(objs, more...)
		}
	} else {
		var err error
		if objs, err = f.readerList(ctx, name+"/", false, activity); err != nil {
			return nil, err
		}
	}
	versions := map[uint64][]segment{}
	for _, o := range objs {
		if n, e, first, lastSeq, ok := parseSegmentKey(o.Key); ok && n == name {
			versions[e] = append(versions[e], segment{seq: first, last: lastSeq, size: o.Size})
		}
	}
	var vs []logVersion
	for e, segs := range versions {
		if trashed[versionRef{name, e}] || !admitLogVersion(name, e, last) {
			continue
		}
		if v := buildLogVersion(e, segs); !v.headDeleted() {
			vs = append(vs, v)
		}
	}
	v, ok := chooseLogVersion(vs)
	if !ok {
		return nil, nil
	}
	return &file{kind: KindLog, epoch: v.epoch, size: v.size, segments: v.segments, nextSeq: v.lastSeq + 1}, nil
}

func isManifest(name string) bool { return strings.HasPrefix(name, "MANIFEST-") }

// manifestOf is the MANIFEST a CURRENT content names ("" if none).
func manifestOf(current []byte) string {
	m := strings.TrimSpace(string(current))
	if !isManifest(m) || strings.ContainsAny(m, "/\n") {
		return ""
	}
	return m
}

// bringLogsLocal fetches every WAL of the view, and the MANIFEST CURRENT
// names, that has no local copy yet, so that RocksDB's catch-up reads only
// local files.
func (f *FS) bringLogsLocal(ctx context.Context, activity string) error {
	m := manifestOf(f.current)
	f.mu.Lock()
	var names []string
	for name, st := range f.files {
		if st.kind == KindLog && (name == m || !isManifest(name)) {
			if _, err := os.Stat(f.localPath(name)); errors.Is(err, os.ErrNotExist) {
				names = append(names, name)
			}
		}
	}
	f.mu.Unlock()
	return parallel(ctx, len(names), openParallelism, func(ctx context.Context, i int) error {
		return f.Fetch(names[i], activity)
	})
}

// writeCurrent replaces the local CURRENT with the one last read.
func (f *FS) writeCurrent() error {
	if f.current == nil {
		return nil
	}
	return writeFileAtomic(f.localPath("CURRENT"), f.current)
}

// extendLog appends the bytes a log gained in the store (nf, a newer
// listing of the same version as of) to its local copy, in place, and
// updates of.
func (f *FS) extendLog(ctx context.Context, name string, of, nf *file, activity string) error {
	of.mu.Lock()
	defer of.mu.Unlock()
	if nf.size <= of.size {
		return nil // nothing new (a listing never shrinks a log)
	}
	path := f.localPath(name)
	fi, err := os.Stat(path)
	if err != nil {
		// Not fetched yet: the fetch will read everything there is.
		of.segments, of.size = nf.segments, nf.size
		return nil
	}
	if fi.Size() != of.size {
		return fmt.Errorf("local copy of %s is %d bytes, the reader had %d", name, fi.Size(), of.size)
	}
	// The objects of the new listing that hold bytes past of.size.
	var start, off int64
	var pieces []segment
	for _, s := range nf.segments {
		if off+s.size > of.size {
			if pieces == nil {
				start = off
			}
			pieces = append(pieces, s)
		}
		off += s.size
	}
	data, err := f.readSegments(ctx, name, nf.epoch, pieces, nf.size-start, activity)
	if errors.Is(err, objstore.ErrNotFound) {
		// The owner folded those segments and deleted them since the
		// listing: list the version again, its fold holds the same bytes.
		v, lerr := f.listVersion(ctx, name, nf.epoch)
		if lerr != nil {
			return lerr
		}
		if v.size < nf.size || !v.contiguous() {
			return fmt.Errorf("log %s (epoch %d) lost segments while being read (%d of %d bytes left): %w", name, nf.epoch, v.size, nf.size, err)
		}
		segs := trimSegments(v.segments, nf.size)
		start, off, pieces = 0, 0, nil
		for _, s := range segs {
			if off+s.size > of.size {
				if pieces == nil {
					start = off
				}
				pieces = append(pieces, s)
			}
			off += s.size
		}
		nf = &file{segments: segs, size: nf.size, epoch: nf.epoch}
		data, err = f.readSegments(ctx, name, nf.epoch, pieces, nf.size-start, activity)
	}
	if err != nil {
		return fmt.Errorf("read the new part of %s: %w", name, err)
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fh.Write(data[of.size-start:])
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("extend the local copy of %s: %w", name, err)
	}
	of.segments, of.size = nf.segments, nf.size
	return nil
}
