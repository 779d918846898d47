// Package shalefs is the Go half of the Shale FileSystem (design §3-4): the
// C++ rocksdb::FileSystem in internal/rocksshim keeps RocksDB's hot paths
// on local disk and calls into this package for everything that touches the
// object store: uploading WAL/MANIFEST segments on sync and tables on
// close, replacing CURRENT with If-Match, fetching files into the local
// cache, listings, deferred deletes, and the fencing protocol that makes one
// owner at a time safe (docs/fencing.md).
package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Config configures a FileSystem.
type Config struct {
	Store    objstore.Store
	CacheDir string // local directory RocksDB runs in: cache and staging
	// Epoch to own the database with; 0 takes the next one.
	Epoch uint64
	// Lease is the read lease: an owner serves reads only while it has
	// confirmed its ownership within Lease, and a new owner waits
	// Lease+LeaseMargin after taking its epoch before it opens.
	Lease, LeaseMargin time.Duration
	// ConfirmEvery is how often ownership is re-confirmed while reads are
	// being served (default Lease/4; above Lease, reads wait for a
	// confirmation now and then).
	ConfirmEvery time.Duration
	// IdleConfirmEvery is how often an owner serving no reads confirms its
	// ownership (default 30s): only so that a deposed idle owner notices
	// and stops; safety never depends on it. Each confirmation is one GET.
	IdleConfirmEvery time.Duration
	// DeleteGrace is how long a deleted file stays in the store.
	DeleteGrace time.Duration
	// AckFresh: a synced write is acknowledged only if this owner confirmed
	// its ownership within AckFresh (else it confirms first; default 10s).
	// That is what lets the seals of deleted logs go after 3×AckFresh of
	// their writer (docs/fencing.md, "Deletes and slots").
	AckFresh time.Duration
	// CacheBytes bounds the tables kept in CacheDir (0: unbounded). Tables
	// that do not fit are read from the store range by range.
	CacheBytes int64
	// Cold, when set, is the cold tier's store: tables RocksDB writes cold
	// go there (tier.go). A database that recorded a cold tier refuses to
	// open without it.
	Cold objstore.Store
	// Existing says the database exists (a primary opened it before): a
	// location without it (no CURRENT or no epoch claim) is refused before
	// anything is claimed or written there, instead of becoming a new,
	// empty database (preclaim.go).
	Existing bool
	// Storage classes for logs (WAL, MANIFEST, CURRENT, ...) and tables.
	LogStorageClass, TableStorageClass string
	// ReadTimeout bounds one attempt of a foreground read; WriteTimeout one
	// attempt of an upload; RetryFor the retries of background work.
	ReadTimeout, WriteTimeout, RetryFor time.Duration
	// WALAttempt bounds one attempt of a WAL segment upload (default 2s,
	// longer for large segments): a write leader waits on it, so a stuck
	// request is abandoned and retried quickly instead of after WriteTimeout.
	WALAttempt time.Duration
	// FoldSegments: once a log this owner writes has this many segments
	// after its last fold, they are folded into one object in the
	// background (default 256; negative: never). A takeover then reads a
	// busy log in a few hundred objects, not one per synced write.
	FoldSegments int
	// ReaderID names a reader's lease (default: host, pid and a random
	// suffix); ReaderTTL is how long the lease protects the files of the
	// reader's view after its last renewal (default 30s).
	ReaderID  string
	ReaderTTL time.Duration
	// NoReaderLease: a reader that publishes no lease and so writes
	// nothing at all (a compaction worker, whose job ends well within the
	// owner's delete grace; docs/compaction.md).
	NoReaderLease bool
	// SkipWALs: a reader that lists no WAL, so RocksDB opens without
	// replaying one (a compaction worker needs only the tables; upstream
	// RocksDB 11.1 skips the replay in OpenAndCompact itself).
	SkipWALs bool
	// FetchWhole, when set, picks the tables fetched whole into the cache;
	// the others are read from the store range by range (a compaction
	// worker reads its inputs whole and only the footers of the rest).
	FetchWhole func(name string) bool
	// Owner describes this process in its epoch object (host, pid, ...).
	Owner  string
	Logger *slog.Logger
	// OnDurable, when set, is called after a sync stored new bytes of a log
	// (a WAL write group or a MANIFEST edit is durable in the store), and
	// after CURRENT was replaced.
	OnDurable func()
	// Observe, when set, is told about every object-store request.
	Observe func(r Request)
	// RangeCacheBytes bounds the memory holding ranges of tables read
	// from the store (blockcache.go; 0: none, every read is a GET);
	// RangeBlockBytes is the size of those ranges (default 64 KiB).
	RangeCacheBytes, RangeBlockBytes int64
	// Clock measures leases, AckFresh and the delete grace (clock.go);
	// default SystemClock(), which counts time the machine was suspended.
	Clock Clock
}

