package protocol

import (
	"fmt"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Pins (docs/rfcs/0010-checkpoints-and-clones.md, steps 12 and 18): a
// clone reads some of this database's table versions and pins them in
// _shale/pins/<clone id>; the trash loop keeps every version a pin names.

// PinState is one pin the trash loop listed: what it keeps, or why it
// could not be read.
type PinState struct {
	Key   string
	Files []layout.VersionRef
	Err   error
}

// PinnedVersions is what the pins keep. An unreadable pin stops every
// delete, as an unreadable reader lease does: it may name any version,
// and a deleted table is lost to the clone for good.
func PinnedVersions(pins []PinState) (map[layout.VersionRef]bool, error) {
	kept := map[layout.VersionRef]bool{}
	for _, p := range pins {
		if p.Err != nil {
			return nil, fmt.Errorf("%w; refusing to delete anything until it is fixed (or removed, if its clone is gone)", p.Err)
		}
		for _, r := range p.Files {
			kept[r] = true
		}
	}
	return kept, nil
}

// MayDetach reports whether a clone's owner may delete its pins (step 18):
// no origin table is in its listing any more, no trash marker of one is
// left (each went after the delete grace, so no reader of the clone that
// could still use one is within it), and no checkpoint or live reader
// lease of the clone names one.
func MayDetach(originTablesLive, originMarkersLeft, originVersionsProtected int) bool {
	return originTablesLive == 0 && originMarkersLeft == 0 && originVersionsProtected == 0
}
