package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Sync makes the first size bytes of a log durable in the store
// (syncLog).
func (f *Owner) Sync(name string, size int64, activity string) error {
	return f.syncLog(name, size, activityOf(activity))
}

// Close finishes a managed file RocksDB wrote (closeFile).
func (f *Owner) Close(name string, size int64, activity string) error {
	return f.closeFile(name, size, activityOf(activity))
}

// Create records a managed file RocksDB just created locally.
func (f *Owner) Create(name string) error {
	if err := f.writable(); err != nil {
		return err
	}
	k := layout.KindOf(name)
	if k == layout.KindLocal || k == layout.KindCurrent {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[name] = &file{kind: k, epoch: f.epoch, nextSeq: 1, ownLog: k == layout.KindLog}
	return nil
}

// CreateWithTemperature implements rocksshim.TemperatureHooks: Create, and
// the tier the file will be uploaded to.
func (f *Owner) CreateWithTemperature(name string, t rocksshim.Temperature) error {
	if err := f.Create(name); err != nil {
		return err
	}
	if tier := TierFor(name, t, f.coldStore() != nil); tier != TierHot {
		f.mu.Lock()
		if st := f.files[name]; st != nil {
			st.tier = tier
		}
		f.mu.Unlock()
	}
	return nil
}

// Sync makes the first size bytes of a log durable in the store: the bytes
// not yet uploaded become the log's next segment, created with
// If-None-Match so that a seal written by a newer owner stops this one.
func (f *Owner) syncLog(name string, size int64, activity Activity) error {
	if layout.KindOf(name) != layout.KindLog {
		return nil // tables and objects are uploaded on close/rename
	}
	f.mu.Lock()
	st := f.files[name]
	f.mu.Unlock()
	if st == nil || !st.ownLog {
		if err := f.FenceError(); err != nil {
			return err
		}
		return fmt.Errorf("sync of %s: not a log this owner writes", name)
	}
	if f.pipe != nil {
		if isWAL(name) {
			// RFC 0013: queue the upload and return; the engine waits for
			// the ticket before it acknowledges.
			err := f.queueSegment(name, st, size, activity)
			if err != nil && !definitelyNotStored(err) {
				f.outcomeUnknown.Store(true)
			}
			return err
		}
		// A MANIFEST (or CATALOG) edit goes after every WAL upload queued
		// before it: it may name a table holding their writes.
		if err := f.drain(); err != nil {
			return err
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	before := st.size
	err := f.syncLocked(name, st, size, activity)
	if err == nil && st.size > before && f.cfg.OnDurable != nil {
		f.cfg.OnDurable()
	}
	if err != nil && !definitelyNotStored(err) {
		// Bytes of this sync may be in the store (a reply lost, an upload
		// that landed after we gave up, a first segment that raced a
		// takeover): a failed write is no longer "definitely not applied".
		f.outcomeUnknown.Store(true)
		if f.FenceError() == nil {
			return f.stopOwner(fmt.Errorf("sync of %s failed: %w", name, err))
		}
	}
	return err
}

// definitelyNotStored: the fence stopped the sync before any of its bytes
// reached the store (a newer owner's seal holds the slot, or the owner
// knew it was fenced before uploading).
func definitelyNotStored(err error) bool {
	var fe *ErrFenced
	var unknown *ErrOutcomeUnknown
	return errors.Is(err, ErrReleased) || errors.As(err, &fe) && !errors.As(err, &unknown)
}

// syncLocked uploads the log's bytes from st.size to size as segments.
//
// st.size (and nextSeq, segments) advance only once a segment is stored
// AND cleared for acknowledgement: the first segment of a new log, or one
// stored on an old confirmation, only after confirmBeforeAck. So the bytes
// below st.size are in every later owner's database, and a sync that finds
// nothing new returns nil without checking the fence: a write whose bytes
// another sync stored is durable, and answering "fenced" (not applied,
// ever) would be false. Every new segment is preceded by a fence check.
// A segment stored whose clearance failed (a store error during the
// confirmation) is not counted: the next sync finds the slot taken by its
// own bytes, adopts them (putSegment) and confirms again, so no later sync
// acknowledges them unconfirmed (issue 22, item 6). What Tails announces
// to readers is also what was cleared (item 1).
func (f *Owner) syncLocked(name string, st *file, size int64, activity Activity) error {
	storedSome := false
	for size > st.size {
		if f.released.Load() {
			// The release may already be read by a successor that waits
			// no lease: store nothing more (RFC 0012).
			if storedSome {
				return fmt.Errorf("sync of %s: %v, after part of it was stored (outcome unknown)", name, ErrReleased)
			}
			return ErrReleased // nothing stored: "not applied" (definitelyNotStored)
		}
		if err := f.FenceError(); err != nil {
			if fe := err.(*ErrFenced); storedSome || fe.Cause != "" {
				// A stopped owner's log may hold a failed sync's bytes
				// (stopOwner): not "definitely not applied".
				return &ErrOutcomeUnknown{Fence: fe}
			}
			return err
		}
		data := make([]byte, size-st.size)
		fh, err := os.Open(f.localPath(name))
		if err != nil {
			return err
		}
		_, err = fh.ReadAt(data, st.size)
		fh.Close()
		if err != nil {
			return fmt.Errorf("sync of %s: read local bytes %d-%d: %w", name, st.size, size, err)
		}
		seq := st.nextSeq
		stored, err := f.putSegment(name, seq, data, activity, false)
		if err != nil {
			return err
		}
		storedSome = true
		if protocol.ConfirmBeforeAck(seq, time.Duration(f.leaseNow()), time.Duration(f.lastConfirm.Load()), f.cfg.AckFresh) {
			// A new log: created after the new owner's listing, no seal
			// protects it. An old confirmation: the seal that would have
			// stopped this segment may have been deleted (docs/fencing.md).
			if err := f.confirmBeforeAck(name, activity); err != nil {
				return err
			}
		}
		if fe := f.FenceError(); fe != nil {
			// Stored, but this owner learned meanwhile that it was deposed:
			// the new owner may or may not have listed the segment. Never
			// acknowledge a write after the fence is known.
			return &ErrOutcomeUnknown{Fence: fe.(*ErrFenced)}
		}
		st.segments = append(st.segments, protocol.Segment{Seq: seq, Size: stored})
		st.nextSeq++
		st.size += stored
		st.unfolded++
		if f.cfg.FoldSegments > 0 && st.unfolded >= f.cfg.FoldSegments {
			f.foldLater(name, st)
		}
	}
	return nil
}

// putSegment creates segment seq of this owner's version of log name and
// returns how many bytes of data it holds. A taken slot holds either a
// newer owner's seal (this owner is fenced; data is not in the log) or our
// own earlier attempt, whose reply was lost or which landed after Sync gave
// up: then the slot holds a prefix of data (the log only grows), and the
// rest goes to the next slot.
//
// exact (a pipelined slot, whose bytes are fixed when it is queued): only
// all of data is ours; a prefix refuses the log.
func (f *Owner) putSegment(name string, seq uint64, data []byte, activity Activity, exact bool) (int64, error) {
	key := layout.SegmentKey(name, f.epoch, seq)
	stored := int64(len(data))
	pol := policy{Attempt: f.walAttempt(len(data)), Total: f.cfg.RetryFor}
	err := pol.do(context.Background(), func(ctx context.Context) error {
		_, err := f.put(ctx, key, name, activity, data, objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass})
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
		got, _, gerr := f.get(ctx, key, name, activity)
		switch {
		case errors.Is(gerr, objstore.ErrNotFound):
			return retryLater(fmt.Errorf("segment %d of %s: the slot was taken, then empty", seq, name))
		case gerr != nil:
			return gerr // the read-back is retried; it never fences by itself
		case len(got) == 0:
			return f.fenceFromStore(ctx) // a seal: a newer owner ended the log here
		case bytes.HasPrefix(data, got) && (!exact || len(got) == len(data)):
			stored = int64(len(got))
			return nil
		}
		return fmt.Errorf("segment %d of %s holds %d bytes this owner did not write there; refusing to continue the log", seq, name, len(got))
	})
	return stored, err
}

// walAttempt bounds one attempt of a segment upload: short, so that a
// stuck request does not hold RocksDB's write leader, but long enough for
// the segment's bytes at a slow 4 MiB/s.
func (f *Owner) walAttempt(n int) time.Duration {
	return min(f.cfg.WALAttempt+time.Duration(n)*time.Second/(4<<20), max(f.cfg.WriteTimeout, f.cfg.WALAttempt))
}

// Close finishes a managed file RocksDB wrote: a log's remaining bytes
// become a segment; a table is uploaded whole.
func (f *Owner) closeFile(name string, size int64, activity Activity) error {
	switch layout.KindOf(name) {
	case layout.KindLog:
		if err := f.syncLog(name, size, activity); err != nil {
			return err
		}
		// A closed WAL's last bytes are stored before Close returns.
		return f.drain()
	case layout.KindTable, layout.KindObject:
		if err := f.writable(); err != nil {
			return err
		}
		return f.upload(name, f.localPath(name), activity)
	}
	return nil
}

// upload stores a finished local file as name's version of this epoch.
func (f *Owner) upload(name, path string, activity Activity) error {
	class := f.cfg.TableStorageClass
	if layout.KindOf(name) != layout.KindTable {
		class = f.cfg.LogStorageClass
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	key := layout.ObjectKey(name, f.epoch)
	tier := f.tierOf(name) // chosen when RocksDB created it
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		err := f.putFileIn(ctx, tier, key, name, activity, path, objstore.PutOptions{StorageClass: class})
		return err
	})
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: layout.KindOf(name), epoch: f.epoch, size: fi.Size(), tier: tier}
	f.mu.Unlock()
	if layout.KindOf(name) == layout.KindTable && path == f.localPath(name) && readsRemotely(tier) {
		// Cold tables stay out of the local cache (tier.go).
		evict := f.cache.Evictor()
		if evict != nil {
			evict(name)
		}
		os.Remove(path)
	} else if layout.KindOf(name) == layout.KindTable && path == f.localPath(name) {
		f.cache.NoteVersion(name, f.epoch)
		// The new table stays cached; older ones make room for it.
		f.cache.Add(name, fi.Size())
		if !f.cache.MakeRoom(0, name) {
			evict := f.cache.Evictor()
			if evict != nil {
				evict(name)
			}
			f.cache.Forget(name)
			os.Remove(path) // too big for the cache: read it from the store
		}
	}
	return nil
}

