package protocol

// The rules the log-protocol model (logmodel_test.go) runs: the fixed
// rules of issue 22, which call the real pure decisions of this package,
// and a frozen copy of the rules before it and of its first fix, each with
// the holes the model finds in it. docs/rfcs/0001-log-protocol-model.md says
// what the model covers.

// modelRules is one version of the store-level log protocol. The pure
// decisions are functions (build); what the I/O code does around them
// (the sealer's loop, the reader's refresh, the owner's announcements) is
// a switch that the model's processes follow.
type modelRules struct {
	name string
	// build reads a version's objects as a log (BuildLogVersion).
	build func(epoch uint64, objs []Segment) LogVersion
	// resealUntilSealed: after a stride-then-fill round the sealer lists
	// the version again, and while the listing holds no seal that counts
	// (one a fold of the version does not cover) it seals on from the
	// highest slot listed + 1 (item 0).
	resealUntilSealed bool
	// fillGaps: while a listing shows empty slots between the log's end
	// and its first valid seal (SealGap), the sealer takes them in order,
	// whoever sealed it: a sealer that stopped between its stride's seal
	// and the fill below it left slots the writer may still fill.
	fillGaps bool
	// readerConfirms: a refresh ends with a read of the owner record and
	// installs its view only if that read shows the epoch of the opened
	// record it used; a refresh that finds a takeover in progress keeps
	// the last view and lists everything next time (item 1).
	readerConfirms bool
	// clearedOnly: a log's stored size (what Tails announces to readers,
	// what a fold reads) advances only once a segment is cleared for
	// acknowledgement, i.e. after the confirmation a first segment needs
	// (items 1 and 6).
	clearedOnly bool
	// hintSealShort: a hinted fetch that meets a seal lists instead (the
	// seal may be void); before, the log ended there.
	hintSealShort bool
	// drop names one rule of the protocol the model leaves out, to show
	// the model needs it (TestLogModelNeedsEveryRule): "" for none.
	drop string
}

// Rules the model can leave out (modelRules.drop).
const (
	dropFill         = "the sealer takes the empty slots below its seal (fill and gap fill)"
	dropFirstConfirm = "a new log's first segment is confirmed before its ack"
	dropStaleConfirm = "a segment stored on a confirmation older than AckFresh is confirmed before its ack"
	dropAdmission    = "log versions of older epochs count only if the last opened record names them"
	dropOpenConfirm  = "Open confirms the ownership after writing the opened record"
	dropReaderLease  = "a log is deleted only once no reader's refresh or lease can use it"
	dropHoleFill     = "the sealer takes a pipelined writer's holes in order (SealGap with its depth)"
	dropInOrderAck   = "a pipelined writer acknowledges a slot only after every earlier one"
)

// without returns r with one rule left out.
func (r modelRules) without(rule string) modelRules {
	r.name += ", without: " + rule
	r.drop = rule
	return r
}

// fixedRules are the rules as built: the real BuildLogVersion (which
// ignores a seal a fold of the same version covers), the sealer's
// re-listing and gap filling (shalefs' sealVersion, SealGap), the
// reader's closing read of the owner record (shalefs' refresh), sizes that
// count only cleared segments (shalefs' syncLocked).
var fixedRules = modelRules{
	name:              "fixed rules",
	build:             BuildLogVersion,
	resealUntilSealed: true,
	fillGaps:          true,
	readerConfirms:    true,
	clearedOnly:       true,
	hintSealShort:     true,
}

// ---------------------------------------------------------------------
// The rules before issue 22 (and of its first fix), kept to show the
// model finds their holes. Nothing outside the model uses them.
// ---------------------------------------------------------------------

// oldRules: a log ends at its first seal, void or not; the sealer stops
// after one stride-then-fill round; a reader installs whatever its
// listing admitted; an owner counts a segment (announces it, folds it)
// once it is stored; a hinted fetch ends the log at a seal.
var oldRules = modelRules{
	name:  "rules before issue 22",
	build: buildLogVersionV0,
}

// oldSealerRules has only the item-0 rules old (the fold race); the reader
// and the announcements are fixed. It still loses acknowledged writes.
var oldSealerRules = modelRules{
	name:           "rules before issue 22 for seals only",
	build:          buildLogVersionV0,
	readerConfirms: true,
	clearedOnly:    true,
	hintSealShort:  true,
}

// oldReaderRules has only the item-1 rules old: the sealer and the log
// reading are fixed. A reader still serves a write that never becomes
// durable.
var oldReaderRules = modelRules{
	name:              "rules before issue 22 for readers only",
	build:             BuildLogVersion,
	resealUntilSealed: true,
	fillGaps:          true,
}

// halfReaderRules fixes the reader's refresh but not what the owner
// announces: a reader that follows hints still serves a first segment
// whose confirmation is going to fail.
var halfReaderRules = modelRules{
	name:              "reader confirmation without the announcement rule",
	build:             BuildLogVersion,
	resealUntilSealed: true,
	fillGaps:          true,
	readerConfirms:    true,
	hintSealShort:     true,
}

// firstFixRules are the rules of the first fix of issue 22 (main at
// 06003b5): void seals and re-sealing, but a sealer takes a valid seal for
// the log's end even when the log does not reach it. The model found two
// ways to lose an acknowledged write with them (TestLogModelFindsOldHoles).
var firstFixRules = modelRules{
	name:              "rules of the first fix of issue 22 (no gap fill)",
	build:             BuildLogVersion,
	resealUntilSealed: true,
	readerConfirms:    true,
	clearedOnly:       true,
	hintSealShort:     true,
}

// buildLogVersionV0 is BuildLogVersion before issue 22: the log ends at
// the version's first seal, even one that landed in a slot a fold's
// cleanup had freed (a fold that does not end before it is refused, so
// the log falls back to segment 1).
func buildLogVersionV0(epoch uint64, objs []Segment) LogVersion {
	v := LogVersion{Epoch: epoch}
	data := map[uint64]Segment{}
	folds := map[uint64]Segment{} // longest fold by first slot
	for _, s := range objs {
		v.LastSeq = max(v.LastSeq, s.End())
		switch {
		case s.Fold():
			if f, ok := folds[s.Seq]; !ok || s.Last > f.Last {
				folds[s.Seq] = s
			}
		case s.Size == 0:
			if !v.Sealed || s.Seq < v.SealSeq {
				v.Sealed, v.SealSeq = true, s.Seq
			}
		default:
			data[s.Seq] = s
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
