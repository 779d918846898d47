// Reads an external SST file before it is ingested, so that the server's
// key and value limits hold for every write path, not only for Put/Write;
// and a local SST file's table properties.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>

#include "shim.h"

using namespace ROCKSDB_NAMESPACE;

int shale_sst_check_sizes(const char* path, size_t max_key, size_t max_value,
                          shale_sst_violation_t* out, char** err) {
  Options opts;
  SstFileReader reader(opts);
  Status s = reader.Open(path);
  if (s.ok()) s = reader.VerifyChecksum();
  if (!s.ok()) {
    *err = strdup(s.ToString().c_str());
    return -1;
  }
  ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<Iterator> it(reader.NewIterator(ro));
  uint64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), n++) {
    size_t klen = it->key().size(), vlen = it->value().size();
    if (klen == 0 || klen > max_key || vlen > max_value) {
      size_t show = klen < 64 ? klen : 64;
      out->key = static_cast<char*>(malloc(show > 0 ? show : 1));
      if (show > 0) memcpy(out->key, it->key().data(), show);
      out->key_shown = show;
      out->key_len = klen;
      out->value_len = vlen;
      out->index = n;
      return 1;
    }
  }
  if (!it->status().ok()) {
    *err = strdup(it->status().ToString().c_str());
    return -1;
  }
  out->index = n;  // the number of entries read
  return 0;
}

int shale_sst_properties(const char* path, shale_sst_props_t* out, char** err) {
  Options opts;
  SstFileReader reader(opts);
  Status s = reader.Open(path);
  if (!s.ok()) {
    *err = strdup(s.ToString().c_str());
    return -1;
  }
  auto p = reader.GetTableProperties();
  out->entries = p->num_entries;
  out->deletions = p->num_deletions;
  out->range_deletions = p->num_range_deletions;
  out->filter_entries = p->num_filter_entries;
  out->orig_file_number = p->orig_file_number;
  out->db_id = strdup(p->db_id.c_str());
  out->db_session_id = strdup(p->db_session_id.c_str());
  out->filter_policy = strdup(p->filter_policy_name.c_str());
  return 0;
}
