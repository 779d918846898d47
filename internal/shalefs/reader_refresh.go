package shalefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Refresh lists the store again and brings the reader's view and the local
// copies of logs up to date. Call it before RocksDB's TryCatchUp, never
// concurrently with it.
func (f *Reader) Refresh(ctx context.Context) error {
	return f.RefreshHinted(ctx, nil)
}

// RefreshHinted is Refresh guided by what the owner announced (tails.go):
// it fetches just the segments the hint names, and lists the store only
// for what a hint cannot say (new tables after a MANIFEST edit, the
// trash). When the hint falls short it refreshes as Refresh does.
func (f *Reader) RefreshHinted(ctx context.Context, h *Hint) error {
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
		err := f.refresh(ctx, ActCatchup, true)
		if err == nil || !errors.Is(err, errManifestGone) || attempt == 3 {
			if err != nil {
				f.rs.full = true // start from a clean listing next time
			}
			return err
		}
	}
}

// refresh is one pass of Refresh (refreshMu held); prefetch brings new
// logs into the local cache. Its steps, in the order of their store
// requests (docs/rfcs/0007-reader-leases.md, step 2): the opened record
// when needed, the trash when due, then
//
//  1. the tails of the logs the view has,
//  2. the top level,
//  3. the logs new to the view,
//  4. CURRENT and the MANIFEST it names,
//  5. the tables, after every MANIFEST listing,
//
// and the closing read of the owner record, before the new view is
// installed.
func (f *Reader) refresh(ctx context.Context, activity Activity, prefetch bool) error {
	p, err := f.beginRefresh(ctx, activity)
	if err != nil {
		return err
	}
	if err := f.listTrashIfDue(ctx, p.full, activity); err != nil {
		return err
	}
	p.trashed = f.rs.trashed
	f.mu.Lock()
	p.old = f.files
	f.mu.Unlock()
	if err := f.listKnownLogTails(ctx, p); err != nil {
		return err
	}
	if err := f.listTopLevel(ctx, p); err != nil {
		return err
	}
	if err := f.listNewLogs(ctx, p); err != nil {
		return err
	}
	if err := f.readCurrentAndManifest(ctx, p); err != nil {
		return err
	}
	files, err := f.listTablesAfterManifest(ctx, p)
	if err != nil {
		return err
	}
	if err := f.readOwnerAfterListings(ctx, p); err != nil {
		return err
	}
	if f.rs.ownerEpoch != p.last.Epoch {
		if !p.readOpened {
			// A newer owner since the last refresh: list everything
			// again under its record, if it has written one.
			f.rs.full = true
			return f.refresh(ctx, activity, prefetch)
		}
		return f.takeoverInProgress(ctx)
	}
	return f.installView(ctx, viewUpdate{
		old: p.old, files: files, current: p.current, currentTag: p.tag,
		full: p.full, start: p.start, activity: activity, prefetch: prefetch,
	})
}

// refreshPass is what one pass of refresh learns, step by step.
type refreshPass struct {
	activity   Activity
	full       bool                 // list everything
	readOpened bool                 // the opened record was read in this pass
	last       *layout.OpenedRecord // the takeover whose record admits log versions
	start      time.Time            // when the listings began
	trashed    map[layout.VersionRef]bool
	old        map[string]*file // the view before this pass

	logs             map[string]*file // the logs of the new view
	top              []objstore.ObjectInfo
	newLogs          []string // log names new to the view
	currentTag       string   // CURRENT's etag in the top-level listing
	currentListed    bool
	manifestAfterTop bool // a MANIFEST listed after the top level

	current []byte // CURRENT's content
	tag     string // and its etag
}

// beginRefresh decides whether the pass lists everything and reads which
// takeover's record admits log versions. It returns the reader's
// takeoverInProgress error when the owner record names a takeover that
// has not completed.
func (f *Reader) beginRefresh(ctx context.Context, activity Activity) (*refreshPass, error) {
	rs := &f.rs
	// A reader whose lease lapsed may have lost files to the deleter: it
	// trusts nothing it knew, and serves no read until RocksDB caught up.
	if !f.readerLeaseFresh() {
		f.lapsed.Store(true)
	}
	p := &refreshPass{activity: activity}
	p.full = rs.full || !f.readerLeaseFresh() || time.Since(rs.fullAt) >= readerFullEvery
	// Which takeover's record admits log versions. The closing read of
	// the owner record (readOwnerAfterListings) checks it again after the
	// listings, so a refresh that follows a confirmed one skips this read.
	last, changed := rs.opened, false
	p.readOpened = p.full || last == nil || rs.ownerEpoch != last.Epoch
	if p.readOpened {
		var err error
		if last, changed, err = f.readerOpened(ctx, activity); err != nil {
			return nil, err
		}
		if last == nil || rs.ownerEpoch != last.Epoch {
			return nil, f.takeoverInProgress(ctx)
		}
	}
	p.last = last
	p.full = p.full || changed // a takeover sealed logs and may admit others
	p.start = time.Now()
	return p, nil
}

