package rocksshim

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"regexp"
	"runtime"
	"runtime/cgo"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// CompactionStatus answers RocksDB's CompactionService calls.
type CompactionStatus int

const (
	// CompactionSuccess: the job was submitted (Start) or its result is
	// ready to install (Wait).
	CompactionSuccess CompactionStatus = 0
	// CompactionUseLocal: RocksDB runs the compaction itself. There is no
	// failure status on purpose: RocksDB (7.8.3 as 9.11) turns kFailure
	// into a background error that stops writes.
	CompactionUseLocal CompactionStatus = 1
)

// CompactionJob identifies one remote compaction of a database: RocksDB
// calls Start and then Wait with the same Session and ID.
type CompactionJob struct {
	Session string // RocksDB's db_session_id
	ID      uint64 // RocksDB's job id, unique within the session
	// Start only: RocksDB's serialized CompactionServiceInput, and the
	// database's table factory options (the worker rebuilds the factory
	// from them).
	Input        []byte
	TableOptions string
	// Start only: the input tables as the database knows them, to judge
	// the result by; empty if RocksDB did not announce the compaction (it
	// does not while shutting down).
	Inputs []CompactionInput
}

// CompactionInput is one input table of a compaction.
type CompactionInput struct {
	Name  string // "000012.sst"
	Level int
	// The file's boundaries (user keys; a range deletion's extent
	// included) and sequence numbers, from the database's live files.
	Smallest, Largest           []byte
	SmallestSeqno, LargestSeqno uint64
	// EpochNumber orders level-0 tables (newer is larger); 0: unknown.
	EpochNumber uint64
	// From its table properties; nil if RocksDB had none.
	Props *TableCounts
}

// TableCounts are the counts a table's properties record. In RocksDB
// (7.8.3 as 9.11) Entries and Deletions include range deletions.
type TableCounts struct {
	Entries, Deletions, RangeDeletions, MergeOperands uint64
	// FilterEntries is the number of keys in the table's filter; with
	// FilterWholeKeys it is the number of distinct user keys among the
	// table's point entries (full filter of whole keys, no prefixes).
	FilterEntries   uint64
	FilterWholeKeys bool
}

// CompactionService is a primary's remote compaction: Start submits a
// job, Wait waits for it and returns RocksDB's serialized result. Both
// return CompactionUseLocal on any trouble.
type CompactionService interface {
	Start(job CompactionJob) CompactionStatus
	Wait(job CompactionJob) (CompactionStatus, []byte)
}

// CompactionInstallObserver is a CompactionService that learns whether
// RocksDB installed the result of a job whose Wait answered
// CompactionSuccess (CompactionService::OnInstallation). ok false means
// RocksDB could not read the result or install an output, which it also
// made a background error.
type CompactionInstallObserver interface {
	Installed(job CompactionJob, ok bool)
}

// CompactionCanceler is a CompactionService whose waiting jobs RocksDB
// cancels when the database closes (CompactionService::
// CancelAwaitingJobs): every Wait should then return CompactionUseLocal
// at once, and later Starts too.
type CompactionCanceler interface {
	CancelAwaiting()
}

// CompactionAttachment is a CompactionService installed in a database's
// options. Close it after the database is closed.
type CompactionAttachment struct {
	once         sync.Once
	h            cgo.Handle
	svc          CompactionService
	tableOptions string
}

// AttachCompactionService makes the database opened with opts hand its
// compactions to svc. Set the table factory first: its options travel
// with every job.
func AttachCompactionService(opts *grocksdb.Options, svc CompactionService) (*CompactionAttachment, error) {
	to, err := TableOptions(opts)
	if err != nil {
		return nil, err
	}
	a := &CompactionAttachment{svc: svc, tableOptions: to}
	a.h = cgo.NewHandle(a)
	C.shale_compaction_service_attach(optionsHandle(opts), C.uintptr_t(a.h))
	runtime.KeepAlive(opts)
	return a, nil
}

// Close releases the attachment; the database must be closed.
func (a *CompactionAttachment) Close() {
	if a != nil {
		a.once.Do(a.h.Delete)
	}
}

