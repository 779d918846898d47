package layout

import "strings"

// Kind says how a RocksDB file is kept in the object store, which decides
// its keys.
type Kind int

const (
	// KindLocal files never leave the machine: LOCK, LOG*, *.dbtmp, ...
	KindLocal Kind = iota
	// KindLog files (WAL *.log, MANIFEST-*, and Shale's own CATALOG,
	// which RocksDB never sees) are append-only segment logs (SegmentKey,
	// FoldKey).
	KindLog
	// KindTable files (*.sst, *.blob) are one immutable object, uploaded on
	// close (ObjectKey).
	KindTable
	// KindObject files (IDENTITY, OPTIONS-*) are whole objects, written when
	// RocksDB renames them into place (ObjectKey).
	KindObject
	// KindCurrent is CURRENT, replaced with If-Match (CurrentKey).
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
	case strings.HasPrefix(name, "MANIFEST-"), strings.HasSuffix(name, ".log") && isNumber(strings.TrimSuffix(name, ".log")), name == CatalogLog:
		return KindLog
	case strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob"):
		return KindTable
	}
	return KindLocal
}
