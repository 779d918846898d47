package shalefs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// TakenAt is when this owner's epoch object was created.
func (f *Owner) TakenAt() time.Time { return f.takenAt }

// LeaseWaited is how long Open waited out the read leases of earlier
// owners (0 if none could still serve): the part of a takeover that is
// a safety wait, not work.
func (f *Owner) LeaseWaited() time.Duration { return f.leaseWaited }

// Fenced is closed when this owner learns it was superseded.
func (f *Owner) Fenced() <-chan struct{} { return f.fencedCh }

// FenceError returns the fence, or nil while this owner is current.
func (f *Owner) FenceError() error {
	if e := f.fenced.Load(); e != nil {
		return e
	}
	return nil
}

// WriteOutcomeUnknown reports whether a write that failed on this fenced
// owner may nevertheless have been applied by the new owner.
func (f *Owner) WriteOutcomeUnknown() bool { return f.outcomeUnknown.Load() }

func (f *Owner) setFenced(by uint64) error {
	e := &ErrFenced{Epoch: f.epoch, By: by}
	if f.fenced.CompareAndSwap(nil, e) {
		f.cfg.Logger.Error("this owner is fenced: a newer owner took the database", "epoch", f.epoch, "by", by)
	}
	f.fenceOnce.Do(func() { close(f.fencedCh) })
	return f.fenced.Load()
}

