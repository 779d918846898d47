// Package layout is the object-store layout of one Shale database: every
// key Shale writes under the database's root and every record it stores
// there, each with a Format and a Parse (docs/fencing.md, "Layout", says
// what each object means). It is pure Go without cgo and depends on
// nothing else of Shale, so the operator (built with CGO_ENABLED=0), the
// compaction worker and the storage layer read the store one way.
//
// Keys, relative to the database's root:
//
//	CURRENT                           replaced with If-Match (CurrentObject)
//	000012.sst.<epoch>                a table (or IDENTITY, OPTIONS-*)
//	                                  written by the owner with <epoch>;
//	                                  flat, so one listing finds them all
//	000011.log/<epoch>/<seq>          segment <seq> of a log written by the
//	                                  owner with <epoch>; an empty segment
//	                                  is a seal: the log ends before it
//	000011.log/<epoch>/<last>.fold-<first>
//	                                  a fold: segments <first>..<last> in
//	                                  one object (they are deleted after;
//	                                  segment 1 stays as the log's anchor)
//	_shale/epoch/<epoch>              ownership claims, create-only
//	_shale/owner                      the highest epoch that completed its
//	                                  claim; only ever raised (If-Match)
//	_shale/released/<epoch>           that owner shut down cleanly
//	_shale/opened/<epoch>             that owner completed its takeover:
//	                                  the log versions it kept
//	_shale/trash/<name>/<epoch>       a deleted file awaiting physical delete
//	_shale/readers/<id>               a reader's lease: the versions it uses
//	_shale/compactions/<job>/<attempt>/<table>
//	                                  an output of a remote compaction
//	_shale/tiers, _shale/tiers-paired the cold tier of the database
//	_shale/tier                       (in the cold store) whose cold tier
//	                                  the location is
//
// Every epoch and slot in a key is a 20-digit decimal (FormatNumber), so
// keys sort in numeric order. Every file name carries its writer's epoch
// because a deposed owner that has not noticed yet may create a file with
// a name the new owner also allocates; the versions never collide, and
// the highest epoch's wins.
package layout

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Shale's own objects live under MetaPrefix; the rest of the root is
// RocksDB's files.
const (
	MetaPrefix = "_shale/"
	// EpochPrefix holds the claims, _shale/epoch/<E> (EpochKey).
	EpochPrefix = MetaPrefix + "epoch/"
	// OwnerKey is the owner record (OwnerEpochRecord): what an owner reads
	// to confirm it still owns the database (one GET instead of a LIST of
	// the claims).
	OwnerKey = MetaPrefix + "owner"
	// ReleasedPrefix holds _shale/released/<E>: owner E stopped serving
	// for good (ReleasedKey).
	ReleasedPrefix = MetaPrefix + "released/"
	// OpenedPrefix holds _shale/opened/<E>: owner E completed its
	// takeover; the record names the log versions of older epochs it kept
	// (OpenedKey, OpenedRecord).
	OpenedPrefix = MetaPrefix + "opened/"
	// TrashPrefix holds the trash markers (TrashKey, TrashMarker).
	TrashPrefix = MetaPrefix + "trash/"
	// ReadersPrefix holds the reader leases (ReaderLeaseKey, ReaderLease).
	ReadersPrefix = MetaPrefix + "readers/"
	// CompactionsPrefix holds the job directories of remote compactions
	// (JobDir).
	CompactionsPrefix = MetaPrefix + "compactions/"
	// TiersKey (hot store) names the database's cold tier (TierRecord).
	TiersKey = MetaPrefix + "tiers"
	// TiersPairedKey (hot store) says the cold marker was written
	// (TiersPaired).
	TiersPairedKey = MetaPrefix + "tiers-paired"
	// ColdMarkerKey (cold store) says whose cold tier the location is
	// (ColdMarker).
	ColdMarkerKey = MetaPrefix + "tier"
	// CurrentKey is RocksDB's CURRENT, stored as CurrentObject.
	CurrentKey = "CURRENT"
)

// numberWidth is the width of every epoch and slot in a key.
const numberWidth = 20

// FormatNumber is an epoch or a slot as keys hold it: 20 decimal digits,
// zero-padded, so that keys sort in numeric order.
func FormatNumber(n uint64) string { return fmt.Sprintf("%020d", n) }