// SetBloomFilter gives a table factory a bloom filter of bitsPerKey,
// instead of grocksdb.NewBloomFilter: that one (RocksDB's C API) is a
// wrapper whose option string is only "bloomfilter", which a compaction
// worker cannot rebuild a filter from, so remote compactions wrote tables
// without filters. Filters of either kind read each other's tables.
func SetBloomFilter(bbto *grocksdb.BlockBasedTableOptions, bitsPerKey float64) {
	C.shale_block_based_set_bloom(bbtoHandle(bbto), C.double(bitsPerKey))
	runtime.KeepAlive(bbto)
}

// SetScanReadahead sets an iterator's implicit readahead
// (BlockBasedTableOptions, which grocksdb lacks): it begins after
// numReads sequential block reads of a table at initial bytes and doubles
// with each read up to max.
func SetScanReadahead(bbto *grocksdb.BlockBasedTableOptions, initial, max, numReads uint64) {
	C.shale_block_based_set_readahead(bbtoHandle(bbto), C.size_t(initial), C.size_t(max), C.uint64_t(numReads))
	runtime.KeepAlive(bbto)
}

// TableOptions returns the table factory's options as a RocksDB option
// string.
func TableOptions(opts *grocksdb.Options) (string, error) {
	var cerr *C.char
	p := C.shale_table_options(optionsHandle(opts), &cerr)
	runtime.KeepAlive(opts)
	if p == nil {
		return "", fmt.Errorf("table options: %s", takeString(cerr))
	}
	return takeString(p), nil
}

func takeString(p *C.char) string {
	if p == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(p))
	return C.GoString(p)
}

func attachmentOf(h C.uintptr_t) *CompactionAttachment {
	return cgo.Handle(h).Value().(*CompactionAttachment)
}

//export shaleCompactionStart
func shaleCompactionStart(h C.uintptr_t, session *C.char, slen C.int, id C.uint64_t, input *C.char, n C.size_t, inputs *C.shale_compaction_input_t, ninputs C.int) C.int {
	a := attachmentOf(h)
	job := CompactionJob{Session: C.GoStringN(session, slen), ID: uint64(id), Input: C.GoBytes(unsafe.Pointer(input), C.int(n)), TableOptions: a.tableOptions}
	if ninputs > 0 {
		for _, in := range unsafe.Slice(inputs, int(ninputs)) {
			ci := CompactionInput{
				Name: C.GoString(in.name), Level: int(in.level),
				Smallest:      C.GoBytes(unsafe.Pointer(in.smallest), C.int(in.smallest_len)),
				Largest:       C.GoBytes(unsafe.Pointer(in.largest), C.int(in.largest_len)),
				SmallestSeqno: uint64(in.smallest_seqno), LargestSeqno: uint64(in.largest_seqno),
				EpochNumber: uint64(in.epoch_number),
			}
			if in.has_props != 0 {
				ci.Props = &TableCounts{
					Entries: uint64(in.entries), Deletions: uint64(in.deletions), RangeDeletions: uint64(in.range_deletions),
					MergeOperands: uint64(in.merge_operands), FilterEntries: uint64(in.filter_entries), FilterWholeKeys: in.filter_whole_keys != 0,
				}
			}
			job.Inputs = append(job.Inputs, ci)
		}
	}
	return C.int(a.svc.Start(job))
}

//export shaleCompactionWait
func shaleCompactionWait(h C.uintptr_t, session *C.char, slen C.int, id C.uint64_t, result **C.char, n *C.size_t) C.int {
	st, res := attachmentOf(h).svc.Wait(CompactionJob{Session: C.GoStringN(session, slen), ID: uint64(id)})
	if st == CompactionSuccess && len(res) > 0 {
		*result = (*C.char)(C.CBytes(res))
		*n = C.size_t(len(res))
	}
	return C.int(st)
}

