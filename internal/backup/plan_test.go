package backup

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanCopy(t *testing.T) {
	want := map[string]int64{"000010.sst.00000000000000000001": 100, "000011.sst.00000000000000000002": 50}
	const a, b = "000010.sst.00000000000000000001", "000011.sst.00000000000000000002"
	for _, tc := range []struct {
		name    string
		present map[string]int64
		known   map[string]Object
		want    map[string]Step
		err     string
	}{
		{"empty store: copy all", nil, nil, map[string]Step{a: Copy, b: Copy}, ""},
		{"in a manifest: skip", map[string]int64{a: 100}, map[string]Object{a: {a, 100, "aa"}}, map[string]Step{a: Skip, b: Copy}, ""},
		{"present, in no manifest (interrupted run): hash", map[string]int64{a: 100, b: 50}, map[string]Object{a: {a, 100, "aa"}}, map[string]Step{a: Skip, b: Hash}, ""},
		{"a manifest names it but it is gone: copy", nil, map[string]Object{a: {a, 100, "aa"}}, map[string]Step{a: Copy, b: Copy}, ""},
		{"manifest size differs from the store's: hash, never trust the sum", map[string]int64{a: 100}, map[string]Object{a: {a, 99, "aa"}}, map[string]Step{a: Hash, b: Copy}, ""},
		{"present with another size: refused", map[string]int64{a: 7}, nil, nil, "is 7 bytes, the source's 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanCopy(want, tc.present, tc.known)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, s := range tc.want {
				if got[k] != s {
					t.Errorf("%s: %v, want %v", k, got[k], s)
				}
			}
		})
	}
}

func TestKnownSums(t *testing.T) {
	ms := []Manifest{
		{Objects: []Object{{"a", 1, "x"}, {"b", 2, "y"}}},
		{Objects: []Object{{"a", 1, "x"}, {"b", 2, "z"}}}, // b disagrees: unknown
	}
	got := KnownSums(ms)
	if got["a"].SHA256 != "x" {
		t.Fatalf("a: %+v", got["a"])
	}
	if _, ok := got["b"]; ok {
		t.Fatalf("b is named with two sums, so it must be read again: %+v", got["b"])
	}
}

func TestUnreferenced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		others  []Manifest
		pending []Pending
		want    []string
	}{
		{"alone: everything", []string{"b", "a"}, nil, nil, []string{"a", "b"}},
		{"shared with another backup", []string{"a", "b", "c"}, []Manifest{{Objects: []Object{{Key: "b"}}}}, nil, []string{"a", "c"}},
		{"a running backup may name it", []string{"a", "b"}, nil, []Pending{{Keys: []string{"a"}}}, []string{"b"}},
		{"all kept", []string{"a"}, []Manifest{{Objects: []Object{{Key: "a"}}}}, []Pending{{Keys: []string{"a"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unreferenced(tc.keys, tc.others, tc.pending); !slices.Equal(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckIdentity(t *testing.T) {
	if err := CheckIdentity(nil, "orders", "s3://a/orders", "x"); err != nil {
		t.Fatal(err)
	}
	if err := CheckIdentity(&Database{Identity: "x"}, "orders", "s3://a/orders", "x"); err != nil {
		t.Fatal(err)
	}
	err := CheckIdentity(&Database{Identity: "x", Source: "s3://a/orders"}, "orders", "s3://b/orders", "y")
	if err == nil || !strings.Contains(err.Error(), "another database") || !strings.Contains(err.Error(), "--database") {
		t.Fatalf("another database's location: %v", err)
	}
}

func TestKeys(t *testing.T) {
	if id := IDOfKey(BackupsPrefix, ManifestKey("b20260101-000000")); id != "b20260101-000000" {
		t.Fatalf("round trip: %q", id)
	}
	for _, k := range []string{"backups/x", "backups/BAD.json", "pending/a.json", "backups/a/b.json"} {
		if id := IDOfKey(BackupsPrefix, k); id != "" {
			t.Fatalf("%s taken for backup %q", k, id)
		}
	}
	for _, id := range []string{"", "-a", "A", "a_b", strings.Repeat("a", 57)} {
		if ValidID(id) == nil {
			t.Fatalf("%q accepted", id)
		}
	}
	if err := ValidID(strings.Repeat("a", 56)); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]string{
		"000010.sst.00000000000000000003":        "000010.sst.00000000000000000000",
		"_shale/checkpoints/x-1/MANIFEST-000005": "MANIFEST-000005/00000000000000000000/00000000000000000001",
		"OPTIONS-000007.00000000000000000003":    "",
		"IDENTITY.00000000000000000001":          "",
		"_shale/checkpoints/x-1/record":          "",
	} {
		got, ok := RestoredKey(src, "_shale/checkpoints/x-1/MANIFEST-000005")
		if got != want || ok != (want != "") {
			t.Errorf("RestoredKey(%s) = %q %v, want %q", src, got, ok, want)
		}
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// b1 ... b5, one a day, b5 completed an hour ago.
	var ms []Manifest
	for i := 1; i <= 5; i++ {
		ms = append(ms, Manifest{ID: fmt.Sprintf("b%d", i), CompletedAt: now.Add(-time.Hour - time.Duration(5-i)*day)})
	}
	shuffled := []Manifest{ms[3], ms[0], ms[4], ms[2], ms[1]}
	for _, tc := range []struct {
		name string
		ms   []Manifest
		p    Policy
		want []string
	}{
		{"empty policy: nothing", ms, Policy{}, nil},
		{"keep last 2", ms, Policy{KeepLast: 2}, []string{"b1", "b2", "b3"}},
		{"keep last 2, any order", shuffled, Policy{KeepLast: 2}, []string{"b1", "b2", "b3"}},
		{"keep last 10: all kept", ms, Policy{KeepLast: 10}, nil},
		{"within 2 days", ms, Policy{KeepWithin: 2 * day}, []string{"b1", "b2", "b3"}},
		{"within a minute: the newest is still kept", ms, Policy{KeepWithin: time.Minute}, []string{"b1", "b2", "b3", "b4"}},
		{"last 1 or within 3 days: either keeps", ms, Policy{KeepLast: 1, KeepWithin: 3 * day}, []string{"b1", "b2"}},
		{"last 4 or within 1 day", ms, Policy{KeepLast: 4, KeepWithin: day}, []string{"b1"}},
		{"no backups", nil, Policy{KeepLast: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Expired(tc.ms, now, tc.p); !slices.Equal(got, tc.want) {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}

func TestOrphans(t *testing.T) {
	now := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	objs := []Stored{{"a", now.Add(-48 * time.Hour)}, {"b", now.Add(-48 * time.Hour)}, {"c", now.Add(-48 * time.Hour)}, {"young", now.Add(-time.Minute)}}
	ms := []Manifest{{Objects: []Object{{Key: "a"}}}}
	ps := []Pending{{Keys: []string{"b"}}}
	if got := Orphans(objs, ms, ps, now, 24*time.Hour); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("%q, want only c: a is a backup's, b a running one's, young within the grace", got)
	}
	if got := Orphans(objs, nil, nil, now, 0); len(got) != 4 {
		t.Fatalf("no grace, nothing referenced: %q", got)
	}
}
