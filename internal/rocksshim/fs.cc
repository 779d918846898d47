// The C++ half of the Shale FileSystem. Hot paths stay here: appends go to
// the local file, reads of cached files are local reads. Only events that
// touch the object store (sync, close, rename, delete, fetch on a cache
// miss, listings) cross into Go.
#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/io_status.h>
#include <rocksdb/options.h>

#include "shim.h"

using namespace ROCKSDB_NAMESPACE;

struct rocksdb_options_t {
  Options rep;
};

// Implemented in Go (fs.go).
extern "C" {
int shaleFSManaged(uintptr_t h, char* name, int n);
int shaleFSEvent(uintptr_t h, int op, char* a, int alen, char* b, int blen,
                 uint64_t size, int activity, char** err_out);
int shaleFSStat(uintptr_t h, char* name, int n, uint64_t* size);
char* shaleFSList(uintptr_t h);
int shaleFSReadAt(uintptr_t h, char* name, int n, uint64_t off, size_t len, char* buf,
                  uint64_t* got, int activity, char** err_out);
int shaleFSMultiReadAt(uintptr_t h, char* name, int n, int count, uint64_t* offs, size_t* lens,
                       char** bufs, uint64_t* gots, int activity, char** err_out);
void shaleFSReadAsync(uintptr_t h, char* name, int n, uint64_t off, size_t len, char* buf,
                      uintptr_t token, int activity);
}

namespace {

// Event codes shared with fs.go.
enum Op { kCreate = 1, kSync = 2, kClose = 3, kRename = 4, kDelete = 5, kFetch = 6, kOpenTable = 7 };
// Result codes shared with fs.go; kRemote answers kOpenTable: read the table
// from the store with ranged reads instead of a local copy.
enum Code { kOK = 0, kNotFound = 1, kRetryable = 2, kFenced = 3, kIOError = 4, kRemote = 5 };
// Activities shared with fs.go.
enum Activity { kForeground = 1, kFlush = 2, kCompaction = 3 };

// RocksDB names its pool threads "rocksdb:high" (flushes) and
// "rocksdb:low"/"rocksdb:bottom" (compactions); anything else is a caller.
int CurrentActivity() {
  char name[32] = {0};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return kForeground;
  if (strncmp(name, "rocksdb:high", 12) == 0) return kFlush;
  if (strncmp(name, "rocksdb:low", 11) == 0 || strncmp(name, "rocksdb:bott", 12) == 0) return kCompaction;
  return kForeground;
}

// ReadActivity prefers what RocksDB says a read is for over the thread's
// name: a Go thread started while Go ran a callback on a RocksDB pool thread
// inherits that thread's name ("rocksdb:low"), and would label the
// foreground reads it later makes as compaction reads.
int ReadActivity(const IOOptions& o) {
  switch (o.io_activity) {
    case Env::IOActivity::kFlush:
      return kFlush;
    case Env::IOActivity::kCompaction:
      return kCompaction;
    case Env::IOActivity::kUnknown:
      return CurrentActivity();
    default:
      return kForeground;  // Get, MultiGet, iterators, open, checksums
  }
}

IOStatus ToStatus(int code, char* msg) {
  std::string m = msg ? msg : "";
  free(msg);
  switch (code) {
    case kOK:
      return IOStatus::OK();
    case kNotFound:
      return IOStatus::PathNotFound(m);
    case kRetryable: {
      IOStatus s = IOStatus::IOError(m);
      s.SetRetryable(true);
      return s;
    }
    case kFenced:
      // A newer owner took the database: permanent, never retried.
      return IOStatus::IOFenced(m);
    default:
      return IOStatus::IOError(m);
  }
}

class ShaleFS;

// One ReadAsync of a remote table in flight. The goroutine that reads it
// fills its own buffer (buf) and reports with shale_fs_async_done; Poll
// waits for that and copies the bytes to RocksDB's buffer before running
// RocksDB's callback on RocksDB's thread; AbortIO runs the callback at once
// with Aborted and leaves the GET to finish on its own, into buf, which
// RocksDB never sees: an iterator that ends or seeks elsewhere does not
// wait a round trip to the store for a readahead it no longer wants. Two
// references, RocksDB's handle (del_fn) and the goroutine's (done); the
// last one frees it.
struct AsyncRead {
  FSReadRequest req;  // RocksDB's request; req.scratch is RocksDB's buffer
  char* buf = nullptr;
  std::function<void(FSReadRequest&, void*)> cb;
  void* cb_arg = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> refs{2};
  bool done = false;       // the goroutine finished (it no longer touches buf)
  bool delivered = false;  // the callback ran
  int code = 0;
  uint64_t got = 0;
  char* err = nullptr;

