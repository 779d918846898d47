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
	fresh      map[string][]byte
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
// local copies, logs grow in place, logs new to it get their bytes in
// v.fresh as local copies (or lose stale ones, to be fetched), tables that
// left are retired, the lease is published, and with v.prefetch the logs
// RocksDB will read are brought local.
func (f *Reader) installView(ctx context.Context, v viewUpdate) error {
	rs := &f.rs
	old, files, manifestGrew := v.old, v.files, v.manifestGrew
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
			if nf != of {
				if err := f.extendLog(ctx, name, of, nf, v.activity); err != nil {
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
	if v.prefetch {
		return f.bringLogsLocal(ctx, v.activity)
	}
	return nil
}