// listKnownLogTails is step 1: the logs the view has, from their last
// known object on (none at a full refresh: they are all listed anew).
func (f *Reader) listKnownLogTails(ctx context.Context, p *refreshPass) error {
	p.logs = map[string]*file{}
	if p.full {
		return nil
	}
	var names []string
	for name, of := range p.old {
		if of.kind == layout.KindLog && !p.trashed[layout.VersionRef{Name: name, Epoch: of.epoch}] {
			names = append(names, name)
		}
	}
	tails := make([]*file, len(names))
	if err := parallel(ctx, len(names), openParallelism, func(ctx context.Context, i int) (err error) {
		tails[i], err = f.listTail(ctx, names[i], p.old[names[i]], p.activity)
		return err
	}); err != nil {
		return err
	}
	for i, st := range tails {
		p.logs[names[i]] = st
	}
	return nil
}

// listTopLevel is step 2: the top level (tables, objects, new logs,
// CURRENT's etag). It drops the logs deleted from the store and notes the
// log names new to the view.
func (f *Reader) listTopLevel(ctx context.Context, p *refreshPass) error {
	top, err := f.readerList(ctx, "", true, p.activity)
	if err != nil {
		return err
	}
	p.top = top
	// A log name with a trashed version that the view does not have is a
	// deleted log waiting out its grace: not listed again until the next
	// full refresh.
	trashedNames := map[string]bool{}
	for r := range p.trashed {
		trashedNames[r.Name] = true
	}
	present := map[string]bool{}
	if err := f.refuseLegacyDirs(ctx, top, p.activity); err != nil {
		return err
	}
	for _, o := range top {
		if name, isDir := strings.CutSuffix(o.Key, "/"); isDir && layout.KindOf(name) == layout.KindLog && name != layout.CatalogLog {
			// (The catalog is no file of RocksDB's: a reader lists it only
			// when asked for the checkpoints, reader_checkpoint.go.)
			if f.cfg.SkipWALs && FileType(name) == "wal" {
				continue // RocksDB opens without them (a compaction worker)
			}
			present[name] = true
			if _, ok := p.logs[name]; !ok && (p.full || !trashedNames[name]) {
				p.newLogs = append(p.newLogs, name)
			}
		} else if o.Key == layout.CurrentKey {
			p.currentTag, p.currentListed = o.ETag, true
		}
	}
	for name := range p.logs {
		if !present[name] {
			delete(p.logs, name) // deleted from the store
		}
	}
	return nil
}

// listNewLogs is step 3: the logs new to the view, each its live version.
func (f *Reader) listNewLogs(ctx context.Context, p *refreshPass) error {
	found := make([]*file, len(p.newLogs))
	if err := parallel(ctx, len(p.newLogs), openParallelism, func(ctx context.Context, i int) (err error) {
		found[i], err = f.listLog(ctx, p.newLogs[i], p.trashed, p.last, p.full, p.activity)
		return err
	}); err != nil {
		return err
	}
	for i, st := range found {
		if st != nil {
			p.logs[p.newLogs[i]] = st
			p.manifestAfterTop = p.manifestAfterTop || isManifest(p.newLogs[i])
		}
	}
	return nil
}

