package protocol

import (
	"errors"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func TestChooseEpoch(t *testing.T) {
	for _, tc := range []struct {
		existing  []uint64
		requested uint64
		want      uint64
		stale     bool
	}{
		{nil, 0, 1, false},
		{nil, 7, 7, false},
		{[]uint64{1, 2}, 0, 3, false},
		{[]uint64{1, 5, 2}, 6, 6, false},
		{[]uint64{1, 5, 2}, 9, 9, false},
		{[]uint64{1, 5, 2}, 5, 0, true}, // equal is not above
		{[]uint64{1, 5, 2}, 3, 0, true},
	} {
		got, err := ChooseEpoch(tc.existing, tc.requested)
		var se *ErrStaleEpoch
		if tc.stale != errors.As(err, &se) || got != tc.want {
			t.Errorf("ChooseEpoch(%v, %d) = %d, %v", tc.existing, tc.requested, got, err)
		}
		if tc.stale && (se.Requested != tc.requested || se.Highest != 5) {
			t.Errorf("stale error names %d and %d", se.Requested, se.Highest)
		}
	}
}

func TestHigherEpoch(t *testing.T) {
	for _, tc := range []struct {
		existing []uint64
		mine     uint64
		want     uint64
	}{
		{[]uint64{1}, 1, 0},
		{[]uint64{1, 2}, 1, 2},
		{[]uint64{1, 3, 2}, 2, 3},
		{[]uint64{4}, 5, 0},
	} {
		if got := HigherEpoch(tc.existing, tc.mine); got != tc.want {
			t.Errorf("HigherEpoch(%v, %d) = %d, want %d", tc.existing, tc.mine, got, tc.want)
		}
	}
}

func TestAdmitLogVersion(t *testing.T) {
	rec := &layout.OpenedRecord{Epoch: 5, Logs: []layout.VersionRef{{Name: "000010.log", Epoch: 3}, {Name: "MANIFEST-000004", Epoch: 4}}}
	for _, c := range []struct {
		name  string
		epoch uint64
		last  *layout.OpenedRecord
		want  bool
	}{
		{"000010.log", 3, nil, true},                             // no takeover recorded: old layout, keep all
		{"000010.log", 3, rec, true},                             // kept by the last opener
		{"MANIFEST-000004", 4, rec, true},                        // kept by the last opener
		{"000011.log", 4, rec, false},                            // created by epoch 4 after epoch 5 listed the store
		{"000010.log", 4, rec, false},                            // same name, version the opener did not keep
		{"000012.log", 5, rec, true},                             // the opener's own log
		{"000013.log", 6, rec, true},                             // a later epoch (it never opened without a record)
		{"000010.log", 3, &layout.OpenedRecord{Epoch: 4}, false}, // record of an opener that kept nothing
	} {
		if got := AdmitLogVersion(c.name, c.epoch, c.last); got != c.want {
			t.Errorf("AdmitLogVersion(%s, %d, %+v) = %v, want %v", c.name, c.epoch, c.last, got, c.want)
		}
	}
}

func TestLeaseWait(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		prev []layout.EpochClaim
		want time.Duration
	}{
		{nil, 0}, // no earlier owner, or it released the database
		{[]layout.EpochClaim{{Lease: 5 * s, LeaseMargin: s}}, 6 * s},
		{[]layout.EpochClaim{{Lease: 30 * s, LeaseMargin: 6 * s}}, 36 * s},             // rollout from a longer lease
		{[]layout.EpochClaim{{}}, 6 * s},                                               // claim without a lease: ours
		{[]layout.EpochClaim{{Lease: 30 * s, LeaseMargin: 6 * s}, {Lease: s}}, 36 * s}, // an older owner may still serve
	} {
		if got := LeaseWait(5*s, s, c.prev); got != c.want {
			t.Errorf("LeaseWait(5s, 1s, %+v) = %v, want %v", c.prev, got, c.want)
		}
	}
}

// TestLeaseFresh: an owner serves reads without confirming only within its
// lease of the start of its last confirmation.
func TestLeaseFresh(t *testing.T) {
	const lease = 5 * time.Second
	confirmed := 100 * time.Second
	for _, tc := range []struct {
		now  time.Duration
		want bool
	}{
		{confirmed, true},
		{confirmed + lease - 1, true},
		{confirmed + lease, false},
		{confirmed + time.Hour, false}, // a suspension counted by the clock
	} {
		if got := LeaseFresh(tc.now, confirmed, lease); got != tc.want {
			t.Errorf("LeaseFresh(%v after the confirmation) = %v, want %v", tc.now-confirmed, got, tc.want)
		}
	}
}

// TestConfirmBeforeAck: which stored segments an owner confirms its
// ownership for before acknowledging them.
func TestConfirmBeforeAck(t *testing.T) {
	const ackFresh = 10 * time.Second
	confirmed := 100 * time.Second
	for _, tc := range []struct {
		name string
		seq  uint64
		age  time.Duration
		want bool
	}{
		{"first segment of a new log, fresh confirmation", 1, 0, true},
		{"later segment, fresh confirmation", 2, ackFresh - 1, false},
		{"later segment, confirmation AckFresh old", 2, ackFresh, true},
		{"later segment after a suspension", 7, time.Hour, true},
	} {
		if got := ConfirmBeforeAck(tc.seq, confirmed+tc.age, confirmed, ackFresh); got != tc.want {
			t.Errorf("%s: ConfirmBeforeAck = %v, want %v", tc.name, got, tc.want)
		}
	}
}
