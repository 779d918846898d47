package rocksshim

/*
#include <stdlib.h>
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"io/fs"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// FileSystemHooks is what the C++ Shale FileSystem asks of Go. Names are
// bare file names in the database directory. Errors may implement
// Fenced() bool or Retryable() bool to set RocksDB's IOStatus accordingly.
type FileSystemHooks interface {
	// Managed reports whether the file lives in the object store (else it
	// is local only and the hooks never hear of it).
	Managed(name string) bool
	Create(name string) error
	Sync(name string, size int64, activity string) error
	Close(name string, size int64, activity string) error
	// Rename publishes dst before RocksDB renames src to it locally. A src
	// outside the database directory (a full path) is a remote
	// compaction's output: the hooks install it, nothing is renamed.
	Rename(src, dst string) error
	Delete(name string) error
	Fetch(name, activity string) error
	Stat(name string) (size int64, exists bool)
	List() []string
	// OpenTable prepares reading a table: nil means a local copy is ready,
	// ErrReadRemote that reads go to ReadAt.
	OpenTable(name, activity string) error
	// ReadAt reads a range of a table from the store into buf.
	ReadAt(name string, off int64, buf []byte, activity string) (int, error)
	// SetEvictor hands the hooks the function that makes open readers of a
	// table stop using its local copy; call it before deleting the copy.
	SetEvictor(evict func(name string))
}

// MultiReadHooks, when the hooks implement it, serves RocksDB's MultiRead
// of a table without a local copy: all of its ranges in one call, so they
// can be fetched concurrently. It returns the bytes read per range.
type MultiReadHooks interface {
	MultiReadAt(name string, offs []int64, bufs [][]byte, activity string) ([]int, error)
}

// ErrReadRemote answers OpenTable: no local copy, read from the store.
var ErrReadRemote = errors.New("read the table from the object store")

// Event, result and activity codes shared with fs.cc.
const (
	opCreate = 1
	opSync   = 2
	opClose  = 3
	opRename = 4
	opDelete = 5
	opFetch  = 6
	opOpen   = 7

	codeOK        = 0
	codeNotFound  = 1
	codeRetryable = 2
	codeFenced    = 3
	codeIOError   = 4
	codeRemote    = 5
)

// activityName labels an event for I/O metrics: WAL traffic, the flush and
// compaction pools (by thread), and otherwise the caller's thread: a
// foreground read, or a foreground write (DB open, manual flush).
func activityName(a C.int, name string, write bool) string {
	if strings.HasSuffix(name, ".log") {
		return "wal"
	}
	switch a {
	case 2:
		return "flush"
	case 3:
		return "compaction"
	}
	if write {
		return "foreground_write"
	}
	return "foreground_read"
}

// FileSystem is a Shale FileSystem installed in a database's options.
type FileSystem struct {
	mu sync.Mutex // guards c against an eviction racing Close
	c  *C.shale_fs_t
	h  cgo.Handle
}

// AttachFileSystem makes the database opened with opts run on dir through
// the Shale FileSystem, reporting to hooks. Call Close after the DB closed.
func AttachFileSystem(opts *grocksdb.Options, dir string, hooks FileSystemHooks) *FileSystem {
	h := cgo.NewHandle(hooks)
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	f := &FileSystem{c: C.shale_fs_attach(optionsHandle(opts), C.uintptr_t(h), cdir), h: h}
	runtime.KeepAlive(opts)
	hooks.SetEvictor(f.evict)
	return f
}

func (f *FileSystem) evict(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		return
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	C.shale_fs_evict(f.c, cname, C.int(len(name)))
}

// Close releases the FileSystem; the database must be closed.
func (f *FileSystem) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c != nil {
		C.shale_fs_destroy(f.c)
		f.c = nil
		f.h.Delete()
	}
}

func hooksOf(h C.uintptr_t) FileSystemHooks {
	return cgo.Handle(h).Value().(FileSystemHooks)
}

//export shaleFSManaged
func shaleFSManaged(h C.uintptr_t, name *C.char, n C.int) C.int {
	if hooksOf(h).Managed(C.GoStringN(name, n)) {
		return 1
	}
	return 0
}

//export shaleFSEvent
func shaleFSEvent(h C.uintptr_t, op C.int, a *C.char, alen C.int, b *C.char, blen C.int, size C.uint64_t, activity C.int, errOut **C.char) C.int {
	hooks := hooksOf(h)
	name := C.GoStringN(a, alen)
	var err error
	switch op {
	case opCreate:
		if th, ok := hooks.(TemperatureHooks); ok {
			err = th.CreateWithTemperature(name, Temperature(size))
		} else {
			err = hooks.Create(name)
		}
	case opSync:
		err = hooks.Sync(name, int64(size), activityName(activity, name, true))
	case opClose:
		err = hooks.Close(name, int64(size), activityName(activity, name, true))
	case opRename:
		err = hooks.Rename(name, C.GoStringN(b, blen))
	case opDelete:
		err = hooks.Delete(name)
	case opFetch:
		err = hooks.Fetch(name, activityName(activity, name, false))
	case opOpen:
		err = hooks.OpenTable(name, activityName(activity, name, false))
		if errors.Is(err, ErrReadRemote) {
			return codeRemote
		}
	default:
		err = errors.New("unknown file system event")
	}
	if err == nil {
		return codeOK
	}
	*errOut = C.CString(err.Error())
	var fenced interface{ Fenced() bool }
	var retry interface{ Retryable() bool }
	switch {
	case errors.As(err, &fenced) && fenced.Fenced():
		return codeFenced
	case errors.Is(err, fs.ErrNotExist):
		return codeNotFound
	case errors.As(err, &retry) && retry.Retryable():
		return codeRetryable
	}
	return codeIOError
}

//export shaleFSReadAt
func shaleFSReadAt(h C.uintptr_t, name *C.char, n C.int, off C.uint64_t, length C.size_t, buf *C.char, got *C.uint64_t, activity C.int, errOut **C.char) C.int {
	nm := C.GoStringN(name, n)
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(length))
	read, err := hooksOf(h).ReadAt(nm, int64(off), b, activityName(activity, nm, false))
	*got = C.uint64_t(read)
	if err == nil {
		return codeOK
	}
	*errOut = C.CString(err.Error())
	var retry interface{ Retryable() bool }
	if errors.As(err, &retry) && retry.Retryable() {
		return codeRetryable
	}
	return codeIOError
}

//export shaleFSMultiReadAt
func shaleFSMultiReadAt(h C.uintptr_t, name *C.char, n C.int, count C.int, offs *C.uint64_t, lens *C.size_t, bufs **C.char, gots *C.uint64_t, activity C.int, errOut **C.char) C.int {
	nm := C.GoStringN(name, n)
	k := int(count)
	offv := unsafe.Slice(offs, k)
	lenv := unsafe.Slice(lens, k)
	bufv := unsafe.Slice(bufs, k)
	gotv := unsafe.Slice(gots, k)
	o := make([]int64, k)
	b := make([][]byte, k)
	for i := 0; i < k; i++ {
		o[i] = int64(offv[i])
		b[i] = unsafe.Slice((*byte)(unsafe.Pointer(bufv[i])), int(lenv[i]))
	}
	hooks := hooksOf(h)
	var got []int
	var err error
	if mr, ok := hooks.(MultiReadHooks); ok {
		got, err = mr.MultiReadAt(nm, o, b, activityName(activity, nm, false))
	} else {
		got = make([]int, k)
		for i := 0; i < k && err == nil; i++ {
			got[i], err = hooks.ReadAt(nm, o[i], b[i], activityName(activity, nm, false))
		}
	}
	if err == nil {
		for i := 0; i < k; i++ {
			gotv[i] = C.uint64_t(got[i])
		}
		return codeOK
	}
	*errOut = C.CString(err.Error())
	var retry interface{ Retryable() bool }
	if errors.As(err, &retry) && retry.Retryable() {
		return codeRetryable
	}
	return codeIOError
}

// asyncSlots bounds the ReadAsync reads of all databases in the process
// that wait on the store at once; more wait for a slot in their goroutine
// (RocksDB's thread never blocks on it: it waits in Poll).
var asyncSlots = make(chan struct{}, 64)

//export shaleFSReadAsync
func shaleFSReadAsync(h C.uintptr_t, name *C.char, n C.int, off C.uint64_t, length C.size_t, buf *C.char, token C.uintptr_t, activity C.int) {
	nm := C.GoStringN(name, n)
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(length))
	hooks := hooksOf(h)
	act := activityName(activity, nm, false)
	go func() {
		asyncSlots <- struct{}{}
		read, err := hooks.ReadAt(nm, int64(off), b, act)
		<-asyncSlots
		var code C.int = codeOK
		var msg *C.char
		if err != nil {
			code, msg = readErrorCode(err), C.CString(err.Error())
		}
		// After this the C++ side may free buf: nothing touches it below.
		C.shale_fs_async_done(token, code, C.uint64_t(read), msg)
	}()
}

// readErrorCode maps a read's error as ReadAt's callers do.
func readErrorCode(err error) C.int {
	var retry interface{ Retryable() bool }
	if errors.As(err, &retry) && retry.Retryable() {
		return codeRetryable
	}
	return codeIOError
}

//export shaleFSStat
func shaleFSStat(h C.uintptr_t, name *C.char, n C.int, size *C.uint64_t) C.int {
	sz, ok := hooksOf(h).Stat(C.GoStringN(name, n))
	if !ok {
		return 0
	}
	*size = C.uint64_t(sz)
	return 1
}

//export shaleFSList
func shaleFSList(h C.uintptr_t) *C.char {
	names := hooksOf(h).List()
	n := 1
	for _, s := range names {
		n += len(s) + 1
	}
	buf := (*[1 << 30]byte)(C.malloc(C.size_t(n)))[:n:n]
	i := 0
	for _, s := range names {
		i += copy(buf[i:], s)
		buf[i] = 0
		i++
	}
	buf[i] = 0
	return (*C.char)(unsafe.Pointer(&buf[0]))
}