// ReadAllowed reports whether this owner may serve reads: it is not fenced
// and it confirmed its ownership within the read lease. When the last
// confirmation is too old it confirms again on the spot (one listing).
func (f *Owner) ReadAllowed() error {
	if err := f.writable(); err != nil {
		return err
	}
	if !f.readSince.Load() {
		f.readSince.Store(true)
	}
	if f.leaseFresh() {
		return nil
	}
	f.confirmMu.Lock()
	defer f.confirmMu.Unlock()
	if f.leaseFresh() {
		return nil // another reader just confirmed
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(f.cfg.ReadTimeout, f.cfg.Lease))
	defer cancel()
	if err := f.confirm(ctx, ActForegroundRead); err != nil {
		if ferr := f.FenceError(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("read lease expired and ownership cannot be confirmed (lease %s): %w", f.cfg.Lease, err)
	}
	if !f.leaseFresh() {
		// The lease counts from when the confirmation began: one slower
		// than the lease proves nothing about now.
		return fmt.Errorf("read lease expired: confirming ownership took longer than the lease (%s); retry", f.cfg.Lease)
	}
	return nil
}

// Lease is this owner's read lease (Config.Lease after defaults).
func (f *Owner) Lease() time.Duration { return f.cfg.Lease }

// IdleConfirmEvery is how often this owner confirms its ownership while it
// serves no reads (Config.IdleConfirmEvery after defaults).
func (f *Owner) IdleConfirmEvery() time.Duration { return f.cfg.IdleConfirmEvery }

// SinceReads is how long ago the lease loop last found reads being served
// (at ConfirmEvery's resolution); a large value if never.
func (f *Owner) SinceReads() time.Duration {
	last := f.lastReads.Load()
	if last == 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(f.leaseNow() - last)
}

// CheckServing reports whether this owner can serve now, for readiness
// probes: it is not fenced, and it confirmed its ownership within maxAge,
// or it confirms it on the spot (one read of the owner record, which also
// tells whether the store answers). Unlike ReadAllowed it does not count
// as a read: the lease loop keeps its idle pace.
func (f *Owner) CheckServing(ctx context.Context, maxAge time.Duration) error {
	if err := f.writable(); err != nil {
		return err
	}
	fresh := func() bool {
		return protocol.LeaseFresh(time.Duration(f.leaseNow()), time.Duration(f.lastConfirm.Load()), maxAge)
	}
	if fresh() {
		return nil
	}
	f.confirmMu.Lock()
	defer f.confirmMu.Unlock()
	if fresh() {
		return nil // a read just confirmed
	}
	if err := f.confirm(ctx, ActLease); err != nil {
		if ferr := f.FenceError(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("cannot confirm ownership (the store does not answer?): %w", err)
	}
	return nil
}

func (f *Owner) leaseFresh() bool {
	return protocol.LeaseFresh(time.Duration(f.leaseNow()), time.Duration(f.lastConfirm.Load()), f.cfg.Lease)
}

// confirm checks that no higher epoch exists, fencing this owner if one
// does. It returns the fence error, or a store error.
func (f *Owner) confirm(ctx context.Context, activity Activity) error {
	h, err := f.checkEpoch(ctx, activity)
	if err != nil {
		return err
	}
	if h != 0 {
		return f.setFenced(h)
	}
	return nil
}

// checkEpoch reads the owner record and returns the highest epoch above
// ours (0: none), renewing the read lease when there is none. It does not
// fence.
func (f *Owner) checkEpoch(ctx context.Context, activity Activity) (uint64, error) {
	start := f.leaseNow()
	e, err := f.ownerEpoch(ctx, activity)
	if err != nil {
		return 0, err
	}
	if e > f.epoch {
		return e, nil
	}
	if e < f.epoch {
		// This owner raised the record to its epoch before it did
		// anything else, and the record only goes up: a lower one (or
		// none, and no claim as high as ours) means the store lost the
		// database (a wiped bucket, a MinIO without its volume). Writing
		// on would acknowledge writes into a store that holds no
		// database; stop, and let the next owner refuse the location.
		return 0, f.stopOwner(fmt.Errorf("the store no longer holds this database's ownership records (highest epoch there %d, ours %d): its data at %s was deleted or lost", e, f.epoch, f.store.URL()))
	}
	// The lease runs from before the read was sent: a newer owner that
	// raised the record after that instant may be missing from it.
	for {
		old := f.lastConfirm.Load()
		if start <= old || f.lastConfirm.CompareAndSwap(old, start) {
			return 0, nil
		}
	}
}

// stopOwner ends this owner's tenure after a log sync or a CURRENT update
// failed for good (issue 22, item 2). RocksDB has not applied the writes
// of that sync, but their bytes may be in the store (a reply lost, then
// read-backs failing until the retries ran out), and they are in the
// local log file either way: a later sync of the log would upload them.
// Left alone, RocksDB resumes on its own after a retryable error (7.8.3 as
// 9.11: max_bgerror_resume_count is unlimited by default), flushes, and serves a database
// without writes that secondaries and the next owner replay from the
// store. Only a reopen from the store makes the two agree, so the owner
// stops as a fenced one does: it uploads nothing more, RocksDB gets
// IOFenced (a fatal error, never resumed), requests are refused (writes
// that failed inside RocksDB with UNAVAILABLE, outcome unknown), and the
// primary exits; the next owner recovers whatever the store holds.
func (f *Owner) stopOwner(cause error) error {
	f.outcomeUnknown.Store(true)
	e := &ErrFenced{Epoch: f.epoch, Cause: cause.Error()}
	if f.fenced.CompareAndSwap(nil, e) {
		f.cfg.Logger.Error("this owner stops: the store may hold writes its RocksDB did not apply; the next owner reopens from the store", "epoch", f.epoch, "cause", cause)
	}
	f.fenceOnce.Do(func() { close(f.fencedCh) })
	return &ErrOutcomeUnknown{Fence: f.fenced.Load()}
}

// confirmBeforeAck acknowledges a stored segment only once no higher epoch
// exists: the first segment of a log this owner created (the log may have
// been created after a newer owner listed the store, so no seal protects
// it), and any segment stored when this owner's last confirmation is older
// than AckFresh (a seal deleted with its log could not stop it). If a newer
// owner exists, the segment is already in the store and that owner may or
// may not have listed it: the outcome of the writes in it is unknown.
func (f *Owner) confirmBeforeAck(name string, activity Activity) error {
	var by uint64
	err := f.background().do(context.Background(), func(ctx context.Context) (err error) {
		by, err = f.checkEpoch(ctx, activity)
		return err
	})
	if err != nil {
		return err
	}
	if by == 0 {
		return nil
	}
	f.outcomeUnknown.Store(true) // before anyone sees the fence
	fe := f.setFenced(by)
	f.cfg.Logger.Error("a segment reached the store after a newer owner took over; its writes' outcome is unknown", "log", name, "epoch", f.epoch, "by", by)
	return &ErrOutcomeUnknown{Fence: fe.(*ErrFenced)}
}

// fenceFromStore fences this owner after a failed condition, naming the
// newer epoch when it can be found.
func (f *Owner) fenceFromStore(ctx context.Context) error {
	var by uint64
	if es, err := f.epochs(ctx, ActBackground); err == nil {
		by = protocol.HigherEpoch(es, f.epoch)
	}
	return f.setFenced(by)
}

// every runs fn at each tick of interval until the FS stops or is fenced.
func (f *Owner) every(interval time.Duration, fn func()) {
	defer f.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-f.fencedCh:
			return
		case <-tick.C:
			fn()
		}
	}
}

