package layout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md). The catalog is a
// log of Shale's own, CATALOG/<E>/<seq>, kept by the same machinery as a
// WAL (sealed by every takeover, admitted, folded and trashed) but never
// shown to RocksDB: segment 1 of each owner's version holds a snapshot of
// every live or pending checkpoint, later segments entries that create or
// delete one. Every entry is one line of JSON.
//
// Each checkpoint's files live under _shale/checkpoints/<id>/: the frozen
// MANIFEST copy (MANIFEST-<n>) and the record naming every table.

// CatalogLog is the catalog's log name (KindOf: a log).
const CatalogLog = "CATALOG"

// CheckpointsPrefix holds one directory per checkpoint id.
const CheckpointsPrefix = MetaPrefix + "checkpoints/"

// CheckpointDir is the directory of checkpoint id: _shale/checkpoints/<id>/.
func CheckpointDir(id string) string { return CheckpointsPrefix + id + "/" }

// CheckpointRecordKey is the record of checkpoint id.
func CheckpointRecordKey(id string) string { return CheckpointDir(id) + "record" }

// CheckpointManifestKey is the frozen MANIFEST copy of checkpoint id.
func CheckpointManifestKey(id, manifest string) string { return CheckpointDir(id) + manifest }

// CheckpointOfKey is the checkpoint id a key under CheckpointsPrefix
// belongs to ("" for a key elsewhere).
func CheckpointOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, CheckpointsPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// CheckpointID names a checkpoint created by the owner of epoch: the
// epoch first, so a sweep knows whose it is.
func CheckpointID(epoch uint64, nonce string) string { return FormatNumber(epoch) + "-" + nonce }

// CheckpointEpoch is the epoch of the owner that created checkpoint id.
func CheckpointEpoch(id string) (uint64, bool) {
	e, rest, found := strings.Cut(id, "-")
	if !found || rest == "" || strings.ContainsAny(rest, "/.") {
		return 0, false
	}
	return ParseNumber(e)
}

var checkpointName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidCheckpointName refuses a name that is not 1-63 lower-case letters,
// digits, '.', '_' or '-', starting and ending with a letter or digit (a
// Kubernetes-style name, so a Checkpoint resource can carry it).
func ValidCheckpointName(name string) error {
	if !checkpointName.MatchString(name) {
		return fmt.Errorf("checkpoint name %q is not valid: use 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// CheckpointFile is one file a checkpoint names. Location is empty for a
// file of this database; a clone's checkpoint names its origin's URL.
type CheckpointFile struct {
	Name     string `json:"name"`
	Epoch    uint64 `json:"epoch"`
	Size     int64  `json:"size"`
	Tier     string `json:"tier,omitempty"` // "" or "hot": the hot store; "cold"
	Location string `json:"location,omitempty"`
}

// CheckpointManifest is the frozen MANIFEST: its name, the bytes kept
// and their SHA-256 (Digest; empty in records written before it was
// added), which a checkpoint server checks.
type CheckpointManifest struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// Digest is the hex SHA-256 of b: how a catalog entry names its record's
// bytes, and a record its MANIFEST copy's, so that a checkpoint server
// refuses either if it changed in the store.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CheckpointRecord is _shale/checkpoints/<id>/record, written before the
// catalog entry that makes it a checkpoint.
type CheckpointRecord struct {
	Name      string             `json:"name"`
	ID        string             `json:"id"`
	Epoch     uint64             `json:"epoch"`
	RequestID string             `json:"requestID,omitempty"`
	CreatedAt time.Time          `json:"createdAt"`
	Expires   time.Time          `json:"expires,omitzero"`
	Sequence  uint64             `json:"sequence"`
	Current   string             `json:"current"` // CURRENT's content: "MANIFEST-<n>\n"
	Manifest  CheckpointManifest `json:"manifest"`
	Files     []CheckpointFile   `json:"files"`
}

// Format is the record's stored bytes.
func (r CheckpointRecord) Format() []byte { return format(r) }

// ParseCheckpointRecord reads a record.
func ParseCheckpointRecord(b []byte) (CheckpointRecord, error) {
	return parse[CheckpointRecord](b)
}

// Catalog operations.
const (
	CatalogSnapshot = "snapshot"
	CatalogCreate   = "create"
	CatalogDelete   = "delete"
)

// CatalogCheckpoint is what the catalog keeps of one checkpoint: enough to
// list it and to protect its files without reading its record.
type CatalogCheckpoint struct {
	Name      string       `json:"name"`
	ID        string       `json:"id"`
	RequestID string       `json:"requestID,omitempty"`
	CreatedAt time.Time    `json:"createdAt"`
	Expires   time.Time    `json:"expires,omitzero"`
	Sequence  uint64       `json:"sequence"`
	Bytes     int64        `json:"bytes"`
	Files     []VersionRef `json:"files"` // every version it protects
	// RecordSHA256 is the Digest of the record's bytes (empty in entries
	// written before it was added).
	RecordSHA256 string `json:"recordSHA256,omitempty"`
}

// CatalogEntry is one line of the catalog: a snapshot (segment 1 of an
// owner's version: every live checkpoint), a create or a delete (by name
// and id; Reason says why: "deleted" or "expired").
type CatalogEntry struct {
	Op          string              `json:"op"`
	Checkpoints []CatalogCheckpoint `json:"checkpoints,omitempty"` // snapshot
	Checkpoint  *CatalogCheckpoint  `json:"checkpoint,omitempty"`  // create
	Name        string              `json:"name,omitempty"`        // delete
	ID          string              `json:"id,omitempty"`          // delete
	Reason      string              `json:"reason,omitempty"`      // delete
	At          time.Time           `json:"at"`
}

// Format is the entry's stored bytes: one line.
func (e CatalogEntry) Format() []byte { return append(format(e), '\n') }

// ParseCatalog splits a catalog version's bytes into entries. Every entry
// is a whole line (each segment holds whole lines), so anything else is
// damage, and refused.
func ParseCatalog(b []byte) ([]CatalogEntry, error) {
	var out []CatalogEntry
	for n := 1; len(b) > 0; n++ {
		line, rest, found := bytes.Cut(b, []byte("\n"))
		if !found {
			return nil, fmt.Errorf("catalog entry %d is not a whole line", n)
		}
		var e CatalogEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("catalog entry %d: %w", n, err)
		}
		out = append(out, e)
		b = rest
	}
	return out, nil
}
