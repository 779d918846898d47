package shalefs

import (
	"context"
	"errors"
	"fmt"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// sealLog seals every version of one log name and returns the live one
// (nil if none): the highest epoch's version with data, minus trashed
// versions and versions the last opener did not keep (those are trashed).
func (f *Owner) sealLog(ctx context.Context, name string, trashed map[layout.VersionRef]bool, last *layout.OpenedRecord) (*file, error) {
	epochs, err := f.logEpochs(ctx, name, trashed)
	if err != nil {
		return nil, err
	}
	var versions []protocol.LogVersion
	for _, e := range epochs {
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
	// The writer's pipeline depth (its claim), read only when a listing
	// shows data the log does not reach or data after the seal.
	var depth uint64 = 1
	depthOf := func(v protocol.LogVersion) (uint64, error) {
		if depth == 1 && (v.Stray || (v.Sealed && v.LastData > v.SealSeq)) {
			return f.claimDepth(ctx, epoch)
		}
		return depth, nil
	}
	for round := 0; ; round++ {
		if depth, err = depthOf(v); err != nil {
			return protocol.LogVersion{}, err
		}
		from, to, gap := v.SealGap(depth)
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
			// taking them, or a pipelined writer's uploads in flight
			// (RFC 0013), and the writer may still store there. Take them
			// in order, as the fill does.
			f.cfg.Logger.Warn("empty slots below a log's seal; sealing them", "log", name, "epoch", epoch, "from", from, "to", to, "pipeline_depth", depth)
			for s := from; s <= to; s++ {
				won, err := seal(s)
				if err != nil {
					return protocol.LogVersion{}, err
				}
				if won {
					break
				}
			}
		case v.LostData(depth):
			// A writer with this depth never stored that far past a slot
			// it had not cleared (RFC 0013, step 10).
			return protocol.LogVersion{}, fmt.Errorf("log %s (epoch %d) has data %d slots past its seal at %d, more than its writer's %d uploads in flight; the store lost data, refusing to open", name, epoch, v.LastData-v.SealSeq, v.SealSeq, depth)
		default:
			return v, nil
		}
		if v, err = f.listVersion(ctx, name, epoch); err != nil {
			return protocol.LogVersion{}, err
		}
	}
}
