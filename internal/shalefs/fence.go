package shalefs

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// This file holds the pure decisions of the fencing protocol
// (docs/fencing.md); the I/O around them is in takeover.go.

// ErrFenced is the permanent error of an owner whose epoch was superseded,
// or (Cause set) that stopped itself because the store and its RocksDB
// may disagree (stopOwner).
type ErrFenced struct {
	Epoch, By uint64
	Cause     string
}

func (e *ErrFenced) Error() string {
	if e.Cause != "" {
		return fmt.Sprintf("stopped: epoch %d no longer writes (%s); the next primary reopens the database from the store", e.Epoch, e.Cause)
	}
	if e.By == 0 {
		return fmt.Sprintf("fenced: epoch %d superseded by a newer owner", e.Epoch)
	}
	return fmt.Sprintf("fenced: epoch %d superseded by %d", e.Epoch, e.By)
}

// ErrStaleEpoch: an owner asked to open with an epoch that is not above
// the highest one in storage.
type ErrStaleEpoch struct {
	Requested, Highest uint64
}

func (e *ErrStaleEpoch) Error() string {
	return fmt.Sprintf("epoch %d is not above epoch %d already taken in storage; refusing to open (a newer owner exists: pass --epoch greater than %d to take over)",
		e.Requested, e.Highest, e.Highest)
}

// chooseEpoch decides the epoch to claim: requested, which must exceed
// every existing epoch, or with requested == 0 the next one.
func chooseEpoch(existing []uint64, requested uint64) (uint64, error) {
	var highest uint64
	for _, e := range existing {
		highest = max(highest, e)
	}
	if requested == 0 {
		return highest + 1, nil
	}
	if requested <= highest {
		return 0, &ErrStaleEpoch{Requested: requested, Highest: highest}
	}
	return requested, nil
}

// higherEpoch returns the highest epoch above mine, or 0.
func higherEpoch(existing []uint64, mine uint64) uint64 {
	var h uint64
	for _, e := range existing {
		if e > mine && e > h {
			h = e
		}
	}
	return h
}

// segment is one object of a segment log: segment seq (last is 0 or seq),
// or a fold of the segments seq..last (last > seq).
type segment struct {
	seq, last uint64
	size      int64
}

func (s segment) fold() bool { return s.last > s.seq }

// end is the last slot the object covers.
func (s segment) end() uint64 { return max(s.seq, s.last) }

// logVersion is what one epoch wrote to one log name.
type logVersion struct {
	epoch uint64
	// The log: objects in order, folds preferred, covering slots 1..n
	// without a gap, up to the first seal.
	segments []segment
	sealed   bool
	sealSeq  uint64 // when sealed: the seq of the first seal
	lastSeq  uint64 // highest slot present (data, fold or seal)
	size     int64  // bytes of the log
	anchored bool   // segment 1 exists (folding never deletes it)
	stray    bool   // data before the seal that the log does not reach: a hole
}

// buildLogVersion reads a version's objects as a log: from slot 1, take the
// longest fold starting there, else the segment there, and go on after it
// until the first seal (an empty segment) or a missing slot. Segments after
// a seal are never part of the log: a writer that finds its slot taken
// stops. Segments a fold covers may be gone (deleted once folded) or put
// back by a late retry; the fold holds their bytes, so they are ignored.
//
// A seal in a slot that a fold covers is void: the writer had used that
// slot, and the fold's clean-up freed it before a new owner's seal, sent
// from a listing older than the fold, won it (issue 22: 266 acknowledged
// writes after such a seal were lost). The writer went on past it, so it
// ends nothing. A fold is stored before any slot it covers is freed, so
// every listing that holds a void seal holds the fold that voids it; and a
// slot the writer never used, once sealed, can never be written or folded
// by it, so a seal no fold covers stays valid (docs/fencing.md, "Folding").
func buildLogVersion(epoch uint64, objs []segment) logVersion {
	v := logVersion{epoch: epoch}
	data := map[uint64]segment{}
	folds := map[uint64]segment{} // longest fold by first slot
	var seals []uint64
	for _, s := range objs {
		v.lastSeq = max(v.lastSeq, s.end())
		switch {
		case s.fold():
			if f, ok := folds[s.seq]; !ok || s.last > f.last {
				folds[s.seq] = s
			}
		case s.size == 0:
			seals = append(seals, s.seq)
		default:
			data[s.seq] = s
		}
	}
	for _, seq := range seals {
		if !foldCovers(folds, seq) && (!v.sealed || seq < v.sealSeq) {
			v.sealed, v.sealSeq = true, seq
		}
	}
	_, v.anchored = data[1]
	beforeSeal := func(slot uint64) bool { return !v.sealed || slot < v.sealSeq }
	p := uint64(1)
	for beforeSeal(p) {
		if f, ok := folds[p]; ok && beforeSeal(f.last) {
			v.segments = append(v.segments, f)
			v.size += f.size
			p = f.last + 1
			continue
		}
		s, ok := data[p]
		if !ok {
			break
		}
		v.segments = append(v.segments, s)
		v.size += s.size
		p++
	}
	for _, s := range objs {
		if s.size > 0 && s.seq >= p && beforeSeal(s.end()) {
			v.stray = true
		}
	}
	return v
}

// foldCovers reports whether a fold covers slot (folds: longest by first
// slot; a shorter fold from the same slot covers less).
func foldCovers(folds map[uint64]segment, slot uint64) bool {
	for _, f := range folds {
		if f.seq <= slot && slot <= f.last {
			return true
		}
	}
	return false
}

