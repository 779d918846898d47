package rocksshim

/*
#include <stdlib.h>
#include "tiering.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Temperature is rocksdb::Temperature: the hint RocksDB gives the
// FileSystem for a new file (FileOptions::temperature) and records in the
// MANIFEST.
type Temperature uint8

// RocksDB's values (include/rocksdb/types.h, unchanged from 7.8.3 to 9.11).
const (
	TemperatureUnknown Temperature = 0x00
	TemperatureHot     Temperature = 0x04
	TemperatureWarm    Temperature = 0x08
	TemperatureCold    Temperature = 0x0C
)

func (t Temperature) String() string {
	switch t {
	case TemperatureUnknown:
		return "unknown"
	case TemperatureHot:
		return "hot"
	case TemperatureWarm:
		return "warm"
	case TemperatureCold:
		return "cold"
	}
	return fmt.Sprintf("temperature(%d)", uint8(t))
}

// TemperatureHooks is implemented by FileSystemHooks that place files by
// temperature: a new file's Create then carries RocksDB's hint.
type TemperatureHooks interface {
	CreateWithTemperature(name string, t Temperature) error
}

func init() {
	t := reflect.TypeOf(grocksdb.DB{})
	if t.NumField() == 0 || t.Field(0).Name != "c" || t.Field(0).Type.Kind() != reflect.Pointer || t.Field(0).Offset != 0 {
		panic(fmt.Sprintf("rocksshim: grocksdb.DB no longer starts with its C handle (first field %v); update rocksshim.dbHandle", t.Field(0)))
	}
}

// SetTiering makes last-level SSTs cold and keeps keys younger than
// coldAfter out of the last level (per-key placement); call before the
// DB opens. Seconds are RocksDB's unit: coldAfter is rounded up to one.
func SetTiering(opts *grocksdb.Options, coldAfter time.Duration) {
	C.shale_options_set_tiering(optionsHandle(opts), C.uint64_t(tieringSeconds(coldAfter)))
	runtime.KeepAlive(opts)
}

// tieringSeconds is coldAfter in RocksDB's unit, rounded up, at least 1.
func tieringSeconds(coldAfter time.Duration) uint64 {
	return max(uint64((coldAfter+time.Second-1)/time.Second), 1)
}

// TieringOptions are the DB::SetOptions keys and values that give an open
// database SetTiering's settings (0: tiering off, as when SetTiering was
// never called). RocksDB 9.x made all three mutable (cf_options.cc:
// kMutable); SetOptions also restarts its (sequence number, time)
// sampling at the new cadence.
func TieringOptions(coldAfter time.Duration) (keys, values []string) {
	keys = []string{"last_level_temperature", "preclude_last_level_data_seconds", "preserve_internal_time_seconds"}
	if coldAfter <= 0 {
		return keys, []string{"kUnknown", "0", "0"}
	}
	secs := strconv.FormatUint(tieringSeconds(coldAfter), 10)
	return keys, []string{"kCold", secs, secs}
}

// NumLevels is the number of LSM levels opts configure.
func NumLevels(opts *grocksdb.Options) int {
	n := int(C.shale_options_num_levels(optionsHandle(opts)))
	runtime.KeepAlive(opts)
	return n
}

// LiveFile describes one live SST file.
type LiveFile struct {
	Name                         string // "000012.sst"
	Level                        int
	Size                         uint64
	Entries                      uint64
	SmallestSeqno, LargestSeqno  uint64
	CreationTime, OldestAncestor time.Time // zero: unknown
	BeingCompacted               bool
	Temperature                  Temperature // as the MANIFEST records it
}

func unixOrZero(s C.uint64_t) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(int64(s), 0)
}

// LiveFiles lists the live SST files of db.
func LiveFiles(db *grocksdb.DB) []LiveFile {
	var files *C.shale_live_file_t
	n := int(C.shale_live_files(dbHandle(db), &files))
	runtime.KeepAlive(db)
	defer C.shale_live_files_free(files, C.int(n))
	out := make([]LiveFile, n)
	for i, f := range unsafe.Slice(files, n) {
		out[i] = LiveFile{
			Name: C.GoString(f.name), Level: int(f.level), Size: uint64(f.size), Entries: uint64(f.entries),
			SmallestSeqno: uint64(f.smallest_seqno), LargestSeqno: uint64(f.largest_seqno),
			CreationTime: unixOrZero(f.file_creation_time), OldestAncestor: unixOrZero(f.oldest_ancester_time),
			BeingCompacted: f.being_compacted != 0, Temperature: Temperature(f.temperature),
		}
	}
	return out
}

// LiveFileNames is DB::GetLiveFiles without a flush: every live file's
// name ("000012.sst", "MANIFEST-000005", "CURRENT", "OPTIONS-...") and
// the bytes of the MANIFEST that describe this state, read together
// under RocksDB's mutex (checkpoints).
func LiveFileNames(db *grocksdb.DB) (names []string, manifestSize uint64, err error) {
	var cnames **C.char
	var n C.int
	var size C.uint64_t
	cerr := C.shale_get_live_files(dbHandle(db), &cnames, &n, &size)
	runtime.KeepAlive(db)
	if cerr != nil {
		defer C.free(unsafe.Pointer(cerr))
		return nil, 0, errors.New(C.GoString(cerr))
	}
	defer C.shale_names_free(cnames, n)
	for _, c := range unsafe.Slice(cnames, int(n)) {
		names = append(names, C.GoString(c))
	}
	return names, uint64(size), nil
}

// Compacted says where a CompactFiles put its output tables.
type Compacted struct {
	Outputs       int // tables written
	AtOutputLevel int // of which in the output level (the rest in the level above it)
}

// CompactFiles compacts the named live SST files (and whatever RocksDB
// must add to make a valid compaction) into outputLevel, in this thread.
func CompactFiles(db *grocksdb.DB, names []string, outputLevel int) (Compacted, error) {
	if len(names) == 0 {
		return Compacted{}, errors.New("compact files: no files")
	}
	cs := make([]*C.char, len(names))
	for i, n := range names {
		cs[i] = C.CString(n)
	}
	defer func() {
		for _, c := range cs {
			C.free(unsafe.Pointer(c))
		}
	}()
	var outputs, at C.int
	msg := C.shale_compact_files(dbHandle(db), &cs[0], C.int(len(cs)), C.int(outputLevel), &outputs, &at)
	runtime.KeepAlive(db)
	res := Compacted{Outputs: int(outputs), AtOutputLevel: int(at)}
	if msg == nil {
		return res, nil
	}
	defer C.free(unsafe.Pointer(msg))
	return res, errors.New(C.GoString(msg))
}
