package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// ErrOutsideWindow: a point-in-time target the archive cannot restore.
var ErrOutsideWindow = errors.New("target outside the recoverable window")

// Window is what a point-in-time restore can reach: from the base backup
// it starts at to the end of the archive.
type Window struct {
	Base         string // the oldest base backup it starts at
	FromSequence uint64
	FromTime     time.Time
	ToSequence   uint64    // the last archived write (0: not computed)
	ToTime       time.Time // every write stored before it is archived
}

func (w Window) String() string {
	to := "the last archived write"
	if w.ToSequence > 0 {
		to = fmt.Sprintf("sequence %d", w.ToSequence)
	}
	return fmt.Sprintf("from sequence %d (%s, backup %s) to %s (%s)", w.FromSequence, w.FromTime.UTC().Format(time.RFC3339Nano), w.Base, to, w.ToTime.UTC().Format(time.RFC3339Nano))
}

// PointInTimeReport says what a point-in-time restore wrote.
type PointInTimeReport struct {
	RestoreReport
	Base     string    // the base backup
	Last     uint64    // the last sequence replayed (Sequence: the base's)
	LastTime time.Time // when the source stored the last batch replayed
	WALs     int
	WALBytes int64
	Window   Window
}

// archiveView is what a restore reads of an archive.
type archiveView struct {
	stored    map[string]IndexEntry
	opened    map[uint64]*layout.OpenedRecord
	trashedBy map[layout.VersionRef]uint64
	started   time.Time
	caughtUp  time.Time
	gaps      []Gap
	completed map[layout.VersionRef]bool // finished versions (an index says so)
}

func readArchive(ctx context.Context, s objstore.Store) (*archiveView, error) {
	v := &archiveView{stored: map[string]IndexEntry{}, opened: map[uint64]*layout.OpenedRecord{}, trashedBy: map[layout.VersionRef]uint64{},
		completed: map[layout.VersionRef]bool{}}
	b, err := get(ctx, s, ArchiveStartedKey)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%s holds no archive (%s): a point-in-time restore needs `shale primary --archive-to` running on the database", s.URL(), ArchiveStartedKey)
	}
	if err != nil {
		return nil, err
	}
	st, err := Parse[ArchiveStarted](ArchiveStartedKey, b)
	if err != nil {
		return nil, err
	}
	v.started = st.StartedAt
	if b, err := get(ctx, s, ArchiveStatusKey); err == nil {
		status, err := Parse[ArchiveStatus](ArchiveStatusKey, b)
		if err != nil {
			return nil, err
		}
		v.caughtUp = status.CaughtUpAt
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return nil, err
	}
	idx, err := readIndexes(ctx, s)
	if err != nil {
		return nil, err
	}
	// After the indexes: a prune record written before this read drops
	// its versions' entries (RFC 0011 step 23a).
	pruned, err := readPruned(ctx, s)
	if err != nil {
		return nil, err
	}
	for _, ix := range idx {
		for _, r := range ix.Completed {
			v.completed[r] = true
		}
		for _, o := range ix.Objects {
			if ref, ok := archivedRef(o.Key); ok && pruned[ref] {
				continue
			}
			if have, ok := v.stored[o.Key]; !ok || o.StoredAt.Before(have.StoredAt) {
				v.stored[o.Key] = o
			}
		}
	}
	// Opened records and trash markers of logs: small, read each.
	for key := range v.stored {
		e, isOpened := layout.ParseOpenedKey(key)
		name, te, isTrash := layout.ParseTrashKey(key)
		if !isOpened && !isTrash {
			continue
		}
		b, err := get(ctx, s, ArchivedKey(key))
		if err != nil {
			return nil, err
		}
		if isOpened {
			r, err := layout.ParseOpenedRecord(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ArchivedKey(key), err)
			}
			v.opened[e] = &r
		} else {
			m, err := layout.ParseTrashMarker(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ArchivedKey(key), err)
			}
			v.trashedBy[layout.VersionRef{Name: name, Epoch: te}] = m.Epoch
		}
	}
	if v.gaps, err = ListGaps(ctx, s); err != nil {
		return nil, err
	}
	return v, nil
}

