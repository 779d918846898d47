package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// A standby (RFC 0012) is the next primary, started before the handover:
// it fills its cache from the store while the current owner still serves
// (Warm), then waits for that owner's release (WaitReleased) and opens
// the database with Open, which finds the release and waits no lease.
// Neither writes anything to the store.

// WarmReport says what Warm did.
type WarmReport struct {
	Tables, Kept int   // tables downloaded; already cached and kept
	Bytes        int64 // bytes downloaded
	Skipped      int   // tables over the cache budget, or gone meanwhile
}

// Warm downloads the database's live tables into cfg.CacheDir, newest
// first (the highest file numbers: the upper levels, read most), up to
// cfg.CacheBytes (0: all), so that the owner opened next on that
// directory reads them locally. It lists the store as a takeover would
// and writes nothing there. The copies are never trusted: Open keeps a
// cached table only if the store still has that version with that size
// (prepareCache), so a table the current owner deleted or rewrote since
// is dropped then.
func Warm(ctx context.Context, cfg Config) (WarmReport, error) {
	cfg.defaults()
	c := newCore(cfg)
	f := &c
	f.epoch = ^uint64(0) // sees every epoch as its past, as a reader
	var rep WarmReport
	markers, top, err := f.listTrashAndTop(ctx)
	if err != nil {
		return rep, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
	}
	files := map[string]*file{}
	for _, o := range top {
		name, e, ok := layout.ParseObjectKey(o.Key)
		if !ok || layout.KindOf(name) != layout.KindTable || trashedVersions(markers)[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: layout.KindTable, epoch: e, size: o.Size}
		}
	}
	f.mu.Lock()
	f.files = files
	f.mu.Unlock()
	if err := f.prepareCache(); err != nil {
		return rep, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	// Table names are zero-padded file numbers: descending is newest first.
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	var want []string
	var budget int64
	for _, n := range names {
		st := files[n]
		if v, ok := f.cache.Version(n); ok && v == st.epoch {
			if fi, err := os.Stat(f.localPath(n)); err == nil && fi.Size() == st.size {
				rep.Kept++
				budget += st.size
				continue
			}
		}
		if cfg.CacheBytes > 0 && budget+st.size > cfg.CacheBytes {
			rep.Skipped++
			continue
		}
		budget += st.size
		want = append(want, n)
	}
	var got, gone atomic.Int64
	var bytes atomic.Int64
	err = parallel(ctx, len(want), openParallelism, func(ctx context.Context, i int) error {
		if err := f.fetch(want[i], ActOpen); err != nil {
			if errors.Is(err, objstore.ErrNotFound) {
				gone.Add(1) // deleted by the current owner meanwhile
				return nil
			}
			return err
		}
		got.Add(1)
		bytes.Add(files[want[i]].size)
		return nil
	})
	rep.Tables, rep.Bytes, rep.Skipped = int(got.Load()), bytes.Load(), rep.Skipped+int(gone.Load())
	return rep, err
}

// ErrNotReleased: the owner a standby waited for was superseded by
// another owner instead of releasing (a failover happened meanwhile).
var ErrNotReleased = errors.New("the owner did not release the database")

// WaitReleased waits until the current owner of the database in
// cfg.Store releases it (_shale/released/<E>, written by its step-down or
// a clean stop) and returns E; 0 if the database has no owner yet. It
// polls the release every poll (one HEAD) and reads the owner record
// once a second: an owner at or above cfg.Epoch (when set), or one that
// changed while waiting, ends the wait with ErrNotReleased. It writes
// nothing, so a standby that dies while waiting leaves no trace.
func WaitReleased(ctx context.Context, cfg Config, poll time.Duration) (uint64, error) {
	cfg.defaults()
	c := newCore(cfg)
	f := &c
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	const ownerEvery = time.Second
	var owner uint64
	var ownerAt time.Time
	for {
		if owner == 0 || time.Since(ownerAt) >= ownerEvery {
			e, err := f.ownerEpoch(ctx, ActOpen)
			if err != nil && ctx.Err() == nil {
				// A store blip: look again at the next poll.
				e = owner
			} else if err != nil {
				return 0, ctx.Err()
			}
			switch {
			case owner == 0 && e == 0:
				return 0, nil // no owner yet: nothing to wait for
			case cfg.Epoch != 0 && e >= cfg.Epoch:
				return 0, fmt.Errorf("%w: epoch %d is already taken (not below this standby's %d)", ErrNotReleased, e, cfg.Epoch)
			case owner != 0 && e != owner:
				return 0, fmt.Errorf("%w: epoch %d was superseded by %d while this standby waited", ErrNotReleased, owner, e)
			}
			owner, ownerAt = e, time.Now()
		}
		_, err := f.store.Stat(ctx, layout.ReleasedKey(owner))
		if err == nil {
			return owner, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(poll):
		}
	}
}
