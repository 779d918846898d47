package protocol

import (
	"testing"
	"time"
)

// TestTrashDue: which trash markers a delete pass takes up (the rule
// emptyTrash applied inline before; docs/fencing.md, "Deletes and slots").
func TestTrashDue(t *testing.T) {
	const grace = time.Hour
	never := time.Duration(-1)
	for _, tc := range []struct {
		name       string
		age        time.Duration
		dataGone   bool
		sealsAfter time.Duration
		want       bool
	}{
		{"within the grace", grace - 1, false, 0, false},
		{"grace over", grace, false, 0, true},
		{"long after the grace", 10 * grace, false, 0, true},
		{"a table's marker: no seals", grace, false, never, true},
		// A log whose data went in an earlier pass waits for its seals.
		{"log data gone, seals not due", grace + time.Minute, true, grace + 2*time.Minute, false},
		{"log data gone, seals due", grace + 2*time.Minute, true, grace + 2*time.Minute, true},
		{"log data gone, writer's AckFresh unknown: seals stay", 100 * grace, true, never, false},
		{"log data gone, but within the grace (a new owner's count)", grace - 1, true, grace, false},
	} {
		if got := TrashDue(tc.age, grace, tc.dataGone, tc.sealsAfter); got != tc.want {
			t.Errorf("%s: TrashDue(%v, %v, %v, %v) = %v, want %v", tc.name, tc.age, grace, tc.dataGone, tc.sealsAfter, got, tc.want)
		}
	}
}

// TestSealsAfter: a log's seals outlive its data by 3×AckFresh of its
// writer, never less than the grace, and forever when the writer's claim
// does not say (a claim of a build before AckFresh).
func TestSealsAfter(t *testing.T) {
	for _, tc := range []struct {
		grace, ackFresh, want time.Duration
	}{
		{time.Hour, 10 * time.Second, time.Hour},
		{time.Second, 10 * time.Second, 30 * time.Second},
		{100 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond},
		{time.Hour, 0, -1},
		{time.Hour, -time.Second, -1},
	} {
		if got := SealsAfter(tc.grace, tc.ackFresh); got != tc.want {
			t.Errorf("SealsAfter(%v, %v) = %v, want %v", tc.grace, tc.ackFresh, got, tc.want)
		}
	}
}

func TestSealsDue(t *testing.T) {
	for _, tc := range []struct {
		age, sealsAfter time.Duration
		want            bool
	}{
		{29 * time.Second, 30 * time.Second, false},
		{30 * time.Second, 30 * time.Second, true},
		{time.Hour, 30 * time.Second, true},
		{1000 * time.Hour, -1, false}, // never
		{0, 0, true},
	} {
		if got := SealsDue(tc.age, tc.sealsAfter); got != tc.want {
			t.Errorf("SealsDue(%v, %v) = %v, want %v", tc.age, tc.sealsAfter, got, tc.want)
		}
	}
}

// TestReaderLeaseRules: what a reader lease protects on the owner's side
// (counted from when the owner saw it change), when the reader serves and
// when it renews (on its own clock).
func TestReaderLeaseRules(t *testing.T) {
	const ttl = 30 * time.Second
	base := 1000 * time.Second
	for _, tc := range []struct {
		since time.Duration
		want  bool
	}{
		{0, true}, {ttl - 1, true}, {ttl, false}, {10 * ttl, false},
	} {
		if got := LeaseProtects(base+tc.since, base, ttl); got != tc.want {
			t.Errorf("LeaseProtects, changed %v ago: %v, want %v", tc.since, got, tc.want)
		}
		if got := ReaderLeaseFresh(base+tc.since, base, ttl); got != tc.want {
			t.Errorf("ReaderLeaseFresh, renewed %v ago: %v, want %v", tc.since, got, tc.want)
		}
	}
	for _, tc := range []struct {
		changed bool
		since   time.Duration
		want    bool
	}{
		{false, 0, false},
		{false, ttl/3 - 1, false},
		{false, ttl / 3, true},
		{true, 0, true}, // the view's files changed: publish them at once
		{false, 2 * ttl, true},
	} {
		if got := RenewReaderLease(tc.changed, base+tc.since, base, ttl); got != tc.want {
			t.Errorf("RenewReaderLease(changed %v, %v after the renewal) = %v, want %v", tc.changed, tc.since, got, tc.want)
		}
	}
}
