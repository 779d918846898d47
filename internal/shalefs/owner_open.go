package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// The owner record, _shale/owner (layout.OwnerEpochRecord), makes
// confirming ownership one GET of one small object instead of a LIST of
// every claim (docs/fencing.md, "Confirming ownership"). A new owner
// raises it to its epoch right after its claim, before it seals, lists or
// writes anything, and counts its lease wait from then; it only ever goes
// up (If-Match on the version read). So any confirmation that does not see
// the new epoch read the record before the new owner raised it, which is
// before the new owner's wait began: the old owner's lease, counted from
// the start of that read, ends before the new owner serves. The claims
// under _shale/epoch/ stay the arbiter of who owns which epoch; the record
// only announces them.

// ErrNotShale: the store location holds objects that are not a Shale
// database.
var ErrNotShale = errors.New("the location holds objects but no Shale database")

// Open takes ownership of the database in cfg.Store and prepares the local
// cache directory for RocksDB (docs/fencing.md, steps 1-4):
//
//  1. refuse unless the epoch is above every epoch in storage;
//  2. claim it: create _shale/epoch/<E> with If-None-Match, then raise
//     _shale/owner to E (what owners read to confirm their ownership);
//  3. seal every log: an empty segment at its next slot, create-only;
//     then list the tables (a sealed MANIFEST names no table uploaded
//     after the listing) and record the logs kept in _shale/opened/<E>;
//  4. wait out the previous owner's read lease, then re-write CURRENT
//     under If-Match so a stale owner's pending CURRENT update fails.
//
// RocksDB is then opened on cfg.CacheDir by the caller.
func Open(ctx context.Context, cfg Config) (*Owner, error) {
	cfg.defaults()
	if cfg.WALPipelineDepth < 0 || cfg.WALPipelineDepth > MaxWALPipelineDepth {
		return nil, fmt.Errorf("--wal-pipeline-depth %d is out of range: want 1 (one upload at a time) to %d", cfg.WALPipelineDepth, MaxWALPipelineDepth)
	}
	f := &Owner{core: newCore(cfg), fencedCh: make(chan struct{}), trashSeen: map[string]*trashEntry{}, ackFresh: map[uint64]time.Duration{}, readerLeases: map[string]*seenLease{}, pins: map[string]*seenPin{}, originPast: map[string]bool{}}
	if cfg.WALPipelineDepth > 1 {
		f.pipe = newPipeline(cfg.WALPipelineDepth)
	}
	pol := f.background()

	// 0. Recognize the location before claiming anything in it.
	var top []objstore.ObjectInfo
	if err := pol.do(ctx, func(ctx context.Context) (err error) {
		top, err = f.listDir(ctx, "", ActOpen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
	}
	if err := recognize(top); err != nil {
		return nil, err
	}

	// 1-2. Claim the epoch.
	var existing []uint64
	if err := pol.do(ctx, func(ctx context.Context) (err error) {
		existing, err = f.epochs(ctx, ActOpen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("list epochs: %w", err)
	}
	// Read-only checks (preclaim.go): a primary that cannot open the
	// database here deposes nobody and writes nothing.
	pre, err := f.beforeClaim(ctx, top, existing)
	if err != nil {
		return nil, err
	}
	epoch, err := protocol.ChooseEpoch(existing, cfg.Epoch)
	if err != nil {
		return nil, err
	}
	f.epoch = epoch
	claim := layout.EpochClaim{Epoch: epoch, TakenAt: time.Now().UTC(), Owner: cfg.Owner, Nonce: newNonce(), Lease: cfg.Lease, LeaseMargin: cfg.LeaseMargin, AckFresh: cfg.AckFresh, WALPipelineDepth: pipelineDepthRecord(cfg.WALPipelineDepth)}.Format()
	err = pol.do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, layout.EpochKey(epoch), "", ActOpen, claim, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// A retry after our own claim landed finds it taken: by us?
			if got, _, gerr := f.get(ctx, layout.EpochKey(epoch), "", ActOpen); gerr == nil && bytes.Equal(got, claim) {
				return nil
			}
		}
		return err
	})
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		return nil, fmt.Errorf("epoch %d was taken by another owner at the same time; refusing to open", epoch)
	} else if err != nil {
		return nil, fmt.Errorf("claim epoch %d: %w", epoch, err)
	}
	// Announce the claim in the owner record before sealing or writing
	// anything; earlier owners' leases are waited out from here (owner.go).
	if err := f.raiseOwner(ctx); err != nil {
		var fe *ErrFenced
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("epoch %d was superseded by %d while opening; refusing to open", epoch, fe.By)
		}
		return nil, err
	}
	f.takenAt = time.Now()
	f.lastConfirm.Store(f.leaseNow())
	if err := f.afterClaim(ctx, pre); err != nil {
		return nil, err
	}

	// 3. Seal, then build the listing from what the seals cut, and record
	// which logs of older epochs this owner's database is made of.
	last, err := f.lastOpened(ctx, f.epoch)
	if err != nil {
		return nil, err
	}
	if err := f.sealAndList(ctx, last); err != nil {
		return nil, err
	}

	// 4. Earlier owners serve reads until their leases run out, unless
	// there was none or the last one released the database when it stopped.
	prev, err := f.predecessors(ctx, existing, last)
	if err != nil {
		return nil, err
	}
	// The wait runs on Go's monotonic clock, which stops while this machine
	// is suspended: a new owner suspended (or its VM paused) during its
	// wait only waits longer, which is safe. The old owner's lease is what
	// must count a suspension, and does (clock.go).
	if wait := time.Until(f.takenAt.Add(protocol.LeaseWait(cfg.Lease, cfg.LeaseMargin, prev))); wait > 0 {
		cfg.Logger.Info("waiting out the previous owner's read lease", "wait", wait.Round(time.Millisecond))
		waited, released, err := f.waitOutLeases(ctx, wait, protocol.HigherEpoch(existing, 0))
		if err != nil {
			return nil, err
		}
		f.leaseWaited = waited
		if released {
			cfg.Logger.Info("the previous owner released the database during the wait", "waited", waited.Round(time.Millisecond))
		}
	}
	// Recorded after the wait, so a record also says that every owner
	// before this one has stopped serving reads; and before RocksDB opens,
	// so before this owner creates a log.
	if err := f.recordOpened(ctx); err != nil {
		return nil, err
	}
	if err := f.takeCurrent(ctx); err != nil {
		return nil, err
	}
	if err := f.prepareCache(); err != nil {
		return nil, err
	}
	if err := pol.do(ctx, func(ctx context.Context) error { return f.confirm(ctx, ActOpen) }); err != nil {
		return nil, err
	}
	// The checkpoint catalog: replayed, this owner's snapshot written and
	// the older version trashed, before RocksDB opens and before the
	// trash loop starts (owner_catalog.go).
	if err := f.openCatalog(ctx); err != nil {
		return nil, err
	}
	f.lastSweep = f.waitNow()
	f.wg.Add(2)
	go f.leaseLoop()
	go f.trashLoop()
	if f.cfg.KeepFolded != nil {
		f.wg.Add(1)
		go f.every(250*time.Millisecond, f.releaseKept)
	}
	return f, nil
}