// ParseNumber parses what FormatNumber makes: exactly 20 decimal digits.
func ParseNumber(s string) (uint64, bool) {
	if len(s) != numberWidth || !isNumber(s) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// numbered is prefix + a 20-digit number.
func numbered(prefix string, n uint64) string { return prefix + FormatNumber(n) }

func parseNumbered(prefix, key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	return ParseNumber(s)
}

// EpochKey is the claim of epoch e: _shale/epoch/<e>.
func EpochKey(e uint64) string { return numbered(EpochPrefix, e) }

// ParseEpochKey returns the epoch of a claim's key.
func ParseEpochKey(key string) (uint64, bool) { return parseNumbered(EpochPrefix, key) }

// OpenedKey is the opened record of epoch e: _shale/opened/<e>.
func OpenedKey(e uint64) string { return numbered(OpenedPrefix, e) }

// ParseOpenedKey returns the epoch of an opened record's key.
func ParseOpenedKey(key string) (uint64, bool) { return parseNumbered(OpenedPrefix, key) }

// ReleasedKey is the release of epoch e: _shale/released/<e>.
func ReleasedKey(e uint64) string { return numbered(ReleasedPrefix, e) }

// ParseReleasedKey returns the epoch of a release's key.
func ParseReleasedKey(key string) (uint64, bool) { return parseNumbered(ReleasedPrefix, key) }

// ObjectKey is the key of version epoch of a table or whole object:
// <name>.<epoch>.
func ObjectKey(name string, epoch uint64) string { return name + "." + FormatNumber(epoch) }

// ParseObjectKey splits "<name>.<epoch>" of a table or whole object.
func ParseObjectKey(key string) (name string, epoch uint64, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 || strings.Contains(key, "/") {
		return "", 0, false
	}
	name = key[:i]
	if KindOf(name) != KindTable && KindOf(name) != KindObject {
		return "", 0, false
	}
	epoch, ok = ParseNumber(key[i+1:])
	return name, epoch, ok
}

// IsLegacyTableDir reports a top-level "<name>/" directory of a table or
// whole object: the layout of development builds before tables were flat.
func IsLegacyTableDir(key string) bool {
	name, isDir := strings.CutSuffix(key, "/")
	return isDir && (KindOf(name) == KindTable || KindOf(name) == KindObject)
}

// LogPrefix is the directory of every version of a log: <name>/.
func LogPrefix(name string) string { return name + "/" }

// LogVersionPrefix is the directory of one epoch's version of a log:
// <name>/<epoch>/.
func LogVersionPrefix(name string, epoch uint64) string {
	return LogPrefix(name) + FormatNumber(epoch) + "/"
}

// ParseLogVersionPrefix returns the epoch of a version directory of log
// name, as a listing of LogPrefix(name) by directory returns it.
func ParseLogVersionPrefix(name, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, LogPrefix(name))
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, "/")
	if !ok {
		return 0, false
	}
	return ParseNumber(rest)
}

// SegmentKey is segment seq of one version of a log:
// <name>/<epoch>/<seq>.
func SegmentKey(name string, epoch, seq uint64) string {
	return LogVersionPrefix(name, epoch) + FormatNumber(seq)
}

// foldMark separates the last and the first slot of a fold's key.
const foldMark = ".fold-"

// FoldKey names the fold of segments first..last:
// <name>/<epoch>/<last>.fold-<first>. It sorts right after segment last
// and before segment last+1, so a listing that misses a folded segment
// (deleted after the fold was written) lists the fold.
func FoldKey(name string, epoch, first, last uint64) string {
	return LogVersionPrefix(name, epoch) + FormatNumber(last) + foldMark + FormatNumber(first)
}

// ParseSegmentKey splits "<name>/<epoch>/<seq>" (a segment: first ==
// last == seq) or "<name>/<epoch>/<last>.fold-<first>" (a fold, first <
// last).
func ParseSegmentKey(key string) (name string, epoch, first, last uint64, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || KindOf(parts[0]) != KindLog {
		return "", 0, 0, 0, false
	}
	e, ok1 := ParseNumber(parts[1])
	l, f, isFold := strings.Cut(parts[2], foldMark)
	last, ok2 := ParseNumber(l)
	first = last
	ok3 := true
	if isFold {
		first, ok3 = ParseNumber(f)
		ok3 = ok3 && first < last
	}
	if !ok1 || !ok2 || !ok3 {
		return "", 0, 0, 0, false
	}
	return parts[0], e, first, last, true
}

