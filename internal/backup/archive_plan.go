package backup

import (
	"fmt"
	"slices"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// The continuous archive and point-in-time restore, pure decisions (RFC
// 0011 steps 18-26): what an archiver copies of one log version, which
// archived log versions a restore replays, where the recoverable window
// starts, and where a restore cuts the logs.

// Keys of the archive in a backup location.
const (
	ArchivePrefix      = "archive/"
	ArchiveIndexPrefix = ArchivePrefix + "index/"
	ArchiveGapsPrefix  = ArchivePrefix + "gaps/"
	ArchiveStatusKey   = ArchivePrefix + "status.json"
	ArchiveStartedKey  = ArchivePrefix + "started.json"
)

// ArchivedKey is where the archive keeps source key src.
func ArchivedKey(src string) string { return ArchivePrefix + src }

// ArchiveIndexKey is the index object of pass `pass` of the archiver of
// owner epoch.
func ArchiveIndexKey(epoch, pass uint64) string {
	return ArchiveIndexPrefix + layout.FormatNumber(epoch) + "/" + layout.FormatNumber(pass)
}

// IndexEntry is one archived object: its source key and when the source
// store says it was stored.
type IndexEntry struct {
	Key      string    `json:"key"`
	Size     int64     `json:"size"`
	StoredAt time.Time `json:"storedAt"`
}

// ArchiveIndex is archive/index/<E>/<pass>: what one pass copied, or a
// merge of index objects.
type ArchiveIndex struct {
	Epoch    uint64       `json:"epoch"`
	Pass     uint64       `json:"pass"`
	ListedAt time.Time    `json:"listedAt"`
	Objects  []IndexEntry `json:"objects"`
	// Level: 0 for a pass's index; a merge of objects of levels up to n
	// is at n+1 (an archiver merges level 0 from its memory, and the
	// merged objects only once there are as many of them: step 18).
	Level int `json:"level,omitempty"`
	// Completed: log versions this pass found whole in the archive and
	// finished (sealed, or deleted by their owner and copied whole).
	Completed []layout.VersionRef `json:"completed,omitempty"`
}

// Gap is archive/gaps/...: log objects the source deleted before the
// archive had them.
type Gap struct {
	Log        string    `json:"log"`
	Epoch      uint64    `json:"epoch"`
	Slot       uint64    `json:"slot"` // the first slot the archive lacks
	DetectedAt time.Time `json:"detectedAt"`
	Reason     string    `json:"reason"`
}

// GapKey is where gap g is recorded.
func GapKey(g Gap) string {
	return ArchiveGapsPrefix + g.DetectedAt.UTC().Format("20060102T150405.000000000Z") + "-" + g.Log + "-" + layout.FormatNumber(g.Epoch) + recordExtension
}

// ArchiveStarted is archive/started.json: the archive's first start.
type ArchiveStarted struct {
	StartedAt time.Time `json:"startedAt"`
}

// ArchiveStatus is archive/status.json.
type ArchiveStatus struct {
	// CaughtUpAt: the listing time of the last pass that copied all it
	// listed: every log object stored before it is archived.
	CaughtUpAt time.Time `json:"caughtUpAt"`
	Epoch      uint64    `json:"epoch"` // the archiving owner's
	Objects    int64     `json:"objects"`
	Gaps       int       `json:"gaps"`
}

// StepResult is what ArchiveStep decides for one log version.
type StepResult struct {
	Copy []protocol.Segment // objects to copy, in slot order
	Next uint64             // the next slot the archive lacks after them
	Done bool               // the archive holds the whole version
	Gap  bool               // the source lost slot Next before the archive had it
}

// ArchiveStep decides what to copy of one log version (RFC 0011 step 19).
// next is the first slot the archive lacks (1 for a version it has never
// seen); objs is the source's listing of the version; trashed says a
// trash marker of the version was listed before objs was.
//
// From next on it takes the segment at the slot, else the longest fold
// covering it, until the first valid seal (protocol.BuildLogVersion
// decides which seals are void): that seal ends the version. A missing
// slot is waited for while the version's writer may still be storing it
// (an upload in flight, possibly behind a later slot), unless the trash
// is taking the version: segment 1 gone (the trash deletes from segment
// 1 up), or the version marked and a later slot listed. A marked version
// whose segment 1 was listed after the marker is whole in the listing:
// copied, it is done.
func ArchiveStep(next uint64, objs []protocol.Segment, trashed bool) StepResult {
	v := protocol.BuildLogVersion(0, objs)
	res := StepResult{Next: next}
	data := map[uint64]protocol.Segment{}
	var folds []protocol.Segment
	for _, s := range objs {
		switch {
		case s.Fold():
			folds = append(folds, s)
		case s.Size > 0:
			data[s.Seq] = s
		}
	}
	for {
		p := res.Next
		// The segment first: a fold holds the same bytes but was stored
		// later, and a time target is only as precise as the times of the
		// archived objects (step 25).
		if s, ok := data[p]; ok && (!v.Sealed || p < v.SealSeq) {
			res.Copy = append(res.Copy, s)
			res.Next = p + 1
			continue
		}
		var best *protocol.Segment
		for i := range folds {
			f := folds[i]
			if f.Seq <= p && p <= f.Last && (best == nil || f.Last > best.Last) {
				best = &folds[i]
			}
		}
		if best != nil && (!v.Sealed || best.Last < v.SealSeq) {
			res.Copy = append(res.Copy, *best)
			res.Next = best.Last + 1
			continue
		}
		if v.Sealed && p == v.SealSeq {
			res.Copy = append(res.Copy, protocol.Segment{Seq: p})
			res.Next, res.Done = p+1, true
			return res
		}
		break
	}
	later := v.LastSeq >= res.Next
	switch {
	case len(objs) == 0:
		// Nothing listed: deleted whole (a version the archive tracked
		// and had not finished), or never written.
		res.Gap = next > 1
	case !v.Anchored && res.Next == 1:
		res.Gap = true // segment 1 deleted before the archive had it
	case !v.Anchored:
		// The trash has started on it (the archive missed its marker, or
		// the pass that would have finished it): what it deleted may
		// have gone past what the archive has.
		res.Gap = true
	case trashed && later:
		res.Gap = true
	case trashed:
		res.Done = true // marked, listed whole after the marker, copied
	}
	return res
}

// AdmitArchived decides whether an archived log version is part of the
// database's history (RFC 0011 step 24): opened holds the archived opened
// records by epoch, trashedBy the epoch that wrote each archived trash
// marker of a log version. The first takeover that completed after epoch
// e decides, with protocol.AdmitLogVersion; a version it did not keep is
// history still if its own owner deleted it (RocksDB deletes a WAL only
// after a flush the MANIFEST recorded, which a deposed owner cannot do:
// its MANIFEST is sealed), so it was deleted before that takeover listed
// the store.
func AdmitArchived(name string, e uint64, opened map[uint64]*layout.OpenedRecord, trashedBy map[layout.VersionRef]uint64) bool {
	var first *layout.OpenedRecord
	for ep, r := range opened {
		if ep > e && (first == nil || ep < first.Epoch) {
			first = r
		}
	}
	if protocol.AdmitLogVersion(name, e, first) {
		return true
	}
	by, ok := trashedBy[layout.VersionRef{Name: name, Epoch: e}]
	return ok && by == e
}

// WindowStart is the base backup the recoverable window starts at (RFC
// 0011 step 23): the oldest published backup whose checkpoint was
// created after the archive started and after every gap; ok false when
// there is none (a backup is needed after the archive started or after
// the last gap).
func WindowStart(ms []Manifest, started time.Time, gaps []Gap) (Manifest, bool) {
	after := started
	for _, g := range gaps {
		if g.DetectedAt.After(after) {
			after = g.DetectedAt
		}
	}
	var best Manifest
	found := false
	for _, m := range ms {
		if !m.Checkpoint.CreatedAt.After(after) {
			continue
		}
		if !found || m.Checkpoint.Sequence < best.Checkpoint.Sequence {
			best, found = m, true
		}
	}
	return best, found
}

// Target is a point-in-time restore's target: a time, or a sequence
// number (exactly one).
type Target struct {
	Time     time.Time
	Sequence uint64
}

func (t Target) String() string {
	if t.Sequence > 0 {
		return fmt.Sprintf("sequence %d", t.Sequence)
	}
	return "time " + t.Time.UTC().Format(time.RFC3339Nano)
}

// ChooseBase picks the base backup of a target: the newest usable one
// (from the window's start on) at or before it.
func ChooseBase(ms []Manifest, start Manifest, t Target) (Manifest, bool) {
	var best Manifest
	found := false
	for _, m := range ms {
		if m.Checkpoint.Sequence < start.Checkpoint.Sequence {
			continue
		}
		if t.Sequence > 0 && m.Checkpoint.Sequence > t.Sequence || t.Sequence == 0 && m.Checkpoint.CreatedAt.After(t.Time) {
			continue
		}
		if !found || m.Checkpoint.Sequence > best.Checkpoint.Sequence {
			best, found = m, true
		}
	}
	return best, found
}

// ArchivedWAL is one admitted WAL of a restore: its bytes and, for each
// archived object it was read from, where that object's bytes end and
// when the source stored it.
type ArchivedWAL struct {
	Name   string
	Number uint64 // RocksDB's file number: WALs replay in this order
	Data   []byte
	Ends   []int       // end offset of each object's bytes in Data
	Stored []time.Time // its source store time
	// Folds marks the objects that are folds whose segments the archive
	// lacks: their writes were stored between the object before and the
	// fold, no more precisely.
	Folds []bool
}

// object is the index of the object holding byte end-1.
func (w ArchivedWAL) object(end int) int {
	for i, e := range w.Ends {
		if end <= e {
			return i
		}
	}
	return len(w.Ends) - 1
}

// storedAt is when the object holding byte end-1 was stored.
func (w ArchivedWAL) storedAt(end int) time.Time { return w.Stored[w.object(end)] }

// Cut is where a restore cuts one WAL: its first Len bytes are replayed.
type Cut struct {
	Name string
	Len  int
}

// ReplayPlan is what PlanReplay decides.
type ReplayPlan struct {
	Cuts     []Cut  // the WALs to write, each cut, in order
	Last     uint64 // the last sequence replayed (the base's S when none)
	LastTime time.Time
	End      uint64 // the last sequence the archive holds from S on
}

// PlanReplay decides which bytes of the admitted WALs a restore from base
// sequence s to target t replays (RFC 0011 step 25). WALs are read in
// file-number order; batches at or below s are in the base. From s on the
// batches must be contiguous (each starts one above the last one's end):
// a hole (a gap, an ingest's sequence, which has no WAL record) refuses.
// A sequence target takes every batch whose last sequence is at or below
// it; a time target takes the longest run of batches stored at or before
// it. A WAL is cut after its last batch taken; the WALs after the cut are
// left out (a WAL with nothing above s too).
func PlanReplay(wals []ArchivedWAL, s uint64, t Target) (ReplayPlan, error) {
	wals = slices.Clone(wals)
	slices.SortFunc(wals, func(a, b ArchivedWAL) int { return cmpU(a.Number, b.Number) })
	plan := ReplayPlan{Last: s, End: s}
	taking := true
	for _, w := range wals {
		batches, err := ReadWAL(w.Data)
		if err != nil {
			return plan, fmt.Errorf("archived WAL %s: %w", w.Name, err)
		}
		cut := -1
		for _, b := range batches {
			if b.Last() <= s {
				continue
			}
			if b.Seq > plan.End+1 {
				if !taking || t.Sequence > 0 && plan.End >= t.Sequence {
					break // past the target: a hole there does not matter
				}
				return plan, fmt.Errorf("the archived WALs skip sequences %d to %d (in %s): the archive has a gap there (or an ingest, which is not archived); choose a target before sequence %d", plan.End+1, b.Seq-1, w.Name, plan.End+1)
			}
			if b.Seq <= plan.End && b.Last() <= plan.End {
				continue // already replayed (a repeat)
			}
			plan.End = b.Last()
			if !taking {
				continue
			}
			if t.Sequence > 0 && b.Last() > t.Sequence || t.Sequence == 0 && w.storedAt(b.End).After(t.Time) {
				if i := w.object(b.End); t.Sequence == 0 && i < len(w.Folds) && w.Folds[i] && (i == 0 || !w.Stored[i-1].After(t.Time)) {
					// Stored somewhere between the object before and the
					// fold: which side of the target is unknown.
					return plan, fmt.Errorf("the archive holds the writes of %s stored between %s and %s only as one fold (the archive was behind): choose a target outside that span, or a --target-sequence", w.Name, timeOr(w.Stored, i-1), w.Stored[i].UTC().Format(time.RFC3339Nano))
				}
				taking = false
				continue
			}
			cut = b.End
			plan.Last = b.Last()
			plan.LastTime = w.storedAt(b.End)
		}
		if cut > 0 {
			plan.Cuts = append(plan.Cuts, Cut{Name: w.Name, Len: cut})
		}
	}
	return plan, nil
}

func timeOr(ts []time.Time, i int) string {
	if i < 0 {
		return "the log's start"
	}
	return ts[i].UTC().Format(time.RFC3339Nano)
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