  ~AsyncRead() {
    free(buf);
    free(err);
  }
  void Unref() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
  }
  // Deliver runs the callback once: with the result once the read is done,
  // or at once with Aborted (AbortIO: RocksDB drops the buffer, and the
  // callback frees its per-read state, as POSIX's AbortIO does).
  void Deliver(bool abort) {
    if (delivered) return;
    delivered = true;
    if (abort) {
      req.status = IOStatus::Aborted();
      req.result = Slice();
      cb(req, cb_arg);
      return;
    }
    Wait();
    IOStatus s = ToStatus(code, err);
    err = nullptr;
    if (s.ok()) {
      memcpy(req.scratch, buf, got);
      req.result = Slice(req.scratch, got);
    } else {
      req.result = Slice();
    }
    req.status = s;
    cb(req, cb_arg);
  }
};

// A table read from the local cache while it holds a copy, and from the
// object store (ranged reads through Go) once the copy is evicted or when
// the table was never cached.
class ShaleRandomAccessFile : public FSRandomAccessFile {
 public:
  ShaleRandomAccessFile(ShaleFS* fs, std::string name, std::unique_ptr<FSRandomAccessFile> local);
  ~ShaleRandomAccessFile() override;

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& o, Slice* result, char* scratch,
                IODebugContext* dbg) const override;
  // RocksDB's MultiGet reads the blocks it needs from one table in one
  // MultiRead: without a local copy they are fetched concurrently (one Go
  // call for all of them), which is where MultiGet's parallelism comes
  // from in this build: without coroutines (USE_COROUTINES, folly) RocksDB
  // visits the tables of a MultiGet one after another and never calls
  // ReadAsync for it.
  IOStatus MultiRead(FSReadRequest* reqs, size_t num, const IOOptions& o,
                     IODebugContext* dbg) override;
  // RocksDB's asynchronous prefetch (ReadOptions.async_io: an iterator
  // reads the next readahead while it consumes the current one) and its
  // asynchronous seeks. A remote read is started in a goroutine and
  // completed by ShaleFS::Poll on RocksDB's thread; a local copy is read at
  // once (a local read is cheap, and no io_uring handle is mixed in).
  IOStatus ReadAsync(FSReadRequest& req, const IOOptions& o,
                     std::function<void(FSReadRequest&, void*)> cb, void* cb_arg,
                     void** io_handle, IOHandleDeleter* del_fn, IODebugContext* dbg) override;
  // A remote table says NotSupported, so that RocksDB's iterators read
  // ahead themselves (FilePrefetchBuffer: growing reads, up to 256 KiB by
  // default) instead of assuming the OS does and reading block by block.
  IOStatus Prefetch(uint64_t offset, size_t n, const IOOptions& o, IODebugContext* dbg) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (local_) return local_->Prefetch(offset, n, o, dbg);
    return IOStatus::NotSupported("remote table: read ahead in RocksDB");
  }
  IOStatus InvalidateCache(size_t, size_t) override { return IOStatus::OK(); }
  const std::string& name() const { return name_; }
  // DropLocal makes later reads remote; the local copy is being evicted.
  void DropLocal() {
    std::unique_lock<std::shared_mutex> l(mu_);
    local_.reset();
  }

 private:
  ShaleFS* fs_;
  std::string name_;
  mutable std::shared_mutex mu_;
  std::unique_ptr<FSRandomAccessFile> local_;
};