// raiseOwner sets _shale/owner to this owner's epoch unless a higher one is
// there already (then this owner is fenced).
func (f *Owner) raiseOwner(ctx context.Context) error {
	mine := layout.OwnerEpochRecord{Epoch: f.epoch}.Format()
	pol := f.background()
	for attempt := 0; attempt < 50; attempt++ {
		var data []byte
		var info objstore.ObjectInfo
		err := pol.do(ctx, func(ctx context.Context) (err error) {
			data, info, err = f.get(ctx, layout.OwnerKey, "", ActOpen)
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", layout.OwnerKey, err)
		}
		opts := objstore.PutOptions{IfNoneMatch: true}
		if data != nil {
			cur, err := layout.ParseOwnerEpochRecord(data)
			if err != nil {
				return fmt.Errorf("%s is unreadable (%v); refusing to open", layout.OwnerKey, err)
			}
			switch {
			case cur.Epoch > f.epoch:
				return f.setFenced(cur.Epoch)
			case cur.Epoch == f.epoch:
				return nil // our own earlier attempt landed
			}
			opts = objstore.PutOptions{IfMatch: info.ETag}
		}
		err = pol.do(ctx, func(ctx context.Context) error {
			_, err := f.put(ctx, layout.OwnerKey, "", ActOpen, mine, opts)
			return err
		})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			continue // raised by another owner (or by our lost reply): read again
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", layout.OwnerKey, err)
		}
		return nil
	}
	return fmt.Errorf("%s keeps changing under concurrent owners; refusing to open", layout.OwnerKey)
}

