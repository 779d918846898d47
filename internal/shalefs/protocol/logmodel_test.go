package protocol

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// An executable model of the store-level log protocol (docs/fencing.md),
// explored exhaustively within small bounds: every interleaving of the
// processes' atomic steps, depth first, pruning states already explored.
// No goroutines and no real store: each step is one request to an
// abstract store with create-only puts, lists and deletes. The processes:
//
//   - A, the old owner (epoch 1): appends segments to its WAL slot by slot,
//     create-only, acknowledging each (after a confirmation when it is a
//     log's first segment or its confirmation is stale); may switch to a
//     new WAL; folds runs of segments in the background and then deletes
//     the folded ones (all but segment 1); announces what it stored to
//     readers; may notice the takeover through its lease loop.
//   - B, the new owner (epoch 2): claims the epoch and raises the owner
//     record, reads the last opened record, lists the logs, seals each
//     admitted version (stride, then fill; again after void seals; the
//     gap below a seal), writes its opened record,
//     confirms and serves what it replayed; then flushes that into a
//     table, trashes the logs, deletes their data and later their seals.
//   - C (optional), a third owner after B; B may crash at any point.
//   - a reader: refreshes (owner record, opened record, listing, closing
//     read of the owner record, install), or follows A's hints.
//
// docs/rfcs/0001-log-protocol-model.md says what is modelled, what is
// abstracted away, and how to run it. The rules (logmodel_rules_test.go)
// are either the fixed ones, which call BuildLogVersion, SealGap,
// AdmitLogVersion and ChooseLogVersion of this package, or a frozen copy
// of the rules before issue 22 (and of its first fix).

// Bounds of the model's arrays.
const (
	mLogs  = 2  // WALs A writes: L0 (open at the start) and L1 (after a switch)
	mSlots = 16 // slots 1..15 of each log version
	mFolds = 4  // folds per log version
	mDepth = 4  // uploads a pipelined A keeps in flight
)

const (
	epochA = 1
	epochB = 2
	epochC = 3
)

// modelConfig bounds one exploration.
type modelConfig struct {
	Name   string
	Pre    int  // segments of L0 A stored and acknowledged before anything else happens
	Writes int  // further writes A attempts
	Fold   int  // A folds once this many segments are unfolded (0: never)
	NewLog bool // A may switch to a new WAL, L1
	Reader int  // the reader's refreshes (0: no reader)
	Hints  bool // the reader may also refresh from A's announcements
	Trash  bool // B flushes what it replayed, trashes the logs, deletes their data, then their seals
	Third  bool // a third owner C takes over after B
	Crash  bool // B may crash at any point (with Third: an incomplete takeover)
	PerKey bool // a LIST reads one key per step, in key order, and a fold's clean-up deletes one key per step
	// Depth > 1: A keeps up to Depth segment uploads in flight, which land
	// in any order, and clears them in slot order (RFC 0013); its claim
	// records Depth, which the sealers use.
	Depth int
}

// Objects in a slot.
const (
	oNone uint8 = iota
	oData
	oSeal
)

type mFold struct{ first, last uint8 }

// verKey is the objects of one log version.
type verKey struct {
	slots [mSlots]uint8
	folds [mFolds]mFold // in the order they were stored
}

// mStore is the abstract store.
type mStore struct {
	owner    uint8    // _shale/owner
	opened   [4]uint8 // _shale/opened/<e>: 0 absent, else 0x80 | bit l for each L_l@1 it names
	trash    uint8    // bit l: _shale/trash/L_l/1
	logs     [mLogs]verKey
	tables   [4]uint32 // tables[e]: the writes owner e flushed
	tableSet uint8     // bit e: owner e's table exists
}

// mList is a LIST in progress (PerKey): the last key position read (2s
// for segment s, 2s+1 for the fold that ends at s: a fold's key sorts
// right after the last segment it covers) and the objects seen so far.
type mList struct {
	cursor uint8
	seen   verKey
}

// mOld is A, the old owner.
type mOld struct {
	stopped   bool  // fenced (or stopped) and aware of it
	cur       uint8 // the WAL it writes
	next      [mLogs]uint8
	cleared   [mLogs]uint8 // last slot cleared for acknowledgement
	pending   uint8        // a slot of cur stored, waiting for the confirmation that clears it
	written   uint8        // writes attempted
	foldFrom  [mLogs]uint8 // first slot not folded yet
	foldPh    uint8
	foldLog   uint8
	foldFirst uint8
	foldLast  uint8
	foldDel   uint8 // PerKey: the next folded slot to delete
	acked     uint32
	unknown   uint32 // answered "outcome unknown"
	fenced    uint32 // answered "fenced": definitely not applied
	// Depth > 1: the uploads queued and not cleared, in ticket order.
	fly  [mDepth]mFlight
	nfly uint8
}

// mFlight is one queued segment upload of a pipelined A.
type mFlight struct{ l, slot, st uint8 }

// States of a queued upload.
const (
	flQueued uint8 = iota + 1 // sent, not landed yet
	flLanded                  // stored, not cleared
	flSealed                  // met a seal: not stored
)

// Phases of A's background fold (foldLater, foldLog).
const (
	fIdle      uint8 = iota
	fScheduled       // the goroutine is started
	fChecked         // it found the owner not fenced; waits for the log's lock
	fPut             // it read the tail: the fold is to be stored
	fDelete          // the fold is stored: the folded segments are to be deleted
)

// mNew is a new owner (B or C).
type mNew struct {
	ph      uint8
	last    uint8 // epoch of the opened record it read (0: none)
	todo    uint8 // log versions still to seal, or to delete
	sub     uint8
	slot    uint8
	stride  uint8
	taken   uint8
	lst     mList
	kept    uint8  // log versions it replays
	db      uint32 // the writes its database holds
	serving bool   // it opened: confirmed its ownership after writing its record
	leaseOK bool   // its last confirmation is within its lease
	crashed bool
	refused bool // refused to open: a log with a hole
}

// Phases of a new owner.
const (
	nClaim uint8 = iota
	nReadOpened
	nListLogs
	nSeal
	nRecord
	nConfirm
	nFlush
	nTrash
	nDelete
	nDone
)

// Steps of sealing one version (sealVersion).
const (
	sStart  uint8 = iota // list it; seal it unless a seal counts already
	sStride              // seal at slot; on losing it, skip ahead with a doubling stride
	sFill                // seal each slot after taken and below slot, in order, until one is won
	sList                // list it again
)

// mReader is the reader.
type mReader struct {
	ph         uint8
	n          uint8 // refreshes done
	opened     uint8 // rs.opened's epoch (0: none)
	ownerSeen  uint8 // rs.ownerEpoch
	ownerRead  uint8 // this refresh's first read of the owner record
	readOpened bool  // this refresh read the opened records
	full       bool  // rs.full: a hinted refresh falls short
	trashSeen  uint8
	lst        mList
	lstLog     uint8
	seen       [mLogs]verKey
	cand       uint32
	candLast   [mLogs]uint8
	view       uint32       // the writes it serves
	viewLast   [mLogs]uint8 // per log version in the view, the last slot it reaches (0: not in the view)
}

// Reader phases.
const (
	rIdle uint8 = iota
	rOpened
	rList
	rConfirm
)

// mState is the whole model's state; the explorer hashes it.
type mState struct {
	st       mStore
	ackStale bool // A's last confirmation is older than AckFresh (a seal of its logs was deleted)
	a        mOld
	b, c     mNew
	r        mReader
	unfound  uint32 // writes the reader served and then lost (set by the install that lost them)
}