class ShaleWritableFile : public FSWritableFileOwnerWrapper {
 public:
  ShaleWritableFile(std::unique_ptr<FSWritableFile>&& t, ShaleFS* fs, std::string name)
      : FSWritableFileOwnerWrapper(std::move(t)), fs_(fs), name_(std::move(name)),
        activity_(CurrentActivity()) {}
  ~ShaleWritableFile() override {
    if (!closed_) {
      IOOptions o;
      Close(o, nullptr);
    }
  }

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = target()->Append(data, o, dbg);
    if (s.ok()) size_ += data.size();
    return s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const DataVerificationInfo& v,
                  IODebugContext* dbg) override {
    IOStatus s = target()->Append(data, o, v, dbg);
    if (s.ok()) size_ += data.size();
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t off, const IOOptions& o,
                            IODebugContext* dbg) override {
    IOStatus s = target()->PositionedAppend(data, off, o, dbg);
    if (s.ok() && off + data.size() > size_) size_ = off + data.size();
    return s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t off, const IOOptions& o,
                            const DataVerificationInfo& v, IODebugContext* dbg) override {
    IOStatus s = target()->PositionedAppend(data, off, o, v, dbg);
    if (s.ok() && off + data.size() > size_) size_ = off + data.size();
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* dbg) override {
    IOStatus s = target()->Truncate(size, o, dbg);
    if (s.ok()) size_ = size;
    return s;
  }
  // The object store is the durable copy: a sync uploads, the local file
  // (only a cache) is not fsynced.
  IOStatus Sync(const IOOptions& o, IODebugContext* dbg) override { return Upload(o, dbg, kSync); }
  IOStatus Fsync(const IOOptions& o, IODebugContext* dbg) override { return Upload(o, dbg, kSync); }
  IOStatus Close(const IOOptions& o, IODebugContext* dbg) override {
    if (closed_) return IOStatus::OK();
    closed_ = true;
    IOStatus s = target()->Close(o, dbg);
    if (!s.ok()) return s;
    return Upload(o, dbg, kClose);
  }

 private:
  IOStatus Upload(const IOOptions& o, IODebugContext* dbg, int op);

  ShaleFS* fs_;
  std::string name_;
  int activity_;
  std::atomic<uint64_t> size_{0};
  bool closed_ = false;
};

class ShaleFS : public FileSystemWrapper {
 public:
  ShaleFS(const std::shared_ptr<FileSystem>& base, uintptr_t h, std::string dir)
      : FileSystemWrapper(base), h_(h), dir_(std::move(dir)) {
    while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  }

  const char* Name() const override { return "ShaleFileSystem"; }

  // Event forwards an event on a managed file to Go.
  IOStatus Event(int op, const std::string& a, const std::string& b, uint64_t size, int activity) {
    char* err = nullptr;
    int code = shaleFSEvent(h_, op, const_cast<char*>(a.data()), static_cast<int>(a.size()),
                            const_cast<char*>(b.data()), static_cast<int>(b.size()), size,
                            activity, &err);
    return ToStatus(code, err);
  }

  // Managed reports whether fname is a file of the database directory that
  // lives in the object store, and its bare name.
  bool Managed(const std::string& fname, std::string* name) {
    std::string dir, base;
    if (!InDir(fname, &dir, &base) || dir != dir_) return false;
    if (!shaleFSManaged(h_, const_cast<char*>(base.data()), static_cast<int>(base.size()))) return false;
    *name = base;
    return true;
  }

