package shalefs

import (
	"context"
	"errors"
	"fmt"

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

// ownerEpoch reads the highest epoch announced in _shale/owner. A store
// without the record (written by a build before it existed, or damaged)
// falls back to listing the claims, which is always right, only slower.
func (f *core) ownerEpoch(ctx context.Context, activity Activity) (uint64, error) {
	data, _, err := f.get(ctx, layout.OwnerKey, "", activity)
	if err == nil {
		if rec, err := layout.ParseOwnerEpochRecord(data); err == nil && rec.Epoch != 0 {
			return rec.Epoch, nil
		}
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return 0, err
	}
	es, err := f.epochs(ctx, activity)
	if err != nil {
		return 0, err
	}
	return protocol.HigherEpoch(es, 0), nil
}
