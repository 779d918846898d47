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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
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
	// ConfirmEvery is how often ownership is re-confirmed (default Lease/4;
	// above Lease, reads stop between confirmations).
	ConfirmEvery time.Duration
	// DeleteGrace is how long a deleted file stays in the store.
	DeleteGrace time.Duration
	// CacheBytes bounds the tables kept in CacheDir (0: unbounded). Tables
	// that do not fit are read from the store range by range.
	CacheBytes int64
	// Storage classes for logs (WAL, MANIFEST, CURRENT, ...) and tables.
	LogStorageClass, TableStorageClass string
	// ReadTimeout bounds one attempt of a foreground read; WriteTimeout one
	// attempt of an upload; RetryFor the retries of background work.
	ReadTimeout, WriteTimeout, RetryFor time.Duration
	// Owner describes this process in its epoch object (host, pid, ...).
	Owner  string
	Logger *slog.Logger
	// Observe, when set, is told about every object-store request.
	Observe func(r Request)
}

// Request describes one object-store request for instrumentation.
type Request struct {
	Op       string // put, get, list, delete
	FileType string // sst, wal, manifest, other
	Activity string // foreground_read, foreground_write, wal, flush, compaction, open, background
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
	def(&c.DeleteGrace, time.Hour)
	def(&c.ReadTimeout, 10*time.Second)
	def(&c.WriteTimeout, 60*time.Second)
	def(&c.RetryFor, 5*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// FS is an open Shale FileSystem for one database.
type FS struct {
	cfg   Config
	store objstore.Store
	epoch uint64

	mu          sync.Mutex
	files       map[string]*file // the live listing: managed names
	currentETag string           // etag of the CURRENT this owner last wrote

	fenced      atomic.Pointer[ErrFenced]
	fencedCh    chan struct{}
	fenceOnce   sync.Once
	lastConfirm atomic.Int64 // unix nanos of the last ownership confirmation
	confirmMu   sync.Mutex   // one on-demand confirmation at a time
	takenAt     time.Time

	cache     tableCache
	serving   atomic.Bool          // RocksDB is open: reads are foreground
	trashSeen map[string]time.Time // trash marker -> deletion time (trashLoop only)

	stop chan struct{}
	wg   sync.WaitGroup
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

	// logs only
	segments []segment
	nextSeq  uint64
	ownLog   bool // created by this owner: appendable
}

// Epoch is the epoch this FS owns the database with.
func (f *FS) Epoch() uint64 { return f.epoch }

// TakenAt is when this owner's epoch object was created.
func (f *FS) TakenAt() time.Time { return f.takenAt }

// Fenced is closed when this owner learns it was superseded.
func (f *FS) Fenced() <-chan struct{} { return f.fencedCh }

// FenceError returns the fence, or nil while this owner is current.
func (f *FS) FenceError() error {
	if e := f.fenced.Load(); e != nil {
		return e
	}
	return nil
}

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
	if err := f.FenceError(); err != nil {
		return err
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
	return nil
}

func (f *FS) leaseFresh() bool {
	return time.Since(time.Unix(0, f.lastConfirm.Load())) < f.cfg.Lease
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

func (f *FS) del(ctx context.Context, key, name string) error {
	start := time.Now()
	err := f.store.Delete(ctx, key)
	f.observe("delete", name, "background", 0, start, err)
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
	start := time.Now()
	es, err := f.epochs(ctx, activity)
	if err != nil {
		return err
	}
	if h := higherEpoch(es, f.epoch); h != 0 {
		return f.setFenced(h)
	}
	f.lastConfirm.Store(start.UnixNano())
	return nil
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
	if err := f.FenceError(); err != nil {
		return err
	}
	f.mu.Lock()
	st := f.files[name]
	f.mu.Unlock()
	if st == nil || !st.ownLog {
		return fmt.Errorf("sync of %s: not a log this owner writes", name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if size <= st.size {
		return nil
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
	key := segmentKey(name, f.epoch, seq)
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		_, err := f.put(ctx, key, name, activity, data, objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// Our own earlier attempt may have landed before its reply was
			// lost; anything else in our slot is a newer owner's seal.
			got, _, gerr := f.get(ctx, key, name, activity)
			if gerr != nil {
				return gerr
			}
			if bytes.Equal(got, data) {
				return nil
			}
			return f.fenceFromStore(ctx)
		}
		return err
	})
	if err != nil {
		return err
	}
	if seq == 1 {
		// A new log: it may have been created after a newer owner listed
		// the store, so it is acknowledged only once no higher epoch exists.
		if err := f.background().do(context.Background(), func(ctx context.Context) error {
			return f.confirm(ctx, activity)
		}); err != nil {
			return err
		}
	}
	st.segments = append(st.segments, segment{seq: seq, size: int64(len(data))})
	st.nextSeq++
	st.size = size
	return nil
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
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		err := f.putFile(ctx, key, name, activity, path, objstore.PutOptions{StorageClass: class})
		return err
	})
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: KindOf(name), epoch: f.epoch, size: fi.Size()}
	f.mu.Unlock()
	if KindOf(name) == KindTable && path == f.localPath(name) {
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
// a stale owner's update fails here.
func (f *FS) replaceCurrent(path string) error {
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	data := f.currentObject(content)
	f.mu.Lock()
	defer f.mu.Unlock()
	opts := objstore.PutOptions{IfMatch: f.currentETag, StorageClass: f.cfg.LogStorageClass}
	if f.currentETag == "" {
		opts = objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass}
	}
	var info objstore.ObjectInfo
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		var err error
		info, err = f.put(ctx, "CURRENT", "CURRENT", "flush", data, opts)
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// Lost reply of our own write, or a newer owner's CURRENT.
			got, ginfo, gerr := f.get(ctx, "CURRENT", "CURRENT", "flush")
			if gerr == nil && bytes.Equal(got, data) && f.FenceError() == nil {
				if cerr := f.confirm(ctx, "flush"); cerr != nil {
					return cerr
				}
				info = ginfo
				return nil
			}
			return f.fenceFromStore(ctx)
		}
		return err
	})
	if err != nil {
		return err
	}
	f.currentETag = info.ETag
	f.files["CURRENT"] = &file{kind: KindCurrent, size: int64(len(content))}
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
	marker, _ := json.Marshal(trashMarker{DeletedAt: time.Now().UTC(), Epoch: f.epoch})
	return f.background().do(context.Background(), func(ctx context.Context) error {
		_, err := f.put(ctx, trashKey(name, st.epoch), name, "background", marker, objstore.PutOptions{})
		return err
	})
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
	st := f.files[name]
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
			data, _, err = f.get(ctx, objectKey(name, st.epoch), name, activity)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fetch %s: %w", name, err)
	}
	return writeFileAtomic(f.localPath(name), data)
}

