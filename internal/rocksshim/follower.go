package rocksshim

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
rocksdb_t* shale_open_follower(rocksdb_options_t* opts, const char* leader, const char* follower,
                               uint64_t refresh_ms, char** err);
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// OpenFollower opens the database in leader as a follower (RocksDB 9.x's
// DB::OpenAsFollower, experimental) keeping its own files in follower: a
// read-only instance whose own thread tails the leader's MANIFEST every
// refresh. It applies flushed tables only: a follower reads no WAL, so it
// sees a write once the leader has flushed it (docs/secondary.md,
// "Followers"). On a Shale FileSystem, leader must be its directory.
func OpenFollower(opts *grocksdb.Options, leader, follower string, refresh time.Duration) (*grocksdb.DB, error) {
	cl, cf := C.CString(leader), C.CString(follower)
	defer C.free(unsafe.Pointer(cl))
	defer C.free(unsafe.Pointer(cf))
	var e *C.char
	h := C.shale_open_follower(optionsHandle(opts), cl, cf, C.uint64_t(max(refresh.Milliseconds(), 1)), &e)
	if err := cError(e); err != nil {
		return nil, err
	}
	// grocksdb.DB starts with its C handle (checked in db.go's init); the
	// rest (name, options) only matters to methods Shale does not call.
	db := new(grocksdb.DB)
	*(**C.rocksdb_t)(unsafe.Pointer(db)) = h
	return db, nil
}
