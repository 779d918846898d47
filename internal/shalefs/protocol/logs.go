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
// segment 1 (deleted) or with data the log does not reach (a hole: the
// store lost data, and the open refuses).
func (v LogVersion) SealGap() (from, to uint64, ok bool) {
	if !v.Sealed || !v.Anchored || v.Stray || len(v.Segments) == 0 {
		return 0, 0, false
	}
	end := v.Segments[len(v.Segments)-1].End()
	if end+1 >= v.SealSeq {
		return 0, 0, false
	}
	return end + 1, v.SealSeq - 1, true
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
