package objstore

import (
	"bytes"
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

func TestConditionalPut(t *testing.T) {
	s := newFileStore(t)
	ctx := context.Background()
	first, err := put(t, s, "_shale/epoch/1", "a", PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put(t, s, "_shale/epoch/1", "b", PutOptions{IfNoneMatch: true}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("second create-only put: %v, want ErrPreconditionFailed", err)
	}
	if got := read(t, s, "_shale/epoch/1", 0, -1); got != "a" {
		t.Fatalf("failed put changed the object to %q", got)
	}

	second, err := put(t, s, "_shale/epoch/1", "c", PutOptions{IfMatch: first.ETag})
	if err != nil {
		t.Fatalf("If-Match with the current etag: %v", err)
	}
	if second.ETag == first.ETag {
		t.Fatal("replacement kept the old etag")
	}
	// The same content again still gets a new etag, so a stale owner's
	// etag never matches.
	if _, err := put(t, s, "_shale/epoch/1", "c", PutOptions{IfMatch: first.ETag}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("If-Match with a stale etag: %v", err)
	}
	if _, err := put(t, s, "missing", "x", PutOptions{IfMatch: first.ETag}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("If-Match on a missing key: %v", err)
	}
	if _, err := s.Stat(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed If-Match created the key: %v", err)
	}
}

// Many writers race to create one key: exactly one wins.
func TestCreateOnlyRace(t *testing.T) {
	s := newFileStore(t)
	for round := 0; round < 20; round++ {
		key := fmt.Sprintf("slot/%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := put(t, s, key, fmt.Sprint(i), PutOptions{IfNoneMatch: true})
				if err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, ErrPreconditionFailed) {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d writers won a create-only put", round, wins)
		}
	}
}

// If-Match is a compare-and-swap: of concurrent swaps from one etag, one wins.
func TestIfMatchRace(t *testing.T) {
	s := newFileStore(t)
	cur, err := put(t, s, "CURRENT", "0", PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []ObjectInfo
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				info, err := put(t, s, "CURRENT", fmt.Sprint(i), PutOptions{IfMatch: cur.ETag})
				if err == nil {
					mu.Lock()
					winners = append(winners, info)
					mu.Unlock()
				} else if !errors.Is(err, ErrPreconditionFailed) {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d swaps won", round, len(winners))
		}
		cur = winners[0]
	}
}

func TestGetRangeStatListDelete(t *testing.T) {
	s := newFileStore(t)
	ctx := context.Background()
	if _, err := put(t, s, "db/000001.sst", "0123456789", PutOptions{StorageClass: "REDUCED_REDUNDANCY"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"db/a.b", "db/a/b", "db/MANIFEST-000001/00000000000000000001", "other"} {
		if _, err := put(t, s, k, k, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := read(t, s, "db/000001.sst", 2, 3); got != "234" {
		t.Fatalf("range read = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 8, 100); got != "89" {
		t.Fatalf("read past end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 20, 5); got != "" {
		t.Fatalf("read beyond end = %q", got)
	}
	info, err := s.Stat(ctx, "db/000001.sst")
	if err != nil || info.Size != 10 || info.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("stat = %+v, %v", info, err)
	}
	if info, _ := s.Stat(ctx, "other"); info.StorageClass != "STANDARD" {
		t.Fatalf("default storage class = %q", info.StorageClass)
	}
	if _, _, err := s.Get(ctx, "db/nope", 0, -1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}

	list := func(prefix string) []string {
		var keys []string
		if err := s.List(ctx, prefix, func(o ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	want := "db/000001.sst db/MANIFEST-000001/00000000000000000001 db/a.b db/a/b"
	if got := strings.Join(list("db/"), " "); got != want {
		t.Fatalf("list db/ = %s\nwant       %s", got, want)
	}
	if got := strings.Join(list("db/a"), " "); got != "db/a.b db/a/b" {
		t.Fatalf("list db/a = %s", got)
	}
	if got := list("nothing/"); len(got) != 0 {
		t.Fatalf("list of an absent prefix = %v", got)
	}
	if got := len(list("")); got != 5 {
		t.Fatalf("list of everything has %d keys (reserved files leaked?)", got)
	}

	if err := s.Delete(ctx, "db/MANIFEST-000001/00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "db/MANIFEST-000001/00000000000000000001"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "db", "MANIFEST-000001")); !os.IsNotExist(err) {
		t.Fatal("empty directory left behind after delete")
	}

	c, err := s.Copy(ctx, "db/000001.sst", "db/000002.sst", PutOptions{IfNoneMatch: true})
	if err != nil || c.Size != 10 {
		t.Fatalf("copy: %+v %v", c, err)
	}
	if _, err := s.Copy(ctx, "db/000001.sst", "db/000002.sst", PutOptions{IfNoneMatch: true}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("create-only copy over an existing key: %v", err)
	}
}

func TestInvalidKeys(t *testing.T) {
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

func TestLargeObject(t *testing.T) {
	s := newFileStore(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if _, err := s.Put(context.Background(), "big", bytes.NewReader(big), int64(len(big)), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "big", int64(len(big))-16, -1); got != "0123456789abcdef" {
		t.Fatalf("tail = %q", got)
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
