package layout

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

// TestRecordFormats pins every record's stored bytes and reads them back:
// a renamed field would make every existing store unreadable.
func TestRecordFormats(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 58, 3, 5, time.UTC)
	refs := []VersionRef{{Name: "000010.log", Epoch: 3}, {Name: "MANIFEST-000004", Epoch: 4}}
	for _, tc := range []struct {
		name   string
		rec    any
		stored string
		parse  func([]byte) (any, error)
	}{
		{"epoch claim", EpochClaim{Epoch: 2, TakenAt: at, Owner: "host pid 7", Nonce: "ab", Lease: 5 * time.Second, LeaseMargin: time.Second, AckFresh: 10 * time.Second},
			`{"epoch":2,"takenAt":"2026-11-22T10:58:03.000000005Z","owner":"host pid 7","nonce":"ab","leaseNanos":5000000000,"leaseMarginNanos":1000000000,"ackFreshNanos":10000000000}`,
			func(b []byte) (any, error) { return ParseEpochClaim(b) }},
		{"epoch claim of an older build", EpochClaim{Epoch: 1, TakenAt: at, Nonce: "ab"},
			`{"epoch":1,"takenAt":"2026-11-22T10:58:03.000000005Z","nonce":"ab","leaseNanos":0,"leaseMarginNanos":0}`,
			func(b []byte) (any, error) { return ParseEpochClaim(b) }},
		{"owner record", OwnerEpochRecord{Epoch: 7}, `{"epoch":7}`,
			func(b []byte) (any, error) { return ParseOwnerEpochRecord(b) }},
		{"opened record", OpenedRecord{Epoch: 5, Logs: refs},
			`{"epoch":5,"logs":[{"name":"000010.log","epoch":3},{"name":"MANIFEST-000004","epoch":4}]}`,
			func(b []byte) (any, error) { return ParseOpenedRecord(b) }},
		{"opened record keeping nothing", OpenedRecord{Epoch: 5, Logs: []VersionRef{}}, `{"epoch":5,"logs":[]}`,
			func(b []byte) (any, error) { return ParseOpenedRecord(b) }},
		{"trash marker", TrashMarker{DeletedAt: at, Epoch: 3}, `{"deletedAt":"2026-11-22T10:58:03.000000005Z","deletedByEpoch":3}`,
			func(b []byte) (any, error) { return ParseTrashMarker(b) }},
		{"reader lease", ReaderLease{ID: "r1", TTL: 30 * time.Second, Renewal: "cd", Files: refs},
			`{"id":"r1","ttlNanos":30000000000,"renewal":"cd","files":[{"name":"000010.log","epoch":3},{"name":"MANIFEST-000004","epoch":4}]}`,
			func(b []byte) (any, error) { return ParseReaderLease(b) }},
		{"tier record", TierRecord{ID: "x1", Cold: "s3://cold/db", CreatedAt: at},
			`{"id":"x1","cold":"s3://cold/db","createdAt":"2026-11-22T10:58:03.000000005Z"}`,
			func(b []byte) (any, error) { return ParseTierRecord(b) }},
		{"cold marker", ColdMarker{ID: "x1", Hot: "s3://hot/db", CreatedAt: at},
			`{"id":"x1","hot":"s3://hot/db","createdAt":"2026-11-22T10:58:03.000000005Z"}`,
			func(b []byte) (any, error) { return ParseColdMarker(b) }},
		{"tiers paired", TiersPaired{PairedAt: at}, `{"pairedAt":"2026-11-22T10:58:03.000000005Z"}`,
			func(b []byte) (any, error) { return ParseTiersPaired(b) }},
	} {
		got := reflect.ValueOf(tc.rec).MethodByName("Format").Call(nil)[0].Bytes()
		if string(got) != tc.stored {
			t.Errorf("%s: stored as %s, want %s", tc.name, got, tc.stored)
		}
		back, err := tc.parse([]byte(tc.stored))
		if err != nil || !reflect.DeepEqual(back, tc.rec) {
			t.Errorf("%s: read back %+v, %v; want %+v", tc.name, back, err, tc.rec)
		}
		if _, err := tc.parse([]byte(tc.stored[:len(tc.stored)/2])); err == nil {
			t.Errorf("%s: half a record parsed", tc.name)
		}
	}
	// A field of the wrong type fails the parse, and the rest still
	// decodes: readers of claims use that as a best effort.
	c, err := ParseEpochClaim([]byte(`{"epoch":"two","leaseNanos":5}`))
	if err == nil || c.Lease != 5 {
		t.Errorf("claim with a bad field: %+v, %v", c, err)
	}
}

func TestReleasedRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 58, 3, 5, time.FixedZone("CET", 3600))
	b := FormatReleased(at)
	if string(b) != "2026-11-22T09:58:03.000000005Z" {
		t.Errorf("release stored as %s", b)
	}
	if got, err := ParseReleased(b); err != nil || !got.Equal(at) {
		t.Errorf("release read back as %v, %v", got, err)
	}
	if _, err := ParseReleased([]byte("yesterday")); err == nil {
		t.Error("a release that is no time parsed")
	}
}

// TestCurrentObject: CURRENT's trailer round-trips.
func TestCurrentObject(t *testing.T) {
	for _, e := range numbers() {
		obj := CurrentObject([]byte("MANIFEST-000005\n"), e, "ab12")
		if got := CurrentContent(obj); !bytes.Equal(got, []byte("MANIFEST-000005\n")) {
			t.Errorf("content of %q: %q", obj, got)
		}
		if got := CurrentEpoch(obj); got != e {
			t.Errorf("epoch of %q: %d", obj, got)
		}
	}
	if got := string(CurrentObject([]byte("MANIFEST-000005\n"), 3, "ab12")); got != "MANIFEST-000005\nshale epoch=3 write=ab12\n" {
		t.Errorf("CURRENT stored as %q", got)
	}
	// RocksDB's own CURRENT (no trailer) is its content.
	if got := CurrentContent([]byte("MANIFEST-000005\n")); string(got) != "MANIFEST-000005\n" {
		t.Errorf("content of a plain CURRENT: %q", got)
	}
}

// TestCurrentEpoch (moved from shalefs): the epoch in a stored CURRENT.
func TestCurrentEpoch(t *testing.T) {
	for obj, want := range map[string]uint64{
		"MANIFEST-000005\nshale epoch=3 write=ab12\n":  3,
		"MANIFEST-000005\nshale epoch=12 write=ab12\n": 12,
		"MANIFEST-000005\n":                            0,
		"MANIFEST-000005\nshale epoch=x write=1\n":     0,
	} {
		if got := CurrentEpoch([]byte(obj)); got != want {
			t.Errorf("CurrentEpoch(%q) = %d, want %d", obj, got, want)
		}
	}
}
