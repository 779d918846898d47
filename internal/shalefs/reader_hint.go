package shalefs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// errHintShort: the hint cannot bring the view up to date by itself; the
// reader lists the store instead.
var errHintShort = errors.New("the hint falls short")

// maxHintSlots bounds the segments one hinted refresh fetches from a log;
// beyond, listing (which finds folds) is cheaper.
const maxHintSlots = 256

// refreshHinted brings the view up to date from a hint (refreshMu held):
// the segments the hint names that the view lacks are fetched by key, and
// appended to the local copies; the top level is listed only when a
// MANIFEST grew (for the tables its edits name, after them), CURRENT only
// read when the hint says it changed. It returns errHintShort, having
// changed nothing the view relies on, when it cannot.
func (f *Reader) refreshHinted(ctx context.Context, h *Hint) error {
	rs := &f.rs
	if rs.full || !f.readerLeaseFresh() || time.Since(rs.fullAt) >= readerFullEvery ||
		rs.opened == nil || h.Epoch != rs.opened.Epoch || rs.ownerEpoch != h.Epoch {
		return errHintShort // a takeover, an unknown epoch, or a full refresh due
	}
	const activity = ActCatchup
	start := time.Now()
	if err := f.listTrashIfDue(ctx, false, activity); err != nil {
		return err
	}
	trashed := rs.trashed
	f.mu.Lock()
	old := f.files
	f.mu.Unlock()
	files := map[string]*file{}
	for name, st := range old {
		if !trashed[layout.VersionRef{Name: name, Epoch: st.epoch}] || st.kind == layout.KindCurrent {
			files[name] = st
		}
	}
	type job struct {
		t    LogTail
		of   *file
		from uint64
	}
	var jobs []job
	for _, t := range h.Logs {
		if layout.KindOf(t.Name) != layout.KindLog || trashed[layout.VersionRef{Name: t.Name, Epoch: t.Epoch}] {
			continue
		}
		switch of := files[t.Name]; {
		case of == nil:
			jobs = append(jobs, job{t, nil, 1})
		case of.epoch != t.Epoch:
			return errHintShort
		default:
			if end := lastSlot(of); end < t.LastSegment {
				jobs = append(jobs, job{t, of, end + 1})
			}
		}
	}
	got := make([]*file, len(jobs))
	data := make([][]byte, len(jobs))
	growths := make([]*logGrowth, len(jobs))
	if err := parallel(ctx, len(jobs), openParallelism, func(ctx context.Context, i int) (err error) {
		j := jobs[i]
		got[i], data[i], growths[i], err = f.fetchSlots(ctx, j.t, j.of, j.from, activity)
		return err
	}); err != nil {
		return err
	}
	manifestGrew := false
	fresh := map[string][]byte{}
	grown := map[string]*logGrowth{}
	for i, st := range got {
		name := jobs[i].t.Name
		files[name] = st
		if jobs[i].of == nil {
			fresh[name] = data[i]
		} else if growths[i] != nil {
			grown[name] = growths[i]
		}
		manifestGrew = manifestGrew || isManifest(name)
	}
	current, tag := f.current, rs.currentTag
	if h.CurrentManifest != "" && h.CurrentManifest != manifestOf(f.current) {
		var b []byte
		var info objstore.ObjectInfo
		if err := f.background().do(ctx, func(ctx context.Context) (err error) {
			b, info, err = f.get(ctx, layout.CurrentKey, "CURRENT", activity)
			return err
		}); err != nil {
			return fmt.Errorf("read CURRENT: %w", err)
		}
		current, tag = layout.CurrentContent(b), info.ETag
		manifestGrew = true
	}
	if m := manifestOf(current); m == "" || files[m] == nil {
		return errHintShort
	}
	if manifestGrew {
		// The tables the new MANIFEST bytes name, listed after them.
		top, err := f.readerList(ctx, "", true, activity)
		if err != nil {
			return err
		}
		for name, st := range files {
			if st.kind == layout.KindTable || st.kind == layout.KindObject {
				delete(files, name)
			}
		}
		addListedObjects(files, top, trashed)
		if err := f.listColdTables(ctx, files, trashed); err != nil {
			return err
		}
	}
	files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(current))}
	return f.installView(ctx, viewUpdate{
		old: old, files: files, fresh: fresh, grown: grown, current: current, currentTag: tag,
		full: false, start: start, manifestGrew: manifestGrew, activity: activity, prefetch: true,
	})
}

// lastSlot is the last segment slot a log version of the view reaches.
func lastSlot(st *file) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.segments); n > 0 {
		return st.segments[n-1].End()
	}
	return 0
}

// fetchSlots reads the segments from..t.LastSegment of the log t names:
// for a log new to the view (of nil) a new version and its bytes, for one
// the view has what it gained (installView records it in of and appends it
// to the local copy, after the view holds the tables it may name). A
// segment that is not there (folded away meanwhile) makes the hint fall
// short; a seal ends the log.
func (f *Reader) fetchSlots(ctx context.Context, t LogTail, of *file, from uint64, activity Activity) (*file, []byte, *logGrowth, error) {
	n := t.LastSegment - from + 1
	if n > maxHintSlots {
		return nil, nil, nil, errHintShort
	}
	parts := make([][]byte, n)
	err := parallel(ctx, int(n), 16, func(ctx context.Context, i int) error {
		return f.foreground().do(ctx, func(ctx context.Context) (err error) {
			parts[i], _, err = f.get(ctx, layout.SegmentKey(t.Name, t.Epoch, from+uint64(i)), t.Name, activity)
			return err
		})
	})
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil, nil, errHintShort
	}
	if err != nil {
		return nil, nil, nil, err
	}
	var segs []protocol.Segment
	var data []byte
	for _, p := range parts {
		if len(p) == 0 {
			// A seal: a takeover is under way. It may also be void (in a
			// slot the owner folded away: protocol.BuildLogVersion), which only a
			// listing can tell.
			return nil, nil, nil, errHintShort
		}
		seq := from + uint64(len(segs))
		segs = append(segs, protocol.Segment{Seq: seq, Last: seq, Size: int64(len(p))})
		data = append(data, p...)
	}
	if of == nil {
		if len(segs) == 0 || int64(len(data)) != t.Bytes {
			return nil, nil, nil, errHintShort
		}
		return &file{kind: layout.KindLog, epoch: t.Epoch, size: int64(len(data)), segments: segs, nextSeq: segs[len(segs)-1].Seq + 1}, data, nil, nil
	}
	of.mu.Lock()
	defer of.mu.Unlock()
	if of.size+int64(len(data)) != t.Bytes {
		return nil, nil, nil, errHintShort
	}
	if len(segs) == 0 {
		return of, nil, nil, nil
	}
	return of, nil, &logGrowth{
		of: of, from: of.size, data: data,
		segments: append(append([]protocol.Segment(nil), of.segments...), segs...),
		size:     of.size + int64(len(data)), nextSeq: segs[len(segs)-1].Seq + 1,
	}, nil
}
