package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Folding keeps a log's object count bounded: every synced write group is
// one segment object, so a busy WAL or a long-lived MANIFEST would hold one
// object per sync, and a takeover would list and fetch them all. The owner
// of a log folds each run of FoldSegments segments into one object, written
// create-only, and then deletes the folded segments (all but segment 1,
// the anchor that says the version exists: the trash loop deletes it
// first, so a version without it reads as deleted).
//
// A fold changes no byte of the log and no seal: it holds exactly the bytes
// of the segments it covers (the owner wrote them from its local file),
// readers prefer it to those segments (protocol.BuildLogVersion), and its
// key sorts right after the last segment it covers, so a listing that
// misses a segment deleted after the fold was written lists the fold
// (listings return keys in order). A reader that fetches a segment which
// was folded and deleted after it listed lists the version again (readLog).
// A stale owner may fold its own log while a newer owner reads or seals it:
// that is just as safe, since the fold covers only segments that owner had
// stored before the seal.

// foldLater schedules a fold of the log's unfolded segments.
func (f *Owner) foldLater(name string, st *file) {
	if !st.folding.CompareAndSwap(false, true) {
		return
	}
	f.stopMu.Lock()
	defer f.stopMu.Unlock()
	if f.stopped {
		st.folding.Store(false)
		return
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer st.folding.Store(false)
		if err := f.foldLog(context.Background(), name, st); err != nil {
			f.cfg.Logger.Warn("fold log segments", "log", name, "err", err)
		}
	}()
}

// foldLog folds the segments of one of this owner's logs that follow its
// last fold into one object and deletes them (but segment 1).
func (f *Owner) foldLog(ctx context.Context, name string, st *file) error {
	st.foldMu.Lock()
	defer st.foldMu.Unlock()
	f.mu.Lock()
	live := f.files[name] == st
	f.mu.Unlock()
	if !live || f.FenceError() != nil {
		return nil // deleted meanwhile, or deposed: nothing worth folding
	}
	st.mu.Lock()
	var off int64
	i := 0
	for i < len(st.segments) && st.segments[i].Fold() {
		off += st.segments[i].Size
		i++
	}
	tail := append([]protocol.Segment(nil), st.segments[i:]...)
	st.mu.Unlock()
	if len(tail) < 2 {
		return nil
	}
	first, last := tail[0].Seq, tail[len(tail)-1].Seq
	var n int64
	for _, s := range tail {
		n += s.Size
	}
	data := make([]byte, n)
	fh, err := os.Open(f.localPath(name))
	if err != nil {
		return err
	}
	_, err = fh.ReadAt(data, off)
	fh.Close()
	if err != nil {
		return fmt.Errorf("read local bytes %d-%d: %w", off, off+n, err)
	}
	key := layout.FoldKey(name, f.epoch, first, last)
	err = f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, key, name, ActFold, data, objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// Only this owner folds its logs: our attempt whose reply was lost.
			info, serr := f.store.Stat(ctx, key)
			if serr == nil && info.Size == n {
				return nil
			}
			return fmt.Errorf("fold %s exists with other contents", key)
		}
		return err
	})
	if err != nil {
		return err
	}
	st.mu.Lock()
	// Sync may have appended meanwhile; the tail's objects are still at i.
	st.segments = append(append(st.segments[:i:i], protocol.Segment{Seq: first, Last: last, Size: n}), st.segments[i+len(tail):]...)
	st.unfolded -= len(tail)
	st.mu.Unlock()
	var keys []string
	for _, s := range tail {
		if s.Seq != 1 {
			keys = append(keys, layout.SegmentKey(name, f.epoch, s.Seq))
		}
	}
	if f.cfg.KeepFolded != nil && f.cfg.KeepFolded(name, f.epoch, last) {
		// The archive lacks them: kept a while (RFC 0005 step 2a).
		for _, k := range f.keep(keptFold{name: name, last: last, keys: keys, at: f.waitNow()}) {
			f.dropKept(ctx, k)
		}
		return nil
	}
	return f.background().do(ctx, func(ctx context.Context) error { return f.delMany(ctx, keys, ActFold) })
}

// keptFold is a fold whose covered segments are kept for the archive.
type keptFold struct {
	name string
	last uint64
	keys []string
	at   time.Duration // waitNow when kept
}

// keep adds k to the kept folds and returns the folds of its log to drop
// at once: the oldest, beyond KeepFoldedSegments kept segments.
func (f *Owner) keep(k keptFold) []keptFold {
	f.keepMu.Lock()
	defer f.keepMu.Unlock()
	f.kept = append(f.kept, k)
	n := 0
	for _, o := range f.kept {
		if o.name == k.name {
			n += len(o.keys)
		}
	}
	var out []keptFold
	f.kept = slices.DeleteFunc(f.kept, func(o keptFold) bool {
		if n > f.cfg.KeepFoldedSegments && o.name == k.name {
			n -= len(o.keys)
			out = append(out, o)
			return true
		}
		return false
	})
	return out
}

// releaseKept deletes the kept segments the archive has, or kept for
// KeepFoldedFor (the keep loop runs it; not after a stop or fence: the
// segments then stay, covered, until the trash deletes their version).
func (f *Owner) releaseKept() {
	now := f.waitNow()
	f.keepMu.Lock()
	var due []keptFold
	f.kept = slices.DeleteFunc(f.kept, func(o keptFold) bool {
		if now-o.at >= f.cfg.KeepFoldedFor || !f.cfg.KeepFolded(o.name, f.epoch, o.last) {
			due = append(due, o)
			return true
		}
		return false
	})
	f.keepMu.Unlock()
	for _, k := range due {
		f.dropKept(context.Background(), k)
	}
}

func (f *Owner) dropKept(ctx context.Context, k keptFold) {
	if err := f.background().do(ctx, func(ctx context.Context) error { return f.delMany(ctx, k.keys, ActFold) }); err != nil {
		f.cfg.Logger.Warn("delete folded segments", "log", k.name, "err", err)
	}
}

// KeptFolds is how many folds have segments kept for the archive.
func (f *Owner) KeptFolds() int {
	f.keepMu.Lock()
	defer f.keepMu.Unlock()
	return len(f.kept)
}
