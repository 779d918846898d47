// Remote compaction (docs/rfcs/0008-compaction-install.md): the primary's
// CompactionService, which hands each compaction to Go (compaction.go) to
// submit and wait for, and the worker's side, DB::OpenAndCompact. RocksDB
// 9.11's C API has neither (its remote compaction C API arrived in 10.10).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <rocksdb/compaction_job_stats.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/table_properties.h>
#include <rocksdb/unique_id.h>
#include <rocksdb/utilities/options_type.h>

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
int shaleCompactionStart(uintptr_t h, char* session, int slen, uint64_t job, char* input, size_t n,
                         shale_compaction_input_t* inputs, int ninputs);
int shaleCompactionWait(uintptr_t h, char* session, int slen, uint64_t job, char** result, size_t* n);
void shaleCompactionInstalled(uintptr_t h, char* session, int slen, uint64_t job, int ok);
void shaleCompactionCancelAwaiting(uintptr_t h);
}

namespace {

// Status codes shared with compaction.go.
enum { kSuccess = 0, kUseLocal = 1 };

// InputsListener keeps, from each compaction's OnCompactionBegin until its
// end, what the primary needs to judge a remote result: the database (for
// the inputs' boundaries and sequence numbers) and the inputs' table
// properties, which RocksDB has at hand then. The CompactionService's
// calls carry neither.
class InputsListener : public EventListener {
 public:
  const char* Name() const override { return "ShaleCompactionInputs"; }

  struct Input {
    uint64_t number;
    int level;
    std::shared_ptr<const TableProperties> props;
  };
  struct Job {
    DB* db;
    std::vector<Input> inputs;
  };

  void OnCompactionBegin(DB* db, const CompactionJobInfo& ci) override {
    auto job = std::make_shared<Job>();
    job->db = db;
    for (size_t i = 0; i < ci.input_file_infos.size(); i++) {
      Input in{ci.input_file_infos[i].file_number, ci.input_file_infos[i].level, nullptr};
      if (i < ci.input_files.size()) {
        auto it = ci.table_properties.find(ci.input_files[i]);
        if (it != ci.table_properties.end()) in.props = it->second;
      }
      job->inputs.push_back(in);
    }
    std::lock_guard<std::mutex> l(mu_);
    jobs_[ci.job_id] = job;
  }
  void OnCompactionCompleted(DB*, const CompactionJobInfo& ci) override {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.erase(ci.job_id);
  }
  std::shared_ptr<Job> Get(int job_id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(job_id);
    return it == jobs_.end() ? nullptr : it->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<int, std::shared_ptr<Job>> jobs_;
};

// InputsOf describes a compaction's input tables for the Go side; the
// strings stay alive in keep until the call returns. Empty when RocksDB
// did not announce the compaction (it is shutting down).
std::vector<shale_compaction_input_t> InputsOf(InputsListener* l, uint64_t compaction_id,
                                               std::vector<std::string>* keep) {
  std::vector<shale_compaction_input_t> out;
  // CompactionJob::GetCompactionId: the job id, then the subcompaction's.
  auto job = l->Get(static_cast<int>(compaction_id >> 32));
  if (!job) return out;
  std::vector<LiveFileMetaData> live;
  job->db->GetLiveFilesMetaData(&live);
  std::unordered_map<uint64_t, const LiveFileMetaData*> by_number;
  for (const auto& f : live) by_number[f.file_number] = &f;
  keep->reserve(3 * job->inputs.size());
  for (const auto& in : job->inputs) {
    auto it = by_number.find(in.number);
    if (it == by_number.end()) return {};  // not live: nothing to judge by
    const LiveFileMetaData& f = *it->second;
    shale_compaction_input_t c{};
    keep->push_back(f.relative_filename);
    c.name = const_cast<char*>(keep->back().c_str());
    c.level = in.level;
    keep->push_back(f.smallestkey);
    c.smallest = const_cast<char*>(keep->back().data());
    c.smallest_len = keep->back().size();
    keep->push_back(f.largestkey);
    c.largest = const_cast<char*>(keep->back().data());
    c.largest_len = keep->back().size();
    c.smallest_seqno = f.smallest_seqno;
    c.largest_seqno = f.largest_seqno;
    c.epoch_number = f.epoch_number;
    if (in.props) {
      const TableProperties& p = *in.props;
      c.has_props = 1;
      c.entries = p.num_entries;
      c.deletions = p.num_deletions;
      c.range_deletions = p.num_range_deletions;
      c.merge_operands = p.num_merge_operands;
      c.filter_entries = p.num_filter_entries;
      // A full filter of whole keys (no prefix extractor) holds each
      // distinct user key of the table once: BlockBasedTableBuilder adds
      // every point entry's user key and the builders skip a repeat of the
      // previous one.
      c.filter_whole_keys = !p.filter_policy_name.empty() &&
                            (p.prefix_extractor_name.empty() || p.prefix_extractor_name == "nullptr");
    }
    out.push_back(c);
  }
  return out;
}

// The service never answers kFailure: in RocksDB (7.8.3 as in 9.11,
// db/compaction/compaction_service_job.cc) that is a background error that
// stops writes until the database is reopened. Any trouble is kUseLocal,
// and RocksDB runs the compaction itself.
class ShaleCompactionService : public CompactionService {
 public:
  ShaleCompactionService(uintptr_t h, std::shared_ptr<InputsListener> inputs)
      : h_(h), inputs_(std::move(inputs)) {}
  const char* Name() const override { return "ShaleCompactionService"; }