// sealAndList seals every log version and fills f.files with the live
// files: per name, the highest epoch's version, minus trashed versions and
// log versions the last opener did not keep (protocol.AdmitLogVersion;
// those are trashed). Logs are sealed before the tables are listed: until
// the MANIFEST is sealed, a still-running old owner can upload a table and
// a MANIFEST edit naming it, and a table listing taken before that would
// miss a file the sealed MANIFEST names. Logs are listed level by level
// (names, then versions, then the segments of versions not trashed), many
// at a time, and tables in one listing of the top level, so the cost
// follows the live files, not everything the store still holds for the
// delete grace period.
func (f *Owner) sealAndList(ctx context.Context, last *layout.OpenedRecord) error {
	files, err := f.listStore(ctx, last)
	for name, st := range files {
		f.files[name] = st
	}
	return err
}

// listStore lists the live files of the database for a takeover: per
// name, the highest epoch's version, minus trashed versions and log
// versions the last opener did not keep. It seals every log version
// first, trashes the versions it drops, and notes the trash markers for
// the trash loop (listView is the same listing without sealing).
func (f *Owner) listStore(ctx context.Context, last *layout.OpenedRecord) (map[string]*file, error) {
	// Logs first: seal them (many at a time: after many takeovers a store
	// holds many logs, each a listing or two and maybe a seal).
	markers, top, err := f.listTrashAndTop(ctx)
	if err != nil {
		return nil, err
	}
	trashed := trashedVersions(markers)
	for _, m := range markers {
		if _, _, ok := layout.ParseTrashKey(m.Key); ok {
			f.noteTrash(m.Key)
		}
	}
	files, err := f.listLogs(ctx, top, func(ctx context.Context, name string) (*file, error) {
		return f.sealLog(ctx, name, trashed, last)
	})
	if err != nil {
		return nil, err
	}

	// Then tables, objects and CURRENT, listed after every seal: one
	// listing, since tables are flat objects.
	top, err = f.listRetry(ctx, "", true)
	if err != nil {
		return nil, err
	}
	return files, f.addObjects(ctx, files, top, trashed)
}

// recordOpened writes _shale/opened/<E>: the log versions of older epochs
// this owner's database is made of. It is written before RocksDB opens, so
// before this owner creates any log of its own.
func (f *Owner) recordOpened(ctx context.Context) error {
	rec := layout.OpenedRecord{Epoch: f.epoch, Logs: []layout.VersionRef{}}
	for name, st := range f.files {
		if st.kind == layout.KindLog {
			rec.Logs = append(rec.Logs, layout.VersionRef{Name: name, Epoch: st.epoch})
		}
	}
	sort.Slice(rec.Logs, func(i, j int) bool { return rec.Logs[i].Name < rec.Logs[j].Name })
	b := rec.Format()
	err := f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, layout.OpenedKey(f.epoch), "", ActOpen, b, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// Only this owner writes its record: a retry after a lost reply.
			if got, _, gerr := f.get(ctx, layout.OpenedKey(f.epoch), "", ActOpen); gerr == nil && bytes.Equal(got, b) {
				return nil
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record the takeover: %w", err)
	}
	return nil
}

