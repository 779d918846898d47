package layout

import (
	"errors"
	"fmt"
	"strings"
)

// Clones (docs/rfcs/0010-checkpoints-and-clones.md, steps 16-20). A clone
// is a database whose first MANIFEST is a checkpoint's frozen copy and
// whose tables, until it compacts them away, are objects of other
// databases (its origins): its parent's, or those the parent itself reads
// from its own origins. Two records tie them together:
//
//	_shale/origin            (in the clone) where every origin table lives
//	_shale/pins/<clone id>   (in every origin) the versions the clone reads
//	                         there, which that database's trash keeps
//
// and a third stops new clones of a directory being deleted:
//
//	_shale/deleting          (written by a reclaim or the GC)
//
// All three are created once (If-None-Match) and never rewritten; a pin is
// deleted once, by the clone, when no origin table is live in it any more,
// after the clone wrote
//
//	_shale/detached          (in the clone) its origin tables are gone for
//	                         good: no listing adds them any more

// OriginKey is the clone's origin record.
const OriginKey = MetaPrefix + "origin"

// DetachedKey (in a clone) says the clone released its pins: no origin
// table is in its listing any more (docs/rfcs/0010, step 18).
const DetachedKey = MetaPrefix + "detached"

// DeletingKey marks a directory being deleted.
const DeletingKey = MetaPrefix + "deleting"

// PinsPrefix holds the pins of the clones reading this database's tables.
const PinsPrefix = MetaPrefix + "pins/"

// PinKey is the pin of clone id: _shale/pins/<id>.
func PinKey(cloneID string) string { return PinsPrefix + cloneID }

// ParsePinKey returns the clone id of a pin's key.
func ParsePinKey(key string) (string, bool) {
	id, ok := strings.CutPrefix(key, PinsPrefix)
	if !ok || ValidCloneID(id) != nil {
		return "", false
	}
	return id, true
}

// ValidCloneID refuses an id that is not 1-63 lower-case letters, digits
// or '-', starting and ending with a letter or digit (a Kubernetes UID is
// one).
func ValidCloneID(id string) error {
	if !checkpointName.MatchString(id) {
		return fmt.Errorf("clone id %q is not valid: use 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit (the operator passes the RocksDB's UID)", id)
	}
	return nil
}

// Origin is one database a clone reads tables from.
type Origin struct {
	URL     string `json:"url"`
	ColdURL string `json:"coldURL,omitempty"` // its cold tier, when a table lives there
	Pin     string `json:"pin"`               // the key of the clone's pin there
}

// OriginFile is one table of a clone that lives at an origin: Origin is
// an index into OriginRecord.Origins, Epoch the version's epoch there.
type OriginFile struct {
	Name   string `json:"name"`
	Origin int    `json:"origin"`
	Epoch  uint64 `json:"epoch"`
	Size   int64  `json:"size"`
	Tier   string `json:"tier,omitempty"` // "" or "hot"; "cold": the origin's cold tier
}

// OriginRecord is _shale/origin, written first by a clone's bootstrap.
// Parent, Checkpoint and CheckpointID say which state the clone starts
// from; Manifest and Current are the frozen MANIFEST the bootstrap copies.
type OriginRecord struct {
	CloneID      string             `json:"cloneID"`
	Parent       string             `json:"parent"`
	Checkpoint   string             `json:"checkpoint"`
	CheckpointID string             `json:"checkpointID"`
	Sequence     uint64             `json:"sequence"`
	Current      string             `json:"current"`
	Manifest     CheckpointManifest `json:"manifest"`
	Origins      []Origin           `json:"origins"`
	Files        []OriginFile       `json:"files"`
}

// Format is the record's stored bytes.
func (r OriginRecord) Format() []byte { return format(r) }

// ParseOriginRecord reads an origin record and checks it (Validate).
func ParseOriginRecord(b []byte) (OriginRecord, error) {
	r, err := parse[OriginRecord](b)
	if err != nil {
		return r, fmt.Errorf("%s is unreadable: %w", OriginKey, err)
	}
	return r, r.Validate()
}

// Validate refuses a record a clone could not be read from, naming the
// problem.
func (r OriginRecord) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{OriginKey}, args...)...)
	}
	if err := ValidCloneID(r.CloneID); err != nil {
		return bad("%v", err)
	}
	if r.Parent == "" || r.CheckpointID == "" {
		return bad("no parent or checkpoint id")
	}
	if err := ValidCheckpointName(r.Checkpoint); err != nil {
		return bad("%v", err)
	}
	if !isManifest(r.Manifest.Name) || r.Manifest.Size <= 0 || strings.TrimSpace(r.Current) != r.Manifest.Name {
		return bad("manifest %q (%d bytes) and current %q do not agree", r.Manifest.Name, r.Manifest.Size, strings.TrimSpace(r.Current))
	}
	if len(r.Origins) == 0 {
		return bad("no origin")
	}
	seen := map[string]bool{}
	for i, o := range r.Origins {
		if o.URL == "" || seen[o.URL] {
			return bad("origin %d: empty or repeated URL %q", i, o.URL)
		}
		seen[o.URL] = true
		if o.Pin != PinKey(r.CloneID) {
			return bad("origin %s: pin %q, want %q", o.URL, o.Pin, PinKey(r.CloneID))
		}
	}
	names := map[string]bool{}
	for _, f := range r.Files {
		switch {
		case KindOf(f.Name) != KindTable:
			return bad("file %q is not a table", f.Name)
		case names[f.Name]:
			return bad("table %s is named twice", f.Name)
		case f.Origin < 0 || f.Origin >= len(r.Origins):
			return bad("table %s: origin %d of %d", f.Name, f.Origin, len(r.Origins))
		case f.Size < 0:
			return bad("table %s: size %d", f.Name, f.Size)
		case f.Tier != "" && f.Tier != "hot" && f.Tier != "cold":
			return bad("table %s: tier %q (want hot or cold)", f.Name, f.Tier)
		case f.Tier == "cold" && r.Origins[f.Origin].ColdURL == "":
			return bad("table %s is cold at %s, which names no cold tier", f.Name, r.Origins[f.Origin].URL)
		}
		names[f.Name] = true
	}
	return nil
}

