package protocol

import (
	"fmt"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// ErrStaleEpoch: an owner asked to open with an epoch that is not above
// the highest one in storage.
type ErrStaleEpoch struct {
	Requested, Highest uint64
}

func (e *ErrStaleEpoch) Error() string {
	return fmt.Sprintf("epoch %d is not above epoch %d already taken in storage; refusing to open (a newer owner exists: pass --epoch greater than %d to take over)",
		e.Requested, e.Highest, e.Highest)
}

// ChooseEpoch decides the epoch to claim: requested, which must exceed
// every existing epoch, or with requested == 0 the next one.
func ChooseEpoch(existing []uint64, requested uint64) (uint64, error) {
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

// HigherEpoch returns the highest epoch above mine, or 0: the owner that
// deposed mine (with mine 0, the highest epoch).
func HigherEpoch(existing []uint64, mine uint64) uint64 {
	var h uint64
	for _, e := range existing {
		if e > mine && e > h {
			h = e
		}
	}
	return h
}

// LeaseFresh reports whether an owner may serve a read without confirming
// its ownership first: its last confirmation began (confirmed, on the
// clock's lease reading) less than its lease ago.
func LeaseFresh(now, confirmed, lease time.Duration) bool {
	return now-confirmed < lease
}

// ConfirmBeforeAck reports whether a segment an owner just stored in slot
// seq may be acknowledged only after a confirmation: the first segment of
// a new log (created after a newer owner's listing, no seal protects it),
// and any segment stored on a confirmation AckFresh old or older (the seal
// that would have stopped it may have been deleted with its log).
func ConfirmBeforeAck(seq uint64, now, confirmed, ackFresh time.Duration) bool {
	return seq == 1 || now-confirmed >= ackFresh
}

// LeaseWait is how long a new owner waits after taking its epoch before it
// serves: an earlier owner serves reads for at most its own lease after its
// last confirmation (which began before the new claim existed), plus a
// margin for clock-rate drift. A rollout that shortens the lease must still
// outwait the old, longer one, so the longest lease among the owners that
// may still serve wins. With none (no earlier owner, or the last one
// released the database) there is nothing to wait for.
func LeaseWait(own, ownMargin time.Duration, prev []layout.EpochClaim) time.Duration {
	if len(prev) == 0 {
		return 0
	}
	w := own + ownMargin
	for _, c := range prev {
		w = max(w, c.Lease+c.LeaseMargin)
	}
	return w
}

// AdmitLogVersion decides whether a log version found at takeover may be
// part of the database, given the record of the last owner that completed
// a takeover (nil: none did, as in a database older than the record):
//   - versions of that opener's epoch or later were written by an owner
//     that was current when it created them (a later epoch without a record
//     never opened RocksDB, so it wrote no log);
//   - versions of older epochs count only if the opener kept them.
//
// A version of an older epoch that is not named was created after the
// opener's listing, by an owner it had already deposed: nothing in it was
// ever acknowledged, and no later owner may replay it.
func AdmitLogVersion(name string, epoch uint64, last *layout.OpenedRecord) bool {
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