// readLog reassembles a log from its segments, fetching up to eight at a
// time (a busy WAL has one segment per synced write group).
func (f *FS) readLog(ctx context.Context, name string, st *file, activity string) ([]byte, error) {
	st.mu.Lock()
	segs := append([]segment(nil), st.segments...)
	epoch, size := st.epoch, st.size
	st.mu.Unlock()
	parts := make([][]byte, len(segs))
	errs := make([]error, len(segs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, s := range segs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int, s segment) {
			defer wg.Done()
			defer func() { <-sem }()
			b, _, err := f.get(ctx, segmentKey(name, epoch, s.seq), name, activity)
			if err == nil && int64(len(b)) != s.size {
				err = fmt.Errorf("segment %d of %s is %d bytes, expected %d", s.seq, name, len(b), s.size)
			}
			parts[i], errs[i] = b, err
		}(i, s)
	}
	wg.Wait()
	var buf bytes.Buffer
	buf.Grow(int(size))
	for i := range parts {
		if errs[i] != nil {
			return nil, errs[i]
		}
		buf.Write(parts[i])
	}
	return buf.Bytes(), nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".shale-fetch"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Stat returns the size of a managed file and whether it exists.
func (f *FS) Stat(name string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.files[name]
	if st == nil {
		return 0, false
	}
	if st.kind == KindLog {
		// A log this owner is writing: RocksDB wants its local size.
		if st.ownLog {
			if fi, err := os.Stat(f.localPath(name)); err == nil {
				return fi.Size(), true
			}
		}
	}
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

// Managed implements rocksshim.FileSystemHooks.
func (f *FS) Managed(name string) bool { return KindOf(name) != KindLocal }

// Fenced marks the fence error for the C++ side (IOStatus "fenced").
func (e *ErrFenced) Fenced() bool { return true }
