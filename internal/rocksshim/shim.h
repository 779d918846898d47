// C interface to the parts of RocksDB 9.11's C++ API that its C API
// (rocksdb/c.h, wrapped by grocksdb) lacks: the Shale FileSystem, the
// CompactionService, temperature options and statistics.
#ifndef SHALE_ROCKSSHIM_H
#define SHALE_ROCKSSHIM_H

#include <stdint.h>
#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct shale_statistics_t shale_statistics_t;

typedef struct {
  uint64_t count;
  double sum;
  double p50;
  double p95;
  double p99;
  double max;
} shale_histogram_t;

// Creates a Statistics object and installs it in opts (before DB open):
// tickers only, or with histograms (RocksDB's default level) when
// histograms is non-zero.
shale_statistics_t* shale_statistics_attach(rocksdb_options_t* opts, int histograms);
void shale_statistics_destroy(shale_statistics_t* s);

int shale_ticker_count(void);
const char* shale_ticker_name(int i);
// Fills out[0..n) with the tickers in shale_ticker_name order.
void shale_statistics_tickers(shale_statistics_t* s, uint64_t* out, int n);

int shale_histogram_count(void);
const char* shale_histogram_name(int i);
void shale_statistics_histogram(shale_statistics_t* s, int i, shale_histogram_t* out);

// The RocksDB version linked in, e.g. "9.11.2" (malloc'd).
char* shale_rocksdb_version(void);

// ---- Shale FileSystem -------------------------------------------------------
// A rocksdb::FileSystem over the local directory `dir` that reports every
// event on a managed file (one in `dir` that the Go side says lives in the
// object store) to the Go object behind `handle` (see fs.go). The returned
// object owns the Env installed in opts; destroy it after the DB is closed.
typedef struct shale_fs_t shale_fs_t;
shale_fs_t* shale_fs_attach(rocksdb_options_t* opts, uintptr_t handle, const char* dir);
void shale_fs_destroy(shale_fs_t* fs);
// Makes open readers of the table `name` read from the store from now on
// (its local copy is about to be deleted).
void shale_fs_evict(shale_fs_t* fs, const char* name, int n);
// shale_fs_async_done completes a ReadAsync of a remote table (called by the
// Go goroutine that read it; err is malloc'ed or NULL, and taken).
void shale_fs_async_done(uintptr_t token, int code, uint64_t got, char* err);

// ---- Remote compaction (compaction.cc) ---------------------------------------
// One input table of a compaction, as Schedule hands it to Go: its file
// boundaries (user keys) and sequence numbers from the live files'
// metadata, and counts from its table properties when has_props.
typedef struct {
  char* name;  // "000012.sst"
  int level;
  char* smallest;
  size_t smallest_len;
  char* largest;
  size_t largest_len;
  uint64_t smallest_seqno;
  uint64_t largest_seqno;
  uint64_t epoch_number;     // 0: unknown
  int has_props;
  uint64_t entries;          // every entry, range deletions included
  uint64_t deletions;        // point and range deletions
  uint64_t range_deletions;
  uint64_t merge_operands;
  uint64_t filter_entries;   // keys in the filter
  int filter_whole_keys;     // the filter holds each distinct user key once
} shale_compaction_input_t;
// Installs a CompactionService that hands each compaction to the Go object
// behind `handle` (see compaction.go), and the event listener that tells
// it about each compaction's inputs.
void shale_compaction_service_attach(rocksdb_options_t* opts, uintptr_t handle);
// Sets a bloom filter of bits_per_key made by RocksDB's C++ API: unlike
// the C API's (a wrapper whose id lacks the bits), it serializes as
// "bloomfilter:<bits>:false", which a compaction worker can rebuild.
void shale_block_based_set_bloom(rocksdb_block_based_table_options_t* o, double bits_per_key);
void shale_block_based_set_readahead(rocksdb_block_based_table_options_t* o, size_t initial, size_t max,
                                     uint64_t num_reads);
