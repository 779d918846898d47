package shalefs

import (
	"fmt"
	"sort"
)

// This file holds the pure decisions of the fencing protocol
// (docs/fencing.md); the I/O around them is in takeover.go.

// ErrFenced is the permanent error of an owner whose epoch was superseded.
type ErrFenced struct {
	Epoch, By uint64
}

func (e *ErrFenced) Error() string {
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

// segment is one object of a segment log.
type segment struct {
	seq  uint64
	size int64
}

// logVersion is the segments one epoch wrote to one log name.
type logVersion struct {
	epoch    uint64
	segments []segment // ascending seq, data segments before the seal only
	sealed   bool
	sealSeq  uint64 // when sealed: the seq of the first seal
	lastSeq  uint64 // highest seq present (data or seal)
	size     int64  // bytes in segments before the seal
}

// buildLogVersion orders a version's segment objects and cuts it at its
// first seal (an empty segment). Segments after a seal are never part of
// the log: a writer that finds its slot taken stops.
func buildLogVersion(epoch uint64, segs []segment) logVersion {
	sort.Slice(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	v := logVersion{epoch: epoch}
	for _, s := range segs {
		v.lastSeq = max(v.lastSeq, s.seq)
		if v.sealed {
			continue
		}
		if s.size == 0 {
			v.sealed, v.sealSeq = true, s.seq
			continue
		}
		v.segments = append(v.segments, s)
		v.size += s.size
	}
	return v
}

// contiguous reports whether the data segments are 1..n with no gap; a gap
// means a segment is missing and the log cannot be replayed safely.
func (v logVersion) contiguous() bool {
	for i, s := range v.segments {
		if s.seq != uint64(i+1) {
			return false
		}
	}
	return true
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
