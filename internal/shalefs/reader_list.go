package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// readerOpened returns the record of the last completed takeover, and
// whether it changed since the last refresh. The owner record (one GET)
// says when there may be a new one: an owner raises it before it writes
// its record.
func (f *Reader) readerOpened(ctx context.Context, activity Activity) (*layout.OpenedRecord, bool, error) {
	rs := &f.rs
	var owner uint64
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		owner, err = f.ownerEpoch(ctx, activity)
		return err
	}); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", layout.OwnerKey, err)
	}
	if rs.opened != nil && owner == rs.ownerEpoch && rs.opened.Epoch == owner {
		return rs.opened, false, nil
	}
	objs, err := f.readerList(ctx, layout.OpenedPrefix, false, activity)
	if err != nil {
		return nil, false, err
	}
	var highest uint64
	for _, o := range objs {
		if e, ok := layout.ParseOpenedKey(o.Key); ok {
			highest = max(highest, e)
		}
	}
	var rec *layout.OpenedRecord
	switch {
	case highest == 0:
	case rs.opened != nil && rs.opened.Epoch == highest:
		rec = rs.opened
	default:
		var r layout.OpenedRecord
		err := f.background().do(ctx, func(ctx context.Context) error {
			b, _, err := f.get(ctx, layout.OpenedKey(highest), "", activity)
			if err != nil {
				return err
			}
			if r, err = layout.ParseOpenedRecord(b); err != nil || r.Epoch != highest {
				return fmt.Errorf("%s is unreadable (%v)", layout.OpenedKey(highest), err)
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
func (f *Reader) readerList(ctx context.Context, prefix string, dir bool, activity Activity) (out []objstore.ObjectInfo, err error) {
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
func (f *Reader) listTail(ctx context.Context, name string, of *file, activity Activity) (*file, error) {
	of.mu.Lock()
	known := append([]protocol.Segment(nil), of.segments...)
	size := of.size
	of.mu.Unlock()
	after := ""
	if len(known) > 0 {
		after = segmentObjectKey(name, of.epoch, known[len(known)-1])
	}
	objs, err := f.readerList(ctx, layout.LogVersionPrefix(name, of.epoch), false, activity)
	if err != nil {
		return nil, err
	}
	segs := known
	for _, o := range objs {
		if o.Key <= after {
			continue
		}
		if _, _, first, last, ok := layout.ParseSegmentKey(o.Key); ok {
			segs = append(segs, protocol.Segment{Seq: first, Last: last, Size: o.Size})
		}
	}
	if len(segs) == len(known) {
		return of, nil
	}
	v := protocol.BuildLogVersion(of.epoch, segs)
	if v.Size <= size {
		return of, nil // nothing new it can reach (a seal, or a gap not filled yet)
	}
	return &file{kind: layout.KindLog, epoch: of.epoch, size: v.Size, segments: v.Segments, nextSeq: v.LastSeq + 1}, nil
}

// listLog finds the live version of a log name new to the view (nil if
// none): the highest admitted epoch's version with data, minus trashed and
// deleted ones, as a takeover would choose without sealing. byEpoch lists
// the name's epochs first and skips trashed versions unlisted (a full
// refresh meets every deleted log still in its grace); otherwise one
// listing reads every version.
func (f *Reader) listLog(ctx context.Context, name string, trashed map[layout.VersionRef]bool, last *layout.OpenedRecord, byEpoch bool, activity Activity) (*file, error) {
	var objs []objstore.ObjectInfo
	if byEpoch {
		dirs, err := f.readerList(ctx, layout.LogPrefix(name), true, activity)
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			e, ok := layout.ParseLogVersionPrefix(name, d.Key)
			if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] || !protocol.AdmitLogVersion(name, e, last) {
				continue
			}
			more, err := f.readerList(ctx, layout.LogVersionPrefix(name, e), false, activity)
			if err != nil {
				return nil, err
			}
			objs = append(objs, more...)
		}
	} else {
		var err error
		if objs, err = f.readerList(ctx, layout.LogPrefix(name), false, activity); err != nil {
			return nil, err
		}
	}
	versions := map[uint64][]protocol.Segment{}
	for _, o := range objs {
		if n, e, first, lastSeq, ok := layout.ParseSegmentKey(o.Key); ok && n == name {
			versions[e] = append(versions[e], protocol.Segment{Seq: first, Last: lastSeq, Size: o.Size})
		}
	}
	var vs []protocol.LogVersion
	for e, segs := range versions {
		if trashed[layout.VersionRef{Name: name, Epoch: e}] || !protocol.AdmitLogVersion(name, e, last) {
			continue
		}
		if v := protocol.BuildLogVersion(e, segs); !v.HeadDeleted() {
			vs = append(vs, v)
		}
	}
	v, ok := protocol.ChooseLogVersion(vs)
	if !ok {
		return nil, nil
	}
	return &file{kind: layout.KindLog, epoch: v.Epoch, size: v.Size, segments: v.Segments, nextSeq: v.LastSeq + 1}, nil
}

// logGrowth is what a log of the view gained in the store, read by a
// refresh. installView records it in the view and appends its bytes to the
// local copy (grow) only after it installed the view that holds the tables
// those bytes may name: a follower's own thread (DB::OpenAsFollower) reads
// the MANIFEST's local copy at any time, and an edit it reads names a table
// that must be in the view already, or it counts the table as missing and
// never looks again (its version stays behind for good).
type logGrowth struct {
	of   *file
	from int64  // of.size when read: the bytes follow it
	data []byte // the bytes past from (nil: there was no local copy)
	// The log version with them.
	segments []protocol.Segment
	size     int64
	nextSeq  uint64 // 0: unchanged
}

// readGrowth reads the bytes a log gained in the store (nf, a newer
// listing of the same version as of) past its local copy, without
// touching of or the local copy; nil when it gained none.
func (f *Reader) readGrowth(ctx context.Context, name string, of, nf *file, activity Activity) (*logGrowth, error) {
	of.mu.Lock()
	defer of.mu.Unlock()
	if nf.size <= of.size {
		return nil, nil // nothing new (a listing never shrinks a log)
	}
	g := &logGrowth{of: of, from: of.size, segments: nf.segments, size: nf.size}
	fi, err := os.Stat(f.localPath(name))
	if err != nil {
		return g, nil // not fetched yet: the fetch will read everything there is
	}
	if fi.Size() != of.size {
		return nil, fmt.Errorf("local copy of %s is %d bytes, the reader had %d", name, fi.Size(), of.size)
	}
	// The objects of the new listing that hold bytes past of.size.
	var start, off int64
	var pieces []protocol.Segment
	for _, s := range nf.segments {
		if off+s.Size > of.size {
			if pieces == nil {
				start = off
			}
			pieces = append(pieces, s)
		}
		off += s.Size
	}
	data, err := f.readSegments(ctx, name, nf.epoch, pieces, nf.size-start, activity)
	if errors.Is(err, objstore.ErrNotFound) {
		// The owner folded those segments and deleted them since the
		// listing: list the version again, its fold holds the same bytes.
		v, lerr := f.listVersion(ctx, name, nf.epoch)
		if lerr != nil {
			return nil, lerr
		}
		if v.Size < nf.size || (!v.Contiguous() && v.Sealed) {
			return nil, fmt.Errorf("log %s (epoch %d) lost segments while being read (%d of %d bytes left): %w", name, nf.epoch, v.Size, nf.size, err)
		}
		segs := trimSegments(v.Segments, nf.size)
		start, off, pieces = 0, 0, nil
		for _, s := range segs {
			if off+s.Size > of.size {
				if pieces == nil {
					start = off
				}
				pieces = append(pieces, s)
			}
			off += s.Size
		}
		g.segments = segs
		data, err = f.readSegments(ctx, name, nf.epoch, pieces, nf.size-start, activity)
	}
	if err != nil {
		return nil, fmt.Errorf("read the new part of %s: %w", name, err)
	}
	g.data = data[of.size-start:]
	return g, nil
}

// grow records g in its log's version of the view and appends its bytes
// to the local copy, in place (same inode: RocksDB's open log readers see
// them). A local copy it cannot bring to the new size is dropped: the next
// open fetches the whole log.
func (f *Reader) grow(name string, g *logGrowth) error {
	of := g.of
	of.mu.Lock()
	defer of.mu.Unlock()
	of.segments, of.size = g.segments, g.size
	if g.nextSeq > 0 {
		of.nextSeq = g.nextSeq
	}
	path := f.localPath(name)
	fi, err := os.Stat(path)
	if err != nil {
		return nil // not fetched yet: the fetch will read everything there is
	}
	if g.data == nil || fi.Size() != g.from {
		// Fetched (at the old size) since the growth was read.
		os.Remove(path)
		return nil
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = fh.Write(g.data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("extend the local copy of %s: %w", name, err)
	}
	return nil
}

// bringLogsLocal fetches every WAL of the view, and the MANIFEST CURRENT
// names, that has no local copy yet, so that RocksDB's catch-up reads only
// local files.
func (f *Reader) bringLogsLocal(ctx context.Context, activity Activity) error {
	m := manifestOf(f.current)
	f.mu.Lock()
	var names []string
	for name, st := range f.files {
		if st.kind == layout.KindLog && (name == m || !isManifest(name)) {
			if _, err := os.Stat(f.localPath(name)); errors.Is(err, os.ErrNotExist) {
				names = append(names, name)
			}
		}
	}
	f.mu.Unlock()
	return parallel(ctx, len(names), openParallelism, func(ctx context.Context, i int) error {
		return f.fetch(names[i], activity)
	})
}

// writeCurrent replaces the local CURRENT with the one last read.
func (f *Reader) writeCurrent() error {
	if f.current == nil {
		return nil
	}
	return writeFileAtomic(f.localPath("CURRENT"), f.current)
}

// adoptPendingCold checks the tier records again for a reader whose cold
// store was not in use yet, once per Refresh until the database records
// its cold tier (one GET of _shale/tiers and one of the cold marker).
func (f *Reader) adoptPendingCold(ctx context.Context) error {
	if !f.coldPending.Load() {
		return nil
	}
	return f.checkTiers(ctx, false)
}
