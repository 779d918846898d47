// Package shalefs is the Go half of the Shale FileSystem
// (docs/architecture.md, "The Shale FileSystem"; docs/rfcs/): the C++
// rocksdb::FileSystem in internal/rocksshim keeps RocksDB's hot paths on
// local disk and calls into this package for everything that touches the
// object store: uploading WAL/MANIFEST segments on sync and tables on
// close, replacing CURRENT with If-Match, fetching files into the local
// cache, listings, deferred deletes, and the fencing protocol that makes
// one owner at a time safe (docs/fencing.md).
package shalefs

import (
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/cache"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
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
	// KeepFolded, when set, is asked once a fold is stored whether the
	// segments it covers (slots up to through of the owner's version of
	// log name) are still wanted: the continuous archive has not copied
	// them yet (RFC 0005 step 2a). Their deletion then waits until it
	// says no, for at most KeepFoldedFor (default 2m) and while a log has
	// at most KeepFoldedSegments kept segments (default 4096; beyond, the
	// oldest kept fold's go at once). No write waits for it.
	KeepFolded         func(name string, epoch, through uint64) bool
	KeepFoldedFor      time.Duration
	KeepFoldedSegments int
	// WALPipelineDepth > 1 keeps up to that many WAL segment uploads in
	// flight (owner_pipeline.go, docs/rfcs/0013-pipelined-writes.md): a
	// WAL sync returns once its upload is queued, and the engine waits for
	// its ticket (Ticket, WaitDurable) before acknowledging. 0 or 1: every
	// sync waits for its upload (RFC 0004). At most MaxWALPipelineDepth.
	WALPipelineDepth int
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
	// OpenOrigin opens the store of a clone's origin by URL (default
	// objstore.Open, with the environment's credentials).
	OpenOrigin func(url string) (objstore.Store, error)
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
	def(&c.KeepFoldedFor, 2*time.Minute)
	if c.KeepFoldedSegments <= 0 {
		c.KeepFoldedSegments = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
}

// core is what an Owner and a Reader share: the configuration, the
// listing of managed files, the local caches and the instrumented store
// I/O with its retries (core_*.go). Neither writes through it: what an
// owner does is in owner_*.go, what a reader does in reader_*.go.
type core struct {
	cfg   Config
	store objstore.Store
	// epoch is the owner's epoch; a reader's is math.MaxUint64, since it
	// sees every epoch as its past.
	epoch uint64

	mu    sync.Mutex
	files map[string]*file // the live listing: managed names
	// retired (readers only): tables gone from the listing that RocksDB
	// may still read until its next catch-up.
	retired map[string]retiredFile

	cache      *cache.Tables // tables kept whole in CacheDir
	rangesOnce sync.Once
	ranges     *cache.Ranges // ranges of tables read from the store, built on first use
	serving    atomic.Bool   // RocksDB is open: reads are foreground

	stop chan struct{}
	wg   sync.WaitGroup

	// cold is the cold tier's store once the tier records agree;
	// coldPending: a reader's cold store waits for the database to record
	// its cold tier (core_tier.go).
	cold        atomic.Pointer[coldRef]
	coldPending atomic.Bool

	// origin: a clone's origin record and stores (core_origin.go).
	origin       atomic.Pointer[originState]
	originLoaded atomic.Bool
}

func newCore(cfg Config) core {
	return core{cfg: cfg, store: cfg.Store, files: map[string]*file{}, cache: cache.NewTables(cfg.CacheDir, cfg.CacheBytes), stop: make(chan struct{})}
}

// file is the state of one managed file.
type file struct {
	mu    sync.Mutex // serializes uploads of one log
	kind  layout.Kind
	epoch uint64 // version (the writer's epoch)
	size  int64  // bytes in the store (logs: before the seal)
	tier  Tier   // tables: the store holding this version (tier.go)
	// key, when set, is the one object holding the whole file (a
	// checkpoint's frozen MANIFEST copy), read instead of its log.
	key string
	// origin, when set, is where an origin table of a clone is read
	// (version 0 here; core_origin.go).
	origin *originTable

	// logs only
	segments []protocol.Segment
	nextSeq  uint64
	ownLog   bool // created by this owner: appendable
	// a pipelined WAL (owner_pipeline.go): the next slot to queue and the
	// bytes queued so far (0, 0: none yet); nextSeq and size stay what is
	// stored and cleared.
	qSeq  uint64
	qSize int64

	// own logs only: folding (fold.go)
	foldMu   sync.Mutex  // held by a fold and by Delete waiting for it
	folding  atomic.Bool // a fold is scheduled or running
	unfolded int         // segments after the last fold (under mu)
}

// Serving tells the FileSystem that RocksDB finished opening: later fetches are
// foreground reads, earlier ones part of the open.
func (f *core) Serving() { f.serving.Store(true) }

// Epoch is the epoch this FS owns the database with.
func (f *core) Epoch() uint64 { return f.epoch }

func (f *core) localPath(name string) string { return filepath.Join(f.cfg.CacheDir, name) }

// fileLocked returns the state of a managed file (f.mu held): a live one,
// or on a reader a table that left the listing but that RocksDB's view may
// still use until it catches up (the store keeps it for the delete grace).
func (f *core) fileLocked(name string) *file {
	if st := f.files[name]; st != nil {
		return st
	}
	if r, ok := f.retired[name]; ok {
		return r.file
	}
	return nil
}

// Managed implements rocksshim.FileSystemHooks.
func (f *core) Managed(name string) bool { return layout.KindOf(name) != layout.KindLocal }

// Stat returns the size of a managed file and whether it exists.
func (f *core) Stat(name string) (int64, bool) {
	f.mu.Lock()
	st := f.fileLocked(name)
	f.mu.Unlock()
	if st == nil {
		return 0, false
	}
	if st.kind == layout.KindLog && st.ownLog {
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
func (f *core) List() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.files))
	for n := range f.files {
		if n != layout.CatalogLog { // Shale's own log: RocksDB never sees it
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// stopLoops stops the background loops and waits for them.
func (f *core) stopLoops() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.wg.Wait()
}

// retiredFile is a table a reader's listing dropped, kept (and named in the
// reader's lease) for ReaderTTL: RocksDB reads it until its next catch-up,
// and a scan that started before that may read it a little longer.
type retiredFile struct {
	file  *file
	since time.Time
}

// Owner is the Shale FileSystem of the one process that owns a database
// (a primary): it claims an epoch, takes the database over, writes, and
// runs the lease and trash loops (owner_*.go).
type Owner struct {
	core

	// currentMu serializes CURRENT updates; it is held across uploads, so
	// nothing else waits on it (the listing lock mu is never held across a
	// network call).
	currentMu   sync.Mutex
	currentETag string // etag of the CURRENT this owner last wrote
	// storedCurrent (a string) is the MANIFEST that CURRENT, as this owner
	// last wrote it, names: announced to readers (owner_tails.go).
	storedCurrent atomic.Value

	fenced atomic.Pointer[ErrFenced]
	// released: Release began (RFC 0012). From then on this owner serves
	// no read and stores nothing, whether or not its release object
	// landed: a successor that finds it skips the lease wait.
	released atomic.Bool
	fencedCh chan struct{}
	// outcomeUnknown: an upload that may be part of the new owner's
	// database raced the fence, so failed writes are not "definitely not
	// applied" (the KV service answers UNAVAILABLE, not FAILED_PRECONDITION).
	outcomeUnknown atomic.Bool
	fenceOnce      sync.Once
	// Leases are measured on cfg.Clock's lease reading (core_clock.go), which
	// counts time the machine was suspended and never goes back:
	// lastConfirm is that reading at the start of the last ownership
	// confirmation.
	lastConfirm atomic.Int64
	// lastReads is that reading when the lease loop last found reads
	// being served (readSince), 0 if never: for the primary's readiness.
	lastReads   atomic.Int64
	confirmMu   sync.Mutex // one on-demand confirmation at a time
	takenAt     time.Time
	leaseWaited time.Duration // how long Open waited out earlier owners' leases

	trashMu   sync.Mutex
	trashSeen map[string]*trashEntry   // trash markers this owner knows
	ackFresh  map[uint64]time.Duration // epoch -> its claim's AckFresh (0: unknown), for deleting seals
	readSince atomic.Bool              // a read was allowed since the lease loop last looked
	// readerLeases is the owner's view of everyone's reader lease (trash
	// loop only).
	readerLeases map[string]*seenLease
	pins         map[string]*seenPin // clones' pins (trash loop only)
	// originPast: trash markers of this clone's origin tables that are
	// past the grace and were protected by nothing (kept until detach, so
	// no listing adds their tables back); detached once the pins are gone
	// (trash loop only: owner_detach.go).
	originPast map[string]bool
	detached   bool
	// originDeleting: origin tables deleted whose trash marker is not
	// noted yet (under mu).
	originDeleting int

	compactions jobRegistry // remote compaction outputs being installed (owner_install.go)

	ck        catalogState  // the checkpoint catalog (owner_catalog.go)
	lastSweep time.Duration // when the trash loop last swept checkpoint directories (wait reading)
	keepMu    sync.Mutex
	kept      []keptFold // folds whose segments wait for the archive (owner_fold.go)

	// stopMu orders starting background folds against Stop.
	stopMu  sync.Mutex
	stopped bool

	pipe *pipeline // WALPipelineDepth > 1 (owner_pipeline.go)
	// claimDepths: epoch -> the WAL pipeline depth its claim records
	// (sealing, owner_seal.go).
	claimDepths sync.Map
}

// Reader is a read-only Shale FileSystem on a database another process
// owns (a secondary, a compaction worker): it claims no epoch and writes
// nothing but its lease (reader_*.go).
type Reader struct {
	core

	refreshMu sync.Mutex
	current   []byte      // the CURRENT content it last read
	rs        readerState // what the last refresh learned (under refreshMu)
	// its reader lease (reader_lease.go)
	leaseSum     string
	leaseRenewed atomic.Int64
	lapsed       atomic.Bool // the lease lapsed and RocksDB has not caught up since
	// beforeGrow, in tests, runs when a refresh has installed a view and
	// is about to append what the logs named gained to their local copies.
	beforeGrow func(logs []string)
}