// The table factory's options as a RocksDB option string (malloc'd).
char* shale_table_options(rocksdb_options_t* opts, char** err);
// The top-level field `key` of a serialized CompactionServiceInput or
// CompactionServiceResult (malloc'd), or NULL if absent or on error.
char* shale_compaction_field(const char* data, size_t n, const char* key, char** err);
// One output of a parsed CompactionServiceResult (strings malloc'd).
typedef struct {
  char* name;
  size_t name_len;
  char* smallest;  // internal keys
  size_t smallest_len;
  char* largest;
  size_t largest_len;
  uint64_t smallest_seqno;
  uint64_t largest_seqno;
  uint64_t epoch_number;  // 0: unknown
  uint64_t unique_id[2];
} shale_result_file_t;
typedef struct {
  int code;  // rocksdb::Status::Code of the remote compaction
  int subcode;
  int severity;
  char* message;
  char* output_path;
  int output_level;
  uint64_t num_output_records;
  int nfiles;
  shale_result_file_t* files;
} shale_compaction_result_t;
// Parses a serialized CompactionServiceResult the way RocksDB 9.11 reads
// it: 0 and *out (free with shale_compaction_result_free), or 1 and *err.
int shale_compaction_result_parse(const char* data, size_t n, shale_compaction_result_t* out,
                                  char** err);
void shale_compaction_result_free(shale_compaction_result_t* r);
// The unique id (RocksDB's external form, two little-endian words) of a
// table whose properties hold these db id, session id and file number.
int shale_table_unique_id(const char* db_id, size_t db_id_len, const char* session, size_t session_len,
                          uint64_t file_number, uint64_t out[2], char** err);
typedef struct shale_cancel_t shale_cancel_t;
shale_cancel_t* shale_cancel_new(void);
void shale_cancel_set(shale_cancel_t* c);
void shale_cancel_destroy(shale_cancel_t* c);
// DB::OpenAndCompact with the Env installed in env_opts (a Shale
// FileSystem). Returns 0 and the serialized result, or 1 and *err.
int shale_open_and_compact(rocksdb_options_t* env_opts, const char* name, const char* output_dir,
                           const char* input, size_t n, const char* table_options,
                           shale_cancel_t* cancel, char** result, size_t* rlen, char** err);
// ---- External SST files (sstcheck.cc) ------------------------------------------
typedef struct {
  char* key;         // the offending key's first key_shown bytes (malloc'd)
  size_t key_shown;
  size_t key_len;
  size_t value_len;
  uint64_t index;    // its position in the file; on success, the entries read
} shale_sst_violation_t;
// Reads every entry of the SST file at path (checksums verified): 0 when
// every key is 1..max_key bytes and every value at most max_value; 1 with
// the first entry that is not in *out; -1 on error (*err malloc'd).
int shale_sst_check_sizes(const char* path, size_t max_key, size_t max_value,
                          shale_sst_violation_t* out, char** err);
typedef struct {
  uint64_t entries, deletions, range_deletions, filter_entries, orig_file_number;
  char* db_id;  // malloc'd strings
  char* db_session_id;
  char* filter_policy;
} shale_sst_props_t;
// The table properties of the SST file at path: 0, or -1 and *err.
int shale_sst_properties(const char* path, shale_sst_props_t* out, char** err);
// ---- Fast paths (db.cc) ----------------------------------------------------
// The fast paths turn RocksDB's perf context off on the calling thread.
// Get's results besides the length, 0 on entry. Addresses as integers: a
// Go pointer to a struct holding pointers costs a cgo pointer check a call.
typedef struct {
  uintptr_t overflow;  // a found value longer than cap (malloc'd char*)
  uintptr_t err;       // malloc'd char*
} shale_get_out_t;
// Get: the value's length when found, -1 when not found, -2 on error. A
// found value is copied to buf when it fits cap, else to out->overflow.
int64_t shale_db_get(rocksdb_t* db, rocksdb_readoptions_t* ro, const char* key, size_t klen, char* buf,
                     size_t cap, shale_get_out_t* out);
// Applies a batch given in WriteBatch's serialized form; NULL or the error
// (malloc'd).
char* shale_db_write_rep(rocksdb_t* db, rocksdb_writeoptions_t* wo, const char* rep, size_t len);
// Batched MultiGet of n keys laid end to end in keys (lengths in klens).
// vlens[i] is -1 for a missing key. Returns the total value bytes, with
// the values back to back in buf when they fit cap, else in *overflow
// (malloc'd); -1 on error (*err malloc'd).
int64_t shale_db_multiget(rocksdb_t* db, rocksdb_readoptions_t* ro, size_t n, const char* keys,
                          const size_t* klens, char* buf, size_t cap, int64_t* vlens, char** overflow,
                          char** err);
void shale_readoptions_set_async_io(rocksdb_readoptions_t* ro, int async_io, int optimize_multiget);

#ifdef __cplusplus
}
#endif
#endif
