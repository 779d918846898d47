package operator

import (
	"errors"
	"fmt"
	"sort"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Deleting a database directory that clones may still read from
// (docs/rfcs/0010-checkpoints-and-clones.md, step 14): a reclaim with
// reclaimPolicy Delete and the garbage collector's deletion of an orphan
// both follow reclaimPlan. The runner (reclaimDir) first creates
// _shale/deleting (create-only; found: go on), then lists the directory,
// pins included, and reads every pin: a clone pins before it checks for
// the marker, so a pin written after this listing belongs to a clone that
// then finds the marker and refuses ("A parent deleted while a clone
// opens").

// pinObservation is one pin of the directory: the clone it belongs to and
// the versions it keeps, or why it could not be read.
type pinObservation struct {
	Key   string // relative to the directory: _shale/pins/<clone id>
	Clone string // the clone's URL, as the pin says (a hint for people)
	Files []layout.VersionRef
	Err   error
}

// reclaimInput is what the runner listed after creating the marker: every
// key of the directory in the hot and cold tiers (relative to it), and
// its pins.
type reclaimInput struct {
	Hot  []string
	Cold []string
	Pins []pinObservation
}

// reclaimPlanned is what to do: delete DeleteCold, then DeleteHot; with
// Pinned empty, then delete the marker, then the owner record; with
// clones pinning it, keep both (the record says Delete, so the garbage
// collector finishes once the last pin is gone).
type reclaimPlanned struct {
	DeleteHot  []string
	DeleteCold []string
	// Kept: the versions a pin names that are still there (hot or cold).
	Kept []string
	// Pinned: the pins left, as "clone id (clone URL)".
	Pinned []string
}

// errPinRefused: a pin could not be read, so nothing is deleted.
var errPinRefused = errors.New("a clone's pin")

// reclaimPlan decides what a deletion of a directory removes. It deletes
// every object but the marker, the pins and the <name>.<E> keys a pin
// names (in either tier). An unreadable pin refuses the whole deletion,
// as it stops the owner's trash loop: it may name any version, and a
// deleted table is lost to its clone for good.
func reclaimPlan(in reclaimInput) (reclaimPlanned, error) {
	var p reclaimPlanned
	keep := map[string]bool{layout.DeletingKey: true}
	read := map[string]bool{}
	for _, pin := range in.Pins {
		read[pin.Key] = true
	}
	for _, k := range in.Hot {
		if _, ok := layout.ParsePinKey(k); ok && !read[k] {
			return reclaimPlanned{}, fmt.Errorf("%w: pin %s was listed but not read; refusing to delete anything", errPinRefused, k)
		}
	}
	for _, pin := range in.Pins {
		if pin.Err != nil {
			return reclaimPlanned{}, fmt.Errorf("%w: %w; refusing to delete anything until it is fixed (or removed, if its clone is gone)", errPinRefused, pin.Err)
		}
		keep[pin.Key] = true
		for _, f := range pin.Files {
			keep[layout.ObjectKey(f.Name, f.Epoch)] = true
		}
		id, _ := layout.ParsePinKey(pin.Key)
		p.Pinned = append(p.Pinned, fmt.Sprintf("%s (%s)", id, pin.Clone))
	}
	split := func(keys []string) (del []string) {
		for _, k := range keys {
			if keep[k] {
				if _, ok := layout.ParsePinKey(k); !ok && k != layout.DeletingKey {
					p.Kept = append(p.Kept, k)
				}
				continue
			}
			if _, ok := layout.ParsePinKey(k); ok {
				continue // a pin is its clone's to delete, never ours
			}
			del = append(del, k)
		}
		return del
	}
	p.DeleteCold = split(in.Cold)
	p.DeleteHot = split(in.Hot)
	sort.Strings(p.Pinned)
	return p, nil
}