// Steps, in the order the explorer tries them.
const (
	stAWrite = iota
	stAClear
	stALand0
	stALand1
	stALand2
	stALand3
	stASwitch
	stALease
	stAFold
	stB
	stBCrash
	stC
	stR
	stRHint
	nSteps
)

// Events the tests expect an exploration to reach (coverage: the model is
// not vacuous).
const (
	evSealLost        = "a seal lost its slot to A"
	evVoidReseal      = "the sealer found only void seals and sealed on"
	evGapFill         = "the sealer filled empty slots below a seal"
	evFencedBySeal    = "A's put met a seal: fenced"
	evUnknown         = "A answered outcome unknown"
	evFoldStored      = "A stored a fold"
	evReaderKeeps     = "the reader kept its view during a takeover"
	evReaderRelists   = "the reader's closing read found a newer owner and it listed again"
	evHint            = "the reader followed a hint"
	evFreedSlot       = "A stored into a slot freed by the seal deletion"
	evDeposedOpening  = "an owner was deposed while opening"
	evNotAdmitted     = "an owner trashed a log the last opened record does not name"
	evHeadDeleted     = "an owner found a log without segment 1"
	evSealsDeleted    = "B deleted a log's seals"
	evIncompleteTaken = "C took over from an incomplete takeover"
	evOutOfOrder      = "a pipelined upload landed before an earlier one"
	evHoleSealed      = "the sealer sealed a hole in a pipelined writer's window"
	evLandedPastSeal  = "a pipelined upload landed past the seal that ends the log"
)

func wbit(l, slot uint8) uint32 { return 1 << (uint(l)*mSlots + uint(slot)) }

var logNames = [mLogs]string{"000010.log", "000012.log"}

func logName(l uint8) string { return logNames[l] }

