// Remote compaction (design §6): the primary's CompactionService, which
// hands each compaction to Go (compaction.go) to submit and wait for, and
// the worker's side, DB::OpenAndCompact. RocksDB 7.8.3's C API has
// neither.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include "shim.h"

using namespace ROCKSDB_NAMESPACE;

struct rocksdb_options_t {
  Options rep;
};
struct rocksdb_block_based_table_options_t {  // as in RocksDB's db/c.cc
  BlockBasedTableOptions rep;
};

// Implemented in Go (compaction.go).
extern "C" {
int shaleCompactionStart(uintptr_t h, char* session, int slen, uint64_t job, char* input, size_t n);
int shaleCompactionWait(uintptr_t h, char* session, int slen, uint64_t job, char** result, size_t* n);
}

namespace {

// Status codes shared with compaction.go.
enum { kSuccess = 0, kUseLocal = 1 };

// The service never answers kFailure: in 7.8.3 that is a background error
// that stops writes until the database is reopened. Any trouble is
// kUseLocal, and RocksDB runs the compaction itself.
class ShaleCompactionService : public CompactionService {
 public:
  explicit ShaleCompactionService(uintptr_t h) : h_(h) {}
  const char* Name() const override { return "ShaleCompactionService"; }

  CompactionServiceJobStatus StartV2(const CompactionServiceJobInfo& info,
                                     const std::string& input) override {
    int code = shaleCompactionStart(h_, const_cast<char*>(info.db_session_id.data()),
                                    static_cast<int>(info.db_session_id.size()), info.job_id,
                                    const_cast<char*>(input.data()), input.size());
    return code == kSuccess ? CompactionServiceJobStatus::kSuccess : CompactionServiceJobStatus::kUseLocal;
  }

  CompactionServiceJobStatus WaitForCompleteV2(const CompactionServiceJobInfo& info,
                                               std::string* result) override {
    char* buf = nullptr;
    size_t n = 0;
    int code = shaleCompactionWait(h_, const_cast<char*>(info.db_session_id.data()),
                                   static_cast<int>(info.db_session_id.size()), info.job_id, &buf, &n);
    if (buf) {
      result->assign(buf, n);
      free(buf);
    }
    return code == kSuccess ? CompactionServiceJobStatus::kSuccess : CompactionServiceJobStatus::kUseLocal;
  }

 private:
  uintptr_t h_;
};

char* Copy(const std::string& s) {
  char* p = static_cast<char*>(malloc(s.size() + 1));
  memcpy(p, s.data(), s.size());
  p[s.size()] = 0;
  return p;
}

// The job formats (db/compaction/compaction_service_job.cc) are a 4-byte
// version, 1, then a RocksDB option string.
const size_t kFormatHeader = 4;

}  // namespace

struct shale_cancel_t {
  std::atomic<bool> canceled{false};
};

extern "C" {

void shale_compaction_service_attach(rocksdb_options_t* opts, uintptr_t handle) {
  opts->rep.compaction_service = std::make_shared<ShaleCompactionService>(handle);
}

void shale_block_based_set_bloom(rocksdb_block_based_table_options_t* o, double bits_per_key) {
  o->rep.filter_policy.reset(NewBloomFilterPolicy(bits_per_key));
}

char* shale_table_options(rocksdb_options_t* opts, char** err) {
  std::string s;
  ConfigOptions cfg;
  Status st = opts->rep.table_factory->GetOptionString(cfg, &s);
  if (!st.ok()) {
    *err = Copy(st.ToString());
    return nullptr;
  }
  return Copy(s);
}

char* shale_compaction_field(const char* data, size_t n, const char* key, char** err) {
  if (n <= kFormatHeader || data[0] != 1 || data[1] || data[2] || data[3]) {
    *err = Copy("not a compaction job in format version 1");
    return nullptr;
  }
  std::unordered_map<std::string, std::string> m;
  Status st = StringToMap(std::string(data + kFormatHeader, n - kFormatHeader), &m);
  if (!st.ok()) {
    *err = Copy(st.ToString());
    return nullptr;
  }
  auto it = m.find(key);
  if (it == m.end()) return nullptr;
  return Copy(it->second);
}

shale_cancel_t* shale_cancel_new(void) { return new shale_cancel_t; }
void shale_cancel_set(shale_cancel_t* c) { c->canceled.store(true); }
void shale_cancel_destroy(shale_cancel_t* c) { delete c; }

int shale_open_and_compact(rocksdb_options_t* env_opts, const char* name, const char* output_dir,
                           const char* input, size_t n, const char* table_options,
                           shale_cancel_t* cancel, char** result, size_t* rlen, char** err) {
  CompactionServiceOptionsOverride o;
  o.env = env_opts->rep.env;
  // Pointer options are not serialized in the job: the table factory is
  // rebuilt from the primary's option string (block size, filter, format).
  // Shale's databases use the block-based table format.
  ConfigOptions cfg;
  cfg.ignore_unsupported_options = true;
  o.table_factory.reset(NewBlockBasedTableFactory(BlockBasedTableOptions()));
  Status st = o.table_factory->ConfigureFromString(cfg, table_options);
  if (!st.ok()) {
    *err = Copy("table options: " + st.ToString());
    return 1;
  }
  OpenAndCompactOptions oc;
  oc.canceled = &cancel->canceled;
  std::string out;
  st = DB::OpenAndCompact(oc, name, output_dir, std::string(input, n), &out, o);
  if (!st.ok()) {
    *err = Copy(st.ToString());
    return 1;
  }
  *result = static_cast<char*>(malloc(out.size() + 1));
  memcpy(*result, out.data(), out.size());
  *rlen = out.size();
  return 0;
}

}  // extern "C"