func (f *Owner) putFile(ctx context.Context, key, name string, activity Activity, path string, opts objstore.PutOptions) error {
	start := time.Now()
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	_, err = f.store.Put(ctx, key, fh, st.Size(), opts)
	f.observe("put", name, activity, st.Size(), start, err)
	return err
}

// putFileIn uploads a local file to the store of tier t.
func (f *Owner) putFileIn(ctx context.Context, t Tier, key, name string, activity Activity, path string, opts objstore.PutOptions) error {
	if t == TierHot {
		return f.putFile(ctx, key, name, activity, path, opts)
	}
	start := time.Now()
	n, err := putLocalFile(ctx, f.tierStore(t), key, path, opts)
	f.observeTier(t, "put", name, activity, n, start, err)
	return err
}

func putLocalFile(ctx context.Context, s objstore.Store, key, path string, opts objstore.PutOptions) (int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return 0, err
	}
	_, err = s.Put(ctx, key, fh, st.Size(), opts)
	return st.Size(), err
}

// Delete removes a managed file from the listing and schedules its
// physical deletion after the grace period (secondaries and slow readers
// may still read it).
func (f *Owner) Delete(name string) error {
	k := layout.KindOf(name)
	if k == layout.KindLocal {
		return nil
	}
	if k == layout.KindCurrent {
		return fmt.Errorf("delete CURRENT: refused")
	}
	if err := f.writable(); err != nil {
		return err
	}
	if k == layout.KindLog {
		// No log is trashed with uploads of it in flight (RFC 0013).
		if err := f.drain(); err != nil {
			return err
		}
	}
	f.mu.Lock()
	st := f.files[name]
	delete(f.files, name)
	origin := st != nil && st.origin != nil
	if origin {
		// Counted until its marker is noted: a detach never sees the
		// table neither live nor trashed (owner_detach.go).
		f.originDeleting++
	}
	f.mu.Unlock()
	f.cache.Forget(name)
	if st == nil {
		return nil
	}
	// A running fold finishes first: it deletes segments of the version,
	// and the trash loop must list the version after that.
	st.foldMu.Lock()
	st.foldMu.Unlock()
	err := f.trash(context.Background(), name, st.epoch)
	if origin && err == nil {
		// A failed marker keeps it counted: this owner never detaches, and
		// the next one lists the table as live again.
		f.mu.Lock()
		f.originDeleting--
		f.mu.Unlock()
	}
	return err
}

func (f *Owner) del(ctx context.Context, key, name string, activity Activity) error {
	start := time.Now()
	err := f.store.Delete(ctx, key)
	f.observe("delete", name, activity, 0, start, err)
	return err
}

func (f *Owner) delMany(ctx context.Context, keys []string, activity Activity) error {
	if len(keys) == 0 {
		return nil
	}
	start := time.Now()
	err := f.store.DeleteMany(ctx, keys)
	f.observe("delete", layout.FileOfKey(keys[0]), activity, 0, start, err)
	return err
}
