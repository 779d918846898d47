package shalefs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

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
	// Expired checkpoints go first, so the pass below may delete what only
	// they held; a failed append is retried at the next pass.
	if err := f.expireCheckpoints(); err != nil {
		f.cfg.Logger.Warn("expire checkpoints", "err", err)
	}
	if now-f.lastSweep >= checkpointSweepEvery {
		f.lastSweep = now
		if err := f.sweepCheckpoints(ctx); err != nil {
			f.cfg.Logger.Warn("sweep checkpoint directories", "err", err)
		}
	}
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
	return f.maybeDetach(ctx)
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
	// Checkpoints first, from memory, then the leases, listed (RFC 0010
	// step 12: a checkpoint deleted before a pin's listing cannot drop a
	// version the pin names).
	kept := f.checkpointProtected()
	pinned, err := f.pinnedVersions(ctx)
	if err != nil {
		return err
	}
	protected, err := f.protectedVersions(ctx)
	if err != nil {
		return err
	}
	for r := range kept {
		protected[r] = true
	}
	for r := range pinned {
		protected[r] = true
	}
	var keys, done, past []string
	now := f.waitNow()
	for _, m := range markers {
		if f.FenceError() != nil || !f.leaseFresh() {
			break
		}
		name, epoch, ok := layout.ParseTrashKey(m.Key)
		if !ok || protected[layout.VersionRef{Name: name, Epoch: epoch}] {
			continue // a live reader's view uses it: a later pass retries
		}
		if epoch == 0 && f.originOf(name) != nil {
			// An origin table of this clone: the object is the origin's,
			// kept by the clone's pin there. Nothing goes: the marker
			// stays until detach (so no listing adds the table back),
			// which releases the pin (owner_detach.go).
			past = append(past, m.Key)
			continue
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
	for _, k := range past {
		delete(f.trashSeen, k)
		f.originPast[k] = true
	}
	f.trashMu.Unlock()
	return nil
}

// sealsAfter is how long after its trash marker a log version of epoch may
// lose its seals (protocol.SealsAfter), from the AckFresh in that epoch's
// claim.
func (f *Owner) sealsAfter(ctx context.Context, epoch uint64) (time.Duration, error) {
	if epoch == 0 && f.Origin() != nil {
		// A clone's bootstrap: it claims nothing and writes nothing after
		// its MANIFEST copy, so the seals may go with the data.
		return f.cfg.DeleteGrace, nil
	}
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

// deleteCold deletes trashed table versions from the cold store: a trash
// marker does not say which tier held the table, and deleting a missing
// key is not an error, so every trashed table key is deleted in both.
func (f *Owner) deleteCold(ctx context.Context, keys []string) error {
	cold := f.coldStore()
	if cold == nil {
		return nil
	}
	var tables []string
	for _, k := range keys {
		if name, _, ok := layout.ParseObjectKey(k); ok && layout.KindOf(name) == layout.KindTable {
			tables = append(tables, k)
		}
	}
	if len(tables) == 0 {
		return nil
	}
	start := time.Now()
	err := cold.DeleteMany(ctx, tables)
	f.observeTier(TierCold, "delete", layout.FileOfKey(tables[0]), ActTrash, 0, start, err)
	return err
}

// pinnedVersions lists _shale/pins/ and returns the versions the clones'
// pins keep (RFC 0010 step 12b: after the checkpoints, from memory, and
// before the reader leases). A pin is read once per etag (pins are never
// rewritten); an unreadable one stops every delete.
func (f *Owner) pinnedVersions(ctx context.Context) (map[layout.VersionRef]bool, error) {
	objs, err := f.list(ctx, layout.PinsPrefix, ActTrash)
	if err != nil {
		return nil, err
	}
	var pins []protocol.PinState
	listed := map[string]bool{}
	for _, o := range objs {
		listed[o.Key] = true
		p := f.pins[o.Key]
		if p == nil || p.etag != o.ETag {
			b, info, err := f.get(ctx, o.Key, "", ActTrash)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // released meanwhile: the clone detached
			}
			if err != nil {
				return nil, err
			}
			rec, perr := layout.ParsePin(o.Key, b)
			p = &seenPin{etag: info.ETag, state: protocol.PinState{Key: o.Key, Files: rec.Files, Err: perr}}
			f.pins[o.Key] = p
		}
		pins = append(pins, p.state)
	}
	for k := range f.pins {
		if !listed[k] {
			delete(f.pins, k)
		}
	}
	return protocol.PinnedVersions(pins)
}

// seenPin is what the owner knows of one pin.
type seenPin struct {
	etag  string
	state protocol.PinState
}

// seenLease is what the owner knows of one reader lease.
type seenLease struct {
	etag    string
	changed time.Duration // when this owner saw it change (its clock's wait reading)
	lease   layout.ReaderLease
}

// protectedVersions returns the file versions that live reader leases name,
// listing the leases and reading those that changed since the last call.
func (f *Owner) protectedVersions(ctx context.Context) (map[layout.VersionRef]bool, error) {
	objs, err := f.list(ctx, layout.ReadersPrefix, ActTrash)
	if err != nil {
		return nil, err
	}
	now := f.waitNow()
	listed := map[string]bool{}
	protected := map[layout.VersionRef]bool{}
	for _, o := range objs {
		listed[o.Key] = true
		s := f.readerLeases[o.Key]
		if s == nil || s.etag != o.ETag {
			b, info, err := f.get(ctx, o.Key, "", ActTrash)
			if errors.Is(err, objstore.ErrNotFound) {
				continue // removed meanwhile: the reader stopped
			}
			if err != nil {
				return nil, err
			}
			l, err := layout.ParseReaderLease(b)
			if err != nil || l.TTL <= 0 {
				return nil, fmt.Errorf("reader lease %s is unreadable; refusing to delete anything until it is fixed or removed", o.Key)
			}
			s = &seenLease{etag: info.ETag, changed: now, lease: l}
			f.readerLeases[o.Key] = s
		}
		if protocol.LeaseProtects(now, s.changed, s.lease.TTL) {
			for _, r := range s.lease.Files {
				protected[r] = true
			}
		}
	}
	for k := range f.readerLeases {
		if !listed[k] {
			delete(f.readerLeases, k)
		}
	}
	return protected, nil
}
