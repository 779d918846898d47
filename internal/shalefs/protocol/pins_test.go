package protocol

import (
	"errors"
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func TestPinnedVersions(t *testing.T) {
	a := layout.VersionRef{Name: "000007.sst", Epoch: 2}
	b := layout.VersionRef{Name: "000009.sst", Epoch: 3}
	for _, tc := range []struct {
		name    string
		pins    []PinState
		kept    []layout.VersionRef
		refused bool
	}{
		{"no pin keeps nothing", nil, nil, false},
		{"one pin", []PinState{{Key: "_shale/pins/x", Files: []layout.VersionRef{a}}}, []layout.VersionRef{a}, false},
		{"two clones: the union", []PinState{{Key: "_shale/pins/x", Files: []layout.VersionRef{a}}, {Key: "_shale/pins/y", Files: []layout.VersionRef{a, b}}}, []layout.VersionRef{a, b}, false},
		{"a pin naming nothing (kept for a clone of the clone)", []PinState{{Key: "_shale/pins/x"}}, nil, false},
		{"an unreadable pin stops every delete", []PinState{{Key: "_shale/pins/x", Files: []layout.VersionRef{a}}, {Key: "_shale/pins/y", Err: errors.New("pin _shale/pins/y is unreadable")}}, nil, true},
	} {
		kept, err := PinnedVersions(tc.pins)
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "refusing to delete anything") {
				t.Errorf("%s: %v, want a refusal", tc.name, err)
			}
			continue
		}
		if err != nil || len(kept) != len(tc.kept) {
			t.Errorf("%s: kept %v, %v; want %v", tc.name, kept, err, tc.kept)
		}
		for _, r := range tc.kept {
			if !kept[r] {
				t.Errorf("%s: %v not kept", tc.name, r)
			}
		}
	}
}

func TestMayDetach(t *testing.T) {
	for _, tc := range []struct {
		live, markers, protected int
		want                     bool
	}{
		{0, 0, 0, true},
		{1, 0, 0, false}, // an origin table still live
		{0, 2, 0, false}, // its markers within the grace: a reader may still use it
		{0, 0, 1, false}, // a checkpoint or reader lease of the clone names one
	} {
		if got := MayDetach(tc.live, tc.markers, tc.protected); got != tc.want {
			t.Errorf("MayDetach(%d, %d, %d) = %v, want %v", tc.live, tc.markers, tc.protected, got, tc.want)
		}
	}
}
