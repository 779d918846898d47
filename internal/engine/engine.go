// Package engine is Shale's handle on one RocksDB database: it opens the
// database with Shale's defaults, runs reads and writes, and exposes the
// statistics and properties that metrics and the Status RPC report.
package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"
	"golang.org/x/sys/unix"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// Options tune a database. The zero value is not valid; start from
// DefaultOptions.
type Options struct {
	// BlockCacheBytes is the size of the LRU block cache.
	BlockCacheBytes uint64
	// BackgroundThreads for flushes and compactions.
	BackgroundThreads int
	// BlockSizeBytes of SST data blocks (0: RocksDB's 4 KiB).
	BlockSizeBytes int
	// MaxManifestFileSize rolls the MANIFEST over to a new file past this
	// size (0: 64 MiB). Tests set it tiny to make every edit switch it.
	MaxManifestFileSize uint64
	// TargetFileSizeBytes is the size compactions cut tables at (0:
	// RocksDB's 64 MiB). Tests set it small to get many tables.
	TargetFileSizeBytes uint64
	// BottommostCompression for the last level; newer data uses LZ4.
	BottommostCompression grocksdb.CompressionType
	// Pipeline, when set (with a FileSystem whose WAL syncs return once
	// their upload is queued), holds durable writes back until their
	// uploads are durable and reads back to the last durable write
	// (pipeline.go, docs/rfcs/0013-pipelined-writes.md).
	Pipeline Pipeline
	// FileSystem, when set, puts the Shale FileSystem under RocksDB: the
	// directory is then only a local cache of a database that lives in an
	// object store, and may start empty.
	FileSystem rocksshim.FileSystemHooks
	// CompactionService, when set, is offered every compaction first
	// (remote compaction; it answers "use local" on any trouble).
	CompactionService rocksshim.CompactionService
	// ColdAfter, when positive, turns on tiered placement (tiering.go):
	// last-level tables are cold, keys younger than ColdAfter stay out of
	// the last level, and an age-out pass moves older ones there. The
	// FileSystem puts cold tables in the cold tier.
	ColdAfter time.Duration
	// SecondaryDir, when set, opens the database as a read-only secondary
	// (DB::OpenAsSecondary) that keeps its own files there; it follows the
	// primary with TryCatchUp.
	SecondaryDir string
	// FollowerRefresh, with SecondaryDir, opens a follower instead
	// (DB::OpenAsFollower, RocksDB 9.x, experimental): its own thread
	// tails the MANIFEST this often, and it never reads a WAL, so it
	// applies flushed writes only (docs/secondary.md, "Followers").
	FollowerRefresh time.Duration
	// Tuning is the RocksDB features a user may turn on per database
	// (docs/performance.md measures each).
	Tuning Tuning
}

// Tuning holds RocksDB features that trade one property for speed, off by
// default. Validate refuses the combinations RocksDB refuses.
type Tuning struct {
	// DataBlockHashIndex adds a hash index to every data block
	// (kDataBlockBinaryAndHash): point lookups in a cached block skip the
	// binary search, for a little more block space.
	DataBlockHashIndex bool
	// DataBlockHashRatio is the hash index's utilization ratio, keys per
	// bucket, in (0, 1] (0: RocksDB's 0.75). Lower is faster and larger.
	DataBlockHashRatio float64
	// UnorderedWrite lets writers insert into the memtable without
	// waiting for earlier writers: more write throughput, but a snapshot
	// (and so a MultiGet or a Scan) may see a later write without an
	// earlier one until that earlier one lands.
	UnorderedWrite bool
	// PipelinedWrite overlaps one write group's WAL write with the
	// previous group's memtable insert. RocksDB refuses it with
	// UnorderedWrite.
	PipelinedWrite bool
	// AsyncIO lets RocksDB prefetch for scans asynchronously
	// (ReadOptions.async_io).
	AsyncIO bool
	// OptimizeMultiGetForIO reads the tables of a MultiGet's keys
	// concurrently: RocksDB's optimize_multiget_for_io, which this build
	// (no coroutines) ignores, and the engine's own split of a MultiGet of
	// 8 keys or more into parts read at once (parallelMultiGet).
	OptimizeMultiGetForIO bool
	// ScanReadahead is the readahead of a scan's table reads; 0 leaves
	// RocksDB's (from 8 KiB after 2 sequential block reads, doubling up to
	// 256 KiB). Set, a scan reads ScanReadahead ahead from its first block
	// read of a table on: on a table left in the store each readahead is a
	// round trip to it (5-30 ms to S3), so a scan of N bytes waits for
	// about N/ScanReadahead of them instead of ~5 for 256 KiB; a shorter
	// scan reads what it does not need.
	ScanReadahead uint64
	// GroupCommitWindow is how long a durable write group's leader may
	// wait for the writers of the previous group to come back before it
	// syncs (commit.go): one upload for all of them instead of one for
	// the first and another for the rest. 0 turns it off. It has no effect
	// with UnorderedWrite or PipelinedWrite, which leave grouping to
	// RocksDB.
	GroupCommitWindow time.Duration
	// RocksDBHistograms keeps RocksDB's histograms (rocksdb.db.get.micros
	// and the other latency and size distributions) besides its tickers:
	// two clock reads and a bucket update per Get and Put. Off, only the
	// tickers are kept and exported.
	RocksDBHistograms bool
}

