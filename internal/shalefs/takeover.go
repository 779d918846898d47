package shalefs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// ErrNotShale: the store location holds objects that are not a Shale
// database.
var ErrNotShale = errors.New("the location holds objects but no Shale database")

type epochClaim struct {
	Epoch   uint64    `json:"epoch"`
	TakenAt time.Time `json:"takenAt"`
	Owner   string    `json:"owner,omitempty"`
	Nonce   string    `json:"nonce"` // tells our claim from another's
}

// Open takes ownership of the database in cfg.Store and prepares the local
// cache directory for RocksDB (docs/fencing.md, steps 1-4):
//
//  1. refuse unless the epoch is above every epoch in storage;
//  2. claim it: create _shale/epoch/<E> with If-None-Match;
//  3. seal every log: an empty segment at its next slot, create-only;
//  4. wait out the previous owner's read lease, then re-write CURRENT
//     under If-Match so a stale owner's pending CURRENT update fails.
//
// RocksDB is then opened on cfg.CacheDir by the caller.
func Open(ctx context.Context, cfg Config) (*FS, error) {
	cfg.defaults()
	f := &FS{cfg: cfg, store: cfg.Store, files: map[string]*file{}, fencedCh: make(chan struct{}), stop: make(chan struct{}), trashSeen: map[string]time.Time{}}
	f.cache = tableCache{budget: cfg.CacheBytes, tables: map[string]*cachedTable{}}
	pol := f.background()

	// 0. Recognize the location before claiming anything in it.
	var all []objstore.ObjectInfo
	if err := pol.do(ctx, func(ctx context.Context) (err error) {
		all, err = f.list(ctx, "", "open")
		return err
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
	}
	if err := recognize(all); err != nil {
		return nil, err
	}

	// 1-2. Claim the epoch.
	var existing []uint64
	for _, o := range all {
		if e, ok := parseEpochKey(o.Key); ok {
			existing = append(existing, e)
		}
	}
	epoch, err := chooseEpoch(existing, cfg.Epoch)
	if err != nil {
		return nil, err
	}
	f.epoch = epoch
	claim, _ := json.Marshal(epochClaim{Epoch: epoch, TakenAt: time.Now().UTC(), Owner: cfg.Owner, Nonce: newNonce()})
	err = pol.do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, epochKey(epoch), "", "open", claim, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// A retry after our own claim landed finds it taken: by us?
			if got, _, gerr := f.get(ctx, epochKey(epoch), "", "open"); gerr == nil && bytes.Equal(got, claim) {
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
	f.takenAt = time.Now()
	f.lastConfirm.Store(f.takenAt.UnixNano())
	if err := pol.do(ctx, func(ctx context.Context) error { return f.confirm(ctx, "open") }); err != nil {
		var fe *ErrFenced
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("epoch %d was superseded by %d while opening; refusing to open", epoch, fe.By)
		}
		return nil, err
	}

	// 3. Seal, then build the listing from what the seals cut.
	if err := f.sealAndList(ctx); err != nil {
		return nil, err
	}

	// 4. The previous owner serves reads until its lease runs out, unless
	// there was none or it released the database when it stopped.
	prev := uint64(0)
	for _, e := range existing {
		prev = max(prev, e)
	}
	released := prev == 0
	if !released {
		_, err := f.store.Stat(ctx, releasedKey(prev))
		released = err == nil
	}
	if wait := time.Until(f.takenAt.Add(cfg.Lease + cfg.LeaseMargin)); wait > 0 && !released {
		cfg.Logger.Info("waiting out the previous owner's read lease", "wait", wait.Round(time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := f.takeCurrent(ctx); err != nil {
		return nil, err
	}
	if err := f.prepareCache(); err != nil {
		return nil, err
	}
	if err := pol.do(ctx, func(ctx context.Context) error { return f.confirm(ctx, "open") }); err != nil {
		return nil, err
	}
	f.wg.Add(2)
	go f.leaseLoop()
	go f.trashLoop()
	return f, nil
}

// recognize refuses a location with objects but no sign of Shale.
func recognize(all []objstore.ObjectInfo) error {
	if len(all) == 0 {
		return nil
	}
	for _, o := range all {
		if o.Key == "CURRENT" || strings.HasPrefix(o.Key, metaPrefix) {
			return nil
		}
	}
	for _, o := range all {
		if k := KindOf(o.Key); k == KindLog || k == KindTable {
			return fmt.Errorf("%w: %q looks like a plain RocksDB directory, not Shale's layout; choose an empty location", ErrNotShale, o.Key)
		}
	}
	return fmt.Errorf("%w (found %q); choose an empty location", ErrNotShale, all[0].Key)
}

// sealAndList seals every log version and fills f.files with the live
// files: per name, the highest epoch's version, minus trashed versions.
func (f *FS) sealAndList(ctx context.Context) error {
	pol := f.background()
	var all []objstore.ObjectInfo
	if err := pol.do(ctx, func(ctx context.Context) (err error) {
		all, err = f.list(ctx, "", "open")
		return err
	}); err != nil {
		return err
	}
	type vkey struct {
		name  string
		epoch uint64
	}
	logSegs := map[vkey][]segment{}
	objects := map[string][]vkey{}
	trashed := map[vkey]bool{}
	var current *objstore.ObjectInfo
	for i, o := range all {
		if name, e, seq, ok := parseSegmentKey(o.Key); ok {
			logSegs[vkey{name, e}] = append(logSegs[vkey{name, e}], segment{seq: seq, size: o.Size})
		} else if name, e, ok := parseObjectKey(o.Key); ok {
			objects[name] = append(objects[name], vkey{name, e})
		} else if name, e, ok := parseTrashKey(o.Key); ok {
			trashed[vkey{name, e}] = true
		} else if o.Key == "CURRENT" {
			current = &all[i]
		}
	}

	// Seal every version that is not sealed yet. If a stale owner won the
	// slot, its segment belongs to the log: seal the next slot.
	versions := map[string][]logVersion{}
	for vk, segs := range logSegs {
		v := buildLogVersion(vk.epoch, segs)
		for !v.sealed && vk.epoch < f.epoch {
			slot := v.lastSeq + 1
			err := pol.do(ctx, func(ctx context.Context) error {
				_, err := f.put(ctx, segmentKey(vk.name, vk.epoch, slot), vk.name, "open", nil, objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass})
				return err
			})
			if err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
				return fmt.Errorf("seal %s (epoch %d): %w", vk.name, vk.epoch, err)
			}
			// Re-read the version: sealed by us, or grown by the stale owner.
			var objs []objstore.ObjectInfo
			if err := pol.do(ctx, func(ctx context.Context) (err error) {
				objs, err = f.list(ctx, segmentPrefix(vk.name, vk.epoch), "open")
				return err
			}); err != nil {
				return err
			}
			segs = segs[:0]
			for _, o := range objs {
				if _, _, seq, ok := parseSegmentKey(o.Key); ok {
					segs = append(segs, segment{seq: seq, size: o.Size})
				}
			}
			v = buildLogVersion(vk.epoch, segs)
		}
		if trashed[vk] {
			continue
		}
		if !v.contiguous() {
			return fmt.Errorf("log %s (epoch %d) has a missing segment; the store lost data, refusing to open", vk.name, vk.epoch)
		}
		versions[vk.name] = append(versions[vk.name], v)
	}
	for name, vs := range versions {
		if v, ok := chooseLogVersion(vs); ok {
			f.files[name] = &file{kind: KindLog, epoch: v.epoch, size: v.size, segments: v.segments, nextSeq: v.lastSeq + 1}
		}
	}
	for name, vks := range objects {
		var best *vkey
		for i := range vks {
			if !trashed[vks[i]] && (best == nil || vks[i].epoch > best.epoch) {
				best = &vks[i]
			}
		}
		if best == nil {
			continue
		}
		for _, o := range all {
			if o.Key == objectKey(name, best.epoch) {
				f.files[name] = &file{kind: KindOf(name), epoch: best.epoch, size: o.Size}
			}
		}
	}
	if current != nil {
		f.files["CURRENT"] = &file{kind: KindCurrent, size: current.Size}
	}
	return nil
}

// takeCurrent re-writes CURRENT with its own content under If-Match, so
// that this owner knows the etag and a stale owner's update fails.
func (f *FS) takeCurrent(ctx context.Context) error {
	pol := f.background()
	for attempt := 0; attempt < 10; attempt++ {
		var data []byte
		var info objstore.ObjectInfo
		err := pol.do(ctx, func(ctx context.Context) (err error) {
			data, info, err = f.get(ctx, "CURRENT", "CURRENT", "open")
			return err
		})
		if errors.Is(err, objstore.ErrNotFound) {
			delete(f.files, "CURRENT")
			return nil // a new database: RocksDB creates CURRENT
		}
		if err != nil {
			return fmt.Errorf("read CURRENT: %w", err)
		}
		content := currentContent(data)
		mine := f.currentObject(content)
		err = pol.do(ctx, func(ctx context.Context) error {
			var err error
			info, err = f.put(ctx, "CURRENT", "CURRENT", "open", mine, objstore.PutOptions{IfMatch: info.ETag, StorageClass: f.cfg.LogStorageClass})
			if errors.Is(err, objstore.ErrPreconditionFailed) {
				// Our own write whose reply was lost, or a stale owner's.
				if got, ginfo, gerr := f.get(ctx, "CURRENT", "CURRENT", "open"); gerr == nil && bytes.Equal(got, mine) {
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
		f.files["CURRENT"] = &file{kind: KindCurrent, size: int64(len(content))}
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
func (f *FS) prepareCache() error {
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
		switch KindOf(name) {
		case KindLocal:
			keep = !strings.HasSuffix(name, ".dbtmp") && !strings.HasSuffix(name, ".shale-fetch")
		case KindTable:
			if st := f.files[name]; st != nil {
				if fi, err := e.Info(); err == nil && fi.Size() == st.size {
					keep = true
					f.cache.add(name, st.size)
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

// leaseLoop re-confirms ownership several times per lease, so reads keep
// being served, and notices a newer owner within one lease.
func (f *FS) leaseLoop() {
	defer f.wg.Done()
	tick := time.NewTicker(f.cfg.ConfirmEvery)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-f.fencedCh:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Lease/2)
			if err := f.confirm(ctx, "background"); err != nil && f.FenceError() == nil {
				f.cfg.Logger.Warn("cannot confirm ownership", "err", err)
			}
			cancel()
		}
	}
}

// trashLoop physically deletes files whose grace period is over. Seals are
// kept: deleting a seal would reopen its slot to a stale owner.
func (f *FS) trashLoop() {
	defer f.wg.Done()
	tick := time.NewTicker(min(max(f.cfg.DeleteGrace/4, 50*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-f.fencedCh:
			return
		case <-tick.C:
			if err := f.emptyTrash(context.Background()); err != nil {
				f.cfg.Logger.Warn("deferred delete", "err", err)
			}
		}
	}
}

func (f *FS) emptyTrash(ctx context.Context) error {
	markers, err := f.list(ctx, trashPrefix, "background")
	if err != nil {
		return err
	}
	for _, m := range markers {
		name, epoch, ok := parseTrashKey(m.Key)
		if !ok || f.FenceError() != nil {
			continue
		}
		deletedAt, seen := f.trashSeen[m.Key]
		if !seen {
			b, _, err := f.get(ctx, m.Key, name, "background")
			if err != nil {
				continue
			}
			var tm trashMarker
			if json.Unmarshal(b, &tm) != nil {
				tm.DeletedAt = m.ModTime // unreadable marker: trust the store's time
			}
			deletedAt = tm.DeletedAt
			f.trashSeen[m.Key] = deletedAt
		}
		if time.Since(deletedAt) < f.cfg.DeleteGrace {
			continue
		}
		if KindOf(name) == KindLog {
			segs, err := f.list(ctx, segmentPrefix(name, epoch), "background")
			if err != nil {
				return err
			}
			for _, s := range segs {
				if s.Size > 0 {
					if err := f.del(ctx, s.Key, name); err != nil {
						return err
					}
				}
			}
		} else if err := f.del(ctx, objectKey(name, epoch), name); err != nil {
			return err
		}
		if err := f.del(ctx, m.Key, name); err != nil {
			return err
		}
		delete(f.trashSeen, m.Key)
	}
	return nil
}