//export shaleCompactionInstalled
func shaleCompactionInstalled(h C.uintptr_t, session *C.char, slen C.int, id C.uint64_t, ok C.int) {
	if o, is := attachmentOf(h).svc.(CompactionInstallObserver); is {
		o.Installed(CompactionJob{Session: C.GoStringN(session, slen), ID: uint64(id)}, ok != 0)
	}
}

//export shaleCompactionCancelAwaiting
func shaleCompactionCancelAwaiting(h C.uintptr_t) {
	if c, is := attachmentOf(h).svc.(CompactionCanceler); is {
		c.CancelAwaiting()
	}
}

// CompactionField returns a top-level field of a serialized
// CompactionServiceInput or CompactionServiceResult (RocksDB option string
// syntax; nested values without their braces), and whether it is there.
func CompactionField(data []byte, key string) (string, bool, error) {
	if len(data) == 0 {
		return "", false, errors.New("empty compaction job data")
	}
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	var cerr *C.char
	p := C.shale_compaction_field((*C.char)(unsafe.Pointer(&data[0])), C.size_t(len(data)), ckey, &cerr)
	if cerr != nil {
		return "", false, fmt.Errorf("compaction job data: %s", takeString(cerr))
	}
	if p == nil {
		return "", false, nil
	}
	return takeString(p), true, nil
}

// CompactionInputFiles returns the tables a serialized
// CompactionServiceInput compacts.
func CompactionInputFiles(input []byte) ([]string, error) {
	v, ok, err := CompactionField(input, "input_files")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("compaction input names no input_files")
	}
	if v == "" {
		return nil, nil
	}
	var out []string
	for _, h := range strings.Split(v, ":") {
		name, err := decodeString(h)
		if err != nil {
			return nil, fmt.Errorf("input_files: %w", err)
		}
		out = append(out, name)
	}
	return out, nil
}

// decodeString decodes RocksDB's kEncodedString option values: hex
// (Slice::ToString(true), 7.8.3 as 9.11).
func decodeString(v string) (string, error) {
	b, err := hex.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("%q is not an encoded string: %w", v, err)
	}
	return string(b), nil
}

// Cancel stops a running OpenAndCompact. Set and Close may race: a Set
// after Close does nothing.
type Cancel struct {
	mu sync.Mutex
	c  *C.shale_cancel_t
}

// NewCancel returns a cancellation flag; Close it after OpenAndCompact
// returned.
func NewCancel() *Cancel { return &Cancel{c: C.shale_cancel_new()} }

// Set asks the compaction to stop (it checks between keys).
func (c *Cancel) Set() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		C.shale_cancel_set(c.c)
	}
}

// Close frees the flag.
func (c *Cancel) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		C.shale_cancel_destroy(c.c)
		c.c = nil
	}
}

// OpenAndCompact runs a remote compaction job (DB::OpenAndCompact): it
// opens the database in dir as a secondary through the Env of envOpts (a
// Shale FileSystem attached to it), writes the output tables to outDir
// (which it creates), and returns RocksDB's serialized result.
func OpenAndCompact(envOpts *grocksdb.Options, dir, outDir string, input []byte, tableOptions string, cancel *Cancel) ([]byte, error) {
	if len(input) == 0 {
		return nil, errors.New("open and compact: empty input")
	}
	if cancel == nil || cancel.c == nil {
		return nil, errors.New("open and compact: no live cancellation flag")
	}
	cdir, cout, cto := C.CString(dir), C.CString(outDir), C.CString(tableOptions)
	defer C.free(unsafe.Pointer(cdir))
	defer C.free(unsafe.Pointer(cout))
	defer C.free(unsafe.Pointer(cto))
	cin := C.CBytes(input)
	defer C.free(cin)
	var res, cerr *C.char
	var n C.size_t
	rc := C.shale_open_and_compact(optionsHandle(envOpts), cdir, cout, (*C.char)(cin), C.size_t(len(input)), cto, cancel.c, &res, &n, &cerr)
	runtime.KeepAlive(envOpts)
	if rc != 0 {
		return nil, errors.New(takeString(cerr))
	}
	defer C.free(unsafe.Pointer(res))
	return C.GoBytes(unsafe.Pointer(res), C.int(n)), nil
}

