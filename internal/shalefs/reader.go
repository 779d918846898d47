package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// A reader is a read-only FS on a database that another process owns: what
// a secondary opens RocksDB on (design §5). It claims no epoch, seals
// nothing and writes nothing to the store. It sees the database as the
// next owner would, without sealing: per name the highest epoch's version
// that the last takeover admitted, minus trashed ones, and each log up to
// its last contiguous segment (folds included). Refresh brings that view up
// to date and appends the new bytes of every log to its local copy in
// place, so RocksDB's secondary, which keeps reading a WAL or MANIFEST from
// where it stopped, sees them at its next catch-up.

// ErrReadOnly is the error of a write to a reader.
var ErrReadOnly = errors.New("read-only replica: writes go to the primary")

// OpenReader opens a read-only view of the database in cfg.Store and
// prepares cfg.CacheDir (a directory of its own, never the primary's).
func OpenReader(ctx context.Context, cfg Config) (*FS, error) {
	cfg.defaults()
	f := &FS{cfg: cfg, store: cfg.Store, files: map[string]*file{}, fencedCh: make(chan struct{}), stop: make(chan struct{}), trashSeen: map[string]*trashEntry{}, base: time.Now()}
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
	if err := f.Refresh(ctx); err != nil {
		return nil, err
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
// concurrently with it (RocksDB fetches logs during a catch-up).
func (f *FS) Refresh(ctx context.Context) error {
	if !f.readOnly {
		return errors.New("refresh: not a reader")
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	if err := f.adoptPendingCold(ctx); err != nil {
		return err
	}
	last, err := f.lastOpened(ctx, f.epoch)
	if err != nil {
		return err
	}
	files, err := f.listStore(ctx, last, false)
	if err != nil {
		return err
	}
	var current []byte
	if _, ok := files["CURRENT"]; ok {
		err := f.background().do(ctx, func(ctx context.Context) (err error) {
			current, _, err = f.get(ctx, "CURRENT", "CURRENT", "open")
			return err
		})
		if errors.Is(err, objstore.ErrNotFound) {
			delete(files, "CURRENT")
		} else if err != nil {
			return fmt.Errorf("read CURRENT: %w", err)
		} else {
			current = currentContent(current)
			files["CURRENT"] = &file{kind: KindCurrent, size: int64(len(current))}
		}
	}
	f.mu.Lock()
	old := f.files
	f.mu.Unlock()
	for name, nf := range files {
		of := old[name]
		switch {
		case of == nil:
		case nf.kind == KindLog && of.epoch == nf.epoch:
			if err := f.extendLog(ctx, name, of, nf); err != nil {
				return err
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
	if current != nil && !bytes.Equal(current, f.current) {
		f.current = current
		if err := f.writeCurrent(); err != nil {
			return err
		}
	}
	// Published before RocksDB catches up to the new view, so the owner
	// never deletes a file that view uses.
	return f.publishLease(ctx)
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
func (f *FS) extendLog(ctx context.Context, name string, of, nf *file) error {
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
	data, err := f.readSegments(ctx, name, nf.epoch, pieces, nf.size-start, "background")
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