// Request describes one object-store request for instrumentation.
type Request struct {
	Op       string // put, get, list, delete
	FileType string // sst, wal, manifest, other
	Activity string // foreground_read, foreground_write, wal, flush, compaction, open, background
	Tier     string // tables' gets, puts and deletes: hot or cold ("" for other requests)
	Bytes    int64
	Duration time.Duration
	Err      error
}

// Defaults fills unset fields.
func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Lease, 5*time.Second)
	def(&c.LeaseMargin, c.Lease/5)
	def(&c.ConfirmEvery, max(c.Lease/4, 10*time.Millisecond))
	def(&c.IdleConfirmEvery, 30*time.Second)
	def(&c.DeleteGrace, time.Hour)
	def(&c.AckFresh, 10*time.Second)
	def(&c.ReaderTTL, 30*time.Second)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.WriteTimeout, 60*time.Second)
	def(&c.RetryFor, 5*time.Minute)
	def(&c.WALAttempt, min(2*time.Second, c.WriteTimeout))
	if c.FoldSegments == 0 {
		c.FoldSegments = 256
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
}

// FS is an open Shale FileSystem for one database.
type FS struct {
	cfg   Config
	store objstore.Store
	epoch uint64

	mu    sync.Mutex
	files map[string]*file // the live listing: managed names

	// currentMu serializes CURRENT updates; it is held across uploads, so
	// nothing else waits on it (the listing lock mu is never held across a
	// network call).
	currentMu   sync.Mutex
	currentETag string // etag of the CURRENT this owner last wrote
	// storedCurrent (a string) is the MANIFEST that CURRENT, as this owner
	// last wrote it, names: announced to readers (tails.go).
	storedCurrent atomic.Value

	fenced   atomic.Pointer[ErrFenced]
	fencedCh chan struct{}
	// outcomeUnknown: an upload that may be part of the new owner's
	// database raced the fence, so failed writes are not "definitely not
	// applied" (the KV service answers UNAVAILABLE, not FAILED_PRECONDITION).
	outcomeUnknown atomic.Bool
	fenceOnce      sync.Once
	// Leases are measured on cfg.Clock's lease reading (clock.go), which
	// counts time the machine was suspended and never goes back:
	// lastConfirm is that reading at the start of the last ownership
	// confirmation.
	lastConfirm atomic.Int64
	confirmMu   sync.Mutex // one on-demand confirmation at a time
	takenAt     time.Time
	leaseWaited time.Duration // how long Open waited out earlier owners' leases

	cache     tableCache
	serving   atomic.Bool // RocksDB is open: reads are foreground
	trashMu   sync.Mutex
	trashSeen map[string]*trashEntry   // trash markers this owner knows
	ackFresh  map[uint64]time.Duration // epoch -> its claim's AckFresh (0: unknown), for deleting seals
	readSince atomic.Bool              // a read was allowed since the lease loop last looked

	stop chan struct{}
	wg   sync.WaitGroup
	// A reader (reader.go) writes nothing; current is the CURRENT content
	// it last read.
	readOnly  bool
	refreshMu sync.Mutex
	current   []byte
	retired   map[string]retiredFile // tables gone from the listing that RocksDB may still read
	rs        readerState            // what the last refresh learned (under refreshMu)
	// reader leases (readerlease.go): the reader's own, and the owner's
	// view of everyone's (trash loop only)
	leaseSum     string
	leaseRenewed atomic.Int64
	lapsed       atomic.Bool // the lease lapsed and RocksDB has not caught up since
	readerLeases map[string]*seenLease

	compactions jobRegistry // remote compaction outputs being installed (compaction.go)

	// stopMu orders starting background folds against Stop.
	stopMu  sync.Mutex
	stopped bool

	// cold is the cold tier's store once the tier records agree;
	// coldPending: a reader's cold store waits for the database to record
	// its cold tier (tier.go).
	cold        atomic.Pointer[coldRef]
	coldPending atomic.Bool
}

// Serving tells the FS that RocksDB finished opening: later fetches are
// foreground reads, earlier ones part of the open.
func (f *FS) Serving() { f.serving.Store(true) }