// MaxGroupCommitWindow bounds GroupCommitWindow: a longer wait would only
// add latency, since a group closes as soon as the previous one's writers
// are back.
const MaxGroupCommitWindow = 100 * time.Millisecond

// MaxScanReadahead bounds Tuning.ScanReadahead: each scanning thread holds
// that much per table it reads.
const MaxScanReadahead = 64 << 20

// DefaultGroupCommitWindow is the peer's usual WAL flush interval: a few
// milliseconds against an object-store PUT of several.
const DefaultGroupCommitWindow = 2 * time.Millisecond

// Validate reports a Tuning RocksDB would refuse, naming the flags.
func (t Tuning) Validate() error {
	switch {
	case t.UnorderedWrite && t.PipelinedWrite:
		// RocksDB (7.8.3 as 9.11) rejects this pair when the database opens
		// (ValidateOptions) and on every write (WriteImpl).
		return errors.New("--unordered-write and --pipelined-write cannot be combined (RocksDB refuses it: pipelined writes keep the write order that unordered writes give up); choose one")
	case t.DataBlockHashRatio < 0 || t.DataBlockHashRatio > 1:
		return fmt.Errorf("--data-block-hash-ratio %g is out of range: want a fraction in (0, 1], e.g. 0.75 (0: RocksDB's default)", t.DataBlockHashRatio)
	case t.DataBlockHashRatio > 0 && !t.DataBlockHashIndex:
		return errors.New("--data-block-hash-ratio needs --data-block-index=binary-and-hash (the ratio sizes the hash index)")
	case t.GroupCommitWindow < 0 || t.GroupCommitWindow > MaxGroupCommitWindow:
		return fmt.Errorf("--group-commit-window %s is out of range: want 0 (off) to %s, e.g. 2ms", t.GroupCommitWindow, MaxGroupCommitWindow)
	case t.ScanReadahead > MaxScanReadahead:
		return fmt.Errorf("--scan-readahead %d is over the %d MiB limit; want e.g. 256KiB, near the bytes a typical scan reads (0: RocksDB's)", t.ScanReadahead, MaxScanReadahead>>20)
	case t.OptimizeMultiGetForIO && !t.AsyncIO:
		return errors.New("--optimize-multiget-for-io needs --async-io (RocksDB only uses it for asynchronous reads)")
	}
	return nil
}

// DefaultOptions are Shale's defaults for a database on this machine.
func DefaultOptions() Options {
	return Options{
		BlockCacheBytes:       256 << 20,
		BackgroundThreads:     max(2, runtime.NumCPU()),
		BottommostCompression: grocksdb.ZSTDCompression,
		Tuning:                Tuning{GroupCommitWindow: DefaultGroupCommitWindow},
	}
}

