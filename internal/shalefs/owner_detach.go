package shalefs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Detach (docs/rfcs/0010-checkpoints-and-clones.md, step 18). RocksDB
// deleting an origin table writes a trash marker of epoch 0, for which the
// trash loop deletes nothing: once the marker is past the grace and no
// reader lease or checkpoint names the version, the loop notes it
// (originPast) and keeps the marker, so no listing adds the table back.
// Once no origin table is live, no such marker is pending, and no
// checkpoint or reader lease of the clone names one (protocol.MayDetach),
// a trash pass that confirmed its ownership writes _shale/detached (from
// then on no FileSystem of the clone lists an origin table), deletes the
// clone's pin in every origin, and then the noted markers. Each step is
// repeatable: a takeover finding _shale/detached deletes the pins again
// (deleting a missing key is not an error).

// maybeDetach runs at the end of every trash pass. With nothing to do
// (not a clone, detached, or an origin table still live or pending) it
// sends no request.
func (f *Owner) maybeDetach(ctx context.Context) error {
	o := f.origin.Load()
	if o == nil || f.detached {
		return nil
	}
	if !o.detached {
		live, pending, protected, err := f.originInUse(ctx, o)
		if err != nil || !protocol.MayDetach(live, pending, protected) {
			return err
		}
	}
	if err := f.confirm(ctx, ActTrash); err != nil {
		return err
	}
	if f.FenceError() != nil || !f.leaseFresh() {
		return nil
	}
	// The record first: once a pin is gone its origin may delete the
	// tables, and by then no listing of the clone may name them.
	err := f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, layout.DetachedKey, "", ActTrash, fmt.Appendf(nil, "{\"epoch\":%d,\"at\":%q}\n", f.epoch, time.Now().UTC().Format(time.RFC3339)), objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", layout.DetachedKey, err)
	}
	for _, org := range o.rec.Origins {
		st, err := f.openOrigin(org.URL)
		if err != nil {
			return fmt.Errorf("open origin %s to release the pin: %w", org.URL, err)
		}
		if err := f.background().do(ctx, func(ctx context.Context) error { return st.Delete(ctx, org.Pin) }); err != nil {
			return fmt.Errorf("release the pin %s in %s: %w", org.Pin, org.URL, err)
		}
	}
	f.trashMu.Lock()
	var markers []string
	for k := range f.originPast {
		markers = append(markers, k)
	}
	f.trashMu.Unlock()
	if err := f.delMany(ctx, markers, ActTrash); err != nil {
		return err
	}
	f.trashMu.Lock()
	f.originPast = map[string]bool{}
	f.trashMu.Unlock()
	f.detached = true
	f.cfg.Logger.Info("clone detached: no origin table is used any more, pins released", "origins", len(o.rec.Origins))
	return nil
}

// originInUse counts what keeps a clone attached: origin tables in the
// live listing, trash markers of origin tables still within their grace
// (or kept for a reader), and origin versions a checkpoint or a live
// reader lease names. The leases are listed only when the rest is 0.
func (f *Owner) originInUse(ctx context.Context, o *originState) (live, pending, protected int, err error) {
	f.mu.Lock()
	for _, st := range f.files {
		if st.origin != nil {
			live++
		}
	}
	live += f.originDeleting // deleted, its marker not noted yet
	f.mu.Unlock()
	f.trashMu.Lock()
	for k := range f.trashSeen {
		if name, epoch, ok := layout.ParseTrashKey(k); ok && epoch == 0 && o.tables[name] != nil {
			pending++
		}
	}
	f.trashMu.Unlock()
	if live > 0 || pending > 0 {
		return live, pending, 0, nil
	}
	leases, err := f.protectedVersions(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, p := range []map[layout.VersionRef]bool{f.checkpointProtected(), leases} {
		for r := range p {
			if r.Epoch == 0 && o.tables[r.Name] != nil {
				protected++
			}
		}
	}
	return live, pending, protected, nil
}
