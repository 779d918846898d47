package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func newFileStore(t *testing.T) *FileStore {
	t.Helper()
	s, err := OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func put(t *testing.T, s Store, key, val string, opts PutOptions) (ObjectInfo, error) {
	t.Helper()
	return s.Put(context.Background(), key, strings.NewReader(val), int64(len(val)), opts)
}

func read(t *testing.T, s Store, key string, off, n int64) string {
	t.Helper()
	r, _, err := s.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOpenFileCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := OpenFile(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Fatalf("OpenFile created %s", filepath.Dir(dir))
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := OpenFile(f); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("OpenFile on a regular file: %v", err)
	}
}

// Keys the file layout cannot hold: reserved names, and a key that is also
// a "directory" of other keys (S3 allows both; the suite avoids them).
func TestFileInvalidKeys(t *testing.T) {
	s := newFileStore(t)
	put(t, s, "a/b", "x", PutOptions{})
	for _, k := range []string{"", "/abs", "a//b", "../x", "a/./b", "dir/", ".shale-tmp/x", "a", "a/b/c"} {
		if _, err := put(t, s, k, "v", PutOptions{}); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if got := read(t, s, "a/b", 0, -1); got != "x" {
		t.Fatalf("a/b = %q after rejected puts", got)
	}
}

// S3 has no directories; the file store removes the ones a delete empties.
func TestFileDeleteRemovesEmptyDirs(t *testing.T) {
	s := newFileStore(t)
	ctx := context.Background()
	for _, k := range []string{"db/MANIFEST-000001/00000000000000000001", "db/keep"} {
		if _, err := put(t, s, k, k, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "db/MANIFEST-000001/00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "db", "MANIFEST-000001")); !os.IsNotExist(err) {
		t.Fatal("empty directory left behind after delete")
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "db")); err != nil {
		t.Fatalf("a directory that still holds a key was removed: %v", err)
	}
}

// DeleteMany drops the directories it empties too, checks every key before
// deleting any, and creates nothing in a store never written.
func TestFileDeleteMany(t *testing.T) {
	ctx := context.Background()
	fresh, err := OpenFile(filepath.Join(t.TempDir(), "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.DeleteMany(ctx, []string{"a", "b/c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fresh.Dir()); !os.IsNotExist(err) {
		t.Fatalf("DeleteMany created the store directory: %v", err)
	}

	s := newFileStore(t)
	ks := []string{"db/000012.log/1", "db/000012.log/2", "db/a/b/c", "top"}
	for _, k := range ks {
		if _, err := put(t, s, k, k, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteMany(ctx, []string{"db/a/b/c", ".shale-tmp/x"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("DeleteMany with a reserved key: %v", err)
	}
	if got := read(t, s, "db/a/b/c", 0, -1); got != "db/a/b/c" {
		t.Fatalf("a rejected DeleteMany deleted a key: %q", got)
	}
	if err := s.DeleteMany(ctx, ks[:3]); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".shale-lock .shale-tmp top" {
		t.Fatalf("store directory after DeleteMany holds %q", got)
	}
}

// Put returns the info of its own write, even when another writer replaces
// the object right after it: an owner's next If-Match uses that ETag.
func TestFilePutReturnsOwnInfo(t *testing.T) {
	s := newFileStore(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]string{} // etag -> the put that returned it
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			class := fmt.Sprint("CLASS", w)
			for i := 0; i < 50; i++ {
				val := fmt.Sprintf("%d-%d", w, i)
				info, err := put(t, s, "k", val, PutOptions{StorageClass: class})
				if err != nil {
					t.Error(err)
					return
				}
				if info.Size != int64(len(val)) || info.StorageClass != class {
					t.Errorf("put %s returned another write's info %+v", val, info)
				}
				mu.Lock()
				if prev, dup := seen[info.ETag]; dup {
					t.Errorf("puts %s and %s both returned etag %s", prev, val, info.ETag)
				}
				seen[info.ETag] = val
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}