var (
	// ErrLocked: another process (or this one) has the database open.
	ErrLocked = errors.New("database is already open in another process")
	// ErrNotADatabase: the directory holds files but no RocksDB database.
	ErrNotADatabase = errors.New("directory is not empty and holds no RocksDB database")
	// ErrClosed: the database was closed.
	ErrClosed = errors.New("database is closed")
	// ErrWritesStopped: StopWrites was called (a step-down); the write was
	// refused before RocksDB saw it.
	ErrWritesStopped = errors.New("writes are stopped: this primary is stepping down")
)

// DB is an open RocksDB database. Its methods are safe for concurrent use;
// Close waits for running calls to finish.
type DB struct {
	mu sync.RWMutex // held shared by every call, exclusively by Close
	// gate is held shared by every write path (Put, Delete, Write,
	// WriteBatch, Ingest) and exclusively by a checkpoint while it reads
	// the sequence number and switches the memtable (checkpoint.go).
	gate   sync.RWMutex
	closed bool
	// writesStopped (under gate): StopWrites was called.
	writesStopped bool

	dir     string
	db      *grocksdb.DB
	opts    *grocksdb.Options
	bbto    *grocksdb.BlockBasedTableOptions
	cache   *grocksdb.Cache
	stats   *rocksshim.Statistics
	wSync   *grocksdb.WriteOptions
	wNoSync *grocksdb.WriteOptions
	ro      *grocksdb.ReadOptions
	// multiGets counts the MultiGets under way (parallelMultiGet).
	multiGets atomic.Int32
	tuning    Tuning
	commit    committer // merges concurrent non-durable writes
	durable   committer // merges concurrent durable writes into one synced write
	merge     bool      // use the committers (not with RocksDB's own write modes)

	lockFile *os.File // flock on <dir>/LOCK, held while open
	fs       *rocksshim.FileSystem
	cs       *rocksshim.CompactionAttachment
	tier     *ageOut // nil on a secondary
	pipe     *pipe   // pipelined durable writes (pipeline.go); nil: off
}

