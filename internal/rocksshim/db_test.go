package rocksshim

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

func openDB(t *testing.T) (*grocksdb.DB, *grocksdb.ReadOptions, *grocksdb.WriteOptions) {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	t.Cleanup(opts.Destroy)
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	ro, wo := grocksdb.NewDefaultReadOptions(), grocksdb.NewDefaultWriteOptions()
	t.Cleanup(ro.Destroy)
	t.Cleanup(wo.Destroy)
	return db, ro, wo
}

// Batch's bytes are RocksDB's own serialization of the same operations.
func TestBatchMatchesWriteBatch(t *testing.T) {
	var b Batch
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	big := bytes.Repeat([]byte("v"), 300) // a varint of two bytes
	for i := 0; i < 5; i++ {
		k := []byte(fmt.Sprintf("key%d", i))
		b.Put(k, big[:i*70])
		wb.Put(k, big[:i*70])
		if i%2 == 0 {
			b.Delete(k)
			wb.Delete(k)
		}
	}
	b.Put(nil, nil)
	wb.Put(nil, nil)
	if b.Count() != wb.Count() {
		t.Fatalf("count %d, RocksDB's %d", b.Count(), wb.Count())
	}
	if !bytes.Equal(b.Data(), wb.Data()) {
		t.Fatalf("serialized batch differs from RocksDB's:\n%x\n%x", b.Data(), wb.Data())
	}
	b.Reset()
	if b.Count() != 0 || len(b.Data()) != batchHeader {
		t.Fatalf("after Reset: count %d, %d bytes", b.Count(), len(b.Data()))
	}
}

// WriteRep applies puts and deletes; Get and MultiGet read them back,
// values larger than the scratch buffers included (and small ones after
// those: the thread's value buffer was let go), and tell an empty value
// from a missing key.
func TestFastPaths(t *testing.T) {
	db, ro, wo := openDB(t)
	huge := bytes.Repeat([]byte("0123456789"), 10<<10) // > 16 KiB scratch
	var b Batch
	b.Put([]byte("a"), []byte("1"))
	b.Put([]byte("empty"), nil)
	b.Put([]byte("huge"), huge)
	b.Put([]byte("gone"), []byte("x"))
	b.Delete([]byte("gone"))
	if err := WriteRep(db, wo, b.Data()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key   string
		want  []byte
		found bool
	}{{"a", []byte("1"), true}, {"empty", []byte{}, true}, {"huge", huge, true}, {"gone", nil, false}, {"never", nil, false}, {"a", []byte("1"), true}} {
		v, ok, err := Get(db, ro, []byte(c.key))
		if err != nil || ok != c.found || !bytes.Equal(v, c.want) || (ok && v == nil) {
			t.Errorf("Get(%q) = %d bytes, %v, %v; want %d bytes, %v", c.key, len(v), ok, err, len(c.want), c.found)
		}
	}
	keys := [][]byte{[]byte("huge"), []byte("never"), []byte("a"), []byte("empty"), []byte("gone"), []byte("a")}
	vals, found, err := MultiGet(db, ro, keys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{string(huge), "", "1", "", "", "1"}
	wantFound := []bool{true, false, true, true, false, true}
	for i := range keys {
		if found[i] != wantFound[i] || string(vals[i]) != want[i] || (found[i] && vals[i] == nil) {
			t.Errorf("MultiGet[%d] %q = %q, %v; want %d bytes, %v", i, keys[i], vals[i], found[i], len(want[i]), wantFound[i])
		}
	}
	if err := WriteRep(db, wo, []byte("not a batch")); err == nil {
		t.Error("a malformed batch was applied")
	}
}