  // Schedule hands the job to Go; the scheduled job id RocksDB gives back
  // to Wait is "<job id>/<db session id>" (the job id is unique within a
  // session, and sessions are unique), so the Go side keeps identifying a
  // job by session and id.
  CompactionServiceScheduleResponse Schedule(const CompactionServiceJobInfo& info,
                                             const std::string& input) override {
    std::vector<std::string> keep;
    std::vector<shale_compaction_input_t> in = InputsOf(inputs_.get(), info.job_id, &keep);
    int code = shaleCompactionStart(h_, const_cast<char*>(info.db_session_id.data()),
                                    static_cast<int>(info.db_session_id.size()), info.job_id,
                                    const_cast<char*>(input.data()), input.size(), in.data(),
                                    static_cast<int>(in.size()));
    if (code != kSuccess) return CompactionServiceScheduleResponse(CompactionServiceJobStatus::kUseLocal);
    return CompactionServiceScheduleResponse(std::to_string(info.job_id) + "/" + info.db_session_id,
                                             CompactionServiceJobStatus::kSuccess);
  }

  CompactionServiceJobStatus Wait(const std::string& scheduled_job_id, std::string* result) override {
    uint64_t job_id;
    std::string session;
    if (!Split(scheduled_job_id, &job_id, &session)) return CompactionServiceJobStatus::kUseLocal;
    char* buf = nullptr;
    size_t n = 0;
    int code = shaleCompactionWait(h_, const_cast<char*>(session.data()), static_cast<int>(session.size()),
                                   job_id, &buf, &n);
    if (buf) {
      result->assign(buf, n);
      free(buf);
    }
    return code == kSuccess ? CompactionServiceJobStatus::kSuccess : CompactionServiceJobStatus::kUseLocal;
  }

  // After a Wait that answered kSuccess (db/compaction/
  // compaction_service_job.cc): kSuccess once every output is installed;
  // kFailure when the result could not be read or an output could not be
  // renamed or sized, which RocksDB also makes a background error.
  void OnInstallation(const std::string& scheduled_job_id, CompactionServiceJobStatus status) override {
    uint64_t job_id;
    std::string session;
    if (!Split(scheduled_job_id, &job_id, &session)) return;
    shaleCompactionInstalled(h_, const_cast<char*>(session.data()), static_cast<int>(session.size()), job_id,
                             status == CompactionServiceJobStatus::kSuccess ? 1 : 0);
  }

