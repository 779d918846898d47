package layout

import (
	"strings"
	"testing"
)

func goodOrigin() OriginRecord {
	return OriginRecord{
		CloneID: "c0ffee-1", Parent: "s3://b/parent", Checkpoint: "c1", CheckpointID: "00000000000000000002-ab",
		Sequence: 10, Current: "MANIFEST-000005\n", Manifest: CheckpointManifest{Name: "MANIFEST-000005", Size: 300},
		Origins: []Origin{{URL: "s3://b/parent", Pin: PinKey("c0ffee-1")}, {URL: "s3://b/grand", ColdURL: "s3://cold/grand", Pin: PinKey("c0ffee-1")}},
		Files:   []OriginFile{{Name: "000007.sst", Origin: 0, Epoch: 2, Size: 100}, {Name: "000004.sst", Origin: 1, Epoch: 1, Size: 50, Tier: "cold"}},
	}
}

// TestOriginRecord: a record round-trips, and every way it can be wrong
// is refused with an error naming the problem.
func TestOriginRecord(t *testing.T) {
	r := goodOrigin()
	back, err := ParseOriginRecord(r.Format())
	if err != nil || !back.SameClone(r) || len(back.Files) != 2 || back.Files[1].Tier != "cold" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	for _, tc := range []struct {
		name   string
		change func(*OriginRecord)
		want   string
	}{
		{"bad clone id", func(r *OriginRecord) { r.CloneID = "Bad_ID" }, "clone id"},
		{"no parent", func(r *OriginRecord) { r.Parent = "" }, "no parent"},
		{"bad checkpoint name", func(r *OriginRecord) { r.Checkpoint = "-x" }, "checkpoint name"},
		{"current names another manifest", func(r *OriginRecord) { r.Current = "MANIFEST-000009\n" }, "do not agree"},
		{"empty manifest", func(r *OriginRecord) { r.Manifest.Size = 0 }, "do not agree"},
		{"no origin", func(r *OriginRecord) { r.Origins = nil }, "no origin"},
		{"repeated origin", func(r *OriginRecord) { r.Origins[1].URL = r.Origins[0].URL }, "repeated URL"},
		{"pin of another clone", func(r *OriginRecord) { r.Origins[0].Pin = PinKey("other") }, "pin"},
		{"not a table", func(r *OriginRecord) { r.Files[0].Name = "IDENTITY" }, "not a table"},
		{"table twice", func(r *OriginRecord) { r.Files[1].Name = r.Files[0].Name }, "named twice"},
		{"origin out of range", func(r *OriginRecord) { r.Files[0].Origin = 2 }, "origin 2 of 2"},
		{"bad tier", func(r *OriginRecord) { r.Files[0].Tier = "warm" }, "tier"},
		{"cold without a cold url", func(r *OriginRecord) { r.Origins[1].ColdURL = "" }, "names no cold tier"},
	} {
		r := goodOrigin()
		r.Origins = append([]Origin(nil), r.Origins...)
		r.Files = append([]OriginFile(nil), r.Files...)
		tc.change(&r)
		_, err := ParseOriginRecord(r.Format())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), OriginKey) {
			t.Errorf("%s: %v, want an error about %q naming %s", tc.name, err, tc.want, OriginKey)
		}
	}
	if _, err := ParseOriginRecord([]byte(`{"cloneID":`)); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("half a record: %v", err)
	}
}

func TestPinRecord(t *testing.T) {
	p := PinRecord{Clone: "s3://b/clone", CloneID: "c0ffee-1", Checkpoint: "c1", Files: []VersionRef{{Name: "000007.sst", Epoch: 2}}}
	const stored = `{"clone":"s3://b/clone","cloneID":"c0ffee-1","checkpoint":"c1","files":[{"name":"000007.sst","epoch":2}]}`
	if got := string(p.Format()); got != stored {
		t.Fatalf("stored as %s, want %s", got, stored)
	}
	if back, err := ParsePin(PinKey("c0ffee-1"), []byte(stored)); err != nil || back.Files[0] != p.Files[0] {
		t.Fatalf("read back %+v, %v", back, err)
	}
	for _, tc := range []struct {
		name, key, body, want string
	}{
		{"half", PinKey("c0ffee-1"), stored[:20], "unreadable"},
		{"another clone's key", PinKey("other"), stored, "names clone"},
		{"a bad key", PinsPrefix + "a/b", stored, "names clone"},
		{"not a table", PinKey("c0ffee-1"), strings.Replace(stored, "000007.sst", "MANIFEST-000001", 1), "not a table"},
	} {
		if _, err := ParsePin(tc.key, []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if id, ok := ParsePinKey(PinKey("c0ffee-1")); !ok || id != "c0ffee-1" {
		t.Errorf("ParsePinKey: %q %v", id, ok)
	}
	if _, ok := ParsePinKey("_shale/pinsx"); ok {
		t.Error("ParsePinKey accepted a key outside the prefix")
	}
	if FileOfKey(PinKey("x")) != "" || FileOfKey(OriginKey) != "" || FileOfKey(DeletingKey) != "" {
		t.Error("clone records are Shale's own objects, no file of RocksDB's")
	}
}
