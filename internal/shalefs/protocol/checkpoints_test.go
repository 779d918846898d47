package protocol

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func ck(name, id string, files ...layout.VersionRef) layout.CatalogCheckpoint {
	return layout.CatalogCheckpoint{Name: name, ID: id, Files: files}
}

func ref(name string, e uint64) layout.VersionRef { return layout.VersionRef{Name: name, Epoch: e} }

func TestReplayCatalog(t *testing.T) {
	snap := func(cs ...layout.CatalogCheckpoint) layout.CatalogEntry {
		return layout.CatalogEntry{Op: layout.CatalogSnapshot, Checkpoints: cs}
	}
	create := func(c layout.CatalogCheckpoint) layout.CatalogEntry {
		return layout.CatalogEntry{Op: layout.CatalogCreate, Checkpoint: &c}
	}
	del := func(name, id string) layout.CatalogEntry {
		return layout.CatalogEntry{Op: layout.CatalogDelete, Name: name, ID: id}
	}
	a, b := ck("a", "1-x", ref("1.sst", 1)), ck("b", "2-y", ref("2.sst", 2))
	for _, tc := range []struct {
		name    string
		entries []layout.CatalogEntry
		want    []string // live names
		wantErr bool
	}{
		{name: "empty version", entries: nil, want: nil},
		{name: "empty snapshot", entries: []layout.CatalogEntry{snap()}, want: nil},
		{name: "snapshot carried over", entries: []layout.CatalogEntry{snap(a, b)}, want: []string{"a", "b"}},
		{name: "create after snapshot", entries: []layout.CatalogEntry{snap(a), create(b)}, want: []string{"a", "b"}},
		{name: "delete", entries: []layout.CatalogEntry{snap(a, b), del("a", "1-x")}, want: []string{"b"}},
		{name: "delete of another id keeps it", entries: []layout.CatalogEntry{snap(a), del("a", "9-z")}, want: []string{"a"}},
		{name: "delete twice (expiry and delete)", entries: []layout.CatalogEntry{snap(a), del("a", "1-x"), del("a", "1-x")}, want: nil},
		{name: "recreated after delete", entries: []layout.CatalogEntry{snap(a), del("a", "1-x"), create(ck("a", "3-w"))}, want: []string{"a"}},
		{name: "create repeated with its id", entries: []layout.CatalogEntry{snap(), create(a), create(a)}, want: []string{"a"}},
		{name: "no snapshot first: refused", entries: []layout.CatalogEntry{create(a)}, wantErr: true},
		{name: "second snapshot: refused", entries: []layout.CatalogEntry{snap(), snap(a)}, wantErr: true},
		{name: "name taken by another id: refused", entries: []layout.CatalogEntry{snap(a), create(ck("a", "5-q"))}, wantErr: true},
		{name: "duplicate in snapshot: refused", entries: []layout.CatalogEntry{snap(a, a)}, wantErr: true},
		{name: "unknown op: refused", entries: []layout.CatalogEntry{snap(), {Op: "rename"}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live, err := ReplayCatalog(tc.entries)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var got []string
			for n := range live {
				got = append(got, n)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("live = %v, want %v", got, tc.want)
			}
		})
	}
	// The round trip through the stored form.
	var stored []byte
	for _, e := range []layout.CatalogEntry{snap(a), create(b), del("a", "1-x")} {
		stored = append(stored, e.Format()...)
	}
	entries, err := layout.ParseCatalog(stored)
	if err != nil {
		t.Fatal(err)
	}
	live, err := ReplayCatalog(entries)
	if err != nil || len(live) != 1 || live["b"].ID != "2-y" || !reflect.DeepEqual(live["b"].Files, b.Files) {
		t.Fatalf("round trip: %v, %v", live, err)
	}
	if _, err := layout.ParseCatalog(stored[:len(stored)-3]); err == nil {
		t.Fatal("a torn last line was accepted")
	}
}