  IOStatus NewWritableFile(const std::string& f, const FileOptions& fo,
                           std::unique_ptr<FSWritableFile>* r, IODebugContext* dbg) override {
    std::string name;
    if (!Managed(f, &name)) return target()->NewWritableFile(f, fo, r, dbg);
    // The size argument carries RocksDB's temperature hint: the tier of a table.
    IOStatus s = Event(kCreate, name, "", static_cast<uint64_t>(fo.temperature), CurrentActivity());
    if (!s.ok()) return s;
    std::unique_ptr<FSWritableFile> file;
    s = target()->NewWritableFile(f, fo, &file, dbg);
    if (!s.ok()) return s;
    r->reset(new ShaleWritableFile(std::move(file), this, name));
    return s;
  }

  IOStatus ReopenWritableFile(const std::string& f, const FileOptions& fo,
                              std::unique_ptr<FSWritableFile>* r, IODebugContext* dbg) override {
    std::string name;
    if (Managed(f, &name)) return IOStatus::NotSupported("Shale FileSystem cannot reopen " + name);
    return target()->ReopenWritableFile(f, fo, r, dbg);
  }

  IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const FileOptions& fo,
                             std::unique_ptr<FSWritableFile>* r, IODebugContext* dbg) override {
    std::string name;
    if (Managed(f, &name) || Managed(old, &name))
      return IOStatus::NotSupported("Shale FileSystem cannot recycle log files (recycle_log_file_num must be 0)");
    return target()->ReuseWritableFile(f, old, fo, r, dbg);
  }

  // Reads are local; a managed file missing from the cache is fetched first.
  IOStatus EnsureLocal(const std::string& f, const IOOptions& io, IODebugContext* dbg) {
    std::string name;
    if (!Managed(f, &name)) return IOStatus::OK();
    if (target()->FileExists(f, io, dbg).ok()) return IOStatus::OK();
    return Event(kFetch, name, "", 0, CurrentActivity());
  }

  IOStatus NewSequentialFile(const std::string& f, const FileOptions& fo,
                             std::unique_ptr<FSSequentialFile>* r, IODebugContext* dbg) override {
    IOStatus s = EnsureLocal(f, fo.io_options, dbg);
    if (!s.ok()) return s;
    return target()->NewSequentialFile(f, fo, r, dbg);
  }

  IOStatus NewRandomAccessFile(const std::string& f, const FileOptions& fo,
                               std::unique_ptr<FSRandomAccessFile>* r, IODebugContext* dbg) override {
    std::string name;
    if (Alias(f, &name)) return NewRandomAccessFile(dir_ + "/" + name, fo, r, dbg);
    if (!Managed(f, &name) || !IsTable(name)) {
      IOStatus s = EnsureLocal(f, fo.io_options, dbg);
      if (!s.ok()) return s;
      return target()->NewRandomAccessFile(f, fo, r, dbg);
    }
    // Go decides: a local copy (existing or fetched now) or remote reads.
    char* err = nullptr;
    int code = shaleFSEvent(h_, kOpenTable, const_cast<char*>(name.data()), static_cast<int>(name.size()),
                            nullptr, 0, 0, CurrentActivity(), &err);
    std::unique_ptr<FSRandomAccessFile> local;
    if (code == kOK) {
      free(err);
      FileOptions lfo = fo;
      lfo.use_mmap_reads = false;
      if (!target()->NewRandomAccessFile(f, lfo, &local, dbg).ok()) local.reset();  // evicted meanwhile
    } else if (code == kRemote) {
      free(err);
    } else {
      return ToStatus(code, err);
    }
    r->reset(new ShaleRandomAccessFile(this, name, std::move(local)));
    return IOStatus::OK();
  }

  static bool IsTable(const std::string& name) {
    auto ends = [&](const char* suf) {
      size_t n = strlen(suf);
      return name.size() >= n && name.compare(name.size() - n, n, suf) == 0;
    };
    return ends(".sst") || ends(".blob");
  }

  // Open tables, so an eviction can make them read remotely.
  void Register(ShaleRandomAccessFile* f) {
    std::lock_guard<std::mutex> l(open_mu_);
    open_[f->name()].insert(f);
  }
  void Unregister(ShaleRandomAccessFile* f) {
    std::lock_guard<std::mutex> l(open_mu_);
    auto it = open_.find(f->name());
    if (it == open_.end()) return;
    it->second.erase(f);
    if (it->second.empty()) open_.erase(it);
  }
  void Evict(const std::string& name) {
    std::lock_guard<std::mutex> l(open_mu_);
    auto it = open_.find(name);
    if (it == open_.end()) return;
    for (auto* f : it->second) f->DropLocal();
  }

  IOStatus ReadRemote(const std::string& name, uint64_t off, size_t n, char* buf, uint64_t* got,
                      int activity) {
    char* err = nullptr;
    int code = shaleFSReadAt(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()), off, n,
                             buf, got, activity, &err);
    return ToStatus(code, err);
  }

  IOStatus MultiReadRemote(const std::string& name, FSReadRequest* reqs, size_t num, int activity) {
    std::vector<uint64_t> offs(num), gots(num);
    std::vector<size_t> lens(num);
    std::vector<char*> bufs(num);
    for (size_t i = 0; i < num; i++) {
      offs[i] = reqs[i].offset;
      lens[i] = reqs[i].len;
      bufs[i] = reqs[i].scratch;
    }
    char* err = nullptr;
    int code = shaleFSMultiReadAt(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()),
                                  static_cast<int>(num), offs.data(), lens.data(), bufs.data(),
                                  gots.data(), activity, &err);
    IOStatus s = ToStatus(code, err);
    for (size_t i = 0; i < num; i++) {
      reqs[i].status = s;
      reqs[i].result = s.ok() ? Slice(reqs[i].scratch, gots[i]) : Slice();
    }
    return IOStatus::OK();
  }

  // StartAsync hands a remote read to Go; it completes in a goroutine.
  void StartAsync(const std::string& name, AsyncRead* a, int activity) {
    {
      std::lock_guard<std::mutex> l(async_mu_);
      async_.insert(a);
    }
    shaleFSReadAsync(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()), a->req.offset,
                     a->req.len, a->buf, reinterpret_cast<uintptr_t>(a), activity);
  }
  void Forget(AsyncRead* a) {
    std::lock_guard<std::mutex> l(async_mu_);
    async_.erase(a);
  }

  // Remote tables read asynchronously whatever the local file system does
  // (POSIX reports kAsyncIO only with io_uring); nothing else is claimed
  // (no kFSBuffer, no kVerifyAndReconstructRead).
  void SupportedOps(int64_t& ops) override { ops = 1 << FSSupportedOps::kAsyncIO; }

  // Poll completes this FileSystem's reads (waiting for each, then running
  // its callback here, on the caller's thread, as RocksDB expects) and
  // hands other handles (a local file's io_uring reads) to the base.
  IOStatus Poll(std::vector<void*>& handles, size_t min) override {
    std::vector<void*> others;
    for (AsyncRead* a : Split(handles, &others)) a->Deliver(false);
    if (others.empty()) return IOStatus::OK();
    return target()->Poll(others, min);
  }
  // AbortIO cannot stop a GET under way, and does not wait for it: the
  // GET fills the read's own buffer, not RocksDB's (AsyncRead).
  IOStatus AbortIO(std::vector<void*>& handles) override {
    std::vector<void*> others;
    for (AsyncRead* a : Split(handles, &others)) a->Deliver(true);
    if (others.empty()) return IOStatus::OK();
    return target()->AbortIO(others);
  }

  IOStatus NewRandomRWFile(const std::string& f, const FileOptions& fo,
                           std::unique_ptr<FSRandomRWFile>* r, IODebugContext* dbg) override {
    std::string name;
    if (Managed(f, &name)) return IOStatus::NotSupported("Shale FileSystem cannot open " + name + " read-write");
    return target()->NewRandomRWFile(f, fo, r, dbg);
  }

  IOStatus FileExists(const std::string& f, const IOOptions& io, IODebugContext* dbg) override {
    std::string name;
    if (Alias(f, &name)) return IOStatus::OK();
    if (!Managed(f, &name)) return target()->FileExists(f, io, dbg);
    uint64_t size;
    if (shaleFSStat(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()), &size))
      return IOStatus::OK();
    return IOStatus::NotFound(f);
  }

  IOStatus GetFileSize(const std::string& f, const IOOptions& io, uint64_t* size,
                       IODebugContext* dbg) override {
    std::string name;
    if (Alias(f, &name)) return GetFileSize(dir_ + "/" + name, io, size, dbg);
    if (!Managed(f, &name)) return target()->GetFileSize(f, io, size, dbg);
    if (shaleFSStat(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()), size))
      return IOStatus::OK();
    return IOStatus::PathNotFound(f);
  }

  IOStatus GetFileModificationTime(const std::string& f, const IOOptions& io, uint64_t* t,
                                   IODebugContext* dbg) override {
    std::string name;
    if (Managed(f, &name) && !target()->FileExists(f, io, dbg).ok()) {
      *t = 0;  // not cached locally; RocksDB only uses it as a fallback
      return IOStatus::OK();
    }
    return target()->GetFileModificationTime(f, io, t, dbg);
  }

  IOStatus GetChildren(const std::string& dir, const IOOptions& io, std::vector<std::string>* r,
                       IODebugContext* dbg) override {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (d != dir_) {
      IOStatus s = target()->GetChildren(dir, io, r, dbg);
      if (s.ok()) AliasesIn(d, r);
      return s;
    }
    std::vector<std::string> local;
    IOStatus s = target()->GetChildren(dir, io, &local, dbg);
    if (!s.ok()) return s;
    r->clear();
    char* list = shaleFSList(h_);
    for (char* p = list; p && *p; p += strlen(p) + 1) r->emplace_back(p);
    free(list);
    for (auto& n : local) {
      if (!shaleFSManaged(h_, const_cast<char*>(n.data()), static_cast<int>(n.size()))) r->push_back(n);
    }
    return IOStatus::OK();
  }

  IOStatus GetChildrenFileAttributes(const std::string& dir, const IOOptions& io,
                                     std::vector<FileAttributes>* r, IODebugContext* dbg) override {
    std::vector<std::string> names;
    IOStatus s = GetChildren(dir, io, &names, dbg);
    if (!s.ok()) return s;
    r->clear();
    for (auto& n : names) {
      FileAttributes a;
      a.name = n;
      if (GetFileSize(dir + "/" + n, io, &a.size_bytes, dbg).ok()) r->push_back(a);
    }
    return IOStatus::OK();
  }

  IOStatus DeleteFile(const std::string& f, const IOOptions& io, IODebugContext* dbg) override {
    std::string name;
    if (Unalias(f)) return IOStatus::OK();  // a follower's link: the store's file stays
    if (!Managed(f, &name)) return target()->DeleteFile(f, io, dbg);
    IOStatus s = Event(kDelete, name, "", 0, CurrentActivity());
    if (!s.ok()) return s;
    s = target()->DeleteFile(f, io, dbg);
    if (s.IsNotFound() || s.IsPathNotFound()) return IOStatus::OK();
    return s;
  }

  IOStatus RenameFile(const std::string& src, const std::string& dst, const IOOptions& io,
                      IODebugContext* dbg) override {
    std::string dname, sdir, sname;
    if (Managed(dst, &dname)) {
      if (!InDir(src, &sdir, &sname) || sdir != dir_) {
        // A remote compaction's output, renamed from the worker's output
        // directory (db/compaction/compaction_service_job.cc): Go copies
        // it within the store (or refuses); there is no local file.
        return Event(kRename, src, dname, 0, CurrentActivity());
      }
      IOStatus s = Event(kRename, sname, dname, 0, CurrentActivity());
      if (!s.ok()) return s;
    }
    return target()->RenameFile(src, dst, io, dbg);
  }

  // A follower (DB::OpenAsFollower, RocksDB 9.x) links each table of the
  // leader's directory into its own (env/fs_on_demand.cc) so that the
  // leader deleting it does not pull it from under the follower. Here the
  // link is a name: the follower's path reads the same file of the view
  // (locally cached or from the store), and the reader's lease, not the
  // link, keeps the store's object while it is read. Deleting the link
  // forgets the name only.
  IOStatus LinkFile(const std::string& src, const std::string& dst, const IOOptions& io,
                    IODebugContext* dbg) override {
    std::string name, dname;
    if (Managed(src, &name) && IsTable(name) && !Managed(dst, &dname)) {
      std::string ddir, dbase;
      if (!InDir(dst, &ddir, &dbase) || dbase != name)
        return IOStatus::NotSupported("Shale FileSystem links a table only under its own name: " + dst);
      uint64_t size;
      if (!shaleFSStat(h_, const_cast<char*>(name.data()), static_cast<int>(name.size()), &size))
        return IOStatus::PathNotFound(src);
      std::lock_guard<std::mutex> l(alias_mu_);
      aliases_[ddir + "/" + dbase] = name;
      return IOStatus::OK();
    }
    if (Managed(src, &name) || Managed(dst, &name))
      return IOStatus::NotSupported("Shale FileSystem cannot hard-link " + name);
    return target()->LinkFile(src, dst, io, dbg);
  }

 private:
  std::vector<AsyncRead*> Split(std::vector<void*>& handles, std::vector<void*>* others) {
    std::vector<AsyncRead*> mine;
    std::lock_guard<std::mutex> l(async_mu_);
    for (void* h : handles) {
      if (h == nullptr) continue;
      if (async_.count(h)) {
        mine.push_back(static_cast<AsyncRead*>(h));
      } else {
        others->push_back(h);
      }
    }
    return mine;
  }

  // Alias reports whether f is a follower's link to a table, and its name.
  bool Alias(const std::string& f, std::string* name) {
    std::string dir, base;
    if (!InDir(f, &dir, &base)) return false;
    std::lock_guard<std::mutex> l(alias_mu_);
    auto it = aliases_.find(dir + "/" + base);
    if (it == aliases_.end()) return false;
    *name = it->second;
    return true;
  }
  bool Unalias(const std::string& f) {
    std::string dir, base;
    if (!InDir(f, &dir, &base)) return false;
    std::lock_guard<std::mutex> l(alias_mu_);
    return aliases_.erase(dir + "/" + base) > 0;
  }
  void AliasesIn(const std::string& dir, std::vector<std::string>* r) {
    std::lock_guard<std::mutex> l(alias_mu_);
    for (auto& a : aliases_) {
      if (a.first.size() > dir.size() && a.first.compare(0, dir.size(), dir) == 0 &&
          a.first[dir.size()] == '/' && a.first.find('/', dir.size() + 1) == std::string::npos)
        r->push_back(a.second);
    }
  }

  static bool InDir(const std::string& f, std::string* dir, std::string* base) {
    size_t slash = f.find_last_of('/');
    if (slash == std::string::npos) return false;
    *dir = f.substr(0, slash);
    while (dir->size() > 1 && dir->back() == '/') dir->pop_back();
    *base = f.substr(slash + 1);
    return !base->empty();
  }

  uintptr_t h_;
  std::string dir_;
  std::mutex open_mu_;
  std::unordered_map<std::string, std::unordered_set<ShaleRandomAccessFile*>> open_;
  // A follower's links: its path (directory/name) -> the table's name.
  std::mutex alias_mu_;
  std::unordered_map<std::string, std::string> aliases_;
  // Reads started by StartAsync and not yet freed by RocksDB.
  std::mutex async_mu_;
  std::unordered_set<void*> async_;
};

