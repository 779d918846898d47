package operator

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TestReclaimPlan: a deletion keeps the marker, the pins and exactly the
// versions they name (hot or cold), deletes everything else, reports the
// clones; an unreadable pin refuses the whole deletion.
func TestReclaimPlan(t *testing.T) {
	const (
		t5  = "000005.sst.00000000000000000001"
		t5b = "000005.sst.00000000000000000002" // another version of 000005.sst
		t7  = "000007.sst.00000000000000000001"
		man = "MANIFEST-000001/00000000000000000001/00000000000000000001"
		cat = "CATALOG/00000000000000000001/00000000000000000001"
		ep  = "_shale/epoch/00000000000000000001"
		ckp = "_shale/checkpoints/00000000000000000001-ab/record"
	)
	pinA := pinObservation{Key: layout.PinKey("clone-a"), Clone: "s3://b/a/", Files: []layout.VersionRef{{Name: "000005.sst", Epoch: 1}}}
	pinB := pinObservation{Key: layout.PinKey("clone-b"), Clone: "s3://b/b/", Files: []layout.VersionRef{{Name: "000007.sst", Epoch: 1}, {Name: "000009.sst", Epoch: 3}}}
	emptyPin := pinObservation{Key: layout.PinKey("clone-c"), Clone: "s3://b/c/", Files: []layout.VersionRef{}}
	all := []string{t5, t5b, t7, man, cat, ep, ckp, layout.DeletingKey}
	for _, tc := range []struct {
		name         string
		in           reclaimInput
		hot, cold    []string // deleted
		kept, pinned []string
		wantErr      string
	}{
		{name: "no-pins: everything but the marker",
			in:  reclaimInput{Hot: all},
			hot: []string{t5, t5b, t7, man, cat, ep, ckp}},
		{name: "one pin keeps its version, not the table's other version",
			in:     reclaimInput{Hot: append(slices.Clone(all), pinA.Key), Pins: []pinObservation{pinA}},
			hot:    []string{t5b, t7, man, cat, ep, ckp},
			kept:   []string{t5},
			pinned: []string{"clone-a (s3://b/a/)"}},
		{name: "two pins; a named version already gone",
			in:     reclaimInput{Hot: append(slices.Clone(all), pinA.Key, pinB.Key), Pins: []pinObservation{pinB, pinA}},
			hot:    []string{t5b, man, cat, ep, ckp},
			kept:   []string{t5, t7},
			pinned: []string{"clone-a (s3://b/a/)", "clone-b (s3://b/b/)"}},
		{name: "a cold pinned table is kept, the cold tier's others go first",
			in:     reclaimInput{Hot: []string{man, pinB.Key}, Cold: []string{t7, t5}, Pins: []pinObservation{pinB}},
			hot:    []string{man},
			cold:   []string{t5},
			kept:   []string{t7},
			pinned: []string{"clone-b (s3://b/b/)"}},
		{name: "a pin naming nothing still keeps the record (a clone of the clone verifies it)",
			in:     reclaimInput{Hot: []string{t5, emptyPin.Key}, Pins: []pinObservation{emptyPin}},
			hot:    []string{t5},
			pinned: []string{"clone-c (s3://b/c/)"}},
		{name: "an unreadable pin refuses everything",
			in:      reclaimInput{Hot: append(slices.Clone(all), pinA.Key, pinB.Key), Pins: []pinObservation{pinA, {Key: pinB.Key, Err: errors.New("pin _shale/pins/clone-b is unreadable: bad JSON")}}},
			wantErr: "clone-b is unreadable"},
		{name: "a pin listed but not read refuses everything",
			in:      reclaimInput{Hot: append(slices.Clone(all), pinA.Key)},
			wantErr: "listed but not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := reclaimPlan(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("reclaimPlan = %+v, %v; want error %q", got, err, tc.wantErr)
				}
				if len(got.DeleteHot)+len(got.DeleteCold) > 0 {
					t.Fatalf("refused, but plans deletes: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eq := func(what string, got, want []string) {
				t.Helper()
				slices.Sort(got)
				want = slices.Sorted(slices.Values(want))
				if !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", what, got, want)
				}
			}
			eq("DeleteHot", got.DeleteHot, tc.hot)
			eq("DeleteCold", got.DeleteCold, tc.cold)
			eq("Kept", got.Kept, tc.kept)
			eq("Pinned", got.Pinned, tc.pinned)
			for _, k := range append(got.DeleteHot, got.DeleteCold...) {
				if k == layout.DeletingKey || strings.HasPrefix(k, layout.PinsPrefix) {
					t.Errorf("plans to delete %s", k)
				}
			}
		})
	}
}

// TestClassifyDirPinned: an orphan with pins is never deleted whole; with
// its last pin gone it is an ordinary orphan; pins change nothing for a
// directory kept for another reason.
func TestClassifyDirPinned(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const (
		grace   = time.Hour
		cluster = "c0ffee00-0000-4000-8000-000000000000"
		uid     = types.UID("0a1b2c3d-0000-4000-8000-00000000abcd")
	)
	rec := &dirOwnerRecord{Cluster: cluster, Namespace: "ns", Name: "orders", UID: uid, ReclaimPolicy: shalev1.ReclaimDelete}
	retain := *rec
	retain.ReclaimPolicy = shalev1.ReclaimRetain
	obs := func(r *dirOwnerRecord, age time.Duration, pins ...string) dirObservation {
		return dirObservation{Namespace: "ns", Name: "orders", UID: uid, Objects: 4, Newest: now.Add(-age), Record: r, Pins: pins}
	}
	for _, tc := range []struct {
		name string
		d    dirObservation
		live map[types.UID]bool
		want verdict
	}{
		{"pinned", obs(rec, 2*time.Hour, "clone-a"), nil, keepPinned},
		{"pinned-twice", obs(rec, 2*time.Hour, "clone-a", "clone-b"), nil, keepPinned},
		{"last-pin-gone", obs(rec, 2*time.Hour), nil, orphan},
		{"pinned-live", obs(rec, 2*time.Hour, "clone-a"), map[types.UID]bool{uid: true}, keepLive},
		{"pinned-young", obs(rec, time.Minute, "clone-a"), nil, keepYoung},
		{"pinned-retained", obs(&retain, 2*time.Hour, "clone-a"), nil, keepRetained},
		{"pinned-no-record", obs(nil, 2*time.Hour, "clone-a"), nil, keepUnclaimed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := classifyDir(tc.d, tc.live, cluster, now, grace)
			if got != tc.want {
				t.Errorf("classifyDir = %v (%s), want %v", got, why, tc.want)
			}
			if got == keepPinned && !strings.Contains(why, "clone-a") {
				t.Errorf("the reason %q does not name the clones", why)
			}
		})
	}
}
