// DB::OpenAsFollower (RocksDB 9.x, experimental), which the C API lacks.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

using namespace ROCKSDB_NAMESPACE;

// As in RocksDB's db/c.cc: every C handle holds its C++ object as `rep`.
struct rocksdb_t {
  DB* rep;
};
struct rocksdb_options_t {
  Options rep;
};

extern "C" rocksdb_t* shale_open_follower(rocksdb_options_t* opts, const char* leader, const char* follower,
                                          uint64_t refresh_ms, char** err) {
  Options o = opts->rep;
  // The follower's own thread tails the leader's MANIFEST this often.
  o.follower_refresh_catchup_period_ms = refresh_ms;
  std::unique_ptr<DB> db;
  Status s = DB::OpenAsFollower(o, follower, leader, &db);
  if (!s.ok()) {
    *err = strdup(s.ToString().c_str());
    return nullptr;
  }
  auto* r = new rocksdb_t;
  r->rep = db.release();
  return r;
}
