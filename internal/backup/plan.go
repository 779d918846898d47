// Package backup copies a database's checkpoints to a second object store
// and restores them, archives its logs continuously and restores it to a
// point in time (docs/rfcs/0011-backups-and-point-in-time-restore.md,
// steps 1-26; user guide: docs/backup.md).
//
// Everything of one database lives under <backup location>/<database id>/:
//
//	database.json            which database this is (its first claim's digest)
//	objects/<source key>     copies of the source's immutable objects
//	pending/<id>.json        a running or interrupted backup (create-only, first)
//	backups/<id>.json        a published backup's manifest (create-only, last)
//	deleting/<id>.json       a delete in progress
//	archive/<source key>     the continuous archive of the logs (archive.go)
//	archive/index/<E>/<pass> what each archiver pass copied, with store times
//
// This file holds the keys, the records and the pure decisions (what to
// copy, what a delete may remove, whose backup location this is); the
// rest do the I/O.
package backup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Keys in a backup location.
const (
	DatabaseKey     = "database.json"
	ObjectsPrefix   = "objects/"
	BackupsPrefix   = "backups/"
	PendingPrefix   = "pending/"
	DeletingPrefix  = "deleting/"
	recordExtension = ".json"
	// RestoreKey, in a restored database's directory, says which backup
	// is being restored there (written first, so a rerun may go on).
	RestoreKey = layout.MetaPrefix + "restore"
)

// ObjectKey is where the copy of source key src lives.
func ObjectKey(src string) string { return ObjectsPrefix + src }

// ManifestKey is backup id's manifest: written last, it publishes the backup.
func ManifestKey(id string) string { return BackupsPrefix + id + recordExtension }

// PendingKey is backup id's record while it runs.
func PendingKey(id string) string { return PendingPrefix + id + recordExtension }

// DeletingKey is the marker of a delete of backup id.
func DeletingKey(id string) string { return DeletingPrefix + id + recordExtension }

// IDOfKey is the backup id of a key under prefix ("" for another key).
func IDOfKey(prefix, key string) string {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, recordExtension)
	if !ok || ValidID(id) != nil {
		return ""
	}
	return id
}

// PinID is the id of the pin a backup holds in the source while it
// copies: _shale/pins/backup-<id> (RFC 0010's pin record).
func PinID(id string) string { return "backup-" + id }

var idPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,54}[a-z0-9])?$`)

// ValidID refuses a backup id that is not 1-56 lower-case letters, digits
// or '-', starting and ending with a letter or digit (with "backup-" it
// is a pin id, and a checkpoint name).
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("backup id %q is not valid: use 1-56 lower-case letters, digits or '-', starting and ending with a letter or digit", id)
	}
	return nil
}

// NewID is a backup id for now: b<UTC date>-<time>.
func NewID(now time.Time) string { return "b" + now.UTC().Format("20060102-150405") }

// Object is one object a backup names: its source key, size and SHA-256.
type Object struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// CheckpointRef says which checkpoint a backup copied.
type CheckpointRef struct {
	Name      string    `json:"name"`
	ID        string    `json:"id"`
	Sequence  uint64    `json:"sequence"`
	CreatedAt time.Time `json:"createdAt"`
}

// Manifest is backups/<id>.json: a published backup.
type Manifest struct {
	ID          string        `json:"id"`
	Database    string        `json:"database"`
	Source      string        `json:"source"`
	Checkpoint  CheckpointRef `json:"checkpoint"`
	Current     string        `json:"current"`  // CURRENT's content: "MANIFEST-<n>\n"
	Manifest    string        `json:"manifest"` // the source key of the frozen MANIFEST copy
	StartedAt   time.Time     `json:"startedAt"`
	CompletedAt time.Time     `json:"completedAt"`
	Objects     []Object      `json:"objects"`
	Bytes       int64         `json:"bytes"`
	// What this backup copied (the rest was in the backup store already);
	// Streamed is what of it passed through the process.
	CopiedObjects int   `json:"copiedObjects"`
	CopiedBytes   int64 `json:"copiedBytes"`
	Streamed      int64 `json:"streamed"`
	// SourceKeys: the live keys of the source's checkpoint at S, counted
	// through a checkpoint reader while the pin held it (create
	// --count-source-keys, RFC 0011 step 14a); nil: not counted (and
	// manifests written before it). Verify compares the copy's with it.
	SourceKeys *uint64 `json:"sourceKeys,omitempty"`
}

// Pending is pending/<id>.json: a backup that started and has not been
// published (running, or interrupted: rerun it with the same id, or
// delete it).
type Pending struct {
	ID                string    `json:"id"`
	Source            string    `json:"source"`
	Checkpoint        string    `json:"checkpoint"`
	CheckpointID      string    `json:"checkpointID"`
	CreatedCheckpoint bool      `json:"createdCheckpoint,omitempty"`
	Pin               string    `json:"pin"` // its key in the source
	StartedAt         time.Time `json:"startedAt"`
	Keys              []string  `json:"keys"` // every source key it will name
}

// SameRun: two pending records are one backup's (a rerun finds its own).
func (p Pending) SameRun(o Pending) bool {
	return p.ID == o.ID && p.Source == o.Source && p.CheckpointID == o.CheckpointID
}

// Deleting is deleting/<id>.json: the keys a delete of backup id may
// remove (those no other manifest or pending record names).
type Deleting struct {
	ID        string    `json:"id"`
	Keys      []string  `json:"keys"`
	StartedAt time.Time `json:"startedAt"`
}

// Database is database.json: whose backups these are.
type Database struct {
	Database string `json:"database"`
	Source   string `json:"source"`
	// Identity is the SHA-256 of the source's lowest epoch claim, which
	// is never deleted: another database (a restored copy, a new one at
	// the same path) has another.
	Identity  string    `json:"identity"`
	CreatedAt time.Time `json:"createdAt"`
}

// RestoreRecord is _shale/restore in a restored database's directory.
type RestoreRecord struct {
	Backup    string    `json:"backup"`
	Database  string    `json:"database"`
	StartedAt time.Time `json:"startedAt"`
	// Target: a point-in-time restore's target (RFC 0011 step 26).
	Target string `json:"target,omitempty"`
}

// Format is a record's stored bytes.
func Format(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types, which always marshal
	}
	return append(b, '\n')
}

// Parse reads a record, refusing unknown fields and trailing data.
func Parse[T any](key string, b []byte) (T, error) {
	var v T
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return v, fmt.Errorf("%s is unreadable: %w", key, err)
	}
	return v, nil
}

// CheckIdentity decides whether a backup of a database with identity
// got may go into a location whose database.json is have (nil: none yet).
func CheckIdentity(have *Database, database, source, got string) error {
	if have == nil || have.Identity == got {
		return nil
	}
	return fmt.Errorf("backup location %q holds backups of another database (%s, identity %.12s...); %s has identity %.12s...: "+
		"epoch-keyed objects of two databases would collide there. Back it up under another --database id", database, have.Source, have.Identity, source, got)
}

// Step is what a backup does with one object.
type Step int

const (
	// Copy: not in the backup store yet.
	Copy Step = iota
	// Skip: there, with the size and SHA-256 a manifest recorded.
	Skip
	// Hash: there with the right size but in no manifest (an interrupted
	// run copied it): read it once to learn its SHA-256.
	Hash
)

func (s Step) String() string { return [...]string{"copy", "skip", "hash"}[s] }

// PlanCopy decides, for each object the checkpoint names (want: source
// key to size), what to do. present is what the backup store's objects/
// holds (source key to size); known the SHA-256 manifests record for a
// key and size. A key present with another size is not the same object:
// source keys are immutable, so the backup location holds another
// database's object or damage, and the backup refuses.
func PlanCopy(want map[string]int64, present map[string]int64, known map[string]Object) (map[string]Step, error) {
	out := make(map[string]Step, len(want))
	for _, key := range slices.Sorted(maps.Keys(want)) {
		size := want[key]
		have, ok := present[key]
		switch {
		case !ok:
			out[key] = Copy
		case have != size:
			return nil, fmt.Errorf("%s%s in the backup store is %d bytes, the source's %d: an object key names one immutable object, so this one is damaged or another database's; delete it or use another --database id", ObjectsPrefix, key, have, size)
		default:
			out[key] = Hash
			if o, ok := known[key]; ok && o.Size == size && o.SHA256 != "" {
				out[key] = Skip
			}
		}
	}
	return out, nil
}

// KnownSums indexes the SHA-256 of every object the manifests name.
// Two manifests naming one key with different sums (damage, or a store
// shared by two databases) make it unknown, so it is read again.
func KnownSums(ms []Manifest) map[string]Object {
	out := map[string]Object{}
	bad := map[string]bool{}
	for _, m := range ms {
		for _, o := range m.Objects {
			if prev, ok := out[o.Key]; ok && prev != o {
				bad[o.Key] = true
			}
			out[o.Key] = o
		}
	}
	for k := range bad {
		delete(out, k)
	}
	return out
}

// Unreferenced is what a delete of one backup may remove: its keys that
// no other manifest or pending record names (RFC 0011 step 13). Pending
// records keep their keys: a backup that listed no delete marker may be
// about to name an object it found present.
func Unreferenced(keys []string, others []Manifest, pending []Pending) []string {
	kept := map[string]bool{}
	for _, m := range others {
		for _, o := range m.Objects {
			kept[o.Key] = true
		}
	}
	for _, p := range pending {
		for _, k := range p.Keys {
			kept[k] = true
		}
	}
	var out []string
	for _, k := range keys {
		if !kept[k] && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// RestoredKey is where a backed-up source key goes in a restored
// database: a table as its epoch-0 version (the restored database owns
// it), the frozen MANIFEST as segment 1 of its epoch-0 log. Other objects
// (IDENTITY, OPTIONS, the checkpoint's record) are not restored: RocksDB
// writes its own IDENTITY and OPTIONS, as a clone's first owner does.
func RestoredKey(src, manifestKey string) (string, bool) {
	if src == manifestKey {
		_, name, ok := strings.Cut(strings.TrimPrefix(src, layout.CheckpointsPrefix), "/")
		if !ok {
			return "", false
		}
		return layout.SegmentKey(name, 0, 1), true
	}
	name, _, ok := layout.ParseObjectKey(src)
	if !ok || layout.KindOf(name) != layout.KindTable {
		return "", false
	}
	return layout.ObjectKey(name, 0), true
}

// Policy is a retention policy: keep the newest KeepLast backups and
// every one completed within KeepWithin (either or both; a backup either
// keeps is kept).
type Policy struct {
	KeepLast   int
	KeepWithin time.Duration
}

// Expired returns the ids of the published backups the policy lets go,
// oldest first (RFC 0011 step 16). The newest backup is always kept, and
// a policy that keeps nothing by count or age (both zero) lets nothing
// go: an empty policy is a mistake, not "delete everything".
func Expired(ms []Manifest, now time.Time, p Policy) []string {
	if p.KeepLast <= 0 && p.KeepWithin <= 0 {
		return nil
	}
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b Manifest) int { return b.CompletedAt.Compare(a.CompletedAt) }) // newest first
	var out []string
	for i, m := range sorted {
		keep := i == 0 ||
			(p.KeepLast > 0 && i < p.KeepLast) ||
			(p.KeepWithin > 0 && now.Sub(m.CompletedAt) <= p.KeepWithin)
		if !keep {
			out = append(out, m.ID)
		}
	}
	slices.Reverse(out)
	return out
}

// Stored is an object of the backup store as a listing shows it.
type Stored struct {
	Key     string // its source key (without objects/)
	ModTime time.Time
}

// Orphans is what the sweep may remove (RFC 0011 step 17): objects no
// manifest or pending record names, stored longer than grace ago (a
// backup that has not yet written its pending record names nothing; the
// grace outlasts any backup's start). They are left by a delete
// interrupted between its steps, or written by hand.
func Orphans(objects []Stored, ms []Manifest, pending []Pending, now time.Time, grace time.Duration) []string {
	var old []string
	for _, o := range objects {
		if now.Sub(o.ModTime) >= grace {
			old = append(old, o.Key)
		}
	}
	return Unreferenced(old, ms, pending)
}
