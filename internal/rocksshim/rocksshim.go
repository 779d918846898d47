// Package rocksshim is Shale's C++ bridge to RocksDB 9.11: what the C API
// that grocksdb wraps does not offer. It is compiled by cgo against the
// headers hack/rocksdb.sh installs (CGO_CFLAGS) and linked with its static
// librocksdb.a (CGO_LDFLAGS; the Makefile and hack/*.sh set both).
//
// -Wno-invalid-offsetof: the result mirror in compaction.cc describes
// fields of structs holding TableProperties with offsetof, as RocksDB's
// own field tables do.
package rocksshim

/*
#cgo CXXFLAGS: -std=c++17 -O2 -Wall -Wno-invalid-offsetof
#cgo LDFLAGS: -lrocksdb -lstdc++
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"reflect"
	"runtime"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// grocksdb keeps its C handle unexported as the first field of Options; the
// shim needs that handle. Check the layout once so a grocksdb upgrade that
// changes it fails loudly at start instead of corrupting memory.
func init() {
	t := reflect.TypeOf(grocksdb.Options{})
	if t.NumField() == 0 || t.Field(0).Name != "c" || t.Field(0).Type.Kind() != reflect.Pointer || t.Field(0).Offset != 0 {
		panic(fmt.Sprintf("rocksshim: grocksdb.Options no longer starts with its C handle (first field %v); update rocksshim.optionsHandle", t.Field(0)))
	}
}

func init() {
	t := reflect.TypeOf(grocksdb.BlockBasedTableOptions{})
	if t.NumField() == 0 || t.Field(0).Name != "c" || t.Field(0).Type.Kind() != reflect.Pointer || t.Field(0).Offset != 0 {
		panic(fmt.Sprintf("rocksshim: grocksdb.BlockBasedTableOptions no longer starts with its C handle (first field %v); update rocksshim.bbtoHandle", t.Field(0)))
	}
}

func bbtoHandle(o *grocksdb.BlockBasedTableOptions) *C.rocksdb_block_based_table_options_t {
	return *(**C.rocksdb_block_based_table_options_t)(unsafe.Pointer(o))
}

func optionsHandle(o *grocksdb.Options) *C.rocksdb_options_t {
	return *(**C.rocksdb_options_t)(unsafe.Pointer(o))
}

// Statistics are RocksDB's tickers, and optionally its histograms, for one
// database.
type Statistics struct {
	c          *C.shale_statistics_t
	histograms bool
}

// AttachStatistics enables statistics on opts; call before opening the DB.
// Without histograms RocksDB keeps every ticker but no histogram (its
// latency histograms read the clock twice per operation and cost about
// 400 instructions a Get or Put), and Histograms returns nil.
func AttachStatistics(opts *grocksdb.Options, histograms bool) *Statistics {
	h := C.int(0)
	if histograms {
		h = 1
	}
	s := &Statistics{c: C.shale_statistics_attach(optionsHandle(opts), h), histograms: histograms}
	runtime.KeepAlive(opts)
	return s
}

// Close releases the shim's reference; the DB keeps its own.
func (s *Statistics) Close() {
	if s.c != nil {
		C.shale_statistics_destroy(s.c)
		s.c = nil
	}
}

// Ticker is a monotonically increasing RocksDB counter.
type Ticker struct {
	Name  string // RocksDB's name, e.g. "rocksdb.block.cache.miss"
	Value uint64
}

// Histogram summarises a RocksDB latency or size distribution.
type Histogram struct {
	Name               string // e.g. "rocksdb.db.get.micros"
	Count              uint64
	Sum                float64
	P50, P95, P99, Max float64
}

var tickerNames, histogramNames = func() ([]string, []string) {
	t := make([]string, int(C.shale_ticker_count()))
	for i := range t {
		t[i] = C.GoString(C.shale_ticker_name(C.int(i)))
	}
	h := make([]string, int(C.shale_histogram_count()))
	for i := range h {
		h[i] = C.GoString(C.shale_histogram_name(C.int(i)))
	}
	return t, h
}()

// Tickers returns every ticker's current value.
func (s *Statistics) Tickers() []Ticker {
	vals := make([]C.uint64_t, len(tickerNames))
	C.shale_statistics_tickers(s.c, &vals[0], C.int(len(vals)))
	out := make([]Ticker, len(vals))
	for i, v := range vals {
		out[i] = Ticker{Name: tickerNames[i], Value: uint64(v)}
	}
	return out
}

// Histograms returns every histogram's current summary, or nil when they
// are off.
func (s *Statistics) Histograms() []Histogram {
	if !s.histograms {
		return nil
	}
	return s.readHistograms()
}

func (s *Statistics) readHistograms() []Histogram {
	out := make([]Histogram, len(histogramNames))
	for i := range out {
		var h C.shale_histogram_t
		C.shale_statistics_histogram(s.c, C.int(i), &h)
		out[i] = Histogram{
			Name: histogramNames[i], Count: uint64(h.count), Sum: float64(h.sum),
			P50: float64(h.p50), P95: float64(h.p95), P99: float64(h.p99), Max: float64(h.max),
		}
	}
	return out
}

// RocksDBVersion is the version of the linked RocksDB library.
func RocksDBVersion() string {
	p := C.shale_rocksdb_version()
	defer C.free(unsafe.Pointer(p))
	return C.GoString(p)
}
