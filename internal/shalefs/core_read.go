package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Fetch materializes a managed file in the local cache (RocksDB is about
// to open it): a table or object is downloaded, a log is reassembled from
// its segments up to its seal.
func (f *core) fetch(name string, activity Activity) error {
	f.mu.Lock()
	st := f.fileLocked(name)
	f.mu.Unlock()
	if st == nil {
		return fmt.Errorf("fetch %s: %w", name, os.ErrNotExist)
	}
	if activity == ActForegroundRead && !f.serving.Load() {
		activity = ActOpen
	}
	var data []byte
	pol := f.foreground()
	if activity != ActForegroundRead {
		pol = f.background()
	}
	err := pol.do(context.Background(), func(ctx context.Context) error {
		var err error
		switch {
		case st.key != "":
			data, _, err = f.get(ctx, st.key, name, activity)
			if err == nil && int64(len(data)) != st.size {
				err = fmt.Errorf("%s is %d bytes, expected %d", st.key, len(data), st.size)
			}
		case st.kind == layout.KindLog:
			data, err = f.readLog(ctx, name, st, activity)
		case st.kind == layout.KindCurrent:
			data, _, err = f.get(ctx, layout.CurrentKey, name, activity)
			data = layout.CurrentContent(data)
		default:
			data, err = f.getObject(ctx, name, st, activity)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fetch %s: %w", name, err)
	}
	if err := writeFileAtomic(f.localPath(name), data); err != nil {
		return err
	}
	if st.kind == layout.KindTable {
		f.cache.NoteVersion(name, st.epoch)
	}
	return nil
}

// readLog reassembles a log from its segments and folds, fetching up to
// 16 at a time (a busy WAL has one segment per synced write group until it
// is folded). A folded segment may vanish between the listing and the
// read (its writer folds and deletes while we read): the version is then
// listed again, and the log read from the new listing must hold the same
// bytes.
func (f *core) readLog(ctx context.Context, name string, st *file, activity Activity) ([]byte, error) {
	st.mu.Lock()
	segs := append([]protocol.Segment(nil), st.segments...)
	epoch, size := st.epoch, st.size
	st.mu.Unlock()
	data, err := f.readSegments(ctx, name, epoch, segs, size, activity)
	if !errors.Is(err, objstore.ErrNotFound) {
		return data, err
	}
	v, lerr := f.listVersion(ctx, name, epoch)
	if lerr != nil {
		return nil, lerr
	}
	// A live pipelined log may show uploads landed past one in flight
	// (RFC 0013): only a hole below a seal means lost data.
	if v.Size < size || (!v.Contiguous() && v.Sealed) {
		return nil, fmt.Errorf("log %s (epoch %d) lost segments while being read (%d of %d bytes left): %w", name, epoch, v.Size, size, err)
	}
	st.mu.Lock()
	st.segments = trimSegments(v.Segments, size)
	st.mu.Unlock()
	return f.readSegments(ctx, name, epoch, trimSegments(v.Segments, size), size, activity)
}

// trimSegments keeps the objects that hold the first size bytes of a log.
func trimSegments(segs []protocol.Segment, size int64) []protocol.Segment {
	var n int64
	for i, s := range segs {
		if n >= size {
			return segs[:i]
		}
		n += s.Size
	}
	return segs
}

// readSegments fetches the objects of one log version and joins them.
func (f *core) readSegments(ctx context.Context, name string, epoch uint64, segs []protocol.Segment, size int64, activity Activity) ([]byte, error) {
	parts := make([][]byte, len(segs))
	err := parallel(ctx, len(segs), 16, func(ctx context.Context, i int) error {
		s := segs[i]
		key := layout.SegmentKey(name, epoch, s.Seq)
		if s.Fold() {
			key = layout.FoldKey(name, epoch, s.Seq, s.Last)
		}
		b, _, err := f.get(ctx, key, name, activity)
		if err == nil && int64(len(b)) != s.Size {
			err = fmt.Errorf("object %s of %s is %d bytes, expected %d", key, name, len(b), s.Size)
		}
		parts[i] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(int(size))
	for _, p := range parts {
		buf.Write(p)
	}
	if int64(buf.Len()) < size {
		return nil, fmt.Errorf("log %s (epoch %d) holds %d bytes, expected %d", name, epoch, buf.Len(), size)
	}
	return buf.Bytes()[:size], nil
}

// segmentObjectKey is the key of one object of a log version.
func segmentObjectKey(name string, epoch uint64, s protocol.Segment) string {
	if s.Fold() {
		return layout.FoldKey(name, epoch, s.Seq, s.Last)
	}
	return layout.SegmentKey(name, epoch, s.Seq)
}

// getObject reads a whole table or object of st from its tier, or its
// origin (core_origin.go).
func (f *core) getObject(ctx context.Context, name string, st *file, activity Activity) ([]byte, error) {
	return f.getAt(ctx, name, st, activity)
}

// readsRemotely: a cold table is never copied into the local cache, which
// holds the hot working set; RocksDB reads it range by range (its index
// and filter blocks then live in the block cache).
func readsRemotely(t Tier) bool { return t == TierCold }