// sealGap returns the slots between the end of a sealed log and its first
// valid seal, which a sealer must still take before the log is final. The
// log ends at that seal only if the writer can no longer store anything
// below it; an empty slot below it is one the writer, going slot by slot,
// may still fill and acknowledge. A sealer leaves such slots when it stops
// between winning a slot far ahead (the stride) and filling the ones below
// (it crashed, or was deposed, or won a void seal in a slot a fold had
// freed and took it for the end). Found by the log-protocol model
// (docs/rfcs/0001-log-protocol-model.md). No gap for a version without
// segment 1 (deleted) or with data the log does not reach (a hole: the
// store lost data, and the open refuses).
func (v logVersion) sealGap() (from, to uint64, ok bool) {
	if !v.sealed || !v.anchored || v.stray || len(v.segments) == 0 {
		return 0, 0, false
	}
	end := v.segments[len(v.segments)-1].end()
	if end+1 >= v.sealSeq {
		return 0, 0, false
	}
	return end + 1, v.sealSeq - 1, true
}

// contiguous reports whether the log reaches every object before its seal;
// data it cannot reach means a segment is missing and the log cannot be
// replayed safely.
func (v logVersion) contiguous() bool { return !v.stray }

// headDeleted reports whether the version has data but not its first
// segment: the trash loop deletes a log's first segment first (folding
// never does), so this is a deleted log (possibly with a stale owner's late
// segment put back), not a log with a hole.
func (v logVersion) headDeleted() bool {
	return !v.anchored && (len(v.segments) > 0 || v.stray)
}

// chooseLogVersion picks which epoch's version of a log name is the log.
// Only an owner that did not see a log can create another log of the same
// name, and an owner that did not see it took its epoch after the log's
// writer was fenced, so the version of the highest epoch is the real one;
// lower versions were never acknowledged. A version holding only seals has
// no data (deleted, or never written) and is ignored.
func chooseLogVersion(versions []logVersion) (logVersion, bool) {
	var best logVersion
	found := false
	for _, v := range versions {
		if len(v.segments) == 0 {
			continue
		}
		if !found || v.epoch > best.epoch {
			best, found = v, true
		}
	}
	return best, found
}

// ErrOutcomeUnknown is the error of a write whose bytes reached the store
// before this owner learned it was deposed: the new owner may have listed
// them (and then it serves them) or not. The write is neither acknowledged
// nor known to have failed, so it must never be reported as fenced
// ("definitely not applied"). The owner is fenced all the same.
type ErrOutcomeUnknown struct {
	Fence *ErrFenced
}

func (e *ErrOutcomeUnknown) Error() string {
	return "write outcome unknown (it may have been applied): " + e.Fence.Error()
}

func (e *ErrOutcomeUnknown) Unwrap() error { return e.Fence }

// Fenced marks the error for the C++ side: the owner stops (IOFenced).
func (e *ErrOutcomeUnknown) Fenced() bool { return true }

// OutcomeUnknown marks the error for the KV service (UNAVAILABLE).
func (e *ErrOutcomeUnknown) OutcomeUnknown() bool { return true }

// openedRecord is _shale/opened/<E>: written by owner E once it sealed the
// store and before it opened RocksDB (so before it created any log). It
// names the log versions of older epochs that E's database is made of.
// A log version of an older epoch that is not named was created after E's
// listing, by an owner E had already deposed: nothing in it was ever
// acknowledged (step 5), and no later owner may replay it.
type openedRecord struct {
	Epoch uint64       `json:"epoch"`
	Logs  []versionRef `json:"logs"`
}

// versionRef names one epoch's version of a log.
type versionRef struct {
	Name  string `json:"name"`
	Epoch uint64 `json:"epoch"`
}

// admitLogVersion decides whether a log version found at takeover may be
// part of the database, given the record of the last owner that completed
// a takeover (nil: none did, as in a database older than the record):
//   - versions of that opener's epoch or later were written by an owner
//     that was current when it created them (a later epoch without a record
//     never opened RocksDB, so it wrote no log);
//   - versions of older epochs count only if the opener kept them.
func admitLogVersion(name string, epoch uint64, last *openedRecord) bool {
	if last == nil || epoch >= last.Epoch {
		return true
	}
	for _, r := range last.Logs {
		if r.Name == name && r.Epoch == epoch {
			return true
		}
	}
	return false
}

// leaseWait is how long a new owner waits after taking its epoch before it
// serves: an earlier owner serves reads for at most its own lease after its
// last confirmation (which began before the new claim existed), plus a
// margin for clock-rate drift. A rollout that shortens the lease must still
// outwait the old, longer one, so the longest lease among the owners that
// may still serve wins. With none (no earlier owner, or the last one
// released the database) there is nothing to wait for.
func leaseWait(own, ownMargin time.Duration, prev []epochClaim) time.Duration {
	if len(prev) == 0 {
		return 0
	}
	w := own + ownMargin
	for _, c := range prev {
		w = max(w, c.Lease+c.LeaseMargin)
	}
	return w
}

// currentEpoch reads the epoch from the trailer of a stored CURRENT
// ("MANIFEST-000005\nshale epoch=3 write=..."); 0 if there is none.
func currentEpoch(obj []byte) uint64 {
	_, trailer, ok := bytes.Cut(obj, []byte("\nshale epoch="))
	if !ok {
		return 0
	}
	digits, _, _ := bytes.Cut(trailer, []byte(" "))
	e, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return 0
	}
	return e
}