// readCurrentAndManifest is step 4: CURRENT, when it changed, and the
// MANIFEST it names, which is always in the view (errManifestGone when it
// is already gone: Refresh tries again).
func (f *Reader) readCurrentAndManifest(ctx context.Context, p *refreshPass) error {
	rs := &f.rs
	p.current, p.tag = f.current, rs.currentTag
	if p.currentListed && (p.full || p.current == nil || p.currentTag != rs.currentTag) {
		var b []byte
		var info objstore.ObjectInfo
		err := f.background().do(ctx, func(ctx context.Context) (err error) {
			b, info, err = f.get(ctx, layout.CurrentKey, "CURRENT", p.activity)
			return err
		})
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read CURRENT: %w", err)
		default:
			p.current, p.tag = layout.CurrentContent(b), info.ETag
		}
	}
	if m := manifestOf(p.current); m != "" && p.logs[m] == nil {
		// Created after the listing above (it rolled over meanwhile).
		st, err := f.listLog(ctx, m, p.trashed, p.last, p.full, p.activity)
		if err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("%s: %w", m, errManifestGone)
		}
		p.logs[m] = st
		p.manifestAfterTop = true
	}
	return nil
}

// listTablesAfterManifest is step 5: the files of the new view. Tables
// are listed after every MANIFEST listing (the top level again when a
// MANIFEST was listed after it), so the view holds every table the
// MANIFEST bytes RocksDB reads name.
func (f *Reader) listTablesAfterManifest(ctx context.Context, p *refreshPass) (map[string]*file, error) {
	if p.manifestAfterTop {
		top, err := f.readerList(ctx, "", true, p.activity)
		if err != nil {
			return nil, err
		}
		p.top = top
	}
	files := map[string]*file{}
	for name, st := range p.logs {
		files[name] = st
	}
	addListedObjects(files, p.top, p.trashed)
	// Cold tables too, also listed after every MANIFEST listing.
	if err := f.listColdTables(ctx, files, p.trashed); err != nil {
		return nil, err
	}
	if p.current != nil {
		files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(p.current))}
	}
	return files, nil
}

// addListedObjects adds to files the live version of each object of the
// top-level listing top (tables and other objects), where it is newer than
// what files has.
func addListedObjects(files map[string]*file, top []objstore.ObjectInfo, trashed map[layout.VersionRef]bool) {
	for _, o := range top {
		name, e, ok := layout.ParseObjectKey(o.Key)
		if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: layout.KindOf(name), epoch: e, size: o.Size}
		}
	}
}

// readOwnerAfterListings is the closing read, into rs.ownerEpoch: the
// view is durable only if no newer owner had raised the owner record when
// the listings ended. Then any later owner lists the store after this
// read, so after every segment seen here, and seals each log after them:
// all of it is in its database. A segment listed while a new owner was
// taking over may be one the old owner stored in a log created after that
// owner's listing (never acknowledged, never replayed): not served, not
// even for a moment.
func (f *Reader) readOwnerAfterListings(ctx context.Context, p *refreshPass) error {
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		f.rs.ownerEpoch, err = f.ownerEpoch(ctx, p.activity)
		return err
	}); err != nil {
		return fmt.Errorf("read %s: %w", layout.OwnerKey, err)
	}
	return nil
}

// takeoverInProgress keeps the reader's view (no new bytes are served)
// and renews its lease on that view, so that the owner's deleter spares
// its files while the takeover completes; the next refresh lists
// everything. It returns ErrTakeoverInProgress.
func (f *Reader) takeoverInProgress(ctx context.Context) error {
	f.rs.full = true
	if len(f.files) > 0 {
		if err := f.publishLease(ctx); err != nil {
			return err
		}
	}
	return ErrTakeoverInProgress
}

// listTrashIfDue lists the trash markers when the view's knowledge of them
// is due: at a full refresh, every ReaderTTL/3, and just after the
// MANIFEST changed (files were probably deleted). Before the MANIFEST is
// listed: a marker is written after the edit that deleted its file, so
// the view never drops a table RocksDB has not read the deletion of.
// Between listings the view may keep a trashed file a little longer,
// which only delays its delete.
func (f *Reader) listTrashIfDue(ctx context.Context, full bool, activity Activity) error {
	rs := &f.rs
	if !full && rs.trashed != nil && rs.trashSoon == 0 && time.Since(rs.trashAt) < f.cfg.ReaderTTL/3 {
		return nil
	}
	rs.trashSoon = max(rs.trashSoon-1, 0)
	start := time.Now()
	markers, err := f.readerList(ctx, layout.TrashPrefix, false, activity)
	if err != nil {
		return err
	}
	trashed := map[layout.VersionRef]bool{}
	for _, m := range markers {
		if name, e, ok := layout.ParseTrashKey(m.Key); ok {
			trashed[layout.VersionRef{Name: name, Epoch: e}] = true
		}
	}
	rs.trashed, rs.trashAt = trashed, start
	return nil
}
