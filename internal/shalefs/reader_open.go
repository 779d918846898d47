package shalefs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// A reader is a read-only FS on a database that another process owns: what
// a secondary opens RocksDB on (docs/rfcs/0007-reader-leases.md). It claims
// no epoch, seals nothing and writes nothing to the store but its lease. It
// sees the database as the next owner would, without sealing: per name the
// highest epoch's version that the last takeover admitted, minus trashed
// ones, and each log up to its last contiguous segment (folds included).
//
// Refresh brings that view up to date before each RocksDB catch-up. What a
// catch-up needs from the view (docs/rfcs/0007-reader-leases.md, "Races
// considered"):
//
//   - every table the MANIFEST bytes it will read name: tables are listed
//     after the MANIFEST, since the primary uploads a table before it writes
//     the edit that names it. RocksDB's catch-up (7.8.3 and 9.11: its
//     ManifestTailer is a VersionEditHandlerPointInTime) takes a table it
//     cannot find for missing and freezes its version there until that
//     table is deleted again;
//   - the MANIFEST that CURRENT names, else the catch-up fails with TryAgain;
//   - a local copy of every WAL and of that MANIFEST, holding every byte
//     listed: the catch-up then reads nothing from the store, so a WAL the
//     primary deletes meanwhile cannot fail it halfway (after RocksDB applied
//     the MANIFEST but before it installed the new version). Logs grow in
//     place (same inode): RocksDB keeps reading a WAL or MANIFEST from where
//     it stopped.
//
// Refreshes are incremental: a log the view has is listed only after its
// last known object, CURRENT is read only when its etag changed, the owner
// record (one GET) says whether a takeover happened, and the trash is
// listed every ReaderTTL/3. A takeover, an expired lease or the first
// refresh lists everything.

// ErrReadOnly is the error of a write to a reader.
var ErrReadOnly = errors.New("read-only replica: writes go to the primary")

// ErrTakeoverInProgress: a new owner raised the owner record but has not
// recorded its takeover yet (it is sealing or waiting out the old owner's
// lease). What the old owner stored meanwhile may not be in the new
// owner's database (a log it created after the new owner's listing is
// never replayed), so the reader keeps its last view, which is all
// durable, until the new owner's opened record exists (issue 22, item 1).
var ErrTakeoverInProgress = errors.New("a takeover is in progress: the replica keeps its last view until the new primary has opened")

// errManifestGone: CURRENT names a MANIFEST the store no longer has; it
// rolled over again while the refresh ran, so refresh again.
var errManifestGone = errors.New("CURRENT names a MANIFEST that is gone from the store (it rolled over during the refresh)")

// readerState is what a reader keeps between refreshes (under refreshMu).
type readerState struct {
	full       bool                 // the next refresh lists everything
	opened     *layout.OpenedRecord // the last completed takeover's record (nil: none)
	ownerEpoch uint64               // _shale/owner when opened was read
	currentTag string               // etag of the CURRENT last read
	trashed    map[layout.VersionRef]bool
	trashAt    time.Time // when the last trash listing began
	fullAt     time.Time // when the last full refresh began
	// trashSoon: the MANIFEST grew lately, so files were probably
	// deleted: the next refreshes list the trash (a marker follows its
	// edit closely), and the view lets go of them early.
	trashSoon int
}

// readerFullEvery bounds how long a reader goes without listing
// everything: incremental refreshes skip log names with a trashed version
// (a deleted WAL stays in the store for the delete grace), and this is
// when it would see a new version of such a name all the same (only a
// deposed owner's log number reused by its successor makes one).
const readerFullEvery = 10 * time.Minute

// OpenReader opens a read-only view of the database in cfg.Store and
// prepares cfg.CacheDir (a directory of its own, never the primary's).
func OpenReader(ctx context.Context, cfg Config) (*Reader, error) {
	cfg.defaults()
	f := &Reader{core: newCore(cfg)}
	if f.cfg.ReaderID == "" {
		f.cfg.ReaderID = defaultReaderID()
	}
	f.epoch = math.MaxUint64 // sees every epoch as its past
	var top []objstore.ObjectInfo
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		top, err = f.listDir(ctx, "", ActOpen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
	}
	if err := recognize(top); err != nil {
		return nil, err
	}
	if len(top) == 0 {
		return nil, fmt.Errorf("%s holds no database yet: start its primary first", cfg.Store.URL())
	}
	if err := f.checkTiers(ctx, false); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	f.refreshMu.Lock()
	defer f.refreshMu.Unlock()
	// The listing first, then the cache is made to agree with it (stale
	// local logs dropped), then the logs are fetched. During a takeover
	// there is no view to open on yet: wait for it to complete.
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		f.rs.full = true
		err := f.refresh(ctx, ActOpen, false)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTakeoverInProgress) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (epoch %d has not opened): %w", err, f.rs.ownerEpoch, ctx.Err())
		case <-time.After(wait):
		}
	}
	if _, ok := f.files["CURRENT"]; !ok {
		return nil, fmt.Errorf("%s has no CURRENT yet (its primary has not finished creating it); retry", cfg.Store.URL())
	}
	if err := f.prepareCache(); err != nil {
		return nil, err
	}
	if err := f.writeCurrent(); err != nil {
		return nil, err
	}
	if err := f.bringLogsLocal(ctx, ActOpen); err != nil {
		return nil, err
	}
	return f, nil
}