// Open opens the database in dir, creating it (and missing parent
// directories) if it does not exist. On failure nothing it created is left
// behind.
func Open(dir string, o Options) (_ *DB, err error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("database path %q must be absolute", dir)
	}
	if err := o.Tuning.Validate(); err != nil {
		return nil, err
	}
	var created []string
	if o.FileSystem != nil {
		err = os.MkdirAll(dir, 0o755)
	} else {
		created, err = prepareDir(dir)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			removeCreated(created)
		}
	}()

	// Unordered and pipelined writes are RocksDB's own ways of running
	// many writers at once: merging writes before RocksDB would leave
	// them one writer to work with.
	d := &DB{dir: dir, tuning: o.Tuning, merge: !o.Tuning.UnorderedWrite && !o.Tuning.PipelinedWrite}
	d.durable.window = o.Tuning.GroupCommitWindow
	if o.Pipeline != nil && o.SecondaryDir == "" {
		d.pipe = &pipe{p: o.Pipeline}
		d.durable.pipelined = true
	}
	// Take our own lock before RocksDB runs: its open rotates the info log
	// before it checks its LOCK, which would disturb a live owner.
	if d.lockFile, err = lockDir(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.lockFile.Close()
		}
	}()
	if o.SecondaryDir == "" {
		clearStaging(dir) // ours now: files a crashed owner staged
	}
	d.opts = grocksdb.NewDefaultOptions()
	d.opts.SetCreateIfMissing(true)
	d.opts.IncreaseParallelism(o.BackgroundThreads)
	d.opts.SetMaxBackgroundJobs(o.BackgroundThreads)
	d.opts.SetBytesPerSync(1 << 20)
	d.opts.SetCompression(grocksdb.LZ4Compression)
	d.opts.SetBottommostCompression(o.BottommostCompression)
	d.opts.SetLevelCompactionDynamicLevelBytes(true)
	d.opts.SetKeepLogFileNum(5)
	d.opts.SetMaxLogFileSize(16 << 20)
	// Roll the MANIFEST over at 64 MiB (RocksDB never does by default): in
	// the object store it is a log of segments that a takeover lists and
	// recovery reads whole, so its size must follow the live files, not
	// every edit since the database was created.
	d.opts.SetMaxManifestFileSize(64 << 20)
	if o.MaxManifestFileSize > 0 {
		d.opts.SetMaxManifestFileSize(o.MaxManifestFileSize)
	}
	if o.TargetFileSizeBytes > 0 {
		d.opts.SetTargetFileSizeBase(o.TargetFileSizeBytes)
	}
	// A finite table cache: with max_open_files = -1 (RocksDB's default)
	// DB::Open opens every table first, and on the Shale FileSystem each
	// open of a table not in the cache is a fetch from the store; 10,000
	// tables made a takeover take tens of seconds. With a finite one RocksDB
	// opens 16 at open and the rest when first read. (A secondary sets -1
	// below: RocksDB requires it there.)
	d.opts.SetMaxOpenFiles(maxOpenFiles)
	d.bbto = grocksdb.NewDefaultBlockBasedTableOptions()
	d.cache = grocksdb.NewLRUCache(o.BlockCacheBytes)
	d.bbto.SetBlockCache(d.cache)
	// Through the shim: grocksdb's filter serializes without its bits,
	// and remote compactions rebuild the table factory from that string.
	rocksshim.SetBloomFilter(d.bbto, 10)
	d.bbto.SetCacheIndexAndFilterBlocks(true)
	d.bbto.SetPinL0FilterAndIndexBlocksInCache(true)
	d.bbto.SetFormatVersion(5)
	if o.BlockSizeBytes > 0 {
		d.bbto.SetBlockSize(o.BlockSizeBytes)
	}
	if o.Tuning.DataBlockHashIndex {
		d.bbto.SetDataBlockIndexType(grocksdb.KDataBlockIndexTypeBinarySearchAndHash)
		if o.Tuning.DataBlockHashRatio > 0 {
			d.bbto.SetDataBlockHashRatio(o.Tuning.DataBlockHashRatio)
		}
	}
	if r := o.Tuning.ScanReadahead; r > 0 {
		// Constant, not doubling from 8 KiB: each step is a round trip.
		rocksshim.SetScanReadahead(d.bbto, r, r, 0)
	}
	// A whole-key Bloom filter on each memtable: a Get of a key the
	// memtable does not hold (a miss, or a key already flushed to a table)
	// skips the memtable's skip list, whose walk is a chain of cache misses
	// (a fifth of a served Get's CPU in `perf`). 2% of write_buffer_size:
	// 1.3 MiB per 64 MiB memtable, 8 bits per key at a million keys.
	d.opts.SetMemTablePrefixBloomSizeRatio(memtableBloomRatio)
	d.opts.SetMemtableWholeKeyFiltering(true)
	d.opts.SetUnorderedWrite(o.Tuning.UnorderedWrite)
	d.opts.SetEnablePipelinedWrite(o.Tuning.PipelinedWrite)
	d.opts.SetBlockBasedTableFactory(d.bbto)
	d.stats = rocksshim.AttachStatistics(d.opts, o.Tuning.RocksDBHistograms)
	if o.FileSystem != nil {
		d.fs = rocksshim.AttachFileSystem(d.opts, dir, o.FileSystem)
	}
	if o.CompactionService != nil && o.SecondaryDir == "" {
		if d.cs, err = rocksshim.AttachCompactionService(d.opts, o.CompactionService); err != nil {
			d.free()
			return nil, err
		}
	}
	if o.ColdAfter > 0 && o.SecondaryDir == "" {
		rocksshim.SetTiering(d.opts, o.ColdAfter)
	}

	if o.SecondaryDir != "" {
		// A secondary keeps every table open (RocksDB requires it) and
		// writes only its info log, to its own directory.
		d.opts.SetMaxOpenFiles(-1)
		if err = os.MkdirAll(o.SecondaryDir, 0o755); err == nil && o.FollowerRefresh > 0 {
			d.db, err = rocksshim.OpenFollower(d.opts, dir, o.SecondaryDir, o.FollowerRefresh)
		} else if err == nil {
			d.db, err = grocksdb.OpenDbAsSecondary(d.opts, dir, o.SecondaryDir)
		}
	} else {
		d.db, err = grocksdb.OpenDb(d.opts, dir)
	}
	if err != nil {
		d.free()
		return nil, openError(dir, err)
	}
	d.wSync = grocksdb.NewDefaultWriteOptions()
	d.wSync.SetSync(true)
	d.wNoSync = grocksdb.NewDefaultWriteOptions()
	d.ro = d.newReadOptions()
	if o.SecondaryDir == "" {
		// Also without tiering: SetColdAfter may turn it on.
		d.startAgeOut(o.ColdAfter)
	}
	return d, nil
}

