// Tiered SST placement: temperature options and the live-file metadata and
// CompactFiles the age-out pass uses (tiering.cc, tiering.go).
#ifndef SHALE_ROCKSSHIM_TIERING_H
#define SHALE_ROCKSSHIM_TIERING_H

#include <stdint.h>
#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

// Sets last_level_temperature = kCold and preclude_last_level_data_seconds =
// preserve_internal_time_seconds = cold_after_seconds (before DB open).
void shale_options_set_tiering(rocksdb_options_t* opts, uint64_t cold_after_seconds);
int shale_options_num_levels(rocksdb_options_t* opts);

typedef struct {
  char* name;  // "000012.sst"
  int level;
  uint64_t size;
  uint64_t entries;
  uint64_t smallest_seqno, largest_seqno;
  uint64_t file_creation_time, oldest_ancester_time;  // unix seconds, 0: unknown
  int being_compacted;
  int temperature;  // rocksdb::Temperature as recorded in the MANIFEST
} shale_live_file_t;

// Fills *out with the live SST files (free with shale_live_files_free).
int shale_live_files(rocksdb_t* db, shale_live_file_t** out);
void shale_live_files_free(shale_live_file_t* files, int n);
// DB::CompactFiles into output_level; NULL or a malloc'd error. *outputs
// counts the tables written, *at_output_level those in output_level (the
// rest went to the level above it: per-key placement).
char* shale_compact_files(rocksdb_t* db, const char* const* names, int n, int output_level,
                          int* outputs, int* at_output_level);

// DB::GetLiveFiles without a flush (checkpoints): the live files' names
// ("000012.sst", "MANIFEST-000005", ...) and the MANIFEST's size, read
// together under the DB mutex. NULL or a malloc'd error; free the names
// with shale_names_free.
char* shale_get_live_files(rocksdb_t* db, char*** names, int* n, uint64_t* manifest_size);
void shale_names_free(char** names, int n);

#ifdef __cplusplus
}
#endif
#endif
