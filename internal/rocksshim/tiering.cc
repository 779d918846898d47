// Tiered SST placement (docs/tiering.md): the temperature options RocksDB's
// C API lacks (9.11 as 7.8.3), the live-file metadata the age-out pass needs
// (levels, sequence numbers, creation times), and CompactFiles into the
// last level, where per-key placement splits old keys (cold) from recent
// ones (hot).
#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>

#include "tiering.h"

using ROCKSDB_NAMESPACE::CompactionJobInfo;
using ROCKSDB_NAMESPACE::CompactionOptions;
using ROCKSDB_NAMESPACE::DB;
using ROCKSDB_NAMESPACE::LiveFileMetaData;
using ROCKSDB_NAMESPACE::Options;
using ROCKSDB_NAMESPACE::Status;
using ROCKSDB_NAMESPACE::Temperature;

// Same definitions as in RocksDB's db/c.cc (7.8.3 and 9.11).
struct rocksdb_options_t {
  Options rep;
};
struct rocksdb_t {
  DB* rep;
};

extern "C" {

void shale_options_set_tiering(rocksdb_options_t* opts, uint64_t cold_after_seconds) {
  auto& o = opts->rep;
  // Last-level files are cold; keys younger than cold_after are precluded
  // from the last level (per-key placement), so they stay in the level
  // above it, hot. The sequence-number-to-time samples that tell a key's
  // age are kept as long as both options need them.
  o.last_level_temperature = Temperature::kCold;
  o.preclude_last_level_data_seconds = cold_after_seconds;
  o.preserve_internal_time_seconds = cold_after_seconds;
}

int shale_options_num_levels(rocksdb_options_t* opts) { return opts->rep.num_levels; }

int shale_live_files(rocksdb_t* db, shale_live_file_t** out) {
  std::vector<LiveFileMetaData> md;
  db->rep->GetLiveFilesMetaData(&md);
  auto* files = static_cast<shale_live_file_t*>(calloc(md.size() + 1, sizeof(shale_live_file_t)));
  for (size_t i = 0; i < md.size(); i++) {
    const auto& m = md[i];
    auto& f = files[i];
    f.name = strdup(m.relative_filename.c_str());
    f.level = m.level;
    f.size = m.size;
    f.entries = m.num_entries;
    f.smallest_seqno = m.smallest_seqno;
    f.largest_seqno = m.largest_seqno;
    f.file_creation_time = m.file_creation_time;
    f.oldest_ancester_time = m.oldest_ancester_time;
    f.being_compacted = m.being_compacted ? 1 : 0;
    f.temperature = static_cast<int>(m.temperature);
  }
  *out = files;
  return static_cast<int>(md.size());
}

char* shale_get_live_files(rocksdb_t* db, char*** names, int* n, uint64_t* manifest_size) {
  std::vector<std::string> files;
  Status s = db->rep->GetLiveFiles(files, manifest_size, /*flush_memtable=*/false);
  if (!s.ok()) return strdup(s.ToString().c_str());
  auto* out = static_cast<char**>(calloc(files.size() + 1, sizeof(char*)));
  for (size_t i = 0; i < files.size(); i++) {
    const std::string& f = files[i];
    out[i] = strdup(f.size() > 0 && f[0] == '/' ? f.c_str() + 1 : f.c_str());
  }
  *names = out;
  *n = static_cast<int>(files.size());
  return nullptr;
}

void shale_names_free(char** names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

void shale_live_files_free(shale_live_file_t* files, int n) {
  for (int i = 0; i < n; i++) free(files[i].name);
  free(files);
}

char* shale_compact_files(rocksdb_t* db, const char* const* names, int n, int output_level,
                          int* outputs, int* at_output_level) {
  std::vector<std::string> in;
  for (int i = 0; i < n; i++) in.emplace_back(names[i]);
  CompactionJobInfo info;
  // CompactFiles runs in this thread; the Shale FileSystem tells
  // compaction I/O from foreground reads by thread name (fs.cc), so this
  // thread is a compaction thread for the duration.
  char saved[16] = {0};
  pthread_getname_np(pthread_self(), saved, sizeof(saved));
  pthread_setname_np(pthread_self(), "rocksdb:low");
  Status s = db->rep->CompactFiles(CompactionOptions(), in, output_level, -1, nullptr, &info);
  pthread_setname_np(pthread_self(), saved);
  *outputs = static_cast<int>(info.output_file_infos.size());
  *at_output_level = 0;
  for (const auto& o : info.output_file_infos) {
    if (o.level == output_level) (*at_output_level)++;
  }
  if (s.ok()) return nullptr;
  return strdup(s.ToString().c_str());
}

}  // extern "C"