// file is the state of one managed file.
type file struct {
	mu    sync.Mutex // serializes uploads of one log
	kind  Kind
	epoch uint64 // version (the writer's epoch)
	size  int64  // bytes in the store (logs: before the seal)
	tier  Tier   // tables: the store holding this version (tier.go)

	// logs only
	segments []segment
	nextSeq  uint64
	ownLog   bool // created by this owner: appendable

	// own logs only: folding (fold.go)
	foldMu   sync.Mutex  // held by a fold and by Delete waiting for it
	folding  atomic.Bool // a fold is scheduled or running
	unfolded int         // segments after the last fold (under mu)
}

// Epoch is the epoch this FS owns the database with.
func (f *FS) Epoch() uint64 { return f.epoch }

// TakenAt is when this owner's epoch object was created.
func (f *FS) TakenAt() time.Time { return f.takenAt }

// LeaseWaited is how long Open waited out the read leases of earlier
// owners (0 if none could still serve): the part of a takeover that is
// a safety wait, not work.
func (f *FS) LeaseWaited() time.Duration { return f.leaseWaited }

// Fenced is closed when this owner learns it was superseded.
func (f *FS) Fenced() <-chan struct{} { return f.fencedCh }

// FenceError returns the fence, or nil while this owner is current.
func (f *FS) FenceError() error {
	if e := f.fenced.Load(); e != nil {
		return e
	}
	return nil
}

// WriteOutcomeUnknown reports whether a write that failed on this fenced
// owner may nevertheless have been applied by the new owner.
func (f *FS) WriteOutcomeUnknown() bool { return f.outcomeUnknown.Load() }

func (f *FS) setFenced(by uint64) error {
	e := &ErrFenced{Epoch: f.epoch, By: by}
	if f.fenced.CompareAndSwap(nil, e) {
		f.cfg.Logger.Error("this owner is fenced: a newer owner took the database", "epoch", f.epoch, "by", by)
	}
	f.fenceOnce.Do(func() { close(f.fencedCh) })
	return f.fenced.Load()
}