ShaleRandomAccessFile::ShaleRandomAccessFile(ShaleFS* fs, std::string name,
                                             std::unique_ptr<FSRandomAccessFile> local)
    : fs_(fs), name_(std::move(name)), local_(std::move(local)) {
  fs_->Register(this);
}

ShaleRandomAccessFile::~ShaleRandomAccessFile() { fs_->Unregister(this); }

IOStatus ShaleRandomAccessFile::Read(uint64_t offset, size_t n, const IOOptions& o, Slice* result,
                                     char* scratch, IODebugContext* dbg) const {
  {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (local_) return local_->Read(offset, n, o, result, scratch, dbg);
  }
  uint64_t got = 0;
  IOStatus s = fs_->ReadRemote(name_, offset, n, scratch, &got, ReadActivity(o));
  if (!s.ok()) return s;
  *result = Slice(scratch, got);
  return s;
}

IOStatus ShaleRandomAccessFile::MultiRead(FSReadRequest* reqs, size_t num, const IOOptions& o,
                                          IODebugContext* dbg) {
  {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (local_) return local_->MultiRead(reqs, num, o, dbg);
  }
  return fs_->MultiReadRemote(name_, reqs, num, ReadActivity(o));
}

IOStatus ShaleRandomAccessFile::ReadAsync(FSReadRequest& req, const IOOptions& o,
                                          std::function<void(FSReadRequest&, void*)> cb,
                                          void* cb_arg, void** io_handle, IOHandleDeleter* del_fn,
                                          IODebugContext* dbg) {
  {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (local_) {
      req.status = local_->Read(req.offset, req.len, o, &req.result, req.scratch, dbg);
      cb(req, cb_arg);
      return IOStatus::OK();
    }
  }
  auto* a = new AsyncRead;
  a->buf = static_cast<char*>(malloc(req.len > 0 ? req.len : 1));
  if (a->buf == nullptr) {
    delete a;
    return IOStatus::NoSpace("cannot allocate an asynchronous read of " + std::to_string(req.len) + " bytes");
  }
  a->req.offset = req.offset;
  a->req.len = req.len;
  a->req.scratch = req.scratch;
  a->cb = std::move(cb);
  a->cb_arg = cb_arg;
  ShaleFS* fs = fs_;
  *io_handle = a;
  // RocksDB frees a handle after its callback ran (Poll or AbortIO); the
  // goroutine may still be reading into a->buf, and holds its reference.
  *del_fn = [fs](void* p) {
    auto* a = static_cast<AsyncRead*>(p);
    fs->Forget(a);
    a->Unref();
  };
  fs_->StartAsync(name_, a, ReadActivity(o));
  return IOStatus::OK();
}

