package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func open(t *testing.T, dir string) *DB {
	t.Helper()
	d, err := Open(dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestOpenCreatesMissingParents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "db")
	d := open(t, dir)
	if err := d.Put([]byte("k"), []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusals(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	notDB := filepath.Join(root, "home")
	os.MkdirAll(notDB, 0o755)
	os.WriteFile(filepath.Join(notDB, "notes.txt"), []byte("mine"), 0o644)
	locked := filepath.Join(root, "locked")
	open(t, locked)

	for _, tc := range []struct {
		name, dir, want string
		is              error
	}{
		{"regular file", file, "is not a directory", nil},
		{"under a regular file", filepath.Join(file, "db"), "not a directory", nil},
		{"foreign files", notDB, "holds no RocksDB database", ErrNotADatabase},
		{"already open", locked, "already open", ErrLocked},
		{"relative", "rel/db", "must be absolute", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, root)
			_, err := Open(tc.dir, DefaultOptions())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%s) = %v, want error containing %q", tc.dir, err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			if after := snapshot(t, root); after != before {
				t.Fatalf("failed open changed the filesystem:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A failed open removes the directories it created.
func TestFailedOpenCleansUp(t *testing.T) {
	root := t.TempDir()
	ro := filepath.Join(root, "ro")
	os.Mkdir(ro, 0o555)
	if os.Geteuid() == 0 {
		// root ignores permissions: make creation fail another way.
		os.WriteFile(filepath.Join(root, "blocker"), nil, 0o644)
		ro = filepath.Join(root, "blocker")
	}
	before := snapshot(t, root)
	if _, err := Open(filepath.Join(ro, "x", "db"), DefaultOptions()); err == nil {
		t.Fatal("open under an unusable parent succeeded")
	}
	if after := snapshot(t, root); after != before {
		t.Fatalf("left behind: %s -> %s", before, after)
	}
}

func snapshot(t *testing.T, root string) string {
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !strings.HasSuffix(p, "LOG") {
			fmt.Fprintf(&b, "%s:%d ", strings.TrimPrefix(p, root), fi.Size())
		}
		return nil
	})
	return b.String()
}

func TestScanBounds(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "db"))
	var ms []Mutation
	for _, k := range []string{"a", "b", "ba", "bb", "c", "\xff", "\xff\xff"} {
		ms = append(ms, Mutation{Key: []byte(k), Value: []byte("v" + k)})
	}
	if err := d.Write(ms, false); err != nil {
		t.Fatal(err)
	}
	scan := func(o ScanOptions) string {
		var keys []string
		if err := d.Scan(o, func(k, v []byte) error {
			if !o.KeysOnly && string(v) != "v"+string(k) {
				t.Fatalf("value of %q = %q", k, v)
			}
			keys = append(keys, string(k))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(keys, ",")
	}
	for _, tc := range []struct {
		o    ScanOptions
		want string
	}{
		{ScanOptions{}, "a,b,ba,bb,c,\xff,\xff\xff"},
		{ScanOptions{Start: []byte("b"), End: []byte("c")}, "b,ba,bb"},
		{ScanOptions{Start: []byte("b"), End: []byte("c"), Reverse: true}, "bb,ba,b"},
		{ScanOptions{Prefix: []byte("b")}, "b,ba,bb"},
		{ScanOptions{Prefix: []byte("b"), Reverse: true, Limit: 2}, "bb,ba"},
		{ScanOptions{Prefix: []byte("\xff")}, "\xff,\xff\xff"},
		{ScanOptions{Start: []byte("bb"), Limit: 2, KeysOnly: true}, "bb,c"},
		{ScanOptions{Start: []byte("b"), End: []byte("b")}, ""},
	} {
		if got := scan(tc.o); got != tc.want {
			t.Errorf("scan %+v = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a": "b", "a\xff": "b", "\xff\xff": "", "ab": "ac"} {
		if got := string(PrefixEnd([]byte(in))); got != want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatsAfterFlush(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "db"))
	for i := 0; i < 1000; i++ {
		d.Put([]byte(fmt.Sprintf("key%05d", i)), []byte("value"), false)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.SSTFiles != 1 || s.FilesPerLevel[0] != 1 || s.LiveSSTBytes == 0 || s.EstimatedKeys != 1000 {
		t.Fatalf("stats after one flush: %+v", s)
	}
	if got := d.LatestSequence(); got != 1000 {
		t.Fatalf("latest sequence = %d, want 1000", got)
	}
	d.Close()
	if _, _, err := d.Get([]byte("key00001")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}
