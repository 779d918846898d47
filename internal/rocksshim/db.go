package rocksshim

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// The fast paths below take grocksdb's C handles, kept unexported as the
// first field of each wrapper (as for Options in rocksshim.go).
func init() {
	for _, v := range []any{grocksdb.DB{}, grocksdb.ReadOptions{}, grocksdb.WriteOptions{}} {
		t := reflect.TypeOf(v)
		if t.NumField() == 0 || t.Field(0).Name != "c" || t.Field(0).Type.Kind() != reflect.Pointer || t.Field(0).Offset != 0 {
			panic(fmt.Sprintf("rocksshim: grocksdb.%s no longer starts with its C handle; update rocksshim's handle accessors", t.Name()))
		}
	}
}

func dbHandle(d *grocksdb.DB) *C.rocksdb_t { return *(**C.rocksdb_t)(unsafe.Pointer(d)) }
func readHandle(o *grocksdb.ReadOptions) *C.rocksdb_readoptions_t {
	return *(**C.rocksdb_readoptions_t)(unsafe.Pointer(o))
}
func writeHandle(o *grocksdb.WriteOptions) *C.rocksdb_writeoptions_t {
	return *(**C.rocksdb_writeoptions_t)(unsafe.Pointer(o))
}

func cError(e *C.char) error {
	if e == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(e))
	return errors.New(C.GoString(e))
}

// bytesPtr is b's first byte for C (nil for an empty b). C only reads or
// writes it during the call.
func bytesPtr(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// getScratch is what a Get hands C: a buffer that values are copied into
// before they get their own exactly sized slice (most values fit), and
// C's other results. Pooled, so a Get allocates only the value it returns.
type getScratch struct {
	out C.shale_get_out_t
	buf [16 << 10]byte
}

// cAddr reads an address C stored as an integer (C memory, not Go's).
func cAddr(u *C.uintptr_t) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(u)) }

var scratch = sync.Pool{New: func() any { return new(getScratch) }}

// Get reads key in one cgo call and returns a copy of its value (nil, false
// when it does not exist). grocksdb's Get costs two calls (get, then free
// of a malloc'd copy).
func Get(db *grocksdb.DB, ro *grocksdb.ReadOptions, key []byte) ([]byte, bool, error) {
	g := scratch.Get().(*getScratch)
	defer scratch.Put(g)
	g.out = C.shale_get_out_t{}
	n := C.shale_db_get(dbHandle(db), readHandle(ro), bytesPtr(key), C.size_t(len(key)),
		(*C.char)(unsafe.Pointer(&g.buf[0])), C.size_t(len(g.buf)), &g.out)
	runtime.KeepAlive(key)
	switch {
	case n == -1:
		return nil, false, nil
	case n < 0:
		return nil, false, cError((*C.char)(cAddr(&g.out.err)))
	case g.out.overflow != 0:
		// Larger than the scratch buffer: RocksDB's copy in C memory.
		p := cAddr(&g.out.overflow)
		defer C.free(p)
		return clone(unsafe.Slice((*byte)(p), int(n))), true, nil
	}
	return clone(g.buf[:n]), true, nil
}

// clone copies b into a new slice of its length. make then copy is the form
// the compiler allocates without zeroing first.
func clone(b []byte) []byte {
	v := make([]byte, len(b))
	copy(v, b)
	return v
}

// WriteRep applies a batch in WriteBatch's serialized form (see Batch) in
// one cgo call.
func WriteRep(db *grocksdb.DB, wo *grocksdb.WriteOptions, rep []byte) error {
	cerr := C.shale_db_write_rep(dbHandle(db), writeHandle(wo), bytesPtr(rep), C.size_t(len(rep)))
	runtime.KeepAlive(rep)
	return cError(cerr)
}

