package backup

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Archive retention (RFC 0011 step 23a).

// ArchivePrunedPrefix holds one record per prune of the archive.
const ArchivePrunedPrefix = ArchivePrefix + "pruned/"

// PruneRecord is archive/pruned/<time>-<nonce>.json, written before the
// prune deletes anything: readers drop the index entries of its versions.
type PruneRecord struct {
	Window   string              `json:"window"`   // the base backup the window starts at
	Sequence uint64              `json:"sequence"` // its checkpoint's sequence (S0)
	Versions []layout.VersionRef `json:"versions"`
	Keys     []string            `json:"keys"` // source keys, under archive/
	PrunedAt time.Time           `json:"prunedAt"`
}

// ArchivedLog is what PruneArchive knows of one archived WAL version.
type ArchivedLog struct {
	Ref layout.VersionRef
	// Finished: an index lists it Completed (sealed, or deleted by its
	// owner and copied whole): nothing more of it will be archived.
	Finished bool
	// Readable: the archive holds it from its first slot on and it parsed
	// as a RocksDB log.
	Readable bool
	Last     uint64 // the last sequence of its last batch (0: no batch)
}

// PruneArchive decides which archived WAL versions a prune deletes (RFC
// 0011 step 23a), given every archived WAL version and s0, the sequence
// of the base the recoverable window starts at. A restore from any base
// in the window replays only batches above s0, so a WAL whose batches
// all end at or below s0 is never read again. A name goes whole (every
// version) or not at all: only when every version of it is finished,
// readable, and ends at or below s0.
func PruneArchive(logs []ArchivedLog, s0 uint64) []layout.VersionRef {
	byName := map[string][]ArchivedLog{}
	for _, l := range logs {
		byName[l.Ref.Name] = append(byName[l.Ref.Name], l)
	}
	var out []layout.VersionRef
	for _, vs := range byName {
		if slices.ContainsFunc(vs, func(l ArchivedLog) bool { return !l.Finished || !l.Readable || l.Last > s0 }) {
			continue
		}
		for _, l := range vs {
			out = append(out, l.Ref)
		}
	}
	slices.SortFunc(out, func(a, b layout.VersionRef) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Epoch, b.Epoch))
	})
	return out
}

// archivedRef is the log version an archived key belongs to (a segment,
// fold or seal, or the version's trash marker).
func archivedRef(key string) (layout.VersionRef, bool) {
	if name, e, _, _, ok := layout.ParseSegmentKey(key); ok {
		return layout.VersionRef{Name: name, Epoch: e}, true
	}
	if name, e, ok := layout.ParseTrashKey(key); ok {
		return layout.VersionRef{Name: name, Epoch: e}, true
	}
	return layout.VersionRef{}, false
}

// readPruned returns the versions every prune record of the archive names.
func readPruned(ctx context.Context, s objstore.Store) (map[layout.VersionRef]bool, error) {
	var keys []string
	if err := s.List(ctx, ArchivePrunedPrefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", ArchivePrunedPrefix, err)
	}
	out := map[layout.VersionRef]bool{}
	for _, k := range keys {
		b, err := get(ctx, s, k)
		if err != nil {
			return nil, err
		}
		r, err := Parse[PruneRecord](k, b)
		if err != nil {
			return nil, err
		}
		for _, v := range r.Versions {
			out[v] = true
		}
	}
	return out, nil
}

// ArchivePruneReport says what PruneArchived did (or, dry, would do).
type ArchivePruneReport struct {
	NoArchive bool   // the location holds no archive
	NoWindow  bool   // no base backup starts a window: nothing is pruned
	Window    string // the base the window starts at
	Sequence  uint64 // its sequence
	Versions  []layout.VersionRef
	Objects   int
	Bytes     int64
	Kept      int // archived WAL versions kept
}

