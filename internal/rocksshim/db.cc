// Per-call fast paths for reads and writes: one cgo call each, no malloc'd
// copies handed back to Go, and RocksDB's batched MultiGet (the one that
// async_io and optimize_multiget_for_io act on), which the C API lacks.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_level.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include "shim.h"

using namespace ROCKSDB_NAMESPACE;

// As in RocksDB's db/c.cc (7.8.3 and 9.11): every C handle holds its C++ object as
// its first member, `rep`.
struct rocksdb_t {
  DB* rep;
};

namespace {

ReadOptions& RO(rocksdb_readoptions_t* ro) { return *reinterpret_cast<ReadOptions*>(ro); }
WriteOptions& WO(rocksdb_writeoptions_t* wo) { return *reinterpret_cast<WriteOptions*>(wo); }

void SaveError(const Status& s, char** err) {
  *err = strdup(s.ToString().c_str());
}

// Turns off RocksDB's perf context on the calling thread. Its level is per
// thread and kEnableCount by default, so every Get and Write bumped a dozen
// thread-local counters that Shale never reads; in a shared librocksdb each
// is a __tls_get_addr call: 2,400 instructions a Get and 3,600 a Put
// (db_bench turns it off too). Setting it costs one thread-local store.
void NoPerfContext() { SetPerfLevel(PerfLevel::kDisable); }

// A value Get finds in a memtable is copied into the PinnableSlice's own
// string (one from the block cache is pinned instead); a string per thread,
// reused, spares a malloc and free per such Get, as db_bench's reused
// PinnableSlice does. One that grew past kGetBufferKeep is let go.
thread_local std::string get_buffer;
constexpr size_t kGetBufferKeep = 64 << 10;

// Copies n bytes to buf when they fit cap, else to a malloc'd buffer
// returned in *overflow (the caller frees it).
void CopyOut(const char* data, size_t n, char* buf, size_t cap, char** overflow) {
  if (n <= cap) {
    if (n > 0) memcpy(buf, data, n);
    return;
  }
  *overflow = static_cast<char*>(malloc(n));
  memcpy(*overflow, data, n);
}

}  // namespace

extern "C" {

int64_t shale_db_get(rocksdb_t* db, rocksdb_readoptions_t* ro, const char* key, size_t klen, char* buf,
                     size_t cap, shale_get_out_t* out) {
  NoPerfContext();
  PinnableSlice v(&get_buffer);
  Status s = db->rep->Get(RO(ro), db->rep->DefaultColumnFamily(), Slice(key, klen), &v);
  if (s.IsNotFound()) return -1;
  char* p = nullptr;
  if (!s.ok()) {
    SaveError(s, &p);
    out->err = reinterpret_cast<uintptr_t>(p);
    return -2;
  }
  CopyOut(v.data(), v.size(), buf, cap, &p);
  out->overflow = reinterpret_cast<uintptr_t>(p);
  int64_t n = static_cast<int64_t>(v.size());
  v.Reset();
  if (get_buffer.capacity() > kGetBufferKeep) std::string().swap(get_buffer);
  return n;
}

char* shale_db_write_rep(rocksdb_t* db, rocksdb_writeoptions_t* wo, const char* rep, size_t len) {
  NoPerfContext();
  WriteBatch b(std::string(rep, len));
  Status s = db->rep->Write(WO(wo), &b);
  char* err = nullptr;
  if (!s.ok()) SaveError(s, &err);
  return err;
}

int64_t shale_db_multiget(rocksdb_t* db, rocksdb_readoptions_t* ro, size_t n, const char* keys,
                          const size_t* klens, char* buf, size_t cap, int64_t* vlens, char** overflow,
                          char** err) {
  NoPerfContext();
  std::vector<Slice> ks(n);
  for (size_t i = 0, off = 0; i < n; off += klens[i], i++) ks[i] = Slice(keys + off, klens[i]);
  std::vector<PinnableSlice> vs(n);
  std::vector<Status> st(n);
  db->rep->MultiGet(RO(ro), db->rep->DefaultColumnFamily(), n, ks.data(), vs.data(), st.data());
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (st[i].IsNotFound()) {
      vlens[i] = -1;
      continue;
    }
    if (!st[i].ok()) {
      SaveError(st[i], err);
      return -1;
    }
    vlens[i] = static_cast<int64_t>(vs[i].size());
    total += vs[i].size();
  }
  char* out = buf;
  if (total > cap) out = *overflow = static_cast<char*>(malloc(total));
  for (size_t i = 0, off = 0; i < n; i++) {
    if (vlens[i] <= 0) continue;
    memcpy(out + off, vs[i].data(), vs[i].size());
    off += vs[i].size();
  }
  return static_cast<int64_t>(total);
}

void shale_readoptions_set_async_io(rocksdb_readoptions_t* ro, int async_io, int optimize_multiget) {
  RO(ro).async_io = async_io != 0;
  RO(ro).optimize_multiget_for_io = optimize_multiget != 0;
}

}  // extern "C"
