package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/cache"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

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
	f := &Owner{core: newCore(cfg), fencedCh: make(chan struct{}), trashSeen: map[string]*trashEntry{}, ackFresh: map[uint64]time.Duration{}, readerLeases: map[string]*seenLease{}}
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
	claim := layout.EpochClaim{Epoch: epoch, TakenAt: time.Now().UTC(), Owner: cfg.Owner, Nonce: newNonce(), Lease: cfg.Lease, LeaseMargin: cfg.LeaseMargin, AckFresh: cfg.AckFresh}.Format()
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
		f.leaseWaited = wait
		cfg.Logger.Info("waiting out the previous owner's read lease", "wait", wait.Round(time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
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
	f.wg.Add(2)
	go f.leaseLoop()
	go f.trashLoop()
	return f, nil
}

// recognize refuses a location with objects but no sign of Shale; top is
// its first level (ListDir).
func recognize(top []objstore.ObjectInfo) error {
	if len(top) == 0 {
		return nil
	}
	for _, o := range top {
		if o.Key == layout.CurrentKey || o.Key == layout.MetaPrefix {
			return nil
		}
	}
	for _, o := range top {
		if k := layout.KindOf(o.Key); k == layout.KindLog || k == layout.KindTable {
			return fmt.Errorf("%w: %q looks like a plain RocksDB directory, not Shale's layout; choose an empty location", ErrNotShale, o.Key)
		}
	}
	return fmt.Errorf("%w (found %q); choose an empty location", ErrNotShale, strings.TrimSuffix(top[0].Key, "/"))
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
	markers, err := f.listRetry(ctx, layout.TrashPrefix, false)
	if err != nil {
		return nil, err
	}
	trashed := trashedVersions(markers)
	for _, m := range markers {
		if _, _, ok := layout.ParseTrashKey(m.Key); ok {
			f.noteTrash(m.Key)
		}
	}

	// Logs first: seal them (many at a time: after many takeovers a store
	// holds many logs, each a listing or two and maybe a seal).
	top, err := f.listRetry(ctx, "", true)
	if err != nil {
		return nil, err
	}
	if err := f.refuseLegacyDirs(ctx, top, ActOpen); err != nil {
		return nil, err
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

// refuseLegacyDirs refuses a store whose top level holds table
// directories of the layout of earlier development builds (tables are now
// flat objects). MinIO may list an object that is being deleted as a
// prefix for a moment ("OPTIONS-004015.<epoch>/" while the trash loop
// deleted it, seen in make stress), so such a directory counts only if a
// listing of it finds objects.
func (f *core) refuseLegacyDirs(ctx context.Context, top []objstore.ObjectInfo, activity Activity) error {
	for _, o := range top {
		if !layout.IsLegacyTableDir(o.Key) {
			continue
		}
		var objs []objstore.ObjectInfo
		if err := f.background().do(ctx, func(ctx context.Context) (err error) {
			objs, err = f.list(ctx, o.Key, activity)
			return err
		}); err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("%w: %q is a table directory of the layout of earlier development builds (tables are now flat objects); this build cannot open it", ErrNotShale, o.Key)
		}
	}
	return nil
}

// openParallelism bounds the listings and seals a takeover runs at once.
const openParallelism = 16

// sealLog seals every version of one log name and returns the live one
// (nil if none): the highest epoch's version with data, minus trashed
// versions and versions the last opener did not keep (those are trashed).
func (f *Owner) sealLog(ctx context.Context, name string, trashed map[layout.VersionRef]bool, last *layout.OpenedRecord) (*file, error) {
	epochDirs, err := f.listRetry(ctx, layout.LogPrefix(name), true)
	if err != nil {
		return nil, err
	}
	var versions []protocol.LogVersion
	for _, d := range epochDirs {
		e, ok := layout.ParseLogVersionPrefix(name, d.Key)
		// A trashed version was deleted by an owner that had sealed it
		// (or had written and closed it): no seal, no listing needed.
		if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if !protocol.AdmitLogVersion(name, e, last) {
			// Created after the last opener listed the store, by an
			// owner it had deposed: never acknowledged, never replayed.
			f.cfg.Logger.Warn("ignoring a log written by a deposed owner after a takeover", "log", name, "epoch", e, "last_opener", last.Epoch)
			if err := f.trash(ctx, name, e); err != nil {
				return nil, err
			}
			continue
		}
		v, err := f.sealVersion(ctx, name, e)
		if err != nil {
			return nil, err
		}
		if v.HeadDeleted() {
			// Its owner emptied it after its grace (from the first
			// segment up); a stale owner's late retry may have put a
			// segment back. Not a log any more.
			if err := f.trash(ctx, name, e); err != nil {
				return nil, err
			}
			continue
		}
		if !v.Contiguous() {
			return nil, fmt.Errorf("log %s (epoch %d) has a missing segment; the store lost data, refusing to open", name, e)
		}
		versions = append(versions, v)
	}
	return liveLog(versions), nil
}

// listRetry lists prefix (one level of it with dir) for a takeover,
// retrying failures.
func (f *core) listRetry(ctx context.Context, prefix string, dir bool) (out []objstore.ObjectInfo, err error) {
	err = f.background().do(ctx, func(ctx context.Context) error {
		if dir {
			out, err = f.listDir(ctx, prefix, ActOpen)
		} else {
			out, err = f.list(ctx, prefix, ActOpen)
		}
		return err
	})
	return out, err
}

// lastOpened reads the record of the highest epoch that completed a
// takeover (nil if none did: a new database, or one written before
// records existed).
func (f *core) lastOpened(ctx context.Context, below uint64) (*layout.OpenedRecord, error) {
	var highest uint64
	err := f.background().do(ctx, func(ctx context.Context) error {
		objs, err := f.list(ctx, layout.OpenedPrefix, ActOpen)
		for _, o := range objs {
			if e, ok := layout.ParseOpenedKey(o.Key); ok && e < below {
				highest = max(highest, e)
			}
		}
		return err
	})
	if err != nil || highest == 0 {
		return nil, err
	}
	var rec layout.OpenedRecord
	err = f.background().do(ctx, func(ctx context.Context) error {
		b, _, err := f.get(ctx, layout.OpenedKey(highest), "", ActOpen)
		if err != nil {
			return err
		}
		if rec, err = layout.ParseOpenedRecord(b); err != nil || rec.Epoch != highest {
			return fmt.Errorf("%s is unreadable (%v); refusing to open", layout.OpenedKey(highest), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rec, nil
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

// trash marks one version of a file deleted; the trash loop removes it
// after the grace period.
func (f *Owner) trash(ctx context.Context, name string, epoch uint64) error {
	marker := layout.TrashMarker{DeletedAt: time.Now().UTC(), Epoch: f.epoch}.Format()
	err := f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, layout.TrashKey(name, epoch), name, ActTrash, marker, objstore.PutOptions{})
		return err
	})
	if err == nil {
		f.noteTrash(layout.TrashKey(name, epoch))
	}
	return err
}

// sealVersion lists one log version and, unless it is sealed already (up
// to its seal) or is this owner's, seals it: an empty segment created with If-None-Match at
// a slot after its last segment. A stale owner may still be appending, one
// slot after another, while the (possibly long) listing runs; re-listing
// after every lost slot could chase it forever. So a lost slot is skipped
// with a growing stride until a seal lands, and then every slot below it is
// taken in order: each attempt either seals there (the log ends there; the
// writer, which goes slot by slot, can go no further) or finds the writer's
// segment. Once every slot up to the first seal is taken, one listing reads
// the log.
//
// A won slot is not always unused: the writer may have used it and folded
// it away since the listing (fold.go frees the slots a fold covers). Such a
// seal is void (protocol.BuildLogVersion ignores it: the writer went on
// past it), so if the listing after a round shows no valid seal, the next
// round starts after everything it lists. The fold that voids a seal was
// stored before the slot was freed, so that listing sees it.
//
// And a valid seal is the log's end only if the log reaches it. A sealer
// that stops between its stride's seal and the fill below it (it crashed,
// or was deposed, or its fill won a void seal and stopped there) leaves
// empty slots under the seal, which the writer may still fill and
// acknowledge; so whenever the listing shows such a gap
// (LogVersion.SealGap), those slots are taken in order too, whoever sealed
// the log. The sealer is done when a listing shows a valid seal the log
// reaches.
func (f *Owner) sealVersion(ctx context.Context, name string, epoch uint64) (protocol.LogVersion, error) {
	v, err := f.listVersion(ctx, name, epoch)
	if err != nil || epoch >= f.epoch {
		return v, err
	}
	pol := f.background()
	seal := func(slot uint64) (bool, error) {
		err := pol.do(ctx, func(ctx context.Context) error {
			_, err := f.put(ctx, layout.SegmentKey(name, epoch, slot), name, ActOpen, nil, objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass})
			return err
		})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("seal %s (epoch %d): %w", name, epoch, err)
		}
		return true, nil
	}
	for round := 0; ; round++ {
		from, to, gap := v.SealGap()
		switch {
		case !v.Sealed:
			if round > 0 {
				f.cfg.Logger.Warn("a seal landed in a slot the log's writer had folded away; sealing after it", "log", name, "epoch", epoch, "last_slot", v.LastSeq)
			}
			taken := v.LastSeq // every slot up to here is used
			slot, stride := taken+1, uint64(1)
			for {
				won, err := seal(slot)
				if err != nil {
					return protocol.LogVersion{}, err
				}
				if won {
					break
				}
				taken = slot
				slot, stride = slot+stride, min(stride*2, 1<<16)
			}
			for s := taken + 1; s < slot; s++ {
				won, err := seal(s)
				if err != nil {
					return protocol.LogVersion{}, err
				}
				if won {
					break // the log ends at its first seal, unless a fold voids it
				}
			}
		case gap:
			// Empty slots below the first valid seal: a sealer (an earlier
			// owner, or this one's fill after a void seal) stopped before
			// taking them, and the writer may still store there. Take them
			// in order, as the fill does.
			f.cfg.Logger.Warn("empty slots below a log's seal; sealing them", "log", name, "epoch", epoch, "from", from, "to", to)
			for s := from; s <= to; s++ {
				won, err := seal(s)
				if err != nil {
					return protocol.LogVersion{}, err
				}
				if won {
					break
				}
			}
		default:
			return v, nil
		}
		if v, err = f.listVersion(ctx, name, epoch); err != nil {
			return protocol.LogVersion{}, err
		}
	}
}

// listVersion reads one log version's segments.
func (f *core) listVersion(ctx context.Context, name string, epoch uint64) (protocol.LogVersion, error) {
	var objs []objstore.ObjectInfo
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		objs, err = f.list(ctx, layout.LogVersionPrefix(name, epoch), ActOpen)
		return err
	}); err != nil {
		return protocol.LogVersion{}, err
	}
	var segs []protocol.Segment
	for _, o := range objs {
		if _, _, first, last, ok := layout.ParseSegmentKey(o.Key); ok {
			segs = append(segs, protocol.Segment{Seq: first, Last: last, Size: o.Size})
		}
	}
	return protocol.BuildLogVersion(epoch, segs), nil
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

// prepareCache makes the local directory agree with the store: the store
// is the truth, so every local copy of a log or small object is dropped
// (it may hold bytes that were never synced) and tables are kept only when
// the store has them with the same size.
func (f *core) prepareCache() error {
	if err := os.MkdirAll(f.cfg.CacheDir, 0o755); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	entries, err := os.ReadDir(f.cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		keep := false
		switch layout.KindOf(name) {
		case layout.KindLocal:
			keep = !strings.HasSuffix(name, ".dbtmp") && !strings.Contains(name, fetchTempMark)
			if name == cache.VersionsDir {
				keep = true
				// Forget versions of copies that are gone.
				if vs, err := os.ReadDir(filepath.Join(f.cfg.CacheDir, name)); err == nil {
					for _, v := range vs {
						if _, err := os.Stat(filepath.Join(f.cfg.CacheDir, v.Name())); err != nil {
							os.Remove(filepath.Join(f.cfg.CacheDir, name, v.Name()))
						}
					}
				}
			}
		case layout.KindTable:
			if st := f.files[name]; st != nil {
				v, known := f.cache.Version(name)
				if fi, err := e.Info(); err == nil && fi.Size() == st.size && known && v == st.epoch {
					keep = true
					f.cache.Add(name, st.size)
				}
			}
		}
		if !keep {
			if err := os.RemoveAll(filepath.Join(f.cfg.CacheDir, name)); err != nil {
				return fmt.Errorf("cache dir: %w", err)
			}
		}
	}
	return nil
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

// trashLoop physically deletes files whose grace period is over; a log's
// seals go later (deleteBatch, sealsAfter). It works
// from the markers this owner knows (listed at open, or written since), so
// a pass with nothing due costs no request.
func (f *Owner) trashLoop() {
	f.every(min(max(f.cfg.DeleteGrace/4, 50*time.Millisecond), time.Minute), func() {
		if err := f.emptyTrash(context.Background()); err != nil && f.FenceError() == nil {
			f.cfg.Logger.Warn("deferred delete", "err", err)
		}
	})
}

// noteTrash records a trash marker this owner knows about, and when it
// first did (its clock's wait reading).
func (f *Owner) noteTrash(key string) {
	f.trashMu.Lock()
	defer f.trashMu.Unlock()
	if _, ok := f.trashSeen[key]; !ok {
		f.trashSeen[key] = &trashEntry{first: f.waitNow()}
	}
}

// emptyTrash deletes what has been in the trash for the grace period.
// Only the current owner deletes: each batch with work confirms the
// ownership first and stops when the confirmation is older than a lease, so
// a deposed owner that has not noticed yet cannot delete a file its
// successor uses. The grace runs from when this process first saw a marker,
// on its clock's wait reading (clock.go): another machine's wall clock (the
// marker's DeletedAt) or a step of this one's can never shorten it. Deletes are batched (DeleteObjects, up
// to 1000 keys a request); a log's first segment is deleted before the
// rest of it. Markers a deposed owner wrote after this owner listed the
// trash are left for the next owner's listing.
func (f *Owner) emptyTrash(ctx context.Context) error {
	now := f.waitNow()
	var due []objstore.ObjectInfo
	f.trashMu.Lock()
	for k, e := range f.trashSeen {
		if protocol.TrashDue(now-e.first, f.cfg.DeleteGrace, e.dataGone, e.sealsAfter) {
			due = append(due, objstore.ObjectInfo{Key: k})
		}
	}
	f.trashMu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].Key < due[j].Key })
	for len(due) > 0 {
		batch := due[:min(len(due), trashBatch)]
		due = due[len(batch):]
		if err := f.confirm(ctx, ActTrash); err != nil {
			return err
		}
		if err := f.deleteBatch(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// trashEntry is what the trash loop knows of one marker.
type trashEntry struct {
	first time.Duration // when this process first saw it (wait reading)
	// Logs: the data is deleted, the seals wait until sealsAfter (age of
	// the marker; negative: never, the writer's AckFresh is unknown).
	dataGone   bool
	sealsAfter time.Duration
}

// trashBatch is how many trashed files one pass deletes between two
// confirmations of ownership.
const trashBatch = 500

// deleteBatch physically deletes the trashed files of markers, then the
// markers, while this owner's lease is fresh. A log's data goes first; its
// seals and its marker only once no owner that could still write to it can
// acknowledge a write any more (sealsAfter).
func (f *Owner) deleteBatch(ctx context.Context, markers []objstore.ObjectInfo) error {
	protected, err := f.protectedVersions(ctx)
	if err != nil {
		return err
	}
	var keys, done []string
	now := f.waitNow()
	for _, m := range markers {
		if f.FenceError() != nil || !f.leaseFresh() {
			break
		}
		name, epoch, ok := layout.ParseTrashKey(m.Key)
		if !ok || protected[layout.VersionRef{Name: name, Epoch: epoch}] {
			continue // a live reader's view uses it: a later pass retries
		}
		if layout.KindOf(name) != layout.KindLog {
			keys = append(keys, layout.ObjectKey(name, epoch))
			done = append(done, m.Key)
			continue
		}
		f.trashMu.Lock()
		e := f.trashSeen[m.Key]
		f.trashMu.Unlock()
		if e == nil {
			continue
		}
		if !e.dataGone {
			after, err := f.sealsAfter(ctx, epoch)
			if err != nil {
				return err
			}
			f.trashMu.Lock()
			e.sealsAfter = after
			f.trashMu.Unlock()
		}
		seals := protocol.SealsDue(now-e.first, e.sealsAfter)
		if err := f.deleteLog(ctx, name, epoch, seals); err != nil {
			return err
		}
		f.trashMu.Lock()
		e.dataGone = true
		f.trashMu.Unlock()
		if seals {
			done = append(done, m.Key)
		}
	}
	if f.FenceError() != nil || !f.leaseFresh() {
		return nil
	}
	if err := f.delMany(ctx, keys, ActTrash); err != nil {
		return err
	}
	if err := f.deleteCold(ctx, keys); err != nil {
		return err
	}
	if err := f.delMany(ctx, done, ActTrash); err != nil {
		return err
	}
	f.trashMu.Lock()
	for _, k := range done {
		delete(f.trashSeen, k)
	}
	f.trashMu.Unlock()
	return nil
}

// sealsAfter is how long after its trash marker a log version of epoch may
// lose its seals (protocol.SealsAfter), from the AckFresh in that epoch's
// claim.
func (f *Owner) sealsAfter(ctx context.Context, epoch uint64) (time.Duration, error) {
	f.trashMu.Lock()
	ack, ok := f.ackFresh[epoch]
	f.trashMu.Unlock()
	if !ok {
		err := f.background().do(ctx, func(ctx context.Context) error {
			b, _, err := f.get(ctx, layout.EpochKey(epoch), "", ActTrash)
			if errors.Is(err, objstore.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if c, err := layout.ParseEpochClaim(b); err == nil {
				ack = c.AckFresh
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		f.trashMu.Lock()
		f.ackFresh[epoch] = ack
		f.trashMu.Unlock()
	}
	return protocol.SealsAfter(f.cfg.DeleteGrace, ack), nil
}

// deleteLog physically deletes one version of a log: its first segment
// first (a version without it reads as deleted, never as a log with a
// hole), then its folds and other data segments, and with seals its seals
// too (deleting one reopens its slot: see sealsAfter).
func (f *Owner) deleteLog(ctx context.Context, name string, epoch uint64, seals bool) error {
	objs, err := f.list(ctx, layout.LogVersionPrefix(name, epoch), ActTrash)
	if err != nil {
		return err
	}
	var rest []string
	for _, o := range objs {
		_, _, first, last, ok := layout.ParseSegmentKey(o.Key)
		switch {
		case !ok:
		case o.Size == 0 && first == last:
			if seals {
				rest = append(rest, o.Key)
			}
		case first == 1 && last == 1:
			if err := f.del(ctx, o.Key, name, ActTrash); err != nil {
				return err
			}
		default:
			rest = append(rest, o.Key)
		}
	}
	return f.delMany(ctx, rest, ActTrash)
}