// MultiGet reads keys with RocksDB's batched MultiGet (one cgo call, one
// consistent view); values[i] is nil when found[i] is false.
func MultiGet(db *grocksdb.DB, ro *grocksdb.ReadOptions, keys [][]byte) (values [][]byte, found []bool, err error) {
	n := len(keys)
	if n == 0 {
		return nil, nil, nil
	}
	total := 0
	for _, k := range keys {
		total += len(k)
	}
	// Keys end to end and their lengths: C memory must not hold Go
	// pointers, so no array of slices.
	flat := make([]byte, 0, total)
	klens := make([]C.size_t, n)
	for i, k := range keys {
		flat = append(flat, k...)
		klens[i] = C.size_t(len(k))
	}
	vlens := make([]C.int64_t, n)
	buf := make([]byte, multiGetBuf)
	var overflow, cerr *C.char
	got := C.shale_db_multiget(dbHandle(db), readHandle(ro), C.size_t(n), bytesPtr(flat), &klens[0],
		bytesPtr(buf), C.size_t(len(buf)), &vlens[0], &overflow, &cerr)
	if got < 0 {
		return nil, nil, cError(cerr)
	}
	if overflow != nil {
		// More than buf holds: RocksDB's copies are in C memory.
		buf = append(make([]byte, 0, int(got)), unsafe.Slice((*byte)(unsafe.Pointer(overflow)), int(got))...)
		C.free(unsafe.Pointer(overflow))
	}
	values, found = make([][]byte, n), make([]bool, n)
	off := 0
	for i, l := range vlens {
		if l < 0 {
			continue
		}
		found[i] = true
		values[i] = buf[off : off+int(l) : off+int(l)]
		off += int(l)
	}
	return values, found, nil
}

// multiGetBuf is the values a MultiGet holds without a second copy: 32
// values of 1 KiB.
const multiGetBuf = 32 << 10

// Batch builds a write batch in RocksDB's serialized WriteBatch format
// (db/write_batch.cc: a fixed64 sequence number, a fixed32 count, then one
// record per operation: a type byte, varint32-prefixed key, and for a put a
// varint32-prefixed value), so that a batch of any size crosses into C in
// one call instead of one call per operation. The zero value is empty;
// Reset reuses its memory.
type Batch struct {
	rep   []byte
	count uint32
}

const (
	batchHeader  = 12
	typeDeletion = 0x0
	typeValue    = 0x1
)

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.rep = b.rep[:0]
	b.count = 0
}

func (b *Batch) header() {
	if len(b.rep) == 0 {
		b.rep = append(b.rep, make([]byte, batchHeader)...)
	}
}

// Put adds a put of key.
func (b *Batch) Put(key, value []byte) {
	b.header()
	b.rep = append(b.rep, typeValue)
	b.rep = appendVarint32(b.rep, uint32(len(key)))
	b.rep = append(b.rep, key...)
	b.rep = appendVarint32(b.rep, uint32(len(value)))
	b.rep = append(b.rep, value...)
	b.count++
}

// Delete adds a delete of key.
func (b *Batch) Delete(key []byte) {
	b.header()
	b.rep = append(b.rep, typeDeletion)
	b.rep = appendVarint32(b.rep, uint32(len(key)))
	b.rep = append(b.rep, key...)
	b.count++
}

// Append adds o's operations after b's.
func (b *Batch) Append(o *Batch) {
	if o.count == 0 {
		return
	}
	b.header()
	b.rep = append(b.rep, o.rep[batchHeader:]...)
	b.count += o.count
}

// Count is the number of operations.
func (b *Batch) Count() int { return int(b.count) }

// Size is the serialized size in bytes.
func (b *Batch) Size() int { return len(b.rep) }

// Data is the serialized batch (valid until the next change).
func (b *Batch) Data() []byte {
	b.header()
	b.rep[8], b.rep[9], b.rep[10], b.rep[11] = byte(b.count), byte(b.count>>8), byte(b.count>>16), byte(b.count>>24)
	return b.rep
}

func appendVarint32(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// SetAsyncIO sets ReadOptions.async_io and optimize_multiget_for_io, which
// the C API of 7.8.3 lacks (9.11's has async_io only).
func SetAsyncIO(ro *grocksdb.ReadOptions, asyncIO, optimizeMultiGetForIO bool) {
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	C.shale_readoptions_set_async_io(readHandle(ro), b(asyncIO), b(optimizeMultiGetForIO))
	runtime.KeepAlive(ro)
}