// TrashKey is the trash marker of version epoch of file name:
// _shale/trash/<name>/<epoch>.
func TrashKey(name string, epoch uint64) string {
	return TrashPrefix + name + "/" + FormatNumber(epoch)
}

// ParseTrashKey splits "_shale/trash/<name>/<epoch>".
func ParseTrashKey(key string) (name string, epoch uint64, ok bool) {
	rest, found := strings.CutPrefix(key, TrashPrefix)
	if !found {
		return "", 0, false
	}
	name, e, found := strings.Cut(rest, "/")
	if !found {
		return "", 0, false
	}
	epoch, ok = ParseNumber(e)
	return name, epoch, ok
}

// ReaderLeaseKey is the lease of the reader id: _shale/readers/<id>.
func ReaderLeaseKey(id string) string { return ReadersPrefix + id }

// ParseReaderLeaseKey returns the reader of a lease's key.
func ParseReaderLeaseKey(key string) (id string, ok bool) {
	id, ok = strings.CutPrefix(key, ReadersPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// FileOfKey returns the RocksDB file an object key of the layout belongs
// to ("000012.sst", "000011.log", "CURRENT"), or "" for Shale's own
// objects (_shale/...) and keys that are not part of a database.
func FileOfKey(key string) string {
	if strings.HasPrefix(key, MetaPrefix) {
		return ""
	}
	if name, _, _, _, ok := ParseSegmentKey(key); ok {
		return name
	}
	if name, _, ok := ParseObjectKey(key); ok {
		return name
	}
	if key == CurrentKey {
		return key
	}
	return ""
}

// Remote compaction (docs/compaction.md). A worker writes the outputs of
// one attempt of a job under
//
//	_shale/compactions/<job>/<attempt>/<table>
//
// where <job> is "<20-digit epoch of the owner that submitted it>-<nonce>"
// and attempts count from 1.

// JobID names a job the owner of epoch submits; nonce makes it unique.
func JobID(epoch uint64, nonce string) string { return FormatNumber(epoch) + "-" + nonce }

// ParseJobID splits a job's name into the epoch of the owner that
// submitted it and its nonce (no "/" or ".": a name, not a path or a
// table).
func ParseJobID(job string) (epoch uint64, nonce string, ok bool) {
	e, rest, found := strings.Cut(job, "-")
	if !found || rest == "" || strings.ContainsAny(rest, "/.") {
		return 0, "", false
	}
	epoch, ok = ParseNumber(e)
	if !ok {
		return 0, "", false
	}
	return epoch, rest, true
}

// JobEpoch is the epoch of the owner that submitted a job.
func JobEpoch(job string) (uint64, bool) {
	e, _, ok := ParseJobID(job)
	return e, ok
}

// JobPrefix is the directory of every attempt of a job.
func JobPrefix(job string) string { return CompactionsPrefix + job + "/" }

// JobOfKey is the job a key under CompactionsPrefix belongs to (its first
// element; "" for a key elsewhere). It may not be a job's name: check it
// with ParseJobID.
func JobOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, CompactionsPrefix)
	if !ok {
		return ""
	}
	job, _, _ := strings.Cut(rest, "/")
	return job
}

// JobDir is the key prefix (with a trailing slash) of one attempt's
// outputs, relative to the database's root.
func JobDir(job string, attempt uint32) string {
	return JobPrefix(job) + strconv.FormatUint(uint64(attempt), 10) + "/"
}

// JobOutputKey is the key of one output of an attempt.
func JobOutputKey(job string, attempt uint32, name string) string {
	return path.Join(JobDir(job, attempt), name)
}

// ParseJobOutputKey splits "_shale/compactions/<job>/<attempt>/<table>".
func ParseJobOutputKey(key string) (job string, attempt uint32, name string, ok bool) {
	rest, found := strings.CutPrefix(key, CompactionsPrefix)
	if !found {
		return "", 0, "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || KindOf(parts[2]) != KindTable {
		return "", 0, "", false
	}
	if _, ok := JobEpoch(parts[0]); !ok {
		return "", 0, "", false
	}
	a, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil || a == 0 {
		return "", 0, "", false
	}
	return parts[0], uint32(a), parts[2], true
}