IOStatus ShaleWritableFile::Upload(const IOOptions&, IODebugContext*, int op) {
  return fs_->Event(op, name_, "", size_.load(), activity_);
}

}  // namespace

struct shale_fs_t {
  std::shared_ptr<ShaleFS> fs;
  std::unique_ptr<Env> env;
};

extern "C" {

shale_fs_t* shale_fs_attach(rocksdb_options_t* opts, uintptr_t handle, const char* dir) {
  auto* s = new shale_fs_t;
  s->fs = std::make_shared<ShaleFS>(FileSystem::Default(), handle, dir);
  s->env = NewCompositeEnv(s->fs);
  opts->rep.env = s->env.get();
  // Compaction inputs may be read from the store: read them in large
  // ranges rather than block by block.
  opts->rep.compaction_readahead_size = 2 << 20;
  return s;
}

void shale_fs_evict(shale_fs_t* s, const char* name, int n) { s->fs->Evict(std::string(name, n)); }

void shale_fs_async_done(uintptr_t token, int code, uint64_t got, char* err) {
  auto* a = reinterpret_cast<AsyncRead*>(token);
  {
    std::lock_guard<std::mutex> l(a->mu);
    a->code = code;
    a->got = got;
    a->err = err;
    a->done = true;
    a->cv.notify_all();
  }
  a->Unref();
}

void shale_fs_destroy(shale_fs_t* s) { delete s; }

}  // extern "C"
