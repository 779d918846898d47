#include "shim.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include <rocksdb/options.h>
#include <rocksdb/statistics.h>
#include <rocksdb/version.h>

// The shim mirrors structs of this exact release (compaction.cc, the C
// handles below): compiled against other headers (Debian's
// /usr/include/rocksdb, say, because CGO_CXXFLAGS was not set), it fails
// here rather than misreading memory.
static_assert(ROCKSDB_MAJOR == 9 && ROCKSDB_MINOR == 11,
              "rocksshim needs RocksDB 9.11's headers: run hack/rocksdb.sh and build with the CGO_CFLAGS, "
              "CGO_CXXFLAGS and CGO_LDFLAGS that `hack/rocksdb.sh --cgo-env` prints (make sets them)");

using ROCKSDB_NAMESPACE::Options;
using ROCKSDB_NAMESPACE::Statistics;

// Same definition as in RocksDB's db/c.cc (7.8.3 and 9.11): the C handle wraps the
// C++ Options by value, so the shim can reach fields the C API omits.
struct rocksdb_options_t {
  Options rep;
};

struct shale_statistics_t {
  std::shared_ptr<Statistics> rep;
};

extern "C" {

shale_statistics_t* shale_statistics_attach(rocksdb_options_t* opts, int histograms) {
  auto* s = new shale_statistics_t;
  s->rep = ROCKSDB_NAMESPACE::CreateDBStatistics();
  // kExceptHistogramOrTimers keeps every ticker (time tickers such as
  // stall.micros are measured apart from the histograms' timers) and skips
  // the histograms and their clock reads.
  s->rep->set_stats_level(histograms ? ROCKSDB_NAMESPACE::StatsLevel::kExceptDetailedTimers
                                     : ROCKSDB_NAMESPACE::StatsLevel::kExceptHistogramOrTimers);
  opts->rep.statistics = s->rep;
  return s;
}

void shale_statistics_destroy(shale_statistics_t* s) { delete s; }

int shale_ticker_count(void) {
  return static_cast<int>(ROCKSDB_NAMESPACE::TickersNameMap.size());
}

const char* shale_ticker_name(int i) {
  return ROCKSDB_NAMESPACE::TickersNameMap[i].second.c_str();
}

void shale_statistics_tickers(shale_statistics_t* s, uint64_t* out, int n) {
  const auto& names = ROCKSDB_NAMESPACE::TickersNameMap;
  for (int i = 0; i < n && i < static_cast<int>(names.size()); i++) {
    out[i] = s->rep->getTickerCount(names[i].first);
  }
}

int shale_histogram_count(void) {
  return static_cast<int>(ROCKSDB_NAMESPACE::HistogramsNameMap.size());
}

const char* shale_histogram_name(int i) {
  return ROCKSDB_NAMESPACE::HistogramsNameMap[i].second.c_str();
}

void shale_statistics_histogram(shale_statistics_t* s, int i, shale_histogram_t* out) {
  ROCKSDB_NAMESPACE::HistogramData d;
  s->rep->histogramData(ROCKSDB_NAMESPACE::HistogramsNameMap[i].first, &d);
  out->count = d.count;
  out->sum = static_cast<double>(d.sum);
  out->p50 = d.median;
  out->p95 = d.percentile95;
  out->p99 = d.percentile99;
  out->max = d.max;
}

char* shale_rocksdb_version(void) {
  return strdup(ROCKSDB_NAMESPACE::GetRocksVersionAsString(true).c_str());
}

}  // extern "C"