// newReadOptions are read options with the database's tuning.
func (d *DB) newReadOptions() *grocksdb.ReadOptions {
	ro := grocksdb.NewDefaultReadOptions()
	rocksshim.SetAsyncIO(ro, d.tuning.AsyncIO, d.tuning.OptimizeMultiGetForIO)
	return ro
}

// prepareDir checks that dir can hold a database and creates it and its
// missing parents, returning what it created (deepest last).
func prepareDir(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && !fi.IsDir():
		return nil, fmt.Errorf("%s exists and is not a directory", dir)
	case err == nil:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", dir, err)
		}
		if len(entries) == 0 {
			return nil, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
			return nil, fmt.Errorf("%s: %w (found %q); choose an empty or new directory", dir, ErrNotADatabase, entries[0].Name())
		}
		return nil, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cannot use %s: %w", dir, err)
	}
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cannot use %s: %w", dir, err)
		}
		missing = append([]string{p}, missing...)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i, p := range missing {
		if err := os.Mkdir(p, 0o755); err != nil {
			removeCreated(missing[:i])
			return nil, fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
	return missing, nil
}

// removeCreated undoes prepareDir after a failed open. Only directories we
// created are touched, and RocksDB's files in them were created by us too.
func removeCreated(created []string) {
	if len(created) == 0 {
		return
	}
	os.RemoveAll(created[0])
}

// lockDir takes an exclusive flock on dir/LOCK. flock locks belong to the
// open file, not the process, and do not interact with the fcntl lock
// RocksDB takes on the same file, so a second open in this process or any
// other fails here first.
func lockDir(dir string) (*os.File, error) {
	return LockFile(dir, "LOCK")
}

// LockFile takes an exclusive flock on dir/name (created if missing), held
// until the returned file is closed; ErrLocked if another holder has it.
func LockFile(dir, name string) (*os.File, error) {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot use %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w; stop the other process or choose another directory", dir, ErrLocked)
		}
		return nil, fmt.Errorf("cannot lock %s: %w", p, err)
	}
	return f, nil
}

func openError(dir string, err error) error {
	msg := err.Error()
	if strings.Contains(msg, "lock file") || strings.Contains(msg, "lock hold") {
		return fmt.Errorf("%s: %w (RocksDB: %s); stop the other process or choose another directory", dir, ErrLocked, msg)
	}
	return fmt.Errorf("cannot open RocksDB in %s: %s", dir, msg)
}

func (d *DB) free() {
	for _, f := range []func(){
		func() {
			if d.wSync != nil {
				d.wSync.Destroy()
			}
		},
		func() {
			if d.wNoSync != nil {
				d.wNoSync.Destroy()
			}
		},
		func() {
			if d.ro != nil {
				d.ro.Destroy()
			}
		},
	} {
		f()
	}
	d.stats.Close()
	d.opts.Destroy()
	d.bbto.Destroy()
	d.cache.Destroy()
	if d.fs != nil {
		d.fs.Close()
	}
	d.cs.Close()
}

// Close closes the database after running calls finish.
func (d *DB) Close() {
	// A manual compaction waiting for a worker would otherwise hold up
	// DisableManualCompaction (stopAgeOut) and this Close's lock (Compact
	// holds it shared) until the job ended.
	d.CancelBackgroundWork()
	d.stopAgeOut()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.closed = true
	d.releasePipe()
	d.db.Close()
	d.free()
	d.lockFile.Close()
}

// CancelBackgroundWork begins RocksDB's shutdown (DB::Close does the
// same, later): it flushes the memtables, cancels the compactions waiting
// for a remote worker (CompactionService::CancelAwaitingJobs), and stops
// local ones at their next check, so a Compact call returns. Only Close
// may follow.
func (d *DB) CancelBackgroundWork() {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.closed {
		d.db.CancelAllBackgroundWork(false)
	}
}