// walVersions returns the archived WAL versions a restore replays (RFC
// 0011 step 24): admitted (AdmitArchived), read as logs up to their first
// valid seal (protocol.BuildLogVersion), the highest admitted epoch's of
// each name (protocol.ChooseLogVersion); with the archived key of each
// object of the log, in order.
func (v *archiveView) walVersions() map[string][]walObject {
	byRef := map[layout.VersionRef][]protocol.Segment{}
	for key, o := range v.stored {
		name, e, first, last, ok := layout.ParseSegmentKey(key)
		if !ok || !strings.HasSuffix(name, ".log") {
			continue
		}
		s := protocol.Segment{Seq: first, Size: o.Size}
		if last > first {
			s.Last = last
		}
		ref := layout.VersionRef{Name: name, Epoch: e}
		byRef[ref] = append(byRef[ref], s)
	}
	versions := map[string][]protocol.LogVersion{}
	for ref, segs := range byRef {
		if !AdmitArchived(ref.Name, ref.Epoch, v.opened, v.trashedBy) {
			continue
		}
		lv := protocol.BuildLogVersion(ref.Epoch, segs)
		if lv.HeadDeleted() {
			continue // the archive lacks its segment 1: a gap, which the replay's contiguity check finds if it matters
		}
		versions[ref.Name] = append(versions[ref.Name], lv)
	}
	out := map[string][]walObject{}
	for name, vs := range versions {
		lv, ok := protocol.ChooseLogVersion(vs)
		if !ok {
			continue
		}
		out[name] = v.logObjects(name, lv)
	}
	return out
}

// logObjects is the archived objects of one log version, in order: its
// segments, and for a fold, the fold's segments when the archive has
// them all, else the fold.
func (v *archiveView) logObjects(name string, lv protocol.LogVersion) []walObject {
	var out []walObject
	for _, s := range lv.Segments {
		if !s.Fold() {
			out = append(out, walObject{key: layout.SegmentKey(name, lv.Epoch, s.Seq)})
			continue
		}
		// The fold's segments when the archive has them all (the
		// same bytes, with their own store times), else the fold.
		var segs []walObject
		for q := s.Seq; q <= s.Last; q++ {
			k := layout.SegmentKey(name, lv.Epoch, q)
			if o, ok := v.stored[k]; !ok || o.Size == 0 {
				segs = nil
				break
			}
			segs = append(segs, walObject{key: k})
		}
		if segs == nil {
			segs = []walObject{{key: layout.FoldKey(name, lv.Epoch, s.Seq, s.Last), fold: true}}
		}
		out = append(out, segs...)
	}
	return out
}

// walObject is one archived object of a WAL a restore reads.
type walObject struct {
	key  string
	fold bool // a fold whose segments the archive lacks
}

