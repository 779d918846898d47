package shalefs

import (
	"context"
	"fmt"
	"os"
	"time"
)

// FenceReport is what a fence by hand did (Fence).
type FenceReport struct {
	// Epoch is the epoch the fence claimed and released.
	Epoch uint64
	// LeaseWaited is how long it waited out earlier owners' read leases.
	LeaseWaited time.Duration
}

// Fence fences the database by hand (docs/rfcs/0014-hibernation-and-fencing.md):
// a takeover that opens no RocksDB. Open claims the next epoch (or
// cfg.Epoch), raises the owner record, seals every log of every earlier
// owner and waits out their read leases; then the FileSystem stops and
// the epoch is released, so the next primary opens without a lease wait.
// From the moment Fence returns no owner of an earlier epoch acknowledges
// a write (the store refuses its appends past the seals) or serves a read
// (its lease ran out). An empty cfg.CacheDir gets a temporary directory,
// removed on return.
func Fence(ctx context.Context, cfg Config) (FenceReport, error) {
	if cfg.CacheDir == "" {
		dir, err := os.MkdirTemp("", "shale-fence-")
		if err != nil {
			return FenceReport{}, err
		}
		defer os.RemoveAll(dir)
		cfg.CacheDir = dir
	}
	f, err := Open(ctx, cfg)
	if err != nil {
		return FenceReport{}, err
	}
	rep := FenceReport{Epoch: f.Epoch(), LeaseWaited: f.LeaseWaited()}
	f.Stop()
	if err := f.Release(ctx); err != nil {
		// The earlier owners are fenced all the same (the claim and the
		// seals are in the store); only the next owner's wait is longer.
		return rep, fmt.Errorf("epoch %d fenced every earlier owner, but its release could not be recorded (the next primary waits out this fence's lease): %w", rep.Epoch, err)
	}
	return rep, nil
}
