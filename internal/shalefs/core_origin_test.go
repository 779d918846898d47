package shalefs

import (
	"testing"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TestAddOriginTables: a clone's listing holds its origin tables as
// versions of epoch 0, minus trashed ones; a version of the clone's own
// wins; reads of an origin table go to the origin's key, never the
// clone's.
func TestAddOriginTables(t *testing.T) {
	parent, err := objstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clone, _ := objstore.OpenFile(t.TempDir())
	c := newCore(Config{Store: clone})
	c.origin.Store(&originState{tables: map[string]*originTable{
		"000007.sst": {store: parent, key: layout.ObjectKey("000007.sst", 3), size: 70},
		"000008.sst": {store: parent, key: layout.ObjectKey("000008.sst", 3), size: 80},
		"000009.sst": {store: parent, key: layout.ObjectKey("000009.sst", 2), size: 90, cold: true},
	}})
	files := map[string]*file{"000008.sst": {kind: layout.KindTable, epoch: 1, size: 81}}
	trashed := map[layout.VersionRef]bool{{Name: "000009.sst", Epoch: 0}: true}
	c.addOriginTables(files, trashed)
	if st := files["000007.sst"]; st == nil || st.epoch != 0 || st.size != 70 || st.origin == nil {
		t.Fatalf("origin table: %+v", st)
	}
	if st := files["000008.sst"]; st.epoch != 1 || st.origin != nil {
		t.Fatalf("the clone's own version must win: %+v", st)
	}
	if st := files["000009.sst"]; st != nil {
		t.Fatalf("a trashed origin table is listed: %+v", st)
	}
	if s, k := c.objectAt("000007.sst", files["000007.sst"]); s != parent || k != "000007.sst.00000000000000000003" {
		t.Fatalf("origin table read at %s %s", s.URL(), k)
	}
	if s, k := c.objectAt("000008.sst", files["000008.sst"]); s != clone || k != "000008.sst.00000000000000000001" {
		t.Fatalf("own table read at %s %s", s.URL(), k)
	}
}
