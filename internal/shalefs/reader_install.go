package shalefs

import (
	"bytes"
	"context"
	"os"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// viewUpdate is a view a refresh (listed, or guided by a hint) hands to
// installView.
type viewUpdate struct {
	old   map[string]*file // the view before the refresh
	files map[string]*file // the view the refresh found
	// fresh holds the whole bytes of logs new to the view that a hinted
	// refresh fetched; a listed refresh fetches none (nil).
	fresh map[string][]byte
	// grown holds what logs of the view gained that a hinted refresh
	// fetched (their versions in files are the old view's); a listed
	// refresh reads it in installView.
	grown      map[string]*logGrowth
	current    []byte // CURRENT's content (nil: none yet)
	currentTag string // and its etag
	full       bool   // the refresh listed everything
	start      time.Time
	// manifestGrew: a MANIFEST grew (a hinted refresh knows it already);
	// installView also finds it out by comparing the views.
	manifestGrew bool
	activity     Activity
	prefetch     bool // bring the logs RocksDB will read local
}

// installView makes v.files (with CURRENT's content v.current and etag
// v.currentTag) the view: versions the old view had keep their state and
// local copies, logs new to it get their bytes in v.fresh as local copies
// (or lose stale ones, to be fetched), tables that left are retired, the
// lease is published, then logs grow in place, and with v.prefetch the
// logs RocksDB will read are brought local.
//
// The new bytes of a log reach its local copy only once the view holds
// every table they may name (logGrowth): a follower reads them on its own
// thread, concurrently with the refresh.
func (f *Reader) installView(ctx context.Context, v viewUpdate) error {
	rs := &f.rs
	old, files, manifestGrew := v.old, v.files, v.manifestGrew
	grown := map[string]*logGrowth{}
	for name, nf := range files {
		of := old[name]
		if isManifest(name) && (of == nil || of.epoch != nf.epoch || nf.size > of.size) {
			manifestGrew = true
		}
		switch {
		case of == nil && nf.kind == layout.KindLog:
			if b, ok := v.fresh[name]; ok {
				if err := writeFileAtomic(f.localPath(name), b); err != nil {
					return err
				}
			} else {
				os.Remove(f.localPath(name)) // a stale copy: fetched again
			}
		case of == nil:
		case nf.kind == layout.KindLog && of.epoch == nf.epoch:
			g := v.grown[name]
			if g == nil && nf != of {
				var err error
				if g, err = f.readGrowth(ctx, name, of, nf, v.activity); err != nil {
					return err
				}
			}
			if g != nil {
				grown[name] = g
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
	if v.full {
		rs.fullAt = v.start
	}
	if manifestGrew && !v.full {
		rs.trashSoon = 2
	}
	rs.full = false
	rs.currentTag = v.currentTag
	if v.current != nil && !bytes.Equal(v.current, f.current) {
		f.current = v.current
		if err := f.writeCurrent(); err != nil {
			return err
		}
	}
	// Published before RocksDB catches up to the new view (and before the
	// new logs are fetched), so the owner never deletes a file it uses.
	if err := f.publishLease(ctx); err != nil {
		return err
	}
	if f.beforeGrow != nil && len(grown) > 0 {
		names := make([]string, 0, len(grown))
		for name := range grown {
			names = append(names, name)
		}
		f.beforeGrow(names)
	}
	for name, g := range grown {
		if err := f.grow(name, g); err != nil {
			return err
		}
	}
	if v.prefetch {
		return f.bringLogsLocal(ctx, v.activity)
	}
	return nil
}