// RestoreToPoint restores the database of loc, as it was at target, into
// target store dst, a new empty directory (RFC 0011 steps 24-26): the
// newest usable base backup at or before the target, and the archived
// WALs after it, cut after the target, as epoch-0 logs that the first
// primary's takeover replays. A target outside the window is refused,
// naming it (ErrOutsideWindow).
func RestoreToPoint(ctx context.Context, loc Location, t Target, dst objstore.Store) (PointInTimeReport, error) {
	var rep PointInTimeReport
	if (t.Sequence == 0) == t.Time.IsZero() {
		return rep, errors.New("a point-in-time restore needs exactly one of a target time and a target sequence")
	}
	ms, err := List(ctx, loc)
	if err != nil {
		return rep, err
	}
	av, err := readArchive(ctx, loc.Store)
	if err != nil {
		return rep, err
	}
	start, ok := WindowStart(ms, av.started, av.gaps)
	if !ok {
		why := fmt.Sprintf("the archive started at %s", av.started.UTC().Format(time.RFC3339))
		if n := len(av.gaps); n > 0 {
			why += fmt.Sprintf(" and has a gap detected at %s", av.gaps[n-1].DetectedAt.UTC().Format(time.RFC3339))
		}
		return rep, fmt.Errorf("%w: %s, and no base backup was taken after that: take one (shale backup create) and restore to a point after it", ErrOutsideWindow, why)
	}
	rep.Window = Window{Base: start.ID, FromSequence: start.Checkpoint.Sequence, FromTime: start.Checkpoint.CreatedAt, ToTime: av.caughtUp}
	if t.Sequence == 0 && (t.Time.Before(start.Checkpoint.CreatedAt) || t.Time.After(av.caughtUp)) {
		return rep, fmt.Errorf("%w: %s is outside the window, %s", ErrOutsideWindow, t, rep.Window)
	}
	b, ok := ChooseBase(ms, start, t)
	if !ok {
		return rep, fmt.Errorf("%w: %s is outside the window, %s", ErrOutsideWindow, t, rep.Window)
	}
	rep.Base = b.ID

	// The admitted WALs, read whole (from the archive, in object order).
	logs := av.walVersions()
	var wals []ArchivedWAL
	var mu sync.Mutex
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range logs {
			if !yield(n) {
				return
			}
		}
	})
	err = parallel(ctx, 8, names, func(ctx context.Context, name string) error {
		num, err := strconv.ParseUint(strings.TrimSuffix(name, ".log"), 10, 64)
		if err != nil {
			return fmt.Errorf("archived WAL %s: %w", name, err)
		}
		w := ArchivedWAL{Name: name, Number: num}
		for _, o := range logs[name] {
			k := o.key
			r, _, err := loc.Store.Get(ctx, ArchivedKey(k), 0, -1)
			if err != nil {
				return fmt.Errorf("read %s: %w", ArchivedKey(k), err)
			}
			data, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				return fmt.Errorf("read %s: %w", ArchivedKey(k), err)
			}
			w.Data = append(w.Data, data...)
			w.Ends = append(w.Ends, len(w.Data))
			w.Stored = append(w.Stored, av.stored[k].StoredAt)
			w.Folds = append(w.Folds, o.fold)
		}
		mu.Lock()
		wals = append(wals, w)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return rep, err
	}
	plan, err := PlanReplay(wals, b.Checkpoint.Sequence, t)
	if err != nil {
		return rep, fmt.Errorf("%w: %v (window: %s)", ErrOutsideWindow, err, rep.Window)
	}
	if full, err := PlanReplay(wals, start.Checkpoint.Sequence, Target{Sequence: ^uint64(0)}); err == nil {
		rep.Window.ToSequence = full.End
	}
	if t.Sequence > 0 && t.Sequence > plan.End {
		rep.Window.ToSequence = max(rep.Window.ToSequence, plan.End)
		return rep, fmt.Errorf("%w: %s is outside the window, %s", ErrOutsideWindow, t, rep.Window)
	}
	rep.Last, rep.LastTime = plan.Last, plan.LastTime
	data := map[string][]byte{}
	for _, w := range wals {
		data[w.Name] = w.Data
	}
	rr, err := restore(ctx, loc, b.ID, dst, t.String(), func(ctx context.Context, _ Manifest) error {
		for _, c := range plan.Cuts {
			key := layout.SegmentKey(c.Name, 0, 1)
			if info, err := dst.Stat(ctx, key); err == nil && info.Size == int64(c.Len) {
				continue // an earlier run wrote it
			}
			if _, err := dst.Put(ctx, key, bytes.NewReader(data[c.Name][:c.Len]), int64(c.Len), objstore.PutOptions{}); err != nil {
				return fmt.Errorf("write %s: %w", key, err)
			}
			rep.WALs++
			rep.WALBytes += int64(c.Len)
		}
		return nil
	})
	rep.RestoreReport = rr
	return rep, err
}