// SameClone reports whether two origin records describe the same
// bootstrap (a retry finds its own record): same clone, parent and
// checkpoint.
func (r OriginRecord) SameClone(o OriginRecord) bool {
	return r.CloneID == o.CloneID && r.Parent == o.Parent && r.CheckpointID == o.CheckpointID
}

// PinRecord is _shale/pins/<clone id> in an origin: the versions of this
// database the clone reads (none for a pin kept only so a clone of the
// clone can verify it: step 19).
type PinRecord struct {
	Clone      string       `json:"clone"` // the clone's URL (a hint)
	CloneID    string       `json:"cloneID"`
	Checkpoint string       `json:"checkpoint"`
	Files      []VersionRef `json:"files"`
}

// Format is the pin's stored bytes.
func (p PinRecord) Format() []byte { return format(p) }

// ParsePin reads the pin stored under key and checks it: its id matches
// the key and every file is a table. An unreadable pin is an error the
// trash loop stops on (it cannot tell what the pin keeps).
func ParsePin(key string, b []byte) (PinRecord, error) {
	p, err := parse[PinRecord](b)
	if err != nil {
		return p, fmt.Errorf("pin %s is unreadable: %w", key, err)
	}
	id, ok := ParsePinKey(key)
	if !ok || id != p.CloneID {
		return p, fmt.Errorf("pin %s names clone %q: a pin's key is %s<clone id>", key, p.CloneID, PinsPrefix)
	}
	for _, f := range p.Files {
		if KindOf(f.Name) != KindTable {
			return p, fmt.Errorf("pin %s names %q, which is not a table", key, f.Name)
		}
	}
	return p, nil
}

// ErrForeignOrigin: a clone directory already holds another bootstrap's
// origin record.
var ErrForeignOrigin = errors.New("the directory holds another clone's origin record")

func isManifest(name string) bool {
	return strings.HasPrefix(name, "MANIFEST-") && !strings.ContainsAny(name, "/\n")
}

// CopyKey (in a clone copied from a parent in another store: RFC 0010
// step 20) is written first by its bootstrap, instead of OriginKey: it
// claims the directory and says what is copied from where. A copied clone
// owns its tables: nothing reads this record after CURRENT but the
// operator (what was copied) and a rerun of the bootstrap.
const CopyKey = MetaPrefix + "copy"

// CopyRecord is _shale/copy: the origin record the clone would have had
// (where every table of the checkpoint lives), whose tables and MANIFEST
// copy are copied into the clone's directory (CopyObjects) instead of
// read where they live.
type CopyRecord struct {
	OriginRecord
	Copy bool `json:"copy"` // always true: tells it from an origin record
}

// Format is the record's stored bytes.
func (r CopyRecord) Format() []byte { return format(r) }

// ParseCopyRecord reads a copy record and checks it.
func ParseCopyRecord(b []byte) (CopyRecord, error) {
	r, err := parse[CopyRecord](b)
	if err != nil {
		return r, fmt.Errorf("%s is unreadable: %w", CopyKey, err)
	}
	if !r.Copy {
		return r, fmt.Errorf("%s is not a copy record", CopyKey)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%s: %w", CopyKey, err)
	}
	return r, nil
}

// CopyObject is one object a copied clone's bootstrap copies: Key of
// origin Origin (its cold tier when Cold) to To in the clone's directory.
type CopyObject struct {
	Origin int
	Cold   bool
	Key    string
	To     string
	Size   int64
}

// CopyObjects is everything a copied clone copies: the frozen MANIFEST
// first (the checkpoint's copy in the parent, to the epoch-0 log's segment
// 1), then every table, to <name>.<0> of the clone's hot tier.
func (r CopyRecord) CopyObjects() []CopyObject {
	out := []CopyObject{{Origin: 0, Key: CheckpointManifestKey(r.CheckpointID, r.Manifest.Name), To: SegmentKey(r.Manifest.Name, 0, 1), Size: r.Manifest.Size}}
	for _, f := range r.Files {
		out = append(out, CopyObject{Origin: f.Origin, Cold: f.Tier == "cold", Key: ObjectKey(f.Name, f.Epoch), To: ObjectKey(f.Name, 0), Size: f.Size})
	}
	return out
}

// Totals are the objects and bytes a copied clone copies.
func (r CopyRecord) Totals() (objects int, bytes int64) {
	for _, o := range r.CopyObjects() {
		objects++
		bytes += o.Size
	}
	return objects, bytes
}
