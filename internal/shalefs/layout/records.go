package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The records Shale stores under its keys. Each is JSON, written with
// Format and read with its Parse; a Parse decodes and returns the JSON
// error, and leaves judging the content (an epoch that does not match its
// key, a missing id) to the caller, which knows what to refuse. On an
// error the record holds what did decode (json.Unmarshal's rule), which
// some readers use as a best effort.
//
// The field names are the stored format: a rename makes every existing
// store unreadable (TestRecordFormats pins them).

// format is a record's stored bytes.
func format(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only unsupported types fail, and records hold none.
		panic(fmt.Sprintf("layout: encode %T: %v", v, err))
	}
	return b
}

func parse[T any](b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// EpochClaim is _shale/epoch/<E>: owner E claimed the database, created
// with If-None-Match.
type EpochClaim struct {
	Epoch   uint64    `json:"epoch"`
	TakenAt time.Time `json:"takenAt"`
	Owner   string    `json:"owner,omitempty"`
	Nonce   string    `json:"nonce"` // tells our claim from another's
	// The read lease this owner serves under: its successor waits it out.
	Lease       time.Duration `json:"leaseNanos"`
	LeaseMargin time.Duration `json:"leaseMarginNanos"`
	// How stale this owner's confirmation may be when it acknowledges a
	// synced write: its logs' seals may go 3×AckFresh after their trash.
	AckFresh time.Duration `json:"ackFreshNanos,omitempty"`
	// How many WAL segment uploads this owner keeps in flight (omitted: 1).
	// A sealer reads it: holes in the last slots of this owner's logs are
	// uploads it had in flight (docs/rfcs/0013-pipelined-writes.md).
	WALPipelineDepth int `json:"walPipelineDepth,omitempty"`
}

// Format is the claim's stored bytes.
func (c EpochClaim) Format() []byte { return format(c) }

// ParseEpochClaim reads a claim.
func ParseEpochClaim(b []byte) (EpochClaim, error) { return parse[EpochClaim](b) }

// OwnerEpochRecord is the owner record, _shale/owner: the highest epoch
// that completed its claim. It makes confirming ownership one GET of one
// small object instead of a LIST of every claim (docs/fencing.md,
// "Confirming ownership"); it only ever goes up (If-Match). The claims
// stay the arbiter of who owns which epoch; the record only announces
// them.
type OwnerEpochRecord struct {
	Epoch uint64 `json:"epoch"`
}

// Format is the record's stored bytes.
func (r OwnerEpochRecord) Format() []byte { return format(r) }

// ParseOwnerEpochRecord reads the owner record.
func ParseOwnerEpochRecord(b []byte) (OwnerEpochRecord, error) { return parse[OwnerEpochRecord](b) }

// VersionRef names one epoch's version of a file.
type VersionRef struct {
	Name  string `json:"name"`
	Epoch uint64 `json:"epoch"`
}

// OpenedRecord is _shale/opened/<E>: written by owner E once it sealed the
// store and before it opened RocksDB (so before it created any log). It
// names the log versions of older epochs that E's database is made of.
type OpenedRecord struct {
	Epoch uint64       `json:"epoch"`
	Logs  []VersionRef `json:"logs"`
}

// Format is the record's stored bytes.
func (r OpenedRecord) Format() []byte { return format(r) }

// ParseOpenedRecord reads an opened record.
func ParseOpenedRecord(b []byte) (OpenedRecord, error) { return parse[OpenedRecord](b) }

// TrashMarker is _shale/trash/<name>/<epoch>: that version of the file
// was deleted by the owner Epoch and goes after the delete grace.
type TrashMarker struct {
	DeletedAt time.Time `json:"deletedAt"`
	Epoch     uint64    `json:"deletedByEpoch"`
}

// Format is the marker's stored bytes.
func (m TrashMarker) Format() []byte { return format(m) }

// ParseTrashMarker reads a trash marker.
func ParseTrashMarker(b []byte) (TrashMarker, error) { return parse[TrashMarker](b) }

// ReaderLease is _shale/readers/<id>: the file versions a reader's view
// uses, renewed at least every TTL/3; the owner deletes none of them
// while the lease keeps changing.
type ReaderLease struct {
	ID      string        `json:"id"`
	TTL     time.Duration `json:"ttlNanos"`
	Renewal string        `json:"renewal"` // changes at every renewal
	Files   []VersionRef  `json:"files"`
}

// Format is the lease's stored bytes.
func (l ReaderLease) Format() []byte { return format(l) }

// ParseReaderLease reads a reader lease.
func ParseReaderLease(b []byte) (ReaderLease, error) { return parse[ReaderLease](b) }

// TierRecord is _shale/tiers in the hot store: the database's cold tier,
// created once with If-None-Match and never changed.
type TierRecord struct {
	ID        string    `json:"id"`
	Cold      string    `json:"cold"` // the cold store's URL when recorded (a hint)
	CreatedAt time.Time `json:"createdAt"`
}

// Format is the record's stored bytes.
func (r TierRecord) Format() []byte { return format(r) }

// ParseTierRecord reads a tier record.
func ParseTierRecord(b []byte) (TierRecord, error) { return parse[TierRecord](b) }

// ColdMarker is _shale/tier in the cold store: whose cold tier the
// location is (the ID of its TierRecord).
type ColdMarker struct {
	ID        string    `json:"id"`
	Hot       string    `json:"hot"` // the hot store's URL when recorded (a hint)
	CreatedAt time.Time `json:"createdAt"`
}

// Format is the marker's stored bytes.
func (m ColdMarker) Format() []byte { return format(m) }

// ParseColdMarker reads a cold marker.
func ParseColdMarker(b []byte) (ColdMarker, error) { return parse[ColdMarker](b) }

// TiersPaired is _shale/tiers-paired in the hot store, written once the
// cold marker exists: a cold location without the marker is then a moved
// or emptied cold tier. Only its existence counts.
type TiersPaired struct {
	PairedAt time.Time `json:"pairedAt"`
}

// Format is the record's stored bytes.
func (p TiersPaired) Format() []byte { return format(p) }

// ParseTiersPaired reads the pairing note.
func ParseTiersPaired(b []byte) (TiersPaired, error) { return parse[TiersPaired](b) }

// FormatReleased is the content of _shale/released/<E>: when owner E
// released the database (only its existence counts).
func FormatReleased(at time.Time) []byte { return []byte(at.UTC().Format(time.RFC3339Nano)) }

// ParseReleased reads when a release was written.
func ParseReleased(b []byte) (time.Time, error) { return time.Parse(time.RFC3339Nano, string(b)) }

// CURRENT is stored as RocksDB's content ("MANIFEST-000005\n") and a
// trailer line unique to each write, "shale epoch=<E> write=<nonce>\n".
// S3 etags are content hashes, so without the trailer a rewrite of the
// same content would keep its etag, and a stale owner's If-Match would
// pass; the epoch tells an owner whose CURRENT it finds.

// CurrentObject is the stored CURRENT for RocksDB's content, written by
// the owner of epoch; nonce makes the write unique.
func CurrentObject(content []byte, epoch uint64, nonce string) []byte {
	return fmt.Appendf(append([]byte{}, content...), "shale epoch=%d write=%s\n", epoch, nonce)
}

// CurrentContent strips the trailer: RocksDB's CURRENT is the first line.
func CurrentContent(obj []byte) []byte {
	if i := bytes.IndexByte(obj, '\n'); i >= 0 {
		return obj[:i+1]
	}
	return obj
}

// CurrentEpoch reads the epoch from the trailer of a stored CURRENT; 0 if
// there is none.
func CurrentEpoch(obj []byte) uint64 {
	_, trailer, ok := bytes.Cut(obj, []byte("\nshale epoch="))
	if !ok {
		return 0
	}
	digits, _, _ := bytes.Cut(trailer, []byte(" "))
	e, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return 0
	}
	return e
}
