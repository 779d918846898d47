package protocol

// Segment is one object of a segment log: segment Seq (Last is 0 or Seq),
// or a fold of the segments Seq..Last (Last > Seq).
type Segment struct {
	Seq, Last uint64
	Size      int64
}

// Fold reports whether the object is a fold.
func (s Segment) Fold() bool { return s.Last > s.Seq }

// End is the last slot the object covers.
func (s Segment) End() uint64 { return max(s.Seq, s.Last) }

// LogVersion is what one epoch wrote to one log name.
type LogVersion struct {
	Epoch uint64
	// The log: objects in order, folds preferred, covering slots 1..n
	// without a gap, up to the first seal.
	Segments []Segment
	Sealed   bool
	SealSeq  uint64 // when sealed: the seq of the first seal
	LastSeq  uint64 // highest slot present (data, fold or seal)
	LastData uint64 // highest slot holding data (a segment, or a fold's end)
	Size     int64  // bytes of the log
	Anchored bool   // segment 1 exists (folding never deletes it)
	Stray    bool   // data before the seal that the log does not reach: a hole
}

// BuildLogVersion reads a version's objects as a log: from slot 1, take the
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
func BuildLogVersion(epoch uint64, objs []Segment) LogVersion {
	v := LogVersion{Epoch: epoch}
	data := map[uint64]Segment{}
	folds := map[uint64]Segment{} // longest fold by first slot
	var seals []uint64
	for _, s := range objs {
		v.LastSeq = max(v.LastSeq, s.End())
		if s.Size > 0 {
			v.LastData = max(v.LastData, s.End())
		}
		switch {
		case s.Fold():
			if f, ok := folds[s.Seq]; !ok || s.Last > f.Last {
				folds[s.Seq] = s
			}
		case s.Size == 0:
			seals = append(seals, s.Seq)
		default:
			data[s.Seq] = s
		}
	}
	for _, seq := range seals {
		if !foldCovers(folds, seq) && (!v.Sealed || seq < v.SealSeq) {
			v.Sealed, v.SealSeq = true, seq
		}
	}
	_, v.Anchored = data[1]
	beforeSeal := func(slot uint64) bool { return !v.Sealed || slot < v.SealSeq }
	p := uint64(1)
	for beforeSeal(p) {
		if f, ok := folds[p]; ok && beforeSeal(f.Last) {
			v.Segments = append(v.Segments, f)
			v.Size += f.Size
			p = f.Last + 1
			continue
		}
		s, ok := data[p]
		if !ok {
			break
		}
		v.Segments = append(v.Segments, s)
		v.Size += s.Size
		p++
	}
	for _, s := range objs {
		if s.Size > 0 && s.Seq >= p && beforeSeal(s.End()) {
			v.Stray = true
		}
	}
	return v
}

// foldCovers reports whether a fold covers slot (folds: longest by first
// slot; a shorter fold from the same slot covers less).
func foldCovers(folds map[uint64]Segment, slot uint64) bool {
	for _, f := range folds {
		if f.Seq <= slot && slot <= f.Last {
			return true
		}
	}
	return false
}

// SealGap returns the slots between the end of a sealed log and its first
// valid seal, which a sealer must still take before the log is final. The
// log ends at that seal only if the writer can no longer store anything
// below it; an empty slot below it is one the writer, going slot by slot,
// may still fill and acknowledge. A sealer leaves such slots when it stops
// between winning a slot far ahead (the stride) and filling the ones below
// (it crashed, or was deposed, or won a void seal in a slot a fold had
// freed and took it for the end). Found by the log-protocol model
// (docs/rfcs/0001-log-protocol-model.md). No gap for a version without
// segment 1 (deleted).
//
// depth is the writer's WAL pipeline depth (its epoch claim; 1 for a claim
// that records none). At depth 1 the writer never leaves a hole, so data
// the log does not reach means the store lost data: no gap, and the open
// refuses. A writer with depth D > 1 keeps up to D uploads in flight that
// land in any order, so the empty slots from the log's end up to the seal,
// with its data among them, are its window: they are taken in order like
// any gap, each either sealed (the log ends there, and nothing at or after
// it was acknowledged: acknowledgement is in slot order) or found holding
// the writer's segment (docs/rfcs/0013-pipelined-writes.md, step 9).
func (v LogVersion) SealGap(depth uint64) (from, to uint64, ok bool) {
	if !v.Sealed || !v.Anchored || len(v.Segments) == 0 || (v.Stray && depth <= 1) {
		return 0, 0, false
	}
	end := v.Segments[len(v.Segments)-1].End()
	if end+1 >= v.SealSeq {
		return 0, 0, false
	}
	return end + 1, v.SealSeq - 1, true
}

// LostData reports, for a sealed version whose writer had pipeline depth
// depth > 1, data depth or more slots past the seal that ends its log. A
// seal is won only in an empty slot h, which its writer therefore never
// cleared (it clears a slot only after it landed; folds cover only
// cleared slots), and the writer queues a slot only while fewer than depth
// are uncleared, so it never stored one at h+depth or beyond, before or
// after the seal: such data means the store lost the segments between.
// Sound on a listing that is not a snapshot (RFC 0013, step 10). At depth
// 1 data after the seal is ignored, as it always was. Only for a log that
// has segment 1 and reaches its seal: a version the trash loop emptied
// (segment 1 goes first) may hold a late upload of a deposed writer in a
// slot the loop freed, after a seal won in another freed slot (the
// log-protocol model found it); such a version has no log and is ignored.
func (v LogVersion) LostData(depth uint64) bool {
	return depth > 1 && v.Sealed && v.Anchored && len(v.Segments) > 0 && v.LastData >= v.SealSeq+depth
}

// Contiguous reports whether the log reaches every object before its seal;
// data it cannot reach means a segment is missing and the log cannot be
// replayed safely.
func (v LogVersion) Contiguous() bool { return !v.Stray }

// HeadDeleted reports whether the version has data but not its first
// segment: the trash loop deletes a log's first segment first (folding
// never does), so this is a deleted log (possibly with a stale owner's late
// segment put back), not a log with a hole.
func (v LogVersion) HeadDeleted() bool {
	return !v.Anchored && (len(v.Segments) > 0 || v.Stray)
}

// ChooseLogVersion picks which epoch's version of a log name is the log.
// Only an owner that did not see a log can create another log of the same
// name, and an owner that did not see it took its epoch after the log's
// writer was fenced, so the version of the highest epoch is the real one;
// lower versions were never acknowledged. A version holding only seals has
// no data (deleted, or never written) and is ignored.
func ChooseLogVersion(versions []LogVersion) (LogVersion, bool) {
	var best LogVersion
	found := false
	for _, v := range versions {
		if len(v.Segments) == 0 {
			continue
		}
		if !found || v.Epoch > best.Epoch {
			best, found = v, true
		}
	}
	return best, found
}