// CompactionOutputFiles returns the table names a serialized
// CompactionServiceResult lists.
func CompactionOutputFiles(result []byte) ([]string, error) {
	v, ok, err := CompactionField(result, "output_files")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("compaction result names no output_files")
	}
	// A vector of structs, "{{{file_name=<hex>;...}}:...}": every
	// file_name key in it is one output's.
	var out []string
	for _, m := range fileNameRE.FindAllStringSubmatch(v, -1) {
		name, err := decodeString(m[1])
		if err != nil {
			return nil, fmt.Errorf("output_files: %w", err)
		}
		out = append(out, name)
	}
	return out, nil
}

var fileNameRE = regexp.MustCompile(`(?:^|[{;])file_name=([0-9A-Fa-f]*)(?:[;}]|$)`)

// CompactionResultUint returns an unsigned top-level field of a result
// (bytes_read, bytes_written, num_output_records, ...), or 0.
func CompactionResultUint(result []byte, key string) uint64 {
	v, ok, err := CompactionField(result, key)
	if err != nil || !ok {
		return 0
	}
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// CompactionOutputPath returns the directory a serialized
// CompactionServiceResult says the outputs were written to.
func CompactionOutputPath(result []byte) (string, bool, error) {
	v, ok, err := CompactionField(result, "output_path")
	if err != nil || !ok {
		return "", ok, err
	}
	p, err := decodeString(v)
	return p, err == nil, err
}

// CompactionResult is a serialized CompactionServiceResult as RocksDB
// reads it.
type CompactionResult struct {
	Status           ResultStatus
	OutputPath       string
	OutputLevel      int
	NumOutputRecords uint64
	Files            []CompactionOutput
}

// CompactionOutput is one output table a result names, with the metadata
// RocksDB installs for it as is (it does not read the table for these).
type CompactionOutput struct {
	Name string
	// Internal keys: user key, then 8 bytes of sequence number and type.
	SmallestKey, LargestKey     []byte
	SmallestSeqno, LargestSeqno uint64
	// EpochNumber is installed as the table's epoch (9.11 takes it from
	// the result): it orders level-0 tables for reads.
	EpochNumber uint64
	// RocksDB's internal form; {0, 0} means none (RocksDB then does not
	// verify the table's id when it opens it).
	UniqueID [2]uint64
}

// ResultStatus is the status a worker's RocksDB reported with a result.
type ResultStatus struct {
	Code, Subcode, Severity int
	Message                 string
}

// OK reports whether the remote compaction succeeded.
func (s ResultStatus) OK() bool { return s.Code == 0 }

// rocksdb::Status::Code names (include/rocksdb/status.h).
var statusCodes = []string{"OK", "NotFound", "Corruption", "Not implemented", "Invalid argument", "IO error",
	"Merge in progress", "Result incomplete", "Shutdown in progress", "Operation timed out", "Operation aborted",
	"Resource busy", "Operation expired", "Operation failed. Try again.", "Compaction too large", "Column family dropped"}

func (s ResultStatus) String() string {
	name := fmt.Sprintf("status code %d", s.Code)
	if s.Code >= 0 && s.Code < len(statusCodes) {
		name = statusCodes[s.Code]
	}
	if s.Message == "" {
		return name
	}
	return name + ": " + s.Message
}

// ParseCompactionResult reads a serialized CompactionServiceResult with
// RocksDB's own parser and its 9.11 field table (compaction.cc): what
// parses here, RocksDB reads, and the values are the ones it installs.
// NumOutputRecords is the stats' count (9.11 has no top-level one).
func ParseCompactionResult(data []byte) (*CompactionResult, error) {
	if len(data) == 0 {
		return nil, errors.New("empty compaction result")
	}
	var out C.shale_compaction_result_t
	var cerr *C.char
	if C.shale_compaction_result_parse((*C.char)(unsafe.Pointer(&data[0])), C.size_t(len(data)), &out, &cerr) != 0 {
		return nil, fmt.Errorf("compaction result: %s", takeString(cerr))
	}
	defer C.shale_compaction_result_free(&out)
	r := &CompactionResult{
		Status:     ResultStatus{Code: int(out.code), Subcode: int(out.subcode), Severity: int(out.severity), Message: C.GoString(out.message)},
		OutputPath: C.GoString(out.output_path), OutputLevel: int(out.output_level), NumOutputRecords: uint64(out.num_output_records),
	}
	for _, f := range unsafe.Slice(out.files, int(out.nfiles)) {
		r.Files = append(r.Files, CompactionOutput{
			Name:          C.GoStringN(f.name, C.int(f.name_len)),
			SmallestKey:   C.GoBytes(unsafe.Pointer(f.smallest), C.int(f.smallest_len)),
			LargestKey:    C.GoBytes(unsafe.Pointer(f.largest), C.int(f.largest_len)),
			SmallestSeqno: uint64(f.smallest_seqno), LargestSeqno: uint64(f.largest_seqno),
			EpochNumber: uint64(f.epoch_number),
			UniqueID:    [2]uint64{uint64(f.unique_id[0]), uint64(f.unique_id[1])},
		})
	}
	return r, nil
}

// TableUniqueID is the unique id (RocksDB's external form) of a table
// whose properties hold these creating db id, session id and original
// file number (rocksdb.creating.db.identity, ...session.identity,
// rocksdb.original.file.number), computed by RocksDB.
func TableUniqueID(dbID, session string, fileNumber uint64) ([2]uint64, error) {
	if dbID == "" || session == "" {
		return [2]uint64{}, errors.New("the table's properties name no creating db or session")
	}
	cid, cs := C.CString(dbID), C.CString(session)
	defer C.free(unsafe.Pointer(cid))
	defer C.free(unsafe.Pointer(cs))
	var out [2]C.uint64_t
	var cerr *C.char
	if C.shale_table_unique_id(cid, C.size_t(len(dbID)), cs, C.size_t(len(session)), C.uint64_t(fileNumber), &out[0], &cerr) != 0 {
		return [2]uint64{}, fmt.Errorf("table unique id: %s", takeString(cerr))
	}
	return [2]uint64{uint64(out[0]), uint64(out[1])}, nil
}

// ExternalUniqueID turns a unique id in RocksDB's internal form (as a
// MANIFEST and a compaction result hold it) into the external form
// TableUniqueID returns. RocksDB (7.8.3 as 9.11) exports only the latter; this is
// its InternalUniqueIdToExternal (table/unique_id.cc), a bijection built
// on BijectiveHash2x64 (util/hash.cc). TestRemoteCompactionInProcess
// checks it against real results.
func ExternalUniqueID(internal [2]uint64) [2]uint64 {
	const hiOffsetForZero, loOffsetForZero = 17391078804906429400, 6417269962128484497
	hi, lo := bijectiveHash2x64(internal[1]+hiOffsetForZero, internal[0]+loOffsetForZero)
	return [2]uint64{lo, hi}
}

// bijectiveHash2x64 with seed 0: XXH3's 9-to-16-byte 128-bit hash.
func bijectiveHash2x64(inHigh, inLow uint64) (outHigh, outLow uint64) {
	const bitflipl, bitfliph = 0x59973f0033362349, 0xc202797692d63d58
	hi, lo := bits.Mul64(inLow^inHigh^bitflipl, 0x9E3779B185EBCA87)
	lo += 0x3c0000000000000 // (len - 1) << 54
	inHigh ^= bitfliph
	hi += inHigh + uint64(uint32(inHigh))*0x85EBCA76
	lo ^= bits.ReverseBytes64(hi)
	h2, l2 := bits.Mul64(lo, 0xC2B2AE3D27D4EB4F)
	hi = h2 + hi*0xC2B2AE3D27D4EB4F
	return xxh3Avalanche(hi), xxh3Avalanche(l2)
}

func xxh3Avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= 0x165667919E3779F9
	h ^= h >> 32
	return h
}