  // Called by DB::Close (DBImpl::CancelAllBackgroundWork, before it sets
  // shutting_down_): every Wait returns at once, kUseLocal, and RocksDB's
  // local run of the compaction stops at its first shutdown check.
  void CancelAwaitingJobs() override { shaleCompactionCancelAwaiting(h_); }

 private:
  static bool Split(const std::string& scheduled_job_id, uint64_t* job_id, std::string* session) {
    size_t slash = scheduled_job_id.find('/');
    if (slash == std::string::npos) return false;
    *job_id = std::strtoull(scheduled_job_id.substr(0, slash).c_str(), nullptr, 10);
    *session = scheduled_job_id.substr(slash + 1);
    return true;
  }

  uintptr_t h_;
  std::shared_ptr<InputsListener> inputs_;
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

// ---- Reading a result as RocksDB does ------------------------------------
// RocksDB 9.11 reads a CompactionServiceResult with OptionTypeInfo
// (db/compaction/compaction_service_job.cc) into types its headers do not
// export. These mirror them, field for field and type for type, so that
// the primary parses a result exactly as RocksDB will: a result that
// parses here parses there (a result RocksDB cannot read after Wait said
// success is a background error that stops writes), and the primary
// judges the same values RocksDB installs.

struct ResultFile {  // CompactionServiceOutputFile
  std::string file_name;
  uint64_t smallest_seqno = 0;
  uint64_t largest_seqno = 0;
  std::string smallest_internal_key;
  std::string largest_internal_key;
  uint64_t oldest_ancester_time = 0;
  uint64_t file_creation_time = 0;
  uint64_t epoch_number = 0;
  std::string file_checksum;
  std::string file_checksum_func_name;
  uint64_t paranoid_hash = 0;
  bool marked_for_compaction = false;
  std::array<uint64_t, 2> unique_id{};  // UniqueId64x2
  TableProperties table_properties;
};

struct ResultStatus {  // StatusSerializationAdapter
  uint8_t code = 0;
  uint8_t subcode = 0;
  uint8_t severity = 0;
  std::string message;
};

struct Result {  // CompactionServiceResult
  ResultStatus status;
  std::vector<ResultFile> output_files;
  int output_level = 0;
  std::string output_path;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  CompactionJobStats stats;
};

#define SHALE_FIELD(S, F, T) \
  { #F, {offsetof(S, F), OptionType::T, OptionVerificationType::kNormal, OptionTypeFlags::kNone} }

const std::unordered_map<std::string, OptionTypeInfo> kResultFileInfo = {
    SHALE_FIELD(ResultFile, file_name, kEncodedString),
    SHALE_FIELD(ResultFile, smallest_seqno, kUInt64T),
    SHALE_FIELD(ResultFile, largest_seqno, kUInt64T),
    SHALE_FIELD(ResultFile, smallest_internal_key, kEncodedString),
    SHALE_FIELD(ResultFile, largest_internal_key, kEncodedString),
    SHALE_FIELD(ResultFile, oldest_ancester_time, kUInt64T),
    SHALE_FIELD(ResultFile, file_creation_time, kUInt64T),
    SHALE_FIELD(ResultFile, epoch_number, kUInt64T),
    SHALE_FIELD(ResultFile, file_checksum, kEncodedString),
    SHALE_FIELD(ResultFile, file_checksum_func_name, kEncodedString),
    SHALE_FIELD(ResultFile, paranoid_hash, kUInt64T),
    SHALE_FIELD(ResultFile, marked_for_compaction, kBoolean),
    {"unique_id",
     OptionTypeInfo::Array<uint64_t, 2>(offsetof(ResultFile, unique_id), OptionVerificationType::kNormal,
                                        OptionTypeFlags::kNone, {0, OptionType::kUInt64T})},
    {"table_properties",
     {offsetof(ResultFile, table_properties), OptionType::kStruct, OptionVerificationType::kNormal,
      OptionTypeFlags::kNone,
      [](const ConfigOptions& opts, const std::string&, const std::string& value, void* addr) {
        return TableProperties::Parse(opts, value, static_cast<TableProperties*>(addr));
      },
      nullptr, nullptr}},
};

const std::unordered_map<std::string, OptionTypeInfo> kStatsInfo = {
    SHALE_FIELD(CompactionJobStats, elapsed_micros, kUInt64T),
    SHALE_FIELD(CompactionJobStats, cpu_micros, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_input_records, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_blobs_read, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_input_files, kSizeT),
    SHALE_FIELD(CompactionJobStats, num_input_files_at_output_level, kSizeT),
    SHALE_FIELD(CompactionJobStats, num_output_records, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_output_files, kSizeT),
    SHALE_FIELD(CompactionJobStats, num_output_files_blob, kSizeT),
    SHALE_FIELD(CompactionJobStats, is_full_compaction, kBoolean),
    SHALE_FIELD(CompactionJobStats, is_manual_compaction, kBoolean),
    SHALE_FIELD(CompactionJobStats, is_remote_compaction, kBoolean),
    SHALE_FIELD(CompactionJobStats, total_input_bytes, kUInt64T),
    SHALE_FIELD(CompactionJobStats, total_blob_bytes_read, kUInt64T),
    SHALE_FIELD(CompactionJobStats, total_output_bytes, kUInt64T),
    SHALE_FIELD(CompactionJobStats, total_output_bytes_blob, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_records_replaced, kUInt64T),
    SHALE_FIELD(CompactionJobStats, total_input_raw_key_bytes, kUInt64T),
    SHALE_FIELD(CompactionJobStats, total_input_raw_value_bytes, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_input_deletion_records, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_expired_deletion_records, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_corrupt_keys, kUInt64T),
    SHALE_FIELD(CompactionJobStats, file_write_nanos, kUInt64T),
    SHALE_FIELD(CompactionJobStats, file_range_sync_nanos, kUInt64T),
    SHALE_FIELD(CompactionJobStats, file_fsync_nanos, kUInt64T),
    SHALE_FIELD(CompactionJobStats, file_prepare_write_nanos, kUInt64T),
    SHALE_FIELD(CompactionJobStats, smallest_output_key_prefix, kEncodedString),
    SHALE_FIELD(CompactionJobStats, largest_output_key_prefix, kEncodedString),
    SHALE_FIELD(CompactionJobStats, num_single_del_fallthru, kUInt64T),
    SHALE_FIELD(CompactionJobStats, num_single_del_mismatch, kUInt64T),
};

const std::unordered_map<std::string, OptionTypeInfo> kStatusInfo = {
    SHALE_FIELD(ResultStatus, code, kUInt8T),
    SHALE_FIELD(ResultStatus, subcode, kUInt8T),
    SHALE_FIELD(ResultStatus, severity, kUInt8T),
    SHALE_FIELD(ResultStatus, message, kEncodedString),
};

const std::unordered_map<std::string, OptionTypeInfo> kResultInfo = {
    {"status",
     {offsetof(Result, status), OptionType::kCustomizable, OptionVerificationType::kNormal,
      OptionTypeFlags::kNone,
      [](const ConfigOptions& opts, const std::string&, const std::string& value, void* addr) {
        return OptionTypeInfo::ParseType(opts, value, kStatusInfo, addr);
      },
      nullptr, nullptr}},
    {"output_files",
     OptionTypeInfo::Vector<ResultFile>(
         offsetof(Result, output_files), OptionVerificationType::kNormal, OptionTypeFlags::kNone,
         OptionTypeInfo::Struct("output_files", &kResultFileInfo, 0, OptionVerificationType::kNormal,
                                OptionTypeFlags::kNone))},
    SHALE_FIELD(Result, output_level, kInt),
    SHALE_FIELD(Result, output_path, kEncodedString),
    SHALE_FIELD(Result, bytes_read, kUInt64T),
    SHALE_FIELD(Result, bytes_written, kUInt64T),
    {"stats", OptionTypeInfo::Struct("stats", &kStatsInfo, offsetof(Result, stats),
                                     OptionVerificationType::kNormal, OptionTypeFlags::kNone)},
};

#undef SHALE_FIELD

char* CopyBytes(const std::string& s, size_t* n) {
  *n = s.size();
  return Copy(s);
}

}  // namespace

struct shale_cancel_t {
  std::atomic<bool> canceled{false};
};

extern "C" {

void shale_compaction_service_attach(rocksdb_options_t* opts, uintptr_t handle) {
  auto inputs = std::make_shared<InputsListener>();
  opts->rep.listeners.push_back(inputs);
  opts->rep.compaction_service = std::make_shared<ShaleCompactionService>(handle, inputs);
}

void shale_block_based_set_bloom(rocksdb_block_based_table_options_t* o, double bits_per_key) {
  o->rep.filter_policy.reset(NewBloomFilterPolicy(bits_per_key));
}

void shale_block_based_set_readahead(rocksdb_block_based_table_options_t* o, size_t initial, size_t max,
                                     uint64_t num_reads) {
  o->rep.initial_auto_readahead_size = initial;
  o->rep.max_auto_readahead_size = max;
  o->rep.num_file_reads_for_auto_readahead = num_reads;
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

int shale_compaction_result_parse(const char* data, size_t n, shale_compaction_result_t* out,
                                  char** err) {
  // CompactionServiceResult::Read: the format version, then the options
  // string, unknown options ignored.
  if (n <= kFormatHeader || data[0] != 1 || data[1] || data[2] || data[3]) {
    *err = Copy("not a compaction result in format version 1");
    return 1;
  }
  Result r;
  ConfigOptions cfg;
  cfg.invoke_prepare_options = false;
  cfg.ignore_unknown_options = true;
  Status st = OptionTypeInfo::ParseType(cfg, std::string(data + kFormatHeader, n - kFormatHeader),
                                        kResultInfo, &r);
  if (!st.ok()) {
    *err = Copy(st.ToString());
    return 1;
  }
  memset(out, 0, sizeof(*out));
  out->code = r.status.code;
  out->subcode = r.status.subcode;
  out->severity = r.status.severity;
  out->message = Copy(r.status.message);
  out->output_path = Copy(r.output_path);
  out->output_level = r.output_level;
  // 9.11 has no top-level count; it installs the stats' (SetNumOutputRecords).
  out->num_output_records = r.stats.num_output_records;
  out->nfiles = static_cast<int>(r.output_files.size());
  out->files = static_cast<shale_result_file_t*>(calloc(r.output_files.size() + 1, sizeof(shale_result_file_t)));
  for (size_t i = 0; i < r.output_files.size(); i++) {
    const ResultFile& f = r.output_files[i];
    shale_result_file_t& o = out->files[i];
    o.name = CopyBytes(f.file_name, &o.name_len);
    o.smallest = CopyBytes(f.smallest_internal_key, &o.smallest_len);
    o.largest = CopyBytes(f.largest_internal_key, &o.largest_len);
    o.smallest_seqno = f.smallest_seqno;
    o.largest_seqno = f.largest_seqno;
    o.epoch_number = f.epoch_number;
    o.unique_id[0] = f.unique_id[0];
    o.unique_id[1] = f.unique_id[1];
  }
  return 0;
}

void shale_compaction_result_free(shale_compaction_result_t* r) {
  for (int i = 0; i < r->nfiles; i++) {
    free(r->files[i].name);
    free(r->files[i].smallest);
    free(r->files[i].largest);
  }
  free(r->files);
  free(r->message);
  free(r->output_path);
}

int shale_table_unique_id(const char* db_id, size_t db_id_len, const char* session, size_t session_len,
                          uint64_t file_number, uint64_t out[2], char** err) {
  TableProperties p;
  p.db_id.assign(db_id, db_id_len);
  p.db_session_id.assign(session, session_len);
  p.orig_file_number = file_number;
  std::string id;
  Status st = GetUniqueIdFromTableProperties(p, &id);
  if (!st.ok() || id.size() != 16) {
    *err = Copy(st.ok() ? "unique id of unexpected length" : st.ToString());
    return 1;
  }
  memcpy(&out[0], id.data(), 8);  // EncodeFixed64: little-endian, as is x86
  memcpy(&out[1], id.data() + 8, 8);
  return 0;
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
