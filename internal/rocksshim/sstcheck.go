package rocksshim

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"unsafe"
)

// SSTEntryTooLarge describes the first entry of an external SST file whose
// key or value breaks the limits CheckSSTSizes was given.
type SSTEntryTooLarge struct {
	Key      []byte // its first 64 bytes at most
	KeyLen   int
	ValueLen int
	Index    uint64 // its position in the file, from 0
}

// CheckSSTSizes reads every entry of the SST file at path, verifying its
// checksums, and returns the first one whose key is empty or longer than
// maxKey or whose value is longer than maxValue (nil if none), and the
// number of entries read.
func CheckSSTSizes(path string, maxKey, maxValue int) (*SSTEntryTooLarge, uint64, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var v C.shale_sst_violation_t
	var cerr *C.char
	switch C.shale_sst_check_sizes(cpath, C.size_t(maxKey), C.size_t(maxValue), &v, &cerr) {
	case 0:
		return nil, uint64(v.index), nil
	case 1:
		defer C.free(unsafe.Pointer(v.key))
		return &SSTEntryTooLarge{
			Key:      C.GoBytes(unsafe.Pointer(v.key), C.int(v.key_shown)),
			KeyLen:   int(v.key_len),
			ValueLen: int(v.value_len),
			Index:    uint64(v.index),
		}, uint64(v.index), nil
	default:
		return nil, 0, cError(cerr)
	}
}

// SSTProps are some table properties of a local SST file.
type SSTProps struct {
	TableCounts
	FilterPolicy    string
	DBID, SessionID string
	OrigFileNumber  uint64
}

// SSTProperties reads the table properties of the SST file at path.
func SSTProperties(path string) (SSTProps, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var p C.shale_sst_props_t
	var cerr *C.char
	if C.shale_sst_properties(cpath, &p, &cerr) != 0 {
		return SSTProps{}, cError(cerr)
	}
	defer C.free(unsafe.Pointer(p.db_id))
	defer C.free(unsafe.Pointer(p.db_session_id))
	defer C.free(unsafe.Pointer(p.filter_policy))
	return SSTProps{
		TableCounts:  TableCounts{Entries: uint64(p.entries), Deletions: uint64(p.deletions), RangeDeletions: uint64(p.range_deletions), FilterEntries: uint64(p.filter_entries)},
		FilterPolicy: C.GoString(p.filter_policy), DBID: C.GoString(p.db_id), SessionID: C.GoString(p.db_session_id), OrigFileNumber: uint64(p.orig_file_number),
	}, nil
}
