package shalefs

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// The object-store layout of a database, its keys and records and which
// RocksDB files it holds (KindOf), is package layout's.

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

func newNonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
