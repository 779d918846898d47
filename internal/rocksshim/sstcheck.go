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
