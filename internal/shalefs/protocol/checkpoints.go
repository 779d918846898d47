package protocol

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md). The catalog is a
// log every takeover seals, so what it holds is decided as a WAL's bytes
// are: an entry is a checkpoint's commit once it is in the version a later
// owner replays.

// ReplayCatalog reads the entries of one owner's catalog version: a
// snapshot first (segment 1, written by that owner at its open), then
// creates and deletes. It returns the live checkpoints by name. A version
// that does not start with a snapshot, a snapshot later on, or a create
// of a name already live with another id is damage: it is refused rather
// than guessed at, since a guess could drop a checkpoint someone was told
// was created.
func ReplayCatalog(entries []layout.CatalogEntry) (map[string]layout.CatalogCheckpoint, error) {
	live := map[string]layout.CatalogCheckpoint{}
	for i, e := range entries {
		switch {
		case e.Op == layout.CatalogSnapshot && i == 0:
			for _, c := range e.Checkpoints {
				if _, dup := live[c.Name]; dup || c.Name == "" || c.ID == "" {
					return nil, fmt.Errorf("catalog snapshot: checkpoint %q listed twice or without an id", c.Name)
				}
				live[c.Name] = c
			}
		case i == 0:
			return nil, fmt.Errorf("catalog does not start with a snapshot (found %q)", e.Op)
		case e.Op == layout.CatalogCreate:
			c := e.Checkpoint
			if c == nil || c.Name == "" || c.ID == "" {
				return nil, fmt.Errorf("catalog entry %d: a create without a checkpoint", i+1)
			}
			if old, ok := live[c.Name]; ok && old.ID != c.ID {
				return nil, fmt.Errorf("catalog entry %d: checkpoint %q created again with id %s (live: %s)", i+1, c.Name, c.ID, old.ID)
			}
			live[c.Name] = *c
		case e.Op == layout.CatalogDelete:
			// A delete of a checkpoint already gone (an expiry appended
			// twice, a retried delete) changes nothing.
			if old, ok := live[e.Name]; ok && old.ID == e.ID {
				delete(live, e.Name)
			}
		default:
			return nil, fmt.Errorf("catalog entry %d: unknown operation %q", i+1, e.Op)
		}
	}
	return live, nil
}

// SortedCheckpoints lists checkpoints by creation time, then name.
func SortedCheckpoints(live map[string]layout.CatalogCheckpoint) []layout.CatalogCheckpoint {
	out := make([]layout.CatalogCheckpoint, 0, len(live))
	for _, c := range live {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// CatalogProtects is the set of file versions the trash loop must keep:
// every version a live checkpoint names, and every version a pending one
// names (its create is being committed, or its outcome is unknown: it may
// be in the next owner's catalog). A checkpoint stops protecting only
// once its delete entry is stored, which removes it from live; an expired
// one protects until then.
func CatalogProtects(live map[string]layout.CatalogCheckpoint, pending []layout.CatalogCheckpoint) map[layout.VersionRef]bool {
	out := map[layout.VersionRef]bool{}
	for _, c := range live {
		for _, r := range c.Files {
			out[r] = true
		}
	}
	for _, c := range pending {
		for _, r := range c.Files {
			out[r] = true
		}
	}
	return out
}

// ExpiredCheckpoints are the live checkpoints whose expiry is at or before
// now (the owner's wall clock: a user's deadline, not a safety bound), by
// name.
func ExpiredCheckpoints(live map[string]layout.CatalogCheckpoint, now time.Time) []string {
	var out []string
	for name, c := range live {
		if !c.Expires.IsZero() && !now.Before(c.Expires) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// SweepCheckpointDir decides whether the sweep deletes the directory of
// checkpoint id: only if no live or pending checkpoint of the catalog
// names it, and it is an older owner's (whose create can never commit any
// more: this owner's catalog version is the only one appended to), or
// this owner's with no create in flight. A directory whose id does not
// parse is not Shale's to delete.
func SweepCheckpointDir(id string, named map[string]bool, ownEpoch uint64, inFlight bool) bool {
	e, ok := layout.CheckpointEpoch(id)
	if !ok || named[id] {
		return false
	}
	return e < ownEpoch || (e == ownEpoch && !inFlight)
}

// VerifyCheckpointRecord checks the record a checkpoint server is about
// to serve against the catalog entry that made it a checkpoint. The
// record is a separate object in the store: should it change after the
// commit (damage, or a hand with the store's credentials), a server that
// trusted it would serve another state under the checkpoint's name, or
// tables its lease does not name. The digest, when the entry has one,
// covers every byte (sizes, the MANIFEST copy's size and digest); entries
// written before it was added are checked field by field.
func VerifyCheckpointRecord(c layout.CatalogCheckpoint, raw []byte) (layout.CheckpointRecord, error) {
	if c.RecordSHA256 != "" {
		if got := layout.Digest(raw); got != c.RecordSHA256 {
			return layout.CheckpointRecord{}, fmt.Errorf("its SHA-256 is %.12s..., the catalog's %.12s...", got, c.RecordSHA256)
		}
	}
	rec, err := layout.ParseCheckpointRecord(raw)
	if err != nil {
		return rec, fmt.Errorf("it is not a checkpoint record (%v)", err)
	}
	switch {
	case rec.ID != c.ID || rec.Name != c.Name:
		return rec, fmt.Errorf("it names checkpoint %q (id %s), the catalog %q (id %s)", rec.Name, rec.ID, c.Name, c.ID)
	case rec.Sequence != c.Sequence:
		return rec, fmt.Errorf("it says sequence %d, the catalog %d", rec.Sequence, c.Sequence)
	}
	want := map[layout.VersionRef]bool{}
	for _, r := range c.Files {
		want[r] = true
	}
	var size int64
	for _, f := range rec.Files {
		r := layout.VersionRef{Name: f.Name, Epoch: f.Epoch}
		if !want[r] {
			return rec, fmt.Errorf("it names %s of epoch %d, which the catalog does not", f.Name, f.Epoch)
		}
		delete(want, r)
		size += f.Size
	}
	if len(want) > 0 {
		var missing []string
		for r := range want {
			missing = append(missing, layout.ObjectKey(r.Name, r.Epoch))
		}
		sort.Strings(missing)
		return rec, fmt.Errorf("it omits %s, which the catalog names", strings.Join(missing, ", "))
	}
	if size != c.Bytes {
		return rec, fmt.Errorf("its files add up to %d bytes, the catalog's to %d", size, c.Bytes)
	}
	return rec, nil
}