// ReadAllowed reports whether this owner may serve reads: it is not fenced
// and it confirmed its ownership within the read lease. When the last
// confirmation is too old it confirms again on the spot (one listing).
func (f *FS) ReadAllowed() error {
	if f.readOnly {
		if !f.readerMayServe() {
			return fmt.Errorf("replica lease expired (not renewed within %s): files this replica reads may have been deleted; it serves again after its next catch-up", f.cfg.ReaderTTL)
		}
		return nil
	}
	if err := f.FenceError(); err != nil {
		return err
	}
	if !f.readSince.Load() {
		f.readSince.Store(true)
	}
	if f.leaseFresh() {
		return nil
	}
	f.confirmMu.Lock()
	defer f.confirmMu.Unlock()
	if f.leaseFresh() {
		return nil // another reader just confirmed
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(f.cfg.ReadTimeout, f.cfg.Lease))
	defer cancel()
	if err := f.confirm(ctx, "foreground_read"); err != nil {
		if ferr := f.FenceError(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("read lease expired and ownership cannot be confirmed (lease %s): %w", f.cfg.Lease, err)
	}
	if !f.leaseFresh() {
		// The lease counts from when the confirmation began: one slower
		// than the lease proves nothing about now.
		return fmt.Errorf("read lease expired: confirming ownership took longer than the lease (%s); retry", f.cfg.Lease)
	}
	return nil
}

func (f *FS) leaseFresh() bool {
	return f.leaseNow()-f.lastConfirm.Load() < int64(f.cfg.Lease)
}

func (f *FS) observe(op, name, activity string, n int64, start time.Time, err error) {
	if f.cfg.Observe != nil {
		f.cfg.Observe(Request{Op: op, FileType: FileType(name), Activity: activity, Bytes: n, Duration: time.Since(start), Err: err})
	}
}

func (f *FS) localPath(name string) string { return filepath.Join(f.cfg.CacheDir, name) }

func (f *FS) background() policy {
	return policy{Attempt: f.cfg.WriteTimeout, Total: f.cfg.RetryFor}
}

func (f *FS) foreground() policy {
	return policy{Attempt: f.cfg.ReadTimeout, Total: 3 * f.cfg.ReadTimeout}
}

// ---- object-store calls with instrumentation --------------------------

func (f *FS) put(ctx context.Context, key, name, activity string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := f.store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	f.observe("put", name, activity, int64(len(data)), start, err)
	return info, err
}

func (f *FS) putFile(ctx context.Context, key, name, activity, path string, opts objstore.PutOptions) error {
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

func (f *FS) get(ctx context.Context, key, name, activity string) ([]byte, objstore.ObjectInfo, error) {
	start := time.Now()
	r, info, err := f.store.Get(ctx, key, 0, -1)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(r)
		r.Close()
	}
	f.observe("get", name, activity, int64(len(b)), start, err)
	return b, info, err
}

func (f *FS) list(ctx context.Context, prefix, activity string) ([]objstore.ObjectInfo, error) {
	start := time.Now()
	var out []objstore.ObjectInfo
	err := f.store.List(ctx, prefix, func(o objstore.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	f.observe("list", "", activity, 0, start, err)
	return out, err
}

func (f *FS) listDir(ctx context.Context, dir, activity string) ([]objstore.ObjectInfo, error) {
	start := time.Now()
	var out []objstore.ObjectInfo
	err := f.store.ListDir(ctx, dir, func(o objstore.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	f.observe("list", "", activity, 0, start, err)
	return out, err
}

func (f *FS) del(ctx context.Context, key, name, activity string) error {
	start := time.Now()
	err := f.store.Delete(ctx, key)
	f.observe("delete", name, activity, 0, start, err)
	return err
}

func (f *FS) delMany(ctx context.Context, keys []string, activity string) error {
	if len(keys) == 0 {
		return nil
	}
	start := time.Now()
	err := f.store.DeleteMany(ctx, keys)
	f.observe("delete", FileOfKey(keys[0]), activity, 0, start, err)
	return err
}

// epochs lists the epochs taken in storage.
func (f *FS) epochs(ctx context.Context, activity string) ([]uint64, error) {
	objs, err := f.list(ctx, epochPrefix, activity)
	if err != nil {
		return nil, err
	}
	var es []uint64
	for _, o := range objs {
		if e, ok := parseEpochKey(o.Key); ok {
			es = append(es, e)
		}
	}
	return es, nil
}

// confirm checks that no higher epoch exists, fencing this owner if one
// does. It returns the fence error, or a store error.
func (f *FS) confirm(ctx context.Context, activity string) error {
	h, err := f.checkEpoch(ctx, activity)
	if err != nil {
		return err
	}
	if h != 0 {
		return f.setFenced(h)
	}
	return nil
}

// checkEpoch reads the owner record and returns the highest epoch above
// ours (0: none), renewing the read lease when there is none. It does not
// fence.
func (f *FS) checkEpoch(ctx context.Context, activity string) (uint64, error) {
	start := f.leaseNow()
	e, err := f.ownerEpoch(ctx, activity)
	if err != nil {
		return 0, err
	}
	if e > f.epoch {
		return e, nil
	}
	if e < f.epoch && !f.readOnly {
		// This owner raised the record to its epoch before it did
		// anything else, and the record only goes up: a lower one (or
		// none, and no claim as high as ours) means the store lost the
		// database (a wiped bucket, a MinIO without its volume). Writing
		// on would acknowledge writes into a store that holds no
		// database; stop, and let the next owner refuse the location.
		return 0, f.stopOwner(fmt.Errorf("the store no longer holds this database's ownership records (highest epoch there %d, ours %d): its data at %s was deleted or lost", e, f.epoch, f.store.URL()))
	}
	// The lease runs from before the read was sent: a newer owner that
	// raised the record after that instant may be missing from it.
	for {
		old := f.lastConfirm.Load()
		if start <= old || f.lastConfirm.CompareAndSwap(old, start) {
			return 0, nil
		}
	}
}

// ---- callbacks from the C++ FileSystem ---------------------------------

// Create records a managed file RocksDB just created locally.
func (f *FS) Create(name string) error {
	if err := f.FenceError(); err != nil {
		return err
	}
	k := KindOf(name)
	if k == KindLocal || k == KindCurrent {
		return nil
	}
	if f.readOnly {
		return fmt.Errorf("create %s: %w", name, ErrReadOnly)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[name] = &file{kind: k, epoch: f.epoch, nextSeq: 1, ownLog: k == KindLog}
	return nil
}

// Sync makes the first size bytes of a log durable in the store: the bytes
// not yet uploaded become the log's next segment, created with
// If-None-Match so that a seal written by a newer owner stops this one.
func (f *FS) Sync(name string, size int64, activity string) error {
	if KindOf(name) != KindLog {
		return nil // tables and objects are uploaded on close/rename
	}
	if f.readOnly {
		return fmt.Errorf("sync %s: %w", name, ErrReadOnly)
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

// stopOwner ends this owner's tenure after a log sync or a CURRENT update
// failed for good (issue 22, item 2). RocksDB has not applied the writes
// of that sync, but their bytes may be in the store (a reply lost, then
// read-backs failing until the retries ran out), and they are in the
// local log file either way: a later sync of the log would upload them.
// Left alone, RocksDB resumes on its own after a retryable error (7.8.3 as
// 9.11: max_bgerror_resume_count is unlimited by default), flushes, and serves a database
// without writes that secondaries and the next owner replay from the
// store. Only a reopen from the store makes the two agree, so the owner
// stops as a fenced one does: it uploads nothing more, RocksDB gets
// IOFenced (a fatal error, never resumed), requests are refused (writes
// that failed inside RocksDB with UNAVAILABLE, outcome unknown), and the
// primary exits; the next owner recovers whatever the store holds.
func (f *FS) stopOwner(cause error) error {
	f.outcomeUnknown.Store(true)
	e := &ErrFenced{Epoch: f.epoch, Cause: cause.Error()}
	if f.fenced.CompareAndSwap(nil, e) {
		f.cfg.Logger.Error("this owner stops: the store may hold writes its RocksDB did not apply; the next owner reopens from the store", "epoch", f.epoch, "cause", cause)
	}
	f.fenceOnce.Do(func() { close(f.fencedCh) })
	return &ErrOutcomeUnknown{Fence: f.fenced.Load()}
}

// definitelyNotStored: the fence stopped the sync before any of its bytes
// reached the store (a newer owner's seal holds the slot, or the owner
// knew it was fenced before uploading).
func definitelyNotStored(err error) bool {
	var fe *ErrFenced
	var unknown *ErrOutcomeUnknown
	return errors.As(err, &fe) && !errors.As(err, &unknown)
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
func (f *FS) syncLocked(name string, st *file, size int64, activity string) error {
	storedSome := false
	for size > st.size {
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
		stored, err := f.putSegment(name, seq, data, activity)
		if err != nil {
			return err
		}
		storedSome = true
		if seq == 1 || f.leaseNow()-f.lastConfirm.Load() >= int64(f.cfg.AckFresh) {
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
		st.segments = append(st.segments, segment{seq: seq, size: stored})
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
func (f *FS) putSegment(name string, seq uint64, data []byte, activity string) (int64, error) {
	key := segmentKey(name, f.epoch, seq)
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
		case bytes.HasPrefix(data, got):
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
func (f *FS) walAttempt(n int) time.Duration {
	return min(f.cfg.WALAttempt+time.Duration(n)*time.Second/(4<<20), max(f.cfg.WriteTimeout, f.cfg.WALAttempt))
}

// confirmBeforeAck acknowledges a stored segment only once no higher epoch
// exists: the first segment of a log this owner created (the log may have
// been created after a newer owner listed the store, so no seal protects
// it), and any segment stored when this owner's last confirmation is older
// than AckFresh (a seal deleted with its log could not stop it). If a newer
// owner exists, the segment is already in the store and that owner may or
// may not have listed it: the outcome of the writes in it is unknown.
func (f *FS) confirmBeforeAck(name, activity string) error {
	var by uint64
	err := f.background().do(context.Background(), func(ctx context.Context) (err error) {
		by, err = f.checkEpoch(ctx, activity)
		return err
	})
	if err != nil {
		return err
	}
	if by == 0 {
		return nil
	}
	f.outcomeUnknown.Store(true) // before anyone sees the fence
	fe := f.setFenced(by)
	f.cfg.Logger.Error("a segment reached the store after a newer owner took over; its writes' outcome is unknown", "log", name, "epoch", f.epoch, "by", by)
	return &ErrOutcomeUnknown{Fence: fe.(*ErrFenced)}
}

// fenceFromStore fences this owner after a failed condition, naming the
// newer epoch when it can be found.
func (f *FS) fenceFromStore(ctx context.Context) error {
	var by uint64
	if es, err := f.epochs(ctx, "background"); err == nil {
		by = higherEpoch(es, f.epoch)
	}
	return f.setFenced(by)
}

// Close finishes a managed file RocksDB wrote: a log's remaining bytes
// become a segment; a table is uploaded whole.
func (f *FS) Close(name string, size int64, activity string) error {
	switch KindOf(name) {
	case KindLog:
		return f.Sync(name, size, activity)
	case KindTable, KindObject:
		if err := f.FenceError(); err != nil {
			return err
		}
		if f.readOnly {
			return fmt.Errorf("close %s: %w", name, ErrReadOnly)
		}
		return f.upload(name, f.localPath(name), activity)
	}
	return nil
}

// upload stores a finished local file as name's version of this epoch.
func (f *FS) upload(name, path, activity string) error {
	class := f.cfg.TableStorageClass
	if KindOf(name) != KindTable {
		class = f.cfg.LogStorageClass
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	key := objectKey(name, f.epoch)
	tier := f.tierOf(name) // chosen when RocksDB created it
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		err := f.putFileIn(ctx, tier, key, name, activity, path, objstore.PutOptions{StorageClass: class})
		return err
	})
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: KindOf(name), epoch: f.epoch, size: fi.Size(), tier: tier}
	f.mu.Unlock()
	if KindOf(name) == KindTable && path == f.localPath(name) && readsRemotely(tier) {
		// Cold tables stay out of the local cache (tier.go).
		f.cache.mu.Lock()
		evict := f.cache.evict
		f.cache.mu.Unlock()
		if evict != nil {
			evict(name)
		}
		os.Remove(path)
	} else if KindOf(name) == KindTable && path == f.localPath(name) {
		f.noteCachedVersion(name, f.epoch)
		// The new table stays cached; older ones make room for it.
		f.cache.add(name, fi.Size())
		if !f.cache.makeRoom(0, name, f.cfg.CacheDir) {
			f.cache.mu.Lock()
			evict := f.cache.evict
			f.cache.mu.Unlock()
			if evict != nil {
				evict(name)
			}
			f.cache.forget(name)
			os.Remove(path) // too big for the cache: read it from the store
		}
	}
	return nil
}

// Rename is called before RocksDB renames src to dst locally; it publishes
// dst (CURRENT with If-Match, IDENTITY and OPTIONS whole).
func (f *FS) Rename(src, dst string) error {
	if err := f.FenceError(); err != nil {
		return err
	}
	if strings.Contains(src, "/") {
		return f.installJobOutput(src, dst) // a remote compaction's output
	}
	if f.readOnly && KindOf(dst) != KindLocal {
		return fmt.Errorf("rename %s to %s: %w", src, dst, ErrReadOnly)
	}
	switch KindOf(dst) {
	case KindCurrent:
		return f.replaceCurrent(f.localPath(src))
	case KindObject:
		if err := f.upload(dst, f.localPath(src), "flush"); err != nil {
			return err
		}
		f.dropLocalOnly(src)
		return nil
	case KindTable, KindLog:
		return fmt.Errorf("rename %s to %s: renaming tables or logs is not supported by the Shale FileSystem", src, dst)
	}
	return nil
}

func (f *FS) dropLocalOnly(name string) {
	f.mu.Lock()
	delete(f.files, name)
	f.mu.Unlock()
}

// currentObject is what the store holds for CURRENT: RocksDB's content
// ("MANIFEST-000005\n") and a trailer line unique to this write. S3 etags
// are content hashes, so without the trailer a rewrite of the same
// content would keep its etag, and a stale owner's If-Match would pass.
func (f *FS) currentObject(content []byte) []byte {
	return fmt.Appendf(append([]byte{}, content...), "shale epoch=%d write=%s\n", f.epoch, newNonce())
}

// currentContent strips the trailer: RocksDB's CURRENT is the first line.
func currentContent(obj []byte) []byte {
	if i := bytes.IndexByte(obj, '\n'); i >= 0 {
		return obj[:i+1]
	}
	return obj
}

// replaceCurrent writes CURRENT from a local file, conditional on the etag
// this owner last wrote: a newer owner rewrote CURRENT when it opened, so
// a stale owner's update fails here. Only a CURRENT written by a newer
// owner (its trailer names its epoch) or a newer epoch in the store fences
// this owner; a failed read-back or our own earlier write is retried.
func (f *FS) replaceCurrent(path string) error {
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	data := f.currentObject(content)
	f.currentMu.Lock()
	defer f.currentMu.Unlock()
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		opts := objstore.PutOptions{IfMatch: f.currentETag, StorageClass: f.cfg.LogStorageClass}
		if f.currentETag == "" {
			opts = objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass}
		}
		info, err := f.put(ctx, "CURRENT", "CURRENT", "flush", data, opts)
		if err == nil {
			f.currentETag = info.ETag
			return nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
		got, ginfo, gerr := f.get(ctx, "CURRENT", "CURRENT", "flush")
		if gerr != nil {
			return retryLater(fmt.Errorf("CURRENT changed and cannot be read back: %w", gerr))
		}
		switch e := currentEpoch(got); {
		case bytes.Equal(got, data):
			f.currentETag = ginfo.ETag // our attempt landed; its reply was lost
			return nil
		case e == f.epoch:
			// An earlier update of ours landed after we gave up on it:
			// build on it.
			f.currentETag = ginfo.ETag
			return retryLater(errors.New("CURRENT holds an earlier update of this owner; retrying on top of it"))
		case e > f.epoch:
			return f.setFenced(e)
		}
		if err := f.confirm(ctx, "flush"); err != nil {
			return err
		}
		return retryLater(fmt.Errorf("CURRENT was changed by epoch %d, below ours, and no newer owner exists", currentEpoch(got)))
	})
	if err != nil {
		if f.FenceError() == nil {
			// The update may have landed: the store may name a MANIFEST
			// that RocksDB, told it failed, will delete.
			return f.stopOwner(fmt.Errorf("update of CURRENT failed: %w", err))
		}
		return err
	}
	f.mu.Lock()
	f.files["CURRENT"] = &file{kind: KindCurrent, size: int64(len(content))}
	f.mu.Unlock()
	f.storedCurrent.Store(manifestOf(content))
	if f.cfg.OnDurable != nil {
		f.cfg.OnDurable() // readers follow the MANIFEST switch at once
	}
	return nil
}

// Delete removes a managed file from the listing and schedules its
// physical deletion after the grace period (secondaries and slow readers
// may still read it).
func (f *FS) Delete(name string) error {
	k := KindOf(name)
	if k == KindLocal {
		return nil
	}
	if k == KindCurrent {
		return fmt.Errorf("delete CURRENT: refused")
	}
	if f.readOnly {
		return nil // the primary deletes; a secondary only forgets
	}
	if err := f.FenceError(); err != nil {
		return err
	}
	f.mu.Lock()
	st := f.files[name]
	delete(f.files, name)
	f.mu.Unlock()
	f.cache.forget(name)
	if st == nil {
		return nil
	}
	// A running fold finishes first: it deletes segments of the version,
	// and the trash loop must list the version after that.
	st.foldMu.Lock()
	st.foldMu.Unlock()
	return f.trash(context.Background(), name, st.epoch)
}

type trashMarker struct {
	DeletedAt time.Time `json:"deletedAt"`
	Epoch     uint64    `json:"deletedByEpoch"`
}

// Fetch materializes a managed file in the local cache (RocksDB is about
// to open it): a table or object is downloaded, a log is reassembled from
// its segments up to its seal.
func (f *FS) Fetch(name, activity string) error {
	f.mu.Lock()
	st := f.fileLocked(name)
	f.mu.Unlock()
	if st == nil {
		return fmt.Errorf("fetch %s: %w", name, os.ErrNotExist)
	}
	if activity == "foreground_read" && !f.serving.Load() {
		activity = "open"
	}
	var data []byte
	pol := f.foreground()
	if activity != "foreground_read" {
		pol = f.background()
	}
	err := pol.do(context.Background(), func(ctx context.Context) error {
		var err error
		switch st.kind {
		case KindLog:
			data, err = f.readLog(ctx, name, st, activity)
		case KindCurrent:
			data, _, err = f.get(ctx, "CURRENT", name, activity)
			data = currentContent(data)
		default:
			data, err = f.getObject(ctx, name, st, activity)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fetch %s: %w", name, err)
	}
	if err := writeFileAtomic(f.localPath(name), data); err != nil {
		return err
	}
	if st.kind == KindTable {
		f.noteCachedVersion(name, st.epoch)
	}
	return nil
}

// readLog reassembles a log from its segments and folds, fetching up to
// 16 at a time (a busy WAL has one segment per synced write group until it
// is folded). A folded segment may vanish between the listing and the
// read (its writer folds and deletes while we read): the version is then
// listed again, and the log read from the new listing must hold the same
// bytes.
func (f *FS) readLog(ctx context.Context, name string, st *file, activity string) ([]byte, error) {
	st.mu.Lock()
	segs := append([]segment(nil), st.segments...)
	epoch, size := st.epoch, st.size
	st.mu.Unlock()
	data, err := f.readSegments(ctx, name, epoch, segs, size, activity)
	if !errors.Is(err, objstore.ErrNotFound) {
		return data, err
	}
	v, lerr := f.listVersion(ctx, name, epoch)
	if lerr != nil {
		return nil, lerr
	}
	if v.size < size || !v.contiguous() {
		return nil, fmt.Errorf("log %s (epoch %d) lost segments while being read (%d of %d bytes left): %w", name, epoch, v.size, size, err)
	}
	st.mu.Lock()
	st.segments = trimSegments(v.segments, size)
	st.mu.Unlock()
	return f.readSegments(ctx, name, epoch, trimSegments(v.segments, size), size, activity)
}

// trimSegments keeps the objects that hold the first size bytes of a log.
func trimSegments(segs []segment, size int64) []segment {
	var n int64
	for i, s := range segs {
		if n >= size {
			return segs[:i]
		}
		n += s.size
	}
	return segs
}

// readSegments fetches the objects of one log version and joins them.
func (f *FS) readSegments(ctx context.Context, name string, epoch uint64, segs []segment, size int64, activity string) ([]byte, error) {
	parts := make([][]byte, len(segs))
	err := parallel(ctx, len(segs), 16, func(ctx context.Context, i int) error {
		s := segs[i]
		key := segmentKey(name, epoch, s.seq)
		if s.fold() {
			key = foldKey(name, epoch, s.seq, s.last)
		}
		b, _, err := f.get(ctx, key, name, activity)
		if err == nil && int64(len(b)) != s.size {
			err = fmt.Errorf("object %s of %s is %d bytes, expected %d", key, name, len(b), s.size)
		}
		parts[i] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(int(size))
	for _, p := range parts {
		buf.Write(p)
	}
	if int64(buf.Len()) < size {
		return nil, fmt.Errorf("log %s (epoch %d) holds %d bytes, expected %d", name, epoch, buf.Len(), size)
	}
	return buf.Bytes()[:size], nil
}

// writeFileAtomic writes path through a temporary file of its own, so
// two fetches of one file never write into each other's bytes.
func writeFileAtomic(path string, data []byte) error {
	fh, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+fetchTempMark+"*")
	if err != nil {
		return err
	}
	_, err = fh.Write(data)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(fh.Name(), path)
	}
	if err != nil {
		os.Remove(fh.Name())
	}
	return err
}

// fetchTempMark is in the name of a fetch's temporary file (left behind
// only by a crash; the next open removes it).
const fetchTempMark = ".shale-fetch-"

// Stat returns the size of a managed file and whether it exists.
func (f *FS) Stat(name string) (int64, bool) {
	f.mu.Lock()
	st := f.fileLocked(name)
	f.mu.Unlock()
	if st == nil {
		return 0, false
	}
	if st.kind == KindLog && st.ownLog {
		// A log this owner is writing: RocksDB wants its local size.
		if fi, err := os.Stat(f.localPath(name)); err == nil {
			return fi.Size(), true
		}
	}
	st.mu.Lock() // Sync updates a log's size under the file's own lock
	defer st.mu.Unlock()
	return st.size, true
}

// List returns the managed files of the database, sorted.
func (f *FS) List() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.files))
	for n := range f.files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Stop stops the background work. It uploads nothing: RocksDB closed its
// files before.
func (f *FS) Stop() {
	if f.readOnly {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f.dropLease(ctx)
		cancel()
	}
	f.stopMu.Lock()
	f.stopped = true
	f.stopMu.Unlock()
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
}

// Release records that this owner stopped serving for good, so the next
// owner need not wait out its read lease. Call it only after the database
// is closed and no request is being served.
func (f *FS) Release(ctx context.Context) error {
	if f.FenceError() != nil {
		return nil
	}
	_, err := f.put(ctx, releasedKey(f.epoch), "", "background", []byte(time.Now().UTC().Format(time.RFC3339Nano)), objstore.PutOptions{})
	return err
}

// fileLocked returns the state of a managed file (f.mu held): a live one,
// or on a reader a table that left the listing but that RocksDB's view may
// still use until it catches up (the store keeps it for the delete grace).
func (f *FS) fileLocked(name string) *file {
	if st := f.files[name]; st != nil {
		return st
	}
	if r, ok := f.retired[name]; ok {
		return r.file
	}
	return nil
}

// Managed implements rocksshim.FileSystemHooks.
func (f *FS) Managed(name string) bool { return KindOf(name) != KindLocal }

// Fenced marks the fence error for the C++ side (IOStatus "fenced").
func (e *ErrFenced) Fenced() bool { return true }