// leaseLoop re-confirms ownership several times per lease while reads are
// being served, so they keep being served without waiting, and every
// IdleConfirmEvery otherwise, so that an idle owner that was deposed
// notices (and stops) without costing a request per tick. A read that finds
// the lease expired confirms on the spot (ReadAllowed); writes never need
// the lease (the store fences them).
func (f *Owner) leaseLoop() {
	f.every(f.cfg.ConfirmEvery, func() {
		busy := f.readSince.Swap(false)
		if busy {
			f.lastReads.Store(f.leaseNow())
		}
		if !busy && time.Duration(f.leaseNow()-f.lastConfirm.Load()) < f.cfg.IdleConfirmEvery {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Lease/2)
		defer cancel()
		if err := f.confirm(ctx, ActLease); err != nil && f.FenceError() == nil {
			f.cfg.Logger.Warn("cannot confirm ownership", "err", err)
		}
	})
}

// waitNow is this FS's wait reading: the delete grace, and others' reader
// leases as this owner sees them.
func (f *Owner) waitNow() time.Duration {
	_, w := f.clock().Now()
	return w
}

// ErrReleased: this owner released the database (a clean stop or a
// step-down, RFC 0012) and serves nothing any more. Not a fence: the
// request was not applied, and the next owner serves it (UNAVAILABLE).
var ErrReleased = errors.New("this primary released the database (stopped or stepped down); retry against the new primary")

// writable is nil while this owner may still serve and store: not fenced
// and not released.
func (f *Owner) writable() error {
	if err := f.FenceError(); err != nil {
		return err
	}
	if f.released.Load() {
		return ErrReleased
	}
	return nil
}

// Released reports whether Release began.
func (f *Owner) Released() bool { return f.released.Load() }

// Release records that this owner stopped serving for good, so the next
// owner need not wait out its read lease. Call it only after the database
// is closed and no request is being served. The owner refuses every read
// and upload from the moment Release begins, before the record is written
// (its PUT may land before its reply): a successor that finds the record
// opens without waiting, so this owner must already serve nothing
// (RFC 0012, invariant 2). A retried Release writes the record again.
func (f *Owner) Release(ctx context.Context) error {
	f.released.Store(true)
	if f.FenceError() != nil {
		return nil
	}
	_, err := f.put(ctx, layout.ReleasedKey(f.epoch), "", ActBackground, layout.FormatReleased(time.Now()), objstore.PutOptions{})
	return err
}

// Stop stops the background work. It uploads nothing: RocksDB closed its
// files before.
func (f *Owner) Stop() {
	f.stopMu.Lock()
	f.stopped = true
	f.stopMu.Unlock()
	f.stopLoops()
}

// Fenced marks the fence error for the C++ side (IOStatus "fenced").
func (e *ErrFenced) Fenced() bool { return true }