func TestCatalogProtects(t *testing.T) {
	live := map[string]layout.CatalogCheckpoint{
		"a": ck("a", "1-x", ref("1.sst", 1), ref("2.sst", 1)),
		"b": ck("b", "2-y", ref("2.sst", 1), ref("3.sst", 2)),
	}
	pending := []layout.CatalogCheckpoint{ck("c", "2-z", ref("4.sst", 2))}
	for _, tc := range []struct {
		name    string
		live    map[string]layout.CatalogCheckpoint
		pending []layout.CatalogCheckpoint
		v       layout.VersionRef
		want    bool
	}{
		{"named by a live checkpoint", live, nil, ref("1.sst", 1), true},
		{"named by two", live, nil, ref("2.sst", 1), true},
		{"another epoch of a named table", live, nil, ref("1.sst", 2), false},
		{"named by none", live, nil, ref("9.sst", 1), false},
		{"named by a pending create", live, pending, ref("4.sst", 2), true},
		{"pending create gone (failed for sure)", live, nil, ref("4.sst", 2), false},
		{"no checkpoints", nil, nil, ref("1.sst", 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CatalogProtects(tc.live, tc.pending)[tc.v]; got != tc.want {
				t.Fatalf("protects %v = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
	// Deleted: the catalog replayed after the delete entry no longer
	// protects what only it named.
	after, _ := ReplayCatalog([]layout.CatalogEntry{
		{Op: layout.CatalogSnapshot, Checkpoints: []layout.CatalogCheckpoint{live["a"], live["b"]}},
		{Op: layout.CatalogDelete, Name: "a", ID: "1-x"},
	})
	p := CatalogProtects(after, nil)
	if p[ref("1.sst", 1)] || !p[ref("2.sst", 1)] || !p[ref("3.sst", 2)] {
		t.Fatalf("after deleting a: %v", p)
	}
}

func TestExpiredCheckpoints(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	live := map[string]layout.CatalogCheckpoint{
		"never": {Name: "never"},
		"past":  {Name: "past", Expires: now.Add(-time.Second)},
		"now":   {Name: "now", Expires: now},
		"later": {Name: "later", Expires: now.Add(time.Second)},
	}
	if got := ExpiredCheckpoints(live, now); !reflect.DeepEqual(got, []string{"now", "past"}) {
		t.Fatalf("expired = %v", got)
	}
}

func TestSweepCheckpointDir(t *testing.T) {
	id := func(e uint64) string { return layout.CheckpointID(e, "n") }
	named := map[string]bool{id(3): true}
	for _, tc := range []struct {
		name     string
		id       string
		own      uint64
		inFlight bool
		want     bool
	}{
		{"named by the catalog", id(3), 5, false, false},
		{"older owner's, unnamed (a zombie's or a failed create)", id(4), 5, true, true},
		{"own, create in flight", id(5), 5, true, false},
		{"own, nothing in flight", id(5), 5, false, true},
		{"a newer owner's (this one is deposed)", id(6), 5, false, false},
		{"not an id", "junk", 5, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SweepCheckpointDir(tc.id, named, tc.own, tc.inFlight); got != tc.want {
				t.Fatalf("sweep %s = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

// A checkpoint server serves a record only if it is the one the catalog
// committed: with a digest, byte for byte; without (entries written
// before digests), field by field.
func TestVerifyCheckpointRecord(t *testing.T) {
	rec := layout.CheckpointRecord{Name: "c1", ID: "1-x", Epoch: 1, Sequence: 100, Current: "MANIFEST-000005\n",
		Manifest: layout.CheckpointManifest{Name: "MANIFEST-000005", Size: 300, SHA256: "ab"},
		Files:    []layout.CheckpointFile{{Name: "000007.sst", Epoch: 1, Size: 1000}, {Name: "IDENTITY", Epoch: 1, Size: 37}}}
	entry := func(withDigest bool) layout.CatalogCheckpoint {
		c := layout.CatalogCheckpoint{Name: "c1", ID: "1-x", Sequence: 100, Bytes: 1037, Files: []layout.VersionRef{ref("000007.sst", 1), ref("IDENTITY", 1)}}
		if withDigest {
			c.RecordSHA256 = layout.Digest(rec.Format())
		}
		return c
	}
	changed := func(f func(r *layout.CheckpointRecord)) []byte {
		r := rec
		r.Files = append([]layout.CheckpointFile(nil), rec.Files...)
		f(&r)
		return r.Format()
	}
	for _, tc := range []struct {
		name      string
		raw       []byte
		okDigest  bool // accepted against an entry with a digest
		okNoDigst bool // accepted against an entry without one
	}{
		{"as committed", rec.Format(), true, true},
		{"garbage", []byte("not a record"), false, false},
		{"another id", changed(func(r *layout.CheckpointRecord) { r.ID = "1-y" }), false, false},
		{"another name", changed(func(r *layout.CheckpointRecord) { r.Name = "c2" }), false, false},
		{"a later sequence", changed(func(r *layout.CheckpointRecord) { r.Sequence = 200 }), false, false},
		{"a table dropped", changed(func(r *layout.CheckpointRecord) { r.Files = r.Files[1:] }), false, false},
		{"a table added", changed(func(r *layout.CheckpointRecord) {
			r.Files = append(r.Files, layout.CheckpointFile{Name: "000009.sst", Epoch: 1})
		}), false, false},
		{"another epoch", changed(func(r *layout.CheckpointRecord) { r.Files[0].Epoch = 2 }), false, false},
		{"a size changed", changed(func(r *layout.CheckpointRecord) { r.Files[0].Size = 999 }), false, false},
		// Only the digest sees these: the catalog does not hold them.
		{"the MANIFEST cut short", changed(func(r *layout.CheckpointRecord) { r.Manifest.Size = 100 }), false, true},
		{"another MANIFEST digest", changed(func(r *layout.CheckpointRecord) { r.Manifest.SHA256 = "cd" }), false, true},
		{"reformatted", append(rec.Format(), ' '), false, true},
	} {
		for _, withDigest := range []bool{true, false} {
			_, err := VerifyCheckpointRecord(entry(withDigest), tc.raw)
			want := tc.okNoDigst
			if withDigest {
				want = tc.okDigest
			}
			if (err == nil) != want {
				t.Errorf("%s (digest in the catalog: %v): %v; want accepted %v", tc.name, withDigest, err, want)
			}
		}
	}
}
