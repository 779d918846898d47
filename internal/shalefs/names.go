package shalefs

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Kind says how a RocksDB file is kept in the object store
// (docs/rfcs/0002-object-layout.md).
type Kind int

const (
	// KindLocal files never leave the machine: LOCK, LOG*, *.dbtmp, ...
	KindLocal Kind = iota
	// KindLog files (WAL *.log, MANIFEST-*) are append-only segment logs.
	KindLog
	// KindTable files (*.sst, *.blob) are one immutable object, uploaded on
	// close.
	KindTable
	// KindObject files (IDENTITY, OPTIONS-*) are whole objects, written when
	// RocksDB renames them into place.
	KindObject
	// KindCurrent is CURRENT, replaced with If-Match.
	KindCurrent
)

func (k Kind) String() string {
	return [...]string{"local", "log", "table", "object", "current"}[k]
}

// KindOf classifies a file name (no directory).
func KindOf(name string) Kind {
	switch {
	case name == "CURRENT":
		return KindCurrent
	case name == "IDENTITY", strings.HasPrefix(name, "OPTIONS-") && !strings.HasSuffix(name, ".dbtmp"):
		return KindObject
	case strings.HasPrefix(name, "MANIFEST-"), strings.HasSuffix(name, ".log") && isNumber(strings.TrimSuffix(name, ".log")):
		return KindLog
	case strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob"):
		return KindTable
	}
	return KindLocal
}

// FileType is the metrics label of a file: sst, wal, manifest or other.
func FileType(name string) string {
	switch {
	case strings.HasSuffix(name, ".sst"), strings.HasSuffix(name, ".blob"):
		return "sst"
	case strings.HasSuffix(name, ".log"):
		return "wal"
	case strings.HasPrefix(name, "MANIFEST-"):
		return "manifest"
	}
	return "other"
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

// Object-store layout of one database (keys relative to the DB's root):
//
//	CURRENT                           replaced with If-Match
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
//	_shale/trash/<name>/<epoch>       a deleted file awaiting physical delete
//	_shale/released/<epoch>           that owner shut down cleanly
//	_shale/opened/<epoch>             that owner completed its takeover:
//	                                  the log versions it kept
//
// Every file name carries its writer's epoch because a deposed owner that
// has not noticed yet may create a file with a name the new owner also
// allocates; the versions never collide, and the highest epoch's wins.
const (
	metaPrefix  = "_shale/"
	epochPrefix = "_shale/epoch/"
	trashPrefix = "_shale/trash/"
	// _shale/released/<epoch>: that owner stopped serving for good.
	releasedPrefix = "_shale/released/"
	// _shale/opened/<epoch>: that owner completed its takeover; the record
	// names the log versions of older epochs it kept.
	openedPrefix = "_shale/opened/"
	// _shale/owner: what an owner reads to confirm it still owns the
	// database (one GET instead of a LIST of the claims).
	ownerKey = "_shale/owner"
)

func openedKey(e uint64) string { return openedPrefix + pad(e) }

func releasedKey(e uint64) string { return releasedPrefix + pad(e) }

func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

func epochKey(e uint64) string { return epochPrefix + pad(e) }

func segmentPrefix(name string, epoch uint64) string { return name + "/" + pad(epoch) + "/" }

func segmentKey(name string, epoch, seq uint64) string { return segmentPrefix(name, epoch) + pad(seq) }

func objectKey(name string, epoch uint64) string { return name + "." + pad(epoch) }

// foldKey names the fold of segments first..last. It sorts right after
// segment last and before segment last+1, so a listing that misses a
// folded segment (deleted after the fold was written) lists the fold.
func foldKey(name string, epoch, first, last uint64) string {
	return segmentPrefix(name, epoch) + pad(last) + foldMark + pad(first)
}

const foldMark = ".fold-"

func trashKey(name string, epoch uint64) string { return trashPrefix + name + "/" + pad(epoch) }

// parseObjectKey splits "<name>.<epoch>" of a table or whole object.
func parseObjectKey(key string) (name string, epoch uint64, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 || strings.Contains(key, "/") {
		return "", 0, false
	}
	name = key[:i]
	if KindOf(name) != KindTable && KindOf(name) != KindObject {
		return "", 0, false
	}
	epoch, ok = parseEpochPart(key[i+1:])
	return name, epoch, ok
}

// legacyTableDir reports a top-level "<name>/" directory of a table or
// whole object: the layout of development builds before tables were flat.
func legacyTableDir(key string) bool {
	name, isDir := strings.CutSuffix(key, "/")
	return isDir && (KindOf(name) == KindTable || KindOf(name) == KindObject)
}

// parseTrashKey splits "_shale/trash/<name>/<epoch>".
func parseTrashKey(key string) (name string, epoch uint64, ok bool) {
	rest, found := strings.CutPrefix(key, trashPrefix)
	if !found {
		return "", 0, false
	}
	name, e, found := strings.Cut(rest, "/")
	if !found || len(e) != 20 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(e, 10, 64)
	return name, n, err == nil
}

// parseSegmentKey splits "<name>/<epoch>/<seq>" (a segment: first ==
// last == seq) or "<name>/<epoch>/<last>.fold-<first>" (a fold).
func parseSegmentKey(key string) (name string, epoch, first, last uint64, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || KindOf(parts[0]) != KindLog {
		return "", 0, 0, 0, false
	}
	e, ok1 := parseEpochPart(parts[1])
	l, f, isFold := strings.Cut(parts[2], foldMark)
	last, ok2 := parseEpochPart(l)
	first = last
	ok3 := true
	if isFold {
		first, ok3 = parseEpochPart(f)
		ok3 = ok3 && first < last
	}
	if !ok1 || !ok2 || !ok3 {
		return "", 0, 0, 0, false
	}
	return parts[0], e, first, last, true
}

// parseEpochPart parses a 20-digit number (an epoch or a sequence).
func parseEpochPart(s string) (uint64, bool) {
	if len(s) != 20 || !isNumber(s) {
		return 0, false
	}
	e, err := strconv.ParseUint(s, 10, 64)
	return e, err == nil
}

func parseEpochKey(key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, epochPrefix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	e, err := strconv.ParseUint(s, 10, 64)
	return e, err == nil
}

// FileOfKey returns the RocksDB file an object key of the layout above
// belongs to ("000012.sst", "000011.log", "CURRENT"), or "" for Shale's own
// objects (_shale/...) and keys that are not part of a database.
func FileOfKey(key string) string {
	if strings.HasPrefix(key, metaPrefix) {
		return ""
	}
	if name, _, _, _, ok := parseSegmentKey(key); ok {
		return name
	}
	if name, _, ok := parseObjectKey(key); ok {
		return name
	}
	if key == "CURRENT" {
		return key
	}
	return ""
}