// Dir is the directory holding the database.
func (d *DB) Dir() string { return d.dir }

func (d *DB) enter() error {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (d *DB) leave() { d.mu.RUnlock() }

// enterWrite is enter for a write: it also takes the checkpoint gate
// shared.
func (d *DB) enterWrite() error {
	if err := d.enter(); err != nil {
		return err
	}
	d.gate.RLock()
	if d.writesStopped {
		d.gate.RUnlock()
		d.leave()
		return ErrWritesStopped
	}
	return nil
}

// StopWrites refuses every later write with ErrWritesStopped and returns
// once every write that already entered has finished (acknowledged or
// failed): from then on the memtables and the WAL change no more, so a
// flush holds every acknowledged write (a step-down, RFC 0012). Reads go
// on until Close.
func (d *DB) StopWrites() {
	d.gate.Lock()
	d.writesStopped = true
	d.gate.Unlock()
}

func (d *DB) leaveWrite() {
	d.gate.RUnlock()
	d.leave()
}

func (d *DB) writeOptions(sync bool) *grocksdb.WriteOptions {
	if sync {
		return d.wSync
	}
	return d.wNoSync
}

// Put stores value under key; with sync it returns after the WAL is fsynced.
func (d *DB) Put(key, value []byte, sync bool) error {
	if err := d.enterWrite(); err != nil {
		return err
	}
	defer d.leaveWrite()
	if !grouped(d.merge, len(key)+len(value)) {
		return d.write(sync, func() error { return d.db.Put(d.writeOptions(sync), key, value) })
	}
	// A durable write always goes through its committer: this fast path
	// writes without sync.
	if !sync && d.commit.alone() {
		b := &d.commit.batch
		b.Reset()
		b.Put(key, value)
		wait, err := d.applyNoSync(b)
		d.commit.release()
		return finishWrite(wait, err)
	}
	p := pendingPool.Get().(*pendingWrite)
	p.key, p.value = key, value
	err := d.group(p, sync)
	p.key, p.value = nil, nil
	pendingPool.Put(p)
	return err
}

func (d *DB) applyNoSync(b *rocksshim.Batch) (func() error, error) {
	return d.applyWith(false, func() error { return rocksshim.WriteRep(d.db, d.wNoSync, b.Data()) })
}

func (d *DB) applySync(b *rocksshim.Batch) (func() error, error) {
	return d.applyWith(true, func() error { return rocksshim.WriteRep(d.db, d.wSync, b.Data()) })
}

// finishWrite finishes a write applied with a wait (pipelined mode).
func finishWrite(wait func() error, err error) error {
	if err != nil || wait == nil {
		return err
	}
	return wait()
}

// group sends p through the committer of its kind. Durable and
// non-durable writes have committers of their own: a non-durable write
// must not wait for a group's upload, and a durable one must not be
// acknowledged by a group that was not synced.
func (d *DB) group(p *pendingWrite, sync bool) error {
	if sync {
		return d.durable.write(p, d.applySync)
	}
	return d.commit.write(p, d.applyNoSync)
}

// Delete removes key.
func (d *DB) Delete(key []byte, sync bool) error {
	if err := d.enterWrite(); err != nil {
		return err
	}
	defer d.leaveWrite()
	if !grouped(d.merge, len(key)) {
		return d.write(sync, func() error { return d.db.Delete(d.writeOptions(sync), key) })
	}
	if !sync && d.commit.alone() {
		b := &d.commit.batch
		b.Reset()
		b.Delete(key)
		wait, err := d.applyNoSync(b)
		d.commit.release()
		return finishWrite(wait, err)
	}
	p := pendingPool.Get().(*pendingWrite)
	p.key, p.del = key, true
	err := d.group(p, sync)
	p.key, p.del = nil, false
	pendingPool.Put(p)
	return err
}

// Mutation is one put (Delete false) or delete in a batch.
type Mutation struct {
	Key, Value []byte
	Delete     bool
}

// Write applies the mutations atomically.
func (d *DB) Write(ms []Mutation, sync bool) error {
	if err := d.enterWrite(); err != nil {
		return err
	}
	defer d.leaveWrite()
	b := batches.Get().(*rocksshim.Batch)
	defer putBatch(b)
	for _, m := range ms {
		if m.Delete {
			b.Delete(m.Key)
		} else {
			b.Put(m.Key, m.Value)
		}
	}
	return d.writeBatch(b, sync)
}

func (d *DB) writeBatch(b *rocksshim.Batch, sync bool) error {
	if !grouped(d.merge, b.Size()) {
		return d.write(sync, func() error { return rocksshim.WriteRep(d.db, d.writeOptions(sync), b.Data()) })
	}
	if !sync && d.commit.alone() {
		wait, err := d.applyNoSync(b) // nothing to merge with: no copy
		d.commit.release()
		return finishWrite(wait, err)
	}
	p := pendingPool.Get().(*pendingWrite)
	p.own = b
	err := d.group(p, sync)
	p.own = nil
	pendingPool.Put(p)
	return err
}

// WriteBatch applies a batch built with rocksshim.Batch atomically (the
// way to write many pairs with one call into RocksDB).
func (d *DB) WriteBatch(b *rocksshim.Batch, sync bool) error {
	if b.Count() == 0 {
		return nil
	}
	if err := d.enterWrite(); err != nil {
		return err
	}
	defer d.leaveWrite()
	return d.writeBatch(b, sync)
}

// batches recycles the serialized batches of Write.
var batches = sync.Pool{New: func() any { return new(rocksshim.Batch) }}

func putBatch(b *rocksshim.Batch) {
	if b.Size() > 4<<20 {
		return // let an outsized batch go rather than pin its memory
	}
	b.Reset()
	batches.Put(b)
}

// Get returns a copy of key's value and whether it exists.
func (d *DB) Get(key []byte) ([]byte, bool, error) {
	if err := d.enter(); err != nil {
		return nil, false, err
	}
	defer d.leave()
	ro, done := d.readOptions()
	defer done()
	return rocksshim.Get(d.db, ro, key)
}

// MultiGet reads keys from one consistent view; values[i] is nil when
// found[i] is false.
func (d *DB) MultiGet(keys [][]byte) (values [][]byte, found []bool, err error) {
	if err := d.enter(); err != nil {
		return nil, nil, err
	}
	defer d.leave()
	n := d.multiGets.Add(1)
	defer d.multiGets.Add(-1)
	// With several MultiGets under way, the tables are already read
	// concurrently: a split would only add work.
	if d.tuning.OptimizeMultiGetForIO && len(keys) >= 2*multiGetPartKeys && n < multiGetSplitBelow {
		return d.parallelMultiGet(keys)
	}
	ro, done := d.readOptions()
	defer done()
	return rocksshim.MultiGet(d.db, ro, keys)
}

// A MultiGet with OptimizeMultiGetForIO is split into up to
// multiGetParts MultiGets of at least multiGetPartKeys keys each, while
// fewer than multiGetSplitBelow MultiGets are under way. (1,000,000 pairs
// (220 MB of tables), 10 ms per GET, one caller: 8 parts of 4 read 431 and 380
// keys/s where 4 parts of 8 read 363 and 349, and no split 204 and 297.)
const (
	multiGetParts      = 8
	multiGetPartKeys   = 4
	multiGetSplitBelow = 4
)

// parallelMultiGet is what optimize_multiget_for_io does in a RocksDB built
// with coroutines, and this one (no folly, no USE_COROUTINES) does not:
// read the tables of one MultiGet concurrently. RocksDB's synchronous
// MultiGet visits a level's tables one after another (Version::MultiGet,
// db/version_set.cc), so on tables left in the object store it waits for
// one table's GETs before it starts the next table's. Here the keys are
// sorted and cut into contiguous parts, whose tables mostly differ, and
// the parts run at once, each a MultiGet on its own thread, all under one
// snapshot: the same consistent view, and so the same result, as one
// MultiGet.
func (d *DB) parallelMultiGet(keys [][]byte) (values [][]byte, found []bool, err error) {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	var ro *grocksdb.ReadOptions
	if d.pipe != nil {
		// The pipeline's snapshot (the last durable write's state).
		var done func()
		ro, done = d.readOptions()
		defer done()
	} else {
		snap := d.db.NewSnapshot()
		defer d.db.ReleaseSnapshot(snap)
		ro = d.newReadOptions()
		defer ro.Destroy()
		ro.SetSnapshot(snap)
	}

	parts := min(multiGetParts, len(keys)/multiGetPartKeys)
	values, found = make([][]byte, len(keys)), make([]bool, len(keys))
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		idx := order[p*len(order)/parts : (p+1)*len(order)/parts]
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := make([][]byte, len(idx))
			for j, i := range idx {
				part[j] = keys[i]
			}
			v, f, err := rocksshim.MultiGet(d.db, ro, part)
			if err != nil {
				errs[p] = err
				return
			}
			for j, i := range idx {
				values[i], found[i] = v[j], f[j]
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return values, found, nil
}

// ScanOptions select a key range. Start is inclusive, End exclusive; empty
// means unbounded. Prefix, when set, replaces Start and End.
type ScanOptions struct {
	Start, End, Prefix []byte
	Limit              uint64 // 0: no limit
	Reverse            bool
	KeysOnly           bool
}

// PrefixEnd returns the smallest key greater than every key with prefix p,
// or nil when there is none (p is all 0xff).
func PrefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Scan calls fn for each pair in range, in key order (descending with
// Reverse), from one consistent view. The slices are valid only during the
// call. A non-nil error from fn stops the scan and is returned.
func (d *DB) Scan(o ScanOptions, fn func(key, value []byte) error) error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	lower, upper := o.Start, o.End
	if len(o.Prefix) > 0 {
		lower, upper = o.Prefix, PrefixEnd(o.Prefix)
	}
	var ro *grocksdb.ReadOptions
	if d.pipe != nil {
		// Options of its own with the pipeline's snapshot.
		var done func()
		ro, done = d.readOptions()
		defer done()
	} else {
		ro = d.newReadOptions()
		defer ro.Destroy()
	}
	if len(lower) > 0 {
		ro.SetIterateLowerBound(lower)
	}
	if len(upper) > 0 {
		ro.SetIterateUpperBound(upper)
	}
	it := d.db.NewIterator(ro)
	defer it.Close()
	if o.Reverse {
		it.SeekToLast()
	} else {
		it.SeekToFirst()
	}
	var n uint64
	for ; it.Valid(); n++ {
		if o.Limit > 0 && n >= o.Limit {
			break
		}
		var v []byte
		if !o.KeysOnly {
			v = it.Value().Data()
		}
		if err := fn(it.Key().Data(), v); err != nil {
			return err
		}
		if o.Reverse {
			it.Prev()
		} else {
			it.Next()
		}
	}
	return it.Err()
}

// Flush writes the memtables to SST files and waits for it.
func (d *DB) Flush() error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	return d.db.Flush(fo)
}

// Compact compacts [start, end] (empty: unbounded) and waits for it.
func (d *DB) Compact(start, end []byte) error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	d.db.CompactRange(grocksdb.Range{Start: start, Limit: end})
	return nil
}

// LatestSequence is the sequence number of the last applied write; in
// pipelined mode, of the last write reads see (the state before the oldest
// durable write not yet durable), so that nobody is told of a sequence
// number that could still be lost.
func (d *DB) LatestSequence() uint64 {
	if err := d.enter(); err != nil {
		return 0
	}
	defer d.leave()
	if seq, ok := d.pipeSequence(); ok {
		return seq
	}
	return d.db.GetLatestSequenceNumber()
}

// memtableBloomRatio is the memtable Bloom filter's size as a fraction of
// write_buffer_size (RocksDB's memtable_prefix_bloom_size_ratio).
const memtableBloomRatio = 0.02

// maxOpenFiles bounds the table readers RocksDB keeps open (and the file
// descriptors of cached tables); far above what a primary's working set
// needs, finite so that opening a database does not open every table.
const maxOpenFiles = 65536

// TryCatchUp makes a secondary apply what the primary wrote since the last
// call (new MANIFEST edits and WAL records visible in the directory).
func (d *DB) TryCatchUp() error { return d.db.TryCatchUpWithPrimary() }