// predecessors returns the claims of the owners that may still serve
// reads: every epoch from the last completed takeover on (that opener
// waited out everyone before it), or none if the highest one released the
// database when it stopped.
func (f *Owner) predecessors(ctx context.Context, existing []uint64, last *layout.OpenedRecord) ([]layout.EpochClaim, error) {
	prev := protocol.HigherEpoch(existing, 0)
	if prev == 0 {
		return nil, nil
	}
	var claims []layout.EpochClaim
	err := f.background().do(ctx, func(ctx context.Context) error {
		claims = nil
		if _, err := f.store.Stat(ctx, layout.ReleasedKey(prev)); err == nil {
			return nil
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		for _, e := range existing {
			if last != nil && e < last.Epoch {
				continue
			}
			b, _, err := f.get(ctx, layout.EpochKey(e), "", ActOpen)
			if err != nil {
				return err
			}
			c, _ := layout.ParseEpochClaim(b) // unreadable or older: no lease recorded, ours applies
			claims = append(claims, c)
		}
		return nil
	})
	return claims, err
}

// releasePoll is how often a new owner waiting out a lease looks for the
// previous owner's release (RFC 0003 step 4a).
const releasePoll = 250 * time.Millisecond

// waitOutLeases waits until wait has passed, or until the release of prev
// (the highest earlier epoch) is in the store: an owner writes its release
// only after it stopped serving for good, so finding it after the listing
// means what finding it at the listing means (RFC 0003 step 4a). A look
// that fails is ignored; the wait then ends by time.
func (f *Owner) waitOutLeases(ctx context.Context, wait time.Duration, prev uint64) (waited time.Duration, released bool, err error) {
	start := time.Now()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(releasePoll)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return time.Since(start), false, nil
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-tick.C:
			lctx, cancel := context.WithTimeout(ctx, 4*releasePoll)
			_, err := f.store.Stat(lctx, layout.ReleasedKey(prev))
			cancel()
			if err == nil {
				return time.Since(start), true, nil
			}
		}
	}
}

// takeCurrent re-writes CURRENT with its own content under If-Match, so
// that this owner knows the etag and a stale owner's update fails.
func (f *Owner) takeCurrent(ctx context.Context) error {
	pol := f.background()
	for attempt := 0; attempt < 10; attempt++ {
		var data []byte
		var info objstore.ObjectInfo
		err := pol.do(ctx, func(ctx context.Context) (err error) {
			data, info, err = f.get(ctx, layout.CurrentKey, "CURRENT", ActOpen)
			return err
		})
		if errors.Is(err, objstore.ErrNotFound) {
			delete(f.files, "CURRENT")
			return nil // a new database: RocksDB creates CURRENT
		}
		if err != nil {
			return fmt.Errorf("read CURRENT: %w", err)
		}
		content := layout.CurrentContent(data)
		mine := f.currentObject(content)
		err = pol.do(ctx, func(ctx context.Context) error {
			var err error
			info, err = f.put(ctx, layout.CurrentKey, "CURRENT", ActOpen, mine, objstore.PutOptions{IfMatch: info.ETag, StorageClass: f.cfg.LogStorageClass})
			if errors.Is(err, objstore.ErrPreconditionFailed) {
				// Our own write whose reply was lost, or a stale owner's.
				if got, ginfo, gerr := f.get(ctx, layout.CurrentKey, "CURRENT", ActOpen); gerr == nil && bytes.Equal(got, mine) {
					info = ginfo
					return nil
				}
			}
			return err
		})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			continue // a stale owner finished an update; read it again
		}
		if err != nil {
			return fmt.Errorf("rewrite CURRENT: %w", err)
		}
		f.currentETag = info.ETag
		f.files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(content))}
		manifest := strings.TrimSpace(string(content))
		if _, ok := f.files[manifest]; !ok {
			return fmt.Errorf("CURRENT names %s, which is not in the store; refusing to open", manifest)
		}
		return nil
	}
	return errors.New("CURRENT keeps changing under a stale owner; refusing to open")
}
