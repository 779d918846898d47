package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
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
// logs into the local cache.
func (f *Reader) refresh(ctx context.Context, activity Activity, prefetch bool) error {
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
			if of.kind == layout.KindLog && !trashed[layout.VersionRef{Name: name, Epoch: of.epoch}] {
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
		if name, isDir := strings.CutSuffix(o.Key, "/"); isDir && layout.KindOf(name) == layout.KindLog {
			if f.cfg.SkipWALs && FileType(name) == "wal" {
				continue // RocksDB opens without them (a compaction worker)
			}
			present[name] = true
			if _, ok := logs[name]; !ok && (full || !trashedNames[name]) {
				newLogs = append(newLogs, name)
			}
		} else if o.Key == layout.CurrentKey {
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
			b, info, err = f.get(ctx, layout.CurrentKey, "CURRENT", activity)
			return err
		})
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read CURRENT: %w", err)
		default:
			current, tag = layout.CurrentContent(b), info.ETag
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
		name, e, ok := layout.ParseObjectKey(o.Key)
		if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: layout.KindOf(name), epoch: e, size: o.Size}
		}
	}
	// Cold tables too, also listed after every MANIFEST listing.
	if err := f.listColdTables(ctx, files, trashed); err != nil {
		return err
	}
	if current != nil {
		files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(current))}
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
		return fmt.Errorf("read %s: %w", layout.OwnerKey, err)
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
func (f *Reader) takeoverInProgress(ctx context.Context) error {
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
func (f *Reader) install(ctx context.Context, old, files map[string]*file, fresh map[string][]byte, current []byte, tag string, full bool, start time.Time, manifestGrew bool, activity Activity, prefetch bool) error {
	rs := &f.rs
	for name, nf := range files {
		of := old[name]
		if isManifest(name) && (of == nil || of.epoch != nf.epoch || nf.size > of.size) {
			manifestGrew = true
		}
		switch {
		case of == nil && nf.kind == layout.KindLog:
			if b, ok := fresh[name]; ok {
				if err := writeFileAtomic(f.localPath(name), b); err != nil {
					return err
				}
			} else {
				os.Remove(f.localPath(name)) // a stale copy: fetched again
			}
		case of == nil:
		case nf.kind == layout.KindLog && of.epoch == nf.epoch:
			if nf != of {
				if err := f.extendLog(ctx, name, of, nf, activity); err != nil {
					return err
				}
			}
			files[name] = of
		case nf.kind == layout.KindLog:
			// Another epoch's version of the name (rare: a log a deposed
			// owner created): the local copy is of the wrong one.
			os.Remove(f.localPath(name))
		case nf.kind == layout.KindTable && of.epoch == nf.epoch:
			files[name] = of
		}
	}

	now := time.Now()
	f.mu.Lock()
	if f.retired == nil {
		f.retired = map[string]retiredFile{}
	}
	for name, of := range old {
		if _, ok := files[name]; !ok && of.kind == layout.KindTable {
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
		if of.kind == layout.KindLog && files[name] == nil {
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