// writesString names a set of writes: "000010.log:2,3".
func writesString(w uint32) string {
	var parts []string
	for l := uint8(0); l < mLogs; l++ {
		var slots []string
		for s := uint8(1); s < mSlots; s++ {
			if w&wbit(l, s) != 0 {
				slots = append(slots, fmt.Sprint(s))
			}
		}
		if len(slots) > 0 {
			parts = append(parts, logName(l)+":"+strings.Join(slots, ","))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, " ")
}

// explorer runs one exploration.
type explorer struct {
	cfg   modelConfig
	rules modelRules
	seen  stateSet
	seeds [2]maphash.Seed
	path  []uint8
	// found: per violation kind, the shortest path to it.
	found  map[string][]uint8
	stop   func(found map[string][]uint8) bool
	halted bool
	builds map[verKey]LogVersion
	recs   map[[2]uint8]*layout.OpenedRecord
	cover  map[string]int
	trace  func(who, what string) // set while replaying a path for printing
}

func (x *explorer) say(who, format string, args ...any) {
	if x.trace != nil {
		x.trace(who, fmt.Sprintf(format, args...))
	}
}

func (x *explorer) event(name string) {
	if x.trace == nil {
		x.cover[name]++
	}
}

// build reads a version's objects as a log, by the rules.
func (x *explorer) build(k verKey) LogVersion {
	if v, ok := x.builds[k]; ok {
		return v
	}
	var objs []Segment
	for slot := uint8(1); slot < mSlots; slot++ {
		switch k.slots[slot] {
		case oData:
			objs = append(objs, Segment{Seq: uint64(slot), Last: uint64(slot), Size: 1})
		case oSeal:
			objs = append(objs, Segment{Seq: uint64(slot), Last: uint64(slot)})
		}
	}
	for _, f := range k.folds {
		if f.last != 0 {
			objs = append(objs, Segment{Seq: uint64(f.first), Last: uint64(f.last), Size: int64(f.last - f.first + 1)})
		}
	}
	v := x.rules.build(epochA, objs)
	x.builds[k] = v
	return v
}

func (k verKey) present() bool {
	for _, o := range k.slots {
		if o != oNone {
			return true
		}
	}
	return k.folds[0].last != 0
}

// listNext reads the key of log version l that follows ls.cursor into
// ls.seen and names it; "" when there is none (the listing is complete).
func listNext(s *mState, l uint8, ls *mList) string {
	k := &s.st.logs[l]
	for pos := max(ls.cursor+1, 2); pos < 2*mSlots; pos++ {
		slot := pos / 2
		if pos%2 == 0 {
			if o := k.slots[slot]; o != oNone {
				ls.seen.slots[slot] = o
				ls.cursor = pos
				if o == oSeal {
					return fmt.Sprintf("%d(seal)", slot)
				}
				return fmt.Sprint(slot)
			}
			continue
		}
		for _, f := range k.folds {
			if f.last == slot {
				for i := range ls.seen.folds {
					if ls.seen.folds[i].last == 0 {
						ls.seen.folds[i] = f
						break
					}
				}
				ls.cursor = pos
				return fmt.Sprintf("fold %d-%d", f.first, f.last)
			}
		}
	}
	return ""
}

// list lists log version l: at once, or (PerKey) one key per call, each
// a request that returns the key after the last one read. done says the
// listing is complete and its objects are in ls.seen; else key is the key
// this call read.
func (x *explorer) list(s *mState, l uint8, ls *mList) (done bool, key string) {
	if !x.cfg.PerKey {
		ls.seen = s.st.logs[l]
		return true, ""
	}
	if key := listNext(s, l, ls); key != "" {
		return false, key
	}
	return true, ""
}

// admit is AdmitLogVersion for L_l@1 under the opened record of epoch e.
func (x *explorer) admit(s *mState, l, e uint8) bool {
	if x.rules.drop == dropAdmission {
		return true
	}
	k := [2]uint8{e, s.st.opened[e]}
	rec, ok := x.recs[k]
	if !ok {
		rec = record(s, e)
		x.recs[k] = rec
	}
	return AdmitLogVersion(logName(l), epochA, rec)
}

// logWrites is the set of writes a log holds and the last slot it reaches.
func logWrites(v LogVersion, l uint8) (uint32, uint8) {
	var w uint32
	var last uint8
	for _, seg := range v.Segments {
		for slot := seg.Seq; slot <= seg.End(); slot++ {
			w |= wbit(l, uint8(slot))
		}
		last = uint8(seg.End())
	}
	return w, last
}

// record turns _shale/opened/<e> into the record the code reads.
func record(s *mState, e uint8) *layout.OpenedRecord {
	if e == 0 || s.st.opened[e] == 0 {
		return nil
	}
	r := &layout.OpenedRecord{Epoch: uint64(e), Logs: []layout.VersionRef{}}
	for l := uint8(0); l < mLogs; l++ {
		if s.st.opened[e]&(1<<l) != 0 {
			r.Logs = append(r.Logs, layout.VersionRef{Name: logName(l), Epoch: epochA})
		}
	}
	return r
}

func describe(v LogVersion) string {
	var segs []string
	for _, s := range v.Segments {
		if s.Fold() {
			segs = append(segs, fmt.Sprintf("fold %d-%d", s.Seq, s.Last))
		} else {
			segs = append(segs, fmt.Sprint(s.Seq))
		}
	}
	out := "log [" + strings.Join(segs, " ") + "]"
	if v.Sealed {
		out += fmt.Sprintf(", sealed at %d", v.SealSeq)
	}
	return out
}

// objects names a version's objects in key order, as a LIST returns them.
func objects(k verKey) string {
	var parts []string
	for slot := uint8(1); slot < mSlots; slot++ {
		switch k.slots[slot] {
		case oData:
			parts = append(parts, fmt.Sprint(slot))
		case oSeal:
			parts = append(parts, fmt.Sprintf("%d(seal)", slot))
		}
		for _, f := range k.folds {
			if f.last == slot {
				parts = append(parts, fmt.Sprintf("fold %d-%d", f.first, f.last))
			}
		}
	}
	if len(parts) == 0 {
		return "{}"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// ---- A, the old owner ----

// stored is the last slot of log l that A counts: stored, or (fixed rules)
// cleared for acknowledgement. A fold reads up to it; Tails announces it.
func (x *explorer) stored(s *mState, l uint8) uint8 {
	if x.rules.clearedOnly {
		return s.a.cleared[l]
	}
	return s.a.next[l] - 1
}

func (x *explorer) clear(s *mState, l, slot uint8) {
	a := &s.a
	a.acked |= wbit(l, slot)
	a.cleared[l] = slot
	// foldLater, after each sync: a run of Fold unfolded segments.
	if x.cfg.Fold > 0 && a.foldPh == fIdle && int(x.stored(s, l))+1-int(a.foldFrom[l]) >= x.cfg.Fold {
		a.foldPh, a.foldLog = fScheduled, l
	}
}

func (x *explorer) stepAWrite(s *mState) bool {
	a := &s.a
	if a.stopped {
		return false
	}
	if a.pending != 0 {
		// confirmBeforeAck: one GET of the owner record.
		l, slot := a.cur, a.pending
		a.pending = 0
		if s.st.owner == epochA {
			x.clear(s, l, slot)
			x.say("A", "reads _shale/owner = 1: acknowledges %s slot %d", logName(l), slot)
		} else {
			a.unknown |= wbit(l, slot)
			a.stopped = true
			x.event(evUnknown)
			x.say("A", "reads _shale/owner = %d: fenced; answers %s slot %d \"outcome unknown\"", s.st.owner, logName(l), slot)
		}
		return true
	}
	if int(a.written) >= x.cfg.Writes {
		return false
	}
	l := a.cur
	slot := a.next[l]
	if slot >= mSlots {
		panic("model: raise mSlots")
	}
	a.written++
	switch s.st.logs[l].slots[slot] {
	case oNone:
		s.st.logs[l].slots[slot] = oData
		a.next[l]++
		if s.ackStale {
			x.event(evFreedSlot)
		}
		if (slot == 1 && x.rules.drop != dropFirstConfirm) || (s.ackStale && x.rules.drop != dropStaleConfirm) {
			a.pending = slot
			why := "the log's first segment"
			if slot != 1 {
				why = "its last confirmation is older than AckFresh"
			}
			x.say("A", "stores %s@1 slot %d (create-only); confirms before acknowledging (%s)", logName(l), slot, why)
		} else {
			x.clear(s, l, slot)
			x.say("A", "stores %s@1 slot %d (create-only) and acknowledges it", logName(l), slot)
		}
	case oSeal:
		a.fenced |= wbit(l, slot)
		a.stopped = true
		x.event(evFencedBySeal)
		x.say("A", "put of %s@1 slot %d meets a seal: fenced; answers the write \"fenced\"", logName(l), slot)
	default:
		panic("model: A's next slot holds data")
	}
	return true
}

// ---- a pipelined A (Depth > 1, RFC 0013) ----

// sealDepth is A's pipeline depth as its epoch claim records it.
func (x *explorer) sealDepth() uint64 {
	if x.rules.drop == dropHoleFill || x.cfg.Depth < 1 {
		return 1
	}
	return uint64(x.cfg.Depth)
}

// stepAQueue: a WAL sync queues the next slot's upload (no request yet:
// stepALand is the PUT) while fewer than Depth are uncleared.
func (x *explorer) stepAQueue(s *mState) bool {
	a := &s.a
	if a.stopped || int(a.written) >= x.cfg.Writes || int(a.nfly) >= x.cfg.Depth {
		return false
	}
	l := a.cur
	slot := a.next[l]
	if slot >= mSlots {
		panic("model: raise mSlots")
	}
	a.written++
	a.next[l]++
	a.fly[a.nfly] = mFlight{l: l, slot: slot, st: flQueued}
	a.nfly++
	x.say("A", "queues the upload of %s@1 slot %d", logName(l), slot)
	return true
}

// stepALand: the i-th queued upload's PUT (create-only) reaches the store,
// in any order; also after A stopped (a request already sent).
func (x *explorer) stepALand(s *mState, i uint8) bool {
	a := &s.a
	if i >= a.nfly || a.fly[i].st != flQueued {
		return false
	}
	f := &a.fly[i]
	for j := uint8(0); j < i; j++ {
		if a.fly[j].st == flQueued {
			x.event(evOutOfOrder)
			break
		}
	}
	switch s.st.logs[f.l].slots[f.slot] {
	case oNone:
		s.st.logs[f.l].slots[f.slot] = oData
		f.st = flLanded
		if s.ackStale {
			x.event(evFreedSlot)
		}
		for slot := f.slot - 1; slot > 0; slot-- {
			if s.st.logs[f.l].slots[slot] == oSeal {
				x.event(evLandedPastSeal)
				break
			}
		}
		x.say("A", "stores %s@1 slot %d (create-only)", logName(f.l), f.slot)
	case oSeal:
		f.st = flSealed
		x.event(evFencedBySeal)
		x.say("A", "put of %s@1 slot %d meets a seal", logName(f.l), f.slot)
	default:
		panic("model: A's slot holds data")
	}
	if a.stopped {
		// Nobody clears it any more: drop uploads that are done.
		x.dropDone(s)
	}
	return true
}

// dropDone forgets a stopped A's uploads that can no longer land.
func (x *explorer) dropDone(s *mState) {
	a := &s.a
	k := uint8(0)
	for i := uint8(0); i < a.nfly; i++ {
		if a.fly[i].st == flQueued {
			a.fly[k] = a.fly[i]
			k++
		}
	}
	for i := k; i < a.nfly; i++ {
		a.fly[i] = mFlight{}
	}
	a.nfly = k
}

// stepAClear completes the oldest upload (in ticket order): clears and
// acknowledges it (after a confirmation for a log's first segment or on a
// stale confirmation), or stops A. With dropInOrderAck any landed upload
// is cleared, whatever came before it.
func (x *explorer) stepAClear(s *mState) bool {
	a := &s.a
	if a.stopped || a.nfly == 0 {
		return false
	}
	i := uint8(0)
	if x.rules.drop == dropInOrderAck {
		for i < a.nfly && a.fly[i].st == flQueued {
			i++
		}
		if i == a.nfly {
			return false
		}
	}
	f := a.fly[i]
	stop := func(why string) {
		a.stopped = true
		if a.nfly == 1 && f.st == flSealed {
			a.fenced |= wbit(f.l, f.slot)
		} else {
			for j := uint8(0); j < a.nfly; j++ {
				a.unknown |= wbit(a.fly[j].l, a.fly[j].slot)
			}
			x.event(evUnknown)
		}
		x.say("A", "%s: stops; answers %s", why, writesString(a.unknown|a.fenced&wbit(f.l, f.slot)))
		x.dropDone(s)
	}
	switch f.st {
	case flQueued:
		return false
	case flSealed:
		stop(fmt.Sprintf("%s@1 slot %d met a seal", logName(f.l), f.slot))
		return true
	}
	confirm := (f.slot == 1 && x.rules.drop != dropFirstConfirm) || (s.ackStale && x.rules.drop != dropStaleConfirm)
	if confirm && s.st.owner != epochA {
		stop(fmt.Sprintf("confirms %s@1 slot %d: reads _shale/owner = %d", logName(f.l), f.slot, s.st.owner))
		return true
	}
	copy(a.fly[i:], a.fly[i+1:a.nfly])
	a.nfly--
	a.fly[a.nfly] = mFlight{}
	x.clear(s, f.l, f.slot)
	if confirm {
		x.say("A", "reads _shale/owner = 1: acknowledges %s slot %d", logName(f.l), f.slot)
	} else {
		x.say("A", "acknowledges %s slot %d", logName(f.l), f.slot)
	}
	return true
}

func (x *explorer) stepASwitch(s *mState) bool {
	a := &s.a
	if !x.cfg.NewLog || a.stopped || a.pending != 0 || a.cur != 0 || int(a.written) >= x.cfg.Writes {
		return false
	}
	a.cur = 1
	x.say("A", "switches to a new WAL, %s", logName(1))
	return true
}

func (x *explorer) stepALease(s *mState) bool {
	a := &s.a
	if a.stopped || a.pending != 0 || s.st.owner == epochA {
		return false
	}
	a.stopped = true
	for i := uint8(0); i < a.nfly; i++ {
		a.unknown |= wbit(a.fly[i].l, a.fly[i].slot)
	}
	x.dropDone(s)
	x.say("A", "lease loop reads _shale/owner = %d: fenced, stops", s.st.owner)
	return true
}

func (x *explorer) stepAFold(s *mState) bool {
	a := &s.a
	l := a.foldLog
	switch a.foldPh {
	case fScheduled:
		if a.stopped {
			a.foldPh = fIdle // foldLog returns at once once the owner knows it is fenced
			x.say("A fold", "finds the owner fenced: folds nothing")
			return true
		}
		a.foldPh = fChecked
		x.say("A fold", "starts (the owner is not fenced)")
	case fChecked:
		if a.pending != 0 && a.cur == l {
			return false // the sync holds the log's lock
		}
		first, last := a.foldFrom[l], x.stored(s, l)
		if last < first+1 {
			a.foldPh = fIdle
			x.say("A fold", "finds fewer than 2 segments to fold")
			return true
		}
		a.foldPh, a.foldFirst, a.foldLast = fPut, first, last
		x.say("A fold", "reads the tail of %s@1: slots %d-%d", logName(l), first, last)
	case fPut:
		i := 0
		for i < mFolds && s.st.logs[l].folds[i].last != 0 {
			i++
		}
		if i == mFolds {
			panic("model: raise mFolds")
		}
		s.st.logs[l].folds[i] = mFold{a.foldFirst, a.foldLast}
		a.foldFrom[l] = a.foldLast + 1
		a.foldPh, a.foldDel = fDelete, max(a.foldFirst, 2)
		x.event(evFoldStored)
		x.say("A fold", "stores fold %d-%d of %s@1 (create-only)", a.foldFirst, a.foldLast, logName(l))
	case fDelete:
		k := &s.st.logs[l]
		if x.cfg.PerKey {
			slot := a.foldDel
			k.slots[slot] = oNone
			a.foldDel++
			if a.foldDel > a.foldLast {
				a.foldPh = fIdle
			}
			x.say("A fold", "deletes %s@1 slot %d", logName(l), slot)
			return true
		}
		for slot := max(a.foldFirst, 2); slot <= a.foldLast; slot++ {
			k.slots[slot] = oNone
		}
		a.foldPh = fIdle
		x.say("A fold", "deletes the folded segments %d-%d of %s@1 (keeps slot 1)", max(a.foldFirst, 2), a.foldLast, logName(l))
	default:
		return false
	}
	return true
}

// ---- B and C, the new owners ----

func (x *explorer) stepNew(s *mState, who string, e uint8) bool {
	n := &s.b
	if e == epochC {
		n = &s.c
	}
	if n.crashed || n.refused || n.ph == nDone {
		return false
	}
	switch n.ph {
	case nClaim:
		if e == epochC && s.b.ph == nClaim {
			return false // C's epoch is one above B's claim
		}
		s.st.owner = e
		n.leaseOK = true
		n.ph = nReadOpened
		x.say(who, "claims epoch %d and raises _shale/owner to %d", e, e)
	case nReadOpened:
		for o := e - 1; o > 0; o-- {
			if s.st.opened[o] != 0 {
				n.last = o
				break
			}
		}
		if e == epochC && n.last == epochA {
			x.event(evIncompleteTaken)
		}
		n.ph = nListLogs
		x.say(who, "reads the last opened record: _shale/opened/%d", n.last)
	case nListLogs:
		var names []string
		for l := uint8(0); l < mLogs; l++ {
			if s.st.logs[l].present() && s.st.trash&(1<<l) == 0 {
				n.todo |= 1 << l
				if x.trace != nil {
					names = append(names, logName(l)+"@1")
				}
			}
		}
		n.ph, n.sub = nSeal, sStart
		if n.todo == 0 {
			n.ph = nRecord
		}
		if x.trace != nil {
			x.say(who, "lists the trash and the logs: %s", strings.Join(names, ", "))
		}
	case nSeal:
		x.sealStep(s, n, who, e)
	case nRecord:
		for o := uint8(1); o < e; o++ {
			if s.st.tableSet&(1<<o) != 0 {
				n.db |= s.st.tables[o]
			}
		}
		s.st.opened[e] = 0x80 | n.kept
		n.ph = nConfirm
		if x.trace != nil {
			var names []string
			for l := uint8(0); l < mLogs; l++ {
				if n.kept&(1<<l) != 0 {
					names = append(names, logName(l)+"@1")
				}
			}
			x.say(who, "lists the tables; writes _shale/opened/%d naming [%s]", e, strings.Join(names, " "))
		}
	case nConfirm:
		// Open's last step: a confirmation before serving.
		if s.st.owner != e && x.rules.drop != dropOpenConfirm {
			n.ph = nDone
			x.event(evDeposedOpening)
			x.say(who, "reads _shale/owner = %d: deposed while opening, serves nothing", s.st.owner)
			return true
		}
		n.serving = true
		if e == epochC {
			s.b.leaseOK = false // C waited out B's lease before its record
		}
		n.ph = nDone
		if e == epochB && x.cfg.Trash && n.kept != 0 {
			n.ph = nFlush
		}
		if x.trace != nil {
			x.say(who, "reads _shale/owner = %d: opens and serves %s", e, writesString(n.db))
		}
	case nFlush:
		s.st.tables[e] = n.db
		s.st.tableSet |= 1 << e
		n.ph = nTrash
		x.say(who, "flushes what it replayed into a table")
	case nTrash:
		s.st.trash |= n.kept
		n.todo, n.sub = n.kept, 0
		n.ph = nDelete
		x.say(who, "trashes the logs it replayed")
	case nDelete:
		return x.deleteStep(s, n, who, e)
	}
	return true
}

func (x *explorer) sealStep(s *mState, n *mNew, who string, e uint8) {
	l := uint8(bits.TrailingZeros8(n.todo))
	name := logName(l)
	seal := func(slot uint8) bool {
		if slot >= mSlots {
			panic("model: raise mSlots")
		}
		if s.st.logs[l].slots[slot] != oNone {
			x.event(evSealLost)
			return false
		}
		s.st.logs[l].slots[slot] = oSeal
		return true
	}
	next := func() {
		n.todo &^= 1 << l
		n.sub = sStart
		if n.todo == 0 {
			n.ph = nRecord
		}
	}
	finish := func(v LogVersion) {
		switch {
		case v.HeadDeleted():
			s.st.trash |= 1 << l
			x.event(evHeadDeleted)
			x.say(who, "  %s@1 has no segment 1: a deleted log; trashes it", name)
		case !v.Contiguous() || v.LostData(x.sealDepth()):
			n.refused = true
			x.say(who, "  %s@1 has a hole: refuses to open", name)
			return
		default:
			if _, ok := ChooseLogVersion([]LogVersion{v}); ok {
				w, _ := logWrites(v, l)
				n.kept |= 1 << l
				n.db |= w
				if x.trace != nil {
					x.say(who, "  keeps %s@1 and will replay %s", name, writesString(w))
				}
			}
		}
		next()
	}
	// decide: what the sealer does after a listing (the loop of
	// sealVersion; first: the listing before any seal of its own).
	decide := func(v LogVersion, first bool) {
		from, to, gap := v.SealGap(x.sealDepth())
		if gap && v.Stray {
			x.event(evHoleSealed)
		}
		switch {
		case !v.Sealed && (first || x.rules.resealUntilSealed):
			if !first {
				x.event(evVoidReseal)
				x.say(who, "  no seal that counts (a fold covers each): seals on after slot %d", v.LastSeq)
			}
			n.taken, n.slot, n.stride, n.sub = uint8(v.LastSeq), uint8(v.LastSeq)+1, 1, sStride
		case gap && x.rules.fillGaps && x.rules.drop != dropFill:
			x.event(evGapFill)
			x.say(who, "  empty slots %d-%d below the seal: fills them", from, to)
			n.taken, n.slot, n.sub = uint8(from)-1, uint8(to)+1, sFill
		default:
			finish(v)
		}
	}
	switch n.sub {
	case sStart:
		if !x.admit(s, l, n.last) {
			s.st.trash |= 1 << l
			x.event(evNotAdmitted)
			x.say(who, "%s@1 is not named by _shale/opened/%d: trashes it, never replays it", name, n.last)
			next()
			return
		}
		if done, key := x.list(s, l, &n.lst); !done {
			x.say(who, "lists %s@1: reads key %s", name, key)
			return
		}
		v := x.build(n.lst.seen)
		if x.trace != nil {
			x.say(who, "lists %s@1: %s -> %s", name, objects(n.lst.seen), describe(v))
		}
		n.lst = mList{}
		decide(v, true)
	case sStride:
		if seal(n.slot) {
			x.say(who, "seals %s@1 at slot %d: won", name, n.slot)
			n.sub = sList
			if n.taken+1 < n.slot && x.rules.drop != dropFill {
				n.sub = sFill
			}
			return
		}
		x.say(who, "seals %s@1 at slot %d: taken, skips ahead", name, n.slot)
		n.taken = n.slot
		n.slot += n.stride
		n.stride *= 2
	case sFill:
		slot := n.taken + 1
		if seal(slot) {
			x.say(who, "fills %s@1 slot %d: won", name, slot)
			n.sub = sList
			return
		}
		x.say(who, "fills %s@1 slot %d: taken", name, slot)
		n.taken = slot
		if n.taken+1 >= n.slot {
			n.sub = sList
		}
	case sList:
		if done, key := x.list(s, l, &n.lst); !done {
			x.say(who, "lists %s@1 again: reads key %s", name, key)
			return
		}
		v := x.build(n.lst.seen)
		if x.trace != nil {
			x.say(who, "lists %s@1 again: %s -> %s", name, objects(n.lst.seen), describe(v))
		}
		n.lst = mList{}
		decide(v, false)
	}
}

// deleteStep is B's trash loop on the logs it trashed: data after the
// grace (segment 1 first), seals and marker 3×AckFresh after the marker.
func (x *explorer) deleteStep(s *mState, n *mNew, who string, e uint8) bool {
	l := uint8(bits.TrailingZeros8(n.todo))
	// The grace outlasts any refresh, and a live reader's lease protects
	// the versions its view uses.
	if x.rules.drop != dropReaderLease && (s.r.viewLast[l] != 0 || (s.r.ph != rIdle && s.r.trashSeen&(1<<l) == 0)) {
		return false
	}
	if s.st.owner == e {
		n.leaseOK = true
	} else if !n.leaseOK {
		n.ph = nDone
		x.say(who, "trash loop reads _shale/owner = %d: deposed, deletes nothing", s.st.owner)
		return true
	}
	k := &s.st.logs[l]
	name := logName(l)
	switch n.sub {
	case 0:
		k.slots[1] = oNone
		x.say(who, "the grace is over: deletes %s@1 slot 1 first", name)
	case 1:
		for slot := range k.slots {
			if k.slots[slot] == oData {
				k.slots[slot] = oNone
			}
		}
		k.folds = [mFolds]mFold{}
		x.say(who, "deletes the rest of %s@1's segments and folds", name)
	case 2:
		for slot := range k.slots {
			if k.slots[slot] == oSeal {
				k.slots[slot] = oNone
			}
		}
		s.st.trash &^= 1 << l
		s.ackStale = true
		x.event(evSealsDeleted)
		x.say(who, "3×AckFresh after the marker: deletes %s@1's seals and marker (A's last confirmation is now older than AckFresh)", name)
		n.todo &^= 1 << l
		n.sub = 0
		if n.todo == 0 {
			n.ph = nDone
		}
		return true
	}
	n.sub++
	return true
}

func (x *explorer) stepBCrash(s *mState) bool {
	b := &s.b
	if !x.cfg.Crash || b.crashed || b.refused || b.ph == nDone {
		return false
	}
	b.crashed = true
	x.say("B", "crashes")
	return true
}

// ---- the reader ----

func (x *explorer) stepReader(s *mState) bool {
	r := &s.r
	switch r.ph {
	case rIdle:
		if int(r.n) >= x.cfg.Reader {
			return false
		}
		if x.rules.readerConfirms && !r.full && r.opened != 0 && r.ownerSeen == r.opened {
			// The last refresh's closing read confirmed the record: list.
			r.readOpened = false
			r.ph = rList
			x.say("reader", "refresh (the last one confirmed epoch %d):", r.opened)
			return x.readerList(s)
		}
		r.readOpened = true
		r.ownerRead = s.st.owner
		if r.opened != 0 && r.ownerRead == r.ownerSeen && r.opened == r.ownerRead {
			r.ph = rList
			x.say("reader", "refresh: reads _shale/owner = %d (no takeover since its opened record)", r.ownerRead)
			return true
		}
		r.ph = rOpened
		x.say("reader", "refresh: reads _shale/owner = %d", r.ownerRead)
	case rOpened:
		var highest uint8
		for e := uint8(1); e < 4; e++ {
			if s.st.opened[e] != 0 {
				highest = e
			}
		}
		r.opened, r.ownerSeen = highest, r.ownerRead
		if x.rules.readerConfirms && (r.opened == 0 || r.ownerSeen != r.opened) {
			x.keepView(s, "the last opened record is _shale/opened/%d, the owner %d", highest, r.ownerSeen)
			return true
		}
		r.ph = rList
		x.say("reader", "lists the opened records: uses _shale/opened/%d", highest)
	case rList:
		return x.readerList(s)
	case rConfirm:
		owner := s.st.owner
		r.ownerSeen = owner
		if owner != r.opened {
			if !r.readOpened {
				x.event(evReaderRelists)
				r.full = true
				r.ph = rIdle
				x.say("reader", "closing read: _shale/owner = %d, not %d; lists everything again", owner, r.opened)
				return true
			}
			x.keepView(s, "closing read: _shale/owner = %d, not %d", owner, r.opened)
			return true
		}
		x.say("reader", "closing read: _shale/owner = %d", owner)
		x.install(s)
	}
	return true
}

// readerList is the reader's listing of the store: the trash, then each
// log version (listLog), then the tables.
func (x *explorer) readerList(s *mState) bool {
	r := &s.r
	if r.lst.cursor == 0 && r.lstLog == 0 {
		r.trashSeen = s.st.trash
	}
	admitted := func(l uint8) bool {
		return r.trashSeen&(1<<l) == 0 && x.admit(s, l, r.opened)
	}
	for r.lstLog < mLogs {
		l := r.lstLog
		if admitted(l) {
			if done, key := x.list(s, l, &r.lst); !done {
				x.say("reader", "lists %s@1: reads key %s", logName(l), key)
				return true
			}
		}
		if admitted(l) {
			r.seen[l] = r.lst.seen
		}
		r.lst = mList{}
		r.lstLog++
		if x.cfg.PerKey && r.lstLog < mLogs && admitted(r.lstLog) {
			return true // the next version's listing is the next request
		}
	}
	r.cand, r.candLast = 0, [mLogs]uint8{}
	var logs []string
	for l := uint8(0); l < mLogs; l++ {
		if !r.seen[l].present() {
			continue
		}
		v := x.build(r.seen[l])
		if v.HeadDeleted() {
			continue
		}
		if _, ok := ChooseLogVersion([]LogVersion{v}); ok {
			w, last := logWrites(v, l)
			r.cand |= w
			r.candLast[l] = last
			if x.trace != nil {
				logs = append(logs, fmt.Sprintf("%s@1 %s -> %s", logName(l), objects(r.seen[l]), describe(v)))
			}
		}
	}
	for e := uint8(1); e < 4; e++ {
		if s.st.tableSet&(1<<e) != 0 {
			r.cand |= s.st.tables[e]
			if x.trace != nil {
				logs = append(logs, fmt.Sprintf("the table of epoch %d", e))
			}
		}
	}
	r.lstLog, r.seen = 0, [mLogs]verKey{}
	if x.trace != nil {
		x.say("reader", "lists the store: %s", strings.Join(logs, "; "))
	}
	if x.rules.readerConfirms {
		r.ph = rConfirm
		return true
	}
	x.install(s)
	return true
}

// keepView ends a refresh that found a takeover in progress
// (ErrTakeoverInProgress): the view stays, the next refresh lists all.
func (x *explorer) keepView(s *mState, format string, args ...any) {
	r := &s.r
	r.full = true
	r.ph = rIdle
	r.n++
	x.event(evReaderKeeps)
	x.say("reader", format+": a takeover is in progress; keeps its view", args...)
}

func (x *explorer) install(s *mState) {
	r := &s.r
	s.unfound |= r.view &^ r.cand
	r.view, r.viewLast = r.cand, r.candLast
	r.full = false
	r.ph = rIdle
	r.n++
	if x.trace != nil {
		x.say("reader", "installs the view: serves %s", writesString(r.view))
	}
}

// stepRHint is a refresh driven by A's announcement (refreshHinted): the
// announced segments the view lacks are read by key.
func (x *explorer) stepRHint(s *mState) bool {
	r := &s.r
	if !x.cfg.Hints || r.ph != rIdle || int(r.n) >= x.cfg.Reader || r.full || r.opened != epochA || r.ownerSeen != epochA {
		return false
	}
	var got uint32
	last := r.viewLast
	for l := uint8(0); l < mLogs; l++ {
		if s.a.pending != 0 && s.a.cur == l && !x.rules.clearedOnly {
			continue // Tails skips a log whose sync holds its lock
		}
		ann := x.stored(s, l)
		if ann <= r.viewLast[l] || r.trashSeen&(1<<l) != 0 {
			continue
		}
		for slot := r.viewLast[l] + 1; slot <= ann; slot++ {
			o := s.st.logs[l].slots[slot]
			if o == oNone || (o == oSeal && x.rules.hintSealShort) {
				return false // the hint falls short: the reader lists instead
			}
			if o == oSeal {
				break
			}
			got |= wbit(l, slot)
			last[l] = slot
		}
	}
	if got == 0 {
		return false
	}
	r.view |= got
	r.viewLast = last
	r.n++
	x.event(evHint)
	if x.trace != nil {
		x.say("reader", "follows A's announcement: reads %s by key and serves it", writesString(got))
	}
	return true
}

func (x *explorer) step(s *mState, id int) bool {
	switch id {
	case stAWrite:
		if x.cfg.Depth > 1 {
			return x.stepAQueue(s)
		}
		return x.stepAWrite(s)
	case stAClear:
		return x.cfg.Depth > 1 && x.stepAClear(s)
	case stALand0, stALand1, stALand2, stALand3:
		return x.cfg.Depth > 1 && x.stepALand(s, uint8(id-stALand0))
	case stASwitch:
		return x.stepASwitch(s)
	case stALease:
		return x.stepALease(s)
	case stAFold:
		return x.stepAFold(s)
	case stB:
		return x.stepNew(s, "B", epochB)
	case stBCrash:
		return x.stepBCrash(s)
	case stC:
		return x.cfg.Third && x.stepNew(s, "C", epochC)
	case stR:
		return x.stepReader(s)
	case stRHint:
		return x.stepRHint(s)
	}
	return false
}

// ---- invariants (docs/fencing.md, "Invariant") ----

// Violation kinds.
const (
	vLostAck    = "an acknowledged write is lost"
	vFenced     = "a write answered \"fenced\" is visible"
	vUnfound    = "the reader lost a write it served"
	vNotDurable = "the reader serves a write the database does not hold"
	vLostOwner  = "a write is lost between owners"
	vRefused    = "an owner refused to open"
)

// check returns the violation a state shows, if any.
func (x *explorer) check(s *mState) (string, string) {
	var last *mNew
	lastWho := ""
	for _, n := range []struct {
		who string
		n   *mNew
	}{{"B", &s.b}, {"C", &s.c}} {
		if n.n.refused {
			return vRefused, n.who + " found a hole in a log"
		}
		if !n.n.serving {
			continue
		}
		last, lastWho = n.n, n.who
		if lost := s.a.acked &^ n.n.db; lost != 0 {
			return vLostAck, fmt.Sprintf("A acknowledged %s; %s serves %s without it", writesString(lost), n.who, writesString(n.n.db))
		}
		if bad := s.a.fenced & n.n.db; bad != 0 {
			return vFenced, fmt.Sprintf("%s serves %s, answered \"fenced\"", n.who, writesString(bad))
		}
	}
	if s.b.serving && s.c.serving {
		if lost := s.b.db &^ s.c.db; lost != 0 {
			return vLostOwner, fmt.Sprintf("B served %s; C serves without it", writesString(lost))
		}
	}
	if bad := s.a.fenced & s.r.view; bad != 0 {
		return vFenced, fmt.Sprintf("the reader serves %s, answered \"fenced\"", writesString(bad))
	}
	if s.unfound != 0 {
		return vUnfound, fmt.Sprintf("the reader served %s, and then no longer did", writesString(s.unfound))
	}
	// Once an owner serves, what the reader serves must be in the database
	// of the last owner that does.
	if last != nil {
		if bad := s.r.view &^ last.db; bad != 0 {
			return vNotDurable, fmt.Sprintf("the reader serves %s; %s serves %s, without it", writesString(bad), lastWho, writesString(last.db))
		}
	}
	return "", ""
}

func (x *explorer) initial() mState {
	var s mState
	s.st.owner = epochA
	s.st.opened[epochA] = 0x80 // A opened; it kept no older log
	s.a.next = [mLogs]uint8{1, 1}
	s.a.foldFrom = [mLogs]uint8{1, 1}
	for i := 1; i <= x.cfg.Pre; i++ {
		s.st.logs[0].slots[i] = oData
		s.a.acked |= wbit(0, uint8(i))
		s.a.next[0]++
		s.a.cleared[0]++
	}
	return s
}

func (x *explorer) dfs(s *mState) {
	// States are known by a 128-bit hash: a collision among a few million
	// states is far less likely than a bit flip.
	if !x.seen.add(maphash.Comparable(x.seeds[0], *s), maphash.Comparable(x.seeds[1], *s)) {
		return
	}
	if kind, _ := x.check(s); kind != "" {
		if p, ok := x.found[kind]; !ok || len(x.path) < len(p) {
			x.found[kind] = append([]uint8(nil), x.path...)
		}
		if x.stop != nil && x.stop(x.found) {
			x.halted = true
		}
		return
	}
	for id := 0; id < nSteps && !x.halted; id++ {
		t := *s
		if !x.step(&t, id) {
			continue
		}
		x.path = append(x.path, uint8(id))
		x.dfs(&t)
		x.path = x.path[:len(x.path)-1]
	}
}

// stateSet is the set of states explored, as 128-bit hashes in one flat
// open-addressed table (no pointers for the GC to scan, 16 bytes a slot):
// the large bound explores tens of millions of states.
type stateSet struct {
	slots []uint64 // pairs; 0, 0 is an empty slot
	n     int
}

// add inserts a hash and reports whether it was new.
func (t *stateSet) add(lo, hi uint64) bool {
	if lo == 0 && hi == 0 {
		lo = 1
	}
	if t.slots == nil || 4*(t.n+1) > 3*len(t.slots)/2 {
		t.grow()
	}
	mask := uint64(len(t.slots)/2 - 1)
	for i := lo & mask; ; i = (i + 1) & mask {
		switch a, b := t.slots[2*i], t.slots[2*i+1]; {
		case a == 0 && b == 0:
			t.slots[2*i], t.slots[2*i+1] = lo, hi
			t.n++
			return true
		case a == lo && b == hi:
			return false
		}
	}
}

func (t *stateSet) grow() {
	old := t.slots
	t.slots = make([]uint64, max(2*len(old), 1<<17))
	t.n = 0
	for i := 0; i < len(old); i += 2 {
		if old[i] != 0 || old[i+1] != 0 {
			t.add(old[i], old[i+1])
		}
	}
	if len(old) >= 1<<24 {
		old = nil
		debug.FreeOSMemory() // the old table, now, not at twice the heap
	}
}

// replay runs a path from the initial state and returns the violation it
// ends in; ok is false if one of its steps is not enabled.
func (x *explorer) replay(path []uint8) (kind, detail string, ok bool) {
	s := x.initial()
	for _, id := range path {
		if !x.step(&s, int(id)) {
			return "", "", false
		}
		if k, d := x.check(&s); k != "" {
			return k, d, true
		}
	}
	k, d := x.check(&s)
	return k, d, true
}

// minimize drops steps from a path while it still ends in the same kind
// of violation, so that the printed schedule holds only what matters.
func (x *explorer) minimize(kind string, path []uint8) []uint8 {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(path); i++ {
			cand := append(append([]uint8(nil), path[:i]...), path[i+1:]...)
			if k, _, ok := x.replay(cand); ok && k == kind {
				path, changed = cand, true
				i--
			}
		}
	}
	return path
}

// schedule prints a path as numbered steps.
func (x *explorer) schedule(path []uint8) string {
	var b strings.Builder
	i := 0
	x.trace = func(who, what string) {
		if strings.HasPrefix(what, "  ") {
			fmt.Fprintf(&b, "    %-7s %s\n", "", strings.TrimPrefix(what, "  "))
			return
		}
		i++
		fmt.Fprintf(&b, "%3d %-7s %s\n", i, who, what)
	}
	kind, detail, _ := x.replay(path)
	x.trace = nil
	fmt.Fprintf(&b, "    => %s: %s\n", kind, detail)
	return b.String()
}

// modelResult is what one exploration found.
type modelResult struct {
	states  int
	elapsed time.Duration
	found   map[string]string // kind → the printed, minimized schedule
	cover   map[string]int
}

// exploreModel explores every interleaving within cfg's bounds under
// rules; with stopAt, it stops as soon as it found every kind in it.
func exploreModel(cfg modelConfig, rules modelRules, stopAt ...string) modelResult {
	x := &explorer{cfg: cfg, rules: rules, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		found: map[string][]uint8{}, builds: map[verKey]LogVersion{}, recs: map[[2]uint8]*layout.OpenedRecord{}, cover: map[string]int{}}
	if len(stopAt) > 0 {
		x.stop = func(found map[string][]uint8) bool {
			for _, k := range stopAt {
				if _, ok := found[k]; !ok {
					return false
				}
			}
			return true
		}
	}
	start := time.Now()
	s := x.initial()
	x.dfs(&s)
	res := modelResult{states: x.seen.n, elapsed: time.Since(start), found: map[string]string{}, cover: x.cover}
	x.seen = stateSet{}
	debug.FreeOSMemory() // the next exploration starts from an empty heap
	for kind, path := range x.found {
		res.found[kind] = x.schedule(x.minimize(kind, path))
	}
	return res
}

// ---- bounds and tests ----

// modelBound is one exploration of TestLogModel and the events it must
// reach.
type modelBound struct {
	cfg    modelConfig
	events []string
}

// modelBounds are the explorations of TestLogModel: small ones by default
// (a few seconds under -race on two cores), larger ones with
// SHALE_MODEL_BOUND=large (make stress).
func modelBounds() []modelBound {
	if os.Getenv("SHALE_MODEL_BOUND") == "large" {
		return []modelBound{
			{modelConfig{Name: "fold race", Pre: 1, Writes: 6, Fold: 2, Reader: 2, Hints: true},
				[]string{evVoidReseal, evGapFill, evSealLost, evFencedBySeal, evHint, evReaderKeeps, evReaderRelists}},
			{modelConfig{Name: "fold race, folds of 3", Pre: 1, Writes: 6, Fold: 3, Reader: 2, Hints: true},
				[]string{evVoidReseal, evGapFill, evSealLost, evFencedBySeal, evHint}},
			{modelConfig{Name: "fold race, one key per request", Pre: 1, Writes: 5, Fold: 2, Reader: 1, PerKey: true},
				[]string{evVoidReseal, evGapFill, evSealLost, evFencedBySeal}},
			{modelConfig{Name: "new log", Pre: 1, Writes: 4, Fold: 2, NewLog: true, Reader: 2, Hints: true},
				[]string{evUnknown, evReaderKeeps, evReaderRelists, evHint, evVoidReseal}},
			{modelConfig{Name: "trash and seal deletion", Pre: 1, Writes: 4, Fold: 2, NewLog: true, Reader: 2, Hints: true, Trash: true},
				[]string{evSealsDeleted, evFreedSlot, evUnknown, evVoidReseal, evHint}},
			{modelConfig{Name: "third owner", Pre: 1, Writes: 3, Fold: 2, NewLog: true, Reader: 1, Trash: true, Third: true, Crash: true},
				[]string{evDeposedOpening, evIncompleteTaken, evNotAdmitted, evHeadDeleted, evUnknown, evGapFill, evSealsDeleted}},
			// RFC 0013: uploads landing out of order.
			{modelConfig{Name: "pipeline", Pre: 1, Writes: 5, Depth: 3, Fold: 2, Reader: 2, Hints: true},
				[]string{evOutOfOrder, evHoleSealed, evLandedPastSeal, evFencedBySeal, evSealLost, evVoidReseal, evHint}},
			{modelConfig{Name: "pipeline, one key per request", Pre: 1, Writes: 4, Depth: 3, Fold: 2, Reader: 1, PerKey: true},
				[]string{evOutOfOrder, evHoleSealed, evLandedPastSeal, evVoidReseal}},
			{modelConfig{Name: "pipeline, third owner", Pre: 1, Writes: 2, Depth: 2, Fold: 2, NewLog: true, Reader: 1, Trash: true, Third: true, Crash: true},
				[]string{evOutOfOrder, evHoleSealed, evUnknown, evHeadDeleted, evSealsDeleted, evIncompleteTaken, evFreedSlot}},
		}
	}
	return []modelBound{
		{modelConfig{Name: "fold race", Pre: 1, Writes: 3, Fold: 2, Reader: 1},
			[]string{evVoidReseal, evSealLost, evFencedBySeal}},
		{modelConfig{Name: "fold race, one key per request", Pre: 1, Writes: 3, Fold: 2, PerKey: true},
			[]string{evVoidReseal, evSealLost}},
		{modelConfig{Name: "new log", Pre: 1, Writes: 2, NewLog: true, Reader: 2, Hints: true},
			[]string{evUnknown, evReaderKeeps, evReaderRelists, evHint}},
		{modelConfig{Name: "trash and seal deletion", Pre: 1, Writes: 2, Fold: 2, Reader: 1, Trash: true},
			[]string{evSealsDeleted, evFreedSlot, evUnknown}},
		{modelConfig{Name: "third owner", Pre: 1, Writes: 3, NewLog: true, Third: true, Crash: true},
			[]string{evDeposedOpening, evIncompleteTaken, evNotAdmitted, evGapFill}},
		{modelConfig{Name: "pipeline", Pre: 1, Writes: 4, Depth: 3, Reader: 1, Hints: true},
			[]string{evOutOfOrder, evHoleSealed, evLandedPastSeal, evFencedBySeal, evSealLost}},
		{modelConfig{Name: "pipeline, one key per request", Pre: 1, Writes: 4, Depth: 3, PerKey: true},
			[]string{evOutOfOrder, evHoleSealed, evLandedPastSeal}},
		{modelConfig{Name: "pipeline, new log, third owner", Pre: 1, Writes: 2, Depth: 2, NewLog: true, Third: true, Crash: true},
			[]string{evOutOfOrder, evHoleSealed, evUnknown, evHeadDeleted}},
	}
}

// TestLogModel explores the store-level log protocol with the fixed rules:
// no interleaving within the bounds breaks an invariant.
func TestLogModel(t *testing.T) {
	for _, b := range modelBounds() {
		t.Run(b.cfg.Name, func(t *testing.T) {
			res := exploreModel(b.cfg, fixedRules)
			t.Logf("%+v: %d states in %v", b.cfg, res.states, res.elapsed.Round(time.Millisecond))
			kinds := make([]string, 0, len(res.found))
			for kind := range res.found {
				kinds = append(kinds, kind)
			}
			sort.Strings(kinds)
			for _, kind := range kinds {
				t.Errorf("%s, with the fixed rules:\n%s", kind, res.found[kind])
			}
			for _, ev := range b.events {
				if res.cover[ev] == 0 {
					t.Errorf("the exploration never reached %q: the bounds are too small to mean anything", ev)
				}
			}
		})
	}
}

// TestLogModelFindsOldHoles explores the rules before issue 22: the model
// must find both holes (item 0: acknowledged writes lost to a seal in a
// slot a fold freed; item 1: a reader serving a deposed owner's write that
// never becomes durable), also with the other item's rules fixed, and
// print their schedules; and the two it found in the first fix (a gap
// below a seal).
func TestLogModelFindsOldHoles(t *testing.T) {
	item0 := modelConfig{Pre: 1, Writes: 3, Fold: 2}
	item1 := modelConfig{Pre: 1, Writes: 1, NewLog: true, Reader: 2}
	hints := modelConfig{Pre: 1, Writes: 1, NewLog: true, Reader: 2, Hints: true}
	for _, tc := range []struct {
		name  string
		cfg   modelConfig
		rules modelRules
		want  []string
	}{
		{"item 0", item0, oldRules, []string{vLostAck}},
		{"item 0, readers fixed", item0, oldSealerRules, []string{vLostAck}},
		{"item 0, one key per request", modelConfig{Pre: 1, Writes: 3, Fold: 2, PerKey: true}, oldRules, []string{vLostAck}},
		{"item 1", item1, oldRules, []string{vNotDurable, vUnfound}},
		{"item 1, seals fixed", item1, oldReaderRules, []string{vNotDurable, vUnfound}},
		{"item 1 through hints", hints, halfReaderRules, []string{vNotDurable}},
		// The first fix of issue 22: a sealer that stops between its
		// stride's seal and the fill below leaves empty slots under a
		// valid seal; A fills one and acknowledges it. Either a second
		// owner finds the first one's seal, or the fill stops at a void
		// seal.
		{"gap below a seal, two successors", modelConfig{Pre: 1, Writes: 3, Third: true}, firstFixRules, []string{vLostAck}},
		{"gap below a seal, void seal in the fill", modelConfig{Pre: 1, Writes: 6, Fold: 6}, firstFixRules, []string{vLostAck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := exploreModel(tc.cfg, tc.rules, tc.want...)
			t.Logf("%s: %d states in %v", tc.rules.name, res.states, res.elapsed.Round(time.Millisecond))
			for _, kind := range tc.want {
				sched, ok := res.found[kind]
				if !ok {
					t.Errorf("%s: the model found no schedule where %s", tc.rules.name, kind)
					continue
				}
				t.Logf("%s: %s:\n%s", tc.rules.name, kind, sched)
			}
		})
	}
}

// TestLogModelNeedsEveryRule leaves out one rule of the protocol at a time
// (besides those TestLogModelFindsOldHoles changes) and checks that the
// model then breaks an invariant: each rule carries weight, and the model
// is sharp enough to notice when one goes.
func TestLogModelNeedsEveryRule(t *testing.T) {
	for _, tc := range []struct {
		rule string
		cfg  modelConfig
		want string
	}{
		// B's seal loses slots 2 and 3 to A and wins 5; A stores the
		// skipped slot 4, acknowledged and after B's last listing.
		{dropFill, modelConfig{Pre: 1, Writes: 4}, vLostAck},
		// A's new log appears after B's listing.
		{dropFirstConfirm, modelConfig{Pre: 1, Writes: 1, NewLog: true}, vLostAck},
		// A appends into the slot the seal deletion freed.
		{dropStaleConfirm, modelConfig{Pre: 1, Writes: 2, Trash: true}, vLostAck},
		// Item 1 again: the reader admits A's log B never listed.
		{dropAdmission, modelConfig{Pre: 1, Writes: 1, NewLog: true, Reader: 1}, vNotDurable},
		// B, deposed by C while opening, serves A's new log, which C
		// (listing before it existed) does not replay.
		{dropOpenConfirm, modelConfig{Pre: 1, Writes: 1, NewLog: true, Third: true}, vLostOwner},
		// A reader's listing outlasts the trash, the deletes and A's
		// append into the freed slot, and serves that append.
		{dropReaderLease, modelConfig{Pre: 1, Writes: 1, Fold: 2, Reader: 1, Trash: true, PerKey: true}, vNotDurable},
		// A pipelined A's slot 2 is in flight and 3 landed: a sealer that
		// treats the hole as lost data refuses to open (RFC 0013).
		{dropHoleFill, modelConfig{Pre: 1, Writes: 2, Depth: 2}, vRefused},
		// A acknowledges slot 3 while 2 is in flight; B seals 2.
		{dropInOrderAck, modelConfig{Pre: 1, Writes: 2, Depth: 2}, vLostAck},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			rules := fixedRules.without(tc.rule)
			res := exploreModel(tc.cfg, rules, tc.want)
			sched, ok := res.found[tc.want]
			if !ok {
				t.Fatalf("without %q the model found no schedule where %s (%d states)", tc.rule, tc.want, res.states)
			}
			t.Logf("%d states in %v; %s:\n%s", res.states, res.elapsed.Round(time.Millisecond), tc.want, sched)
		})
	}
}