// PruneArchived deletes the archived WALs no restore from the window
// needs any more (RFC 0011 step 23a): run after the backups a retention
// policy lets go are deleted, so the window starts at the oldest kept
// base. dryRun decides and deletes nothing.
func PruneArchived(ctx context.Context, loc Location, dryRun bool) (ArchivePruneReport, error) {
	var rep ArchivePruneReport
	s := loc.Store
	if _, err := s.Stat(ctx, ArchiveStartedKey); errors.Is(err, objstore.ErrNotFound) {
		rep.NoArchive = true
		return rep, nil
	} else if err != nil {
		return rep, fmt.Errorf("stat %s: %w", ArchiveStartedKey, err)
	}
	// (a) The manifests, then the archive: a backup deleted after this
	// listing only raises the window's start.
	ms, err := List(ctx, loc)
	if err != nil {
		return rep, err
	}
	av, err := readArchive(ctx, s)
	if err != nil {
		return rep, err
	}
	start, ok := WindowStart(ms, av.started, av.gaps)
	if !ok {
		rep.NoWindow = true
		return rep, nil
	}
	rep.Window, rep.Sequence = start.ID, start.Checkpoint.Sequence

	// (b) Every archived WAL version, its finished WALs read whole.
	byRef := map[layout.VersionRef][]protocol.Segment{}
	keysOf := map[layout.VersionRef][]string{}
	for key, o := range av.stored {
		ref, ok := archivedRef(key)
		if !ok || !strings.HasSuffix(ref.Name, ".log") {
			continue
		}
		keysOf[ref] = append(keysOf[ref], key)
		if _, _, first, last, ok := layout.ParseSegmentKey(key); ok {
			sg := protocol.Segment{Seq: first, Size: o.Size}
			if last > first {
				sg.Last = last
			}
			byRef[ref] = append(byRef[ref], sg)
		}
	}
	refs := slices.SortedFunc(func(yield func(layout.VersionRef) bool) {
		for r := range byRef {
			if !yield(r) {
				return
			}
		}
	}, func(a, b layout.VersionRef) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Epoch, b.Epoch))
	})
	logs := make([]ArchivedLog, len(refs))
	at := map[string]int{}
	var names []string
	for i, ref := range refs {
		logs[i] = ArchivedLog{Ref: ref, Finished: av.completed[ref]}
		k := ref.Name + "/" + layout.FormatNumber(ref.Epoch)
		at[k] = i
		if logs[i].Finished {
			names = append(names, k)
		}
	}
	err = parallel(ctx, 8, names, func(ctx context.Context, k string) error {
		i := at[k]
		ref := refs[i]
		lv := protocol.BuildLogVersion(ref.Epoch, byRef[ref])
		if lv.HeadDeleted() {
			return nil // not readable: kept
		}
		var data []byte
		for _, o := range av.logObjects(ref.Name, lv) {
			b, err := get(ctx, s, ArchivedKey(o.key))
			if err != nil {
				return err
			}
			data = append(data, b...)
		}
		batches, err := ReadWAL(data)
		if err != nil {
			return nil // not readable: kept
		}
		logs[i].Readable = true
		if n := len(batches); n > 0 {
			logs[i].Last = batches[n-1].Last()
		}
		return nil
	})
	if err != nil {
		return rep, err
	}

	// (c) The rule.
	rep.Versions = PruneArchive(logs, start.Checkpoint.Sequence)
	rep.Kept = len(logs) - len(rep.Versions)
	if len(rep.Versions) == 0 {
		return rep, nil
	}
	var keys []string
	for _, ref := range rep.Versions {
		keys = append(keys, keysOf[ref]...)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rep.Objects++
		rep.Bytes += av.stored[k].Size
	}
	if dryRun {
		return rep, nil
	}

	// (d) The record, before any delete; (e) the deletes.
	now := time.Now().UTC()
	rec := PruneRecord{Window: start.ID, Sequence: start.Checkpoint.Sequence, Versions: rep.Versions, Keys: keys, PrunedAt: now}
	key := ArchivePrunedPrefix + now.Format("20060102T150405.000000000Z") + "-" + nonce() + recordExtension
	b := Format(rec)
	if _, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		return rep, fmt.Errorf("write %s: %w", key, err)
	}
	del := make([]string, len(keys))
	for i, k := range keys {
		del[i] = ArchivedKey(k)
	}
	if err := s.DeleteMany(ctx, del); err != nil {
		return rep, fmt.Errorf("delete the pruned archive objects: %w (readers ignore them already, by %s; what is left stays as unindexed bytes)", err, key)
	}
	return rep, nil
}
