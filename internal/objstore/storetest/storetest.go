// Package storetest is the conformance suite every objstore backend runs:
// the Store contract the FileSystem and the fencing protocol rely on,
// checked the same way against a directory and against a real S3 server.
// Backend-specific behaviour (file layout, S3 prefixes) is tested beside
// each backend.
package storetest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Backend is the store implementation under test.
type Backend struct {
	// New returns an empty store for one test.
	New func(t *testing.T) objstore.Store
	// UniqueETags is set when every put gets a new ETag, even for
	// identical content (the file store). S3 ETags are content hashes.
	UniqueETags bool
	// PartSize is the size above which the backend writes an object in
	// parts (an S3 multipart upload), 0 if it has no such threshold. The
	// suite puts conditional objects larger than it and, when it is set,
	// checks that they went up in parts: S3 gives a multipart object the
	// ETag "<hex>-<parts>". Keep it small (S3's minimum is 5 MiB).
	PartSize int64
}

// Run runs the whole suite, one subtest per property.
func Run(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Backend)
	}{
		{"ConditionalPut", testConditionalPut},
		{"CreateOnlyRace", testCreateOnlyRace},
		{"IfMatchRace", testIfMatchRace},
		{"GetRangeStatListDelete", testGetRangeStatListDelete},
		{"InfoAgrees", testInfoAgrees},
		{"StorageClass", testStorageClass},
		{"Copy", testCopy},
		{"Missing", testMissing},
		{"InvalidKeys", testInvalidKeys},
		{"ListStops", testListStops},
		{"Canceled", testCanceled},
		{"LargeObject", testLargeObject},
		{"ListDir", testListDir},
		{"DeleteMany", testDeleteMany},
		{"ConditionalPutInParts", testConditionalPutInParts},
		{"ConditionalPutInPartsOvertaken", testConditionalPutInPartsOvertaken},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, b) })
	}
}

func put(t *testing.T, s objstore.Store, key, val string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	t.Helper()
	return s.Put(context.Background(), key, strings.NewReader(val), int64(len(val)), opts)
}

func mustPut(t *testing.T, s objstore.Store, key, val string, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := put(t, s, key, val, opts)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

func read(t *testing.T, s objstore.Store, key string, off, n int64) string {
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

func list(t *testing.T, s objstore.Store, prefix string) []objstore.ObjectInfo {
	t.Helper()
	var infos []objstore.ObjectInfo
	if err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) error {
		infos = append(infos, o)
		return nil
	}); err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return infos
}

func keys(infos []objstore.ObjectInfo) []string {
	var ks []string
	for _, o := range infos {
		ks = append(ks, o.Key)
	}
	return ks
}

func testConditionalPut(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	first, err := put(t, s, "_shale/epoch/1", "a", objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put(t, s, "_shale/epoch/1", "b", objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create-only put: %v, want ErrPreconditionFailed", err)
	}
	if got := read(t, s, "_shale/epoch/1", 0, -1); got != "a" {
		t.Fatalf("failed put changed the object to %q", got)
	}

	second, err := put(t, s, "_shale/epoch/1", "c", objstore.PutOptions{IfMatch: first.ETag})
	if err != nil {
		t.Fatalf("If-Match with the current etag: %v", err)
	}
	if second.ETag == first.ETag {
		t.Fatal("replacement kept the old etag")
	}
	// A stale owner's etag does not match, even when it writes what the
	// current owner wrote.
	if _, err := put(t, s, "_shale/epoch/1", "c", objstore.PutOptions{IfMatch: first.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("If-Match with a stale etag: %v", err)
	}
	if got := read(t, s, "_shale/epoch/1", 0, -1); got != "c" {
		t.Fatalf("failed If-Match put changed the object to %q", got)
	}
	if _, err := put(t, s, "missing", "x", objstore.PutOptions{IfMatch: first.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("If-Match on a missing key: %v", err)
	}
	_, err = s.Stat(ctx, "missing")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("failed If-Match created the key: %v", err)
	}
	if objstore.IsRetryable(err) {
		t.Fatalf("not found is retryable: %v", err)
	}
	_, err = put(t, s, "_shale/epoch/1", "d", objstore.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, objstore.ErrPreconditionFailed) || objstore.IsRetryable(err) {
		t.Fatalf("create-only put over an existing key: %v (retryable %v), want a final ErrPreconditionFailed", err, objstore.IsRetryable(err))
	}

	if b.UniqueETags {
		// The same content again still gets a new etag, so a stale
		// owner's etag never matches.
		third := mustPut(t, s, "_shale/epoch/1", "c", objstore.PutOptions{IfMatch: second.ETag})
		if third.ETag == second.ETag {
			t.Fatal("rewriting the same content kept the etag")
		}
		if _, err := put(t, s, "_shale/epoch/1", "c", objstore.PutOptions{IfMatch: second.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Fatalf("If-Match with a stale etag of identical content: %v", err)
		}
	}
}

// Many writers race to create one key: exactly one wins.
func testCreateOnlyRace(t *testing.T, b Backend) {
	s := b.New(t)
	for round := 0; round < 20; round++ {
		key := fmt.Sprintf("slot/%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		var winner string
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := put(t, s, key, fmt.Sprint(i), objstore.PutOptions{IfNoneMatch: true})
				if err == nil {
					mu.Lock()
					wins++
					winner = fmt.Sprint(i)
					mu.Unlock()
				} else if !errors.Is(err, objstore.ErrPreconditionFailed) {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d writers won a create-only put", round, wins)
		}
		if got := read(t, s, key, 0, -1); got != winner {
			t.Fatalf("round %d: slot holds %q, the winner wrote %q", round, got, winner)
		}
	}
}

// If-Match is a compare-and-swap: of concurrent swaps from one etag, one
// wins. Every write is distinct content, as S3 ETags are content hashes.
func testIfMatchRace(t *testing.T, b Backend) {
	s := b.New(t)
	cur := mustPut(t, s, "CURRENT", "0", objstore.PutOptions{})
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []objstore.ObjectInfo
		var wrote []string
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				val := fmt.Sprintf("%d-%d", round, i)
				info, err := put(t, s, "CURRENT", val, objstore.PutOptions{IfMatch: cur.ETag})
				if err == nil {
					mu.Lock()
					winners = append(winners, info)
					wrote = append(wrote, val)
					mu.Unlock()
				} else if !errors.Is(err, objstore.ErrPreconditionFailed) {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d swaps won", round, len(winners))
		}
		if got := read(t, s, "CURRENT", 0, -1); got != wrote[0] {
			t.Fatalf("round %d: CURRENT holds %q, the winner wrote %q", round, got, wrote[0])
		}
		cur = winners[0]
	}
}

func testGetRangeStatListDelete(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	mustPut(t, s, "db/000001.sst", "0123456789", objstore.PutOptions{StorageClass: "REDUCED_REDUNDANCY"})
	for _, k := range []string{"db/a.b", "db/a/b", "db/MANIFEST-000001/00000000000000000001", "other"} {
		mustPut(t, s, k, k, objstore.PutOptions{})
	}
	if got := read(t, s, "db/000001.sst", 2, 3); got != "234" {
		t.Fatalf("range read = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 0, 1); got != "0" {
		t.Fatalf("first byte = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 3, -1); got != "3456789" {
		t.Fatalf("read to end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 8, 100); got != "89" {
		t.Fatalf("read past end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 10, 5); got != "" {
		t.Fatalf("read at end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 20, 5); got != "" {
		t.Fatalf("read beyond end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 20, -1); got != "" {
		t.Fatalf("read beyond end to end = %q", got)
	}
	if got := read(t, s, "db/000001.sst", 4, 0); got != "" {
		t.Fatalf("empty read = %q", got)
	}
	if _, _, err := s.Get(ctx, "db/000001.sst", -1, 2); err == nil {
		t.Fatal("negative offset accepted")
	}
	// Get reports the whole object, not the range.
	r, ginfo, err := s.Get(ctx, "db/000001.sst", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if ginfo.Size != 10 || ginfo.Key != "db/000001.sst" || ginfo.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("ranged get info = %+v", ginfo)
	}
	r, ginfo, err = s.Get(ctx, "db/000001.sst", 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if ginfo.Size != 10 {
		t.Fatalf("get beyond end info = %+v", ginfo)
	}

	info, err := s.Stat(ctx, "db/000001.sst")
	if err != nil || info.Size != 10 || info.StorageClass != "REDUCED_REDUNDANCY" || info.Key != "db/000001.sst" || info.ModTime.IsZero() {
		t.Fatalf("stat = %+v, %v", info, err)
	}
	if info, _ := s.Stat(ctx, "other"); info.StorageClass != "STANDARD" {
		t.Fatalf("default storage class = %q", info.StorageClass)
	}
	if _, _, err := s.Get(ctx, "db/nope", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}

	want := "db/000001.sst db/MANIFEST-000001/00000000000000000001 db/a.b db/a/b"
	if got := strings.Join(keys(list(t, s, "db/")), " "); got != want {
		t.Fatalf("list db/ = %s\nwant       %s", got, want)
	}
	if got := strings.Join(keys(list(t, s, "db/a")), " "); got != "db/a.b db/a/b" {
		t.Fatalf("list db/a = %s", got)
	}
	if got := strings.Join(keys(list(t, s, "db/MANIFEST-000001/")), " "); got != "db/MANIFEST-000001/00000000000000000001" {
		t.Fatalf("list db/MANIFEST-000001/ = %s", got)
	}
	if got := list(t, s, "nothing/"); len(got) != 0 {
		t.Fatalf("list of an absent prefix = %v", got)
	}
	if got := list(t, s, "db/000001.sst"); len(got) != 1 || got[0].Size != 10 {
		t.Fatalf("list of a full key = %+v", got)
	}
	if got := len(list(t, s, "")); got != 5 {
		t.Fatalf("list of everything has %d keys (reserved files leaked?)", got)
	}

	if err := s.Delete(ctx, "db/MANIFEST-000001/00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "db/MANIFEST-000001/00000000000000000001"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if _, err := s.Stat(ctx, "db/MANIFEST-000001/00000000000000000001"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
	if got := strings.Join(keys(list(t, s, "db/")), " "); got != "db/000001.sst db/a.b db/a/b" {
		t.Fatalf("list after delete = %s", got)
	}

	c, err := s.Copy(ctx, "db/000001.sst", "db/000002.sst", objstore.PutOptions{IfNoneMatch: true})
	if err != nil || c.Size != 10 {
		t.Fatalf("copy: %+v %v", c, err)
	}
	if _, err := s.Copy(ctx, "db/000001.sst", "db/000002.sst", objstore.PutOptions{IfNoneMatch: true}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("create-only copy over an existing key: %v", err)
	}
}

// The info a put returns is the info every later read reports, so an owner
// can use Put's ETag for its next If-Match.
func testInfoAgrees(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	p := mustPut(t, s, "dir/obj", "hello", objstore.PutOptions{IfNoneMatch: true})
	if p.Key != "dir/obj" || p.Size != 5 || p.ETag == "" || p.StorageClass != "STANDARD" || p.ModTime.IsZero() {
		t.Fatalf("put info = %+v", p)
	}
	st, err := s.Stat(ctx, "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	r, g, err := s.Get(ctx, "dir/obj", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	l := list(t, s, "dir/")
	if len(l) != 1 {
		t.Fatalf("list = %+v", l)
	}
	for name, o := range map[string]objstore.ObjectInfo{"stat": st, "get": g, "list": l[0]} {
		if o.Key != p.Key || o.Size != p.Size || o.ETag != p.ETag || o.StorageClass != p.StorageClass || o.ModTime.IsZero() {
			t.Errorf("%s info = %+v, put returned %+v", name, o, p)
		}
	}
	// An unknown size is allowed.
	u, err := s.Put(ctx, "dir/unsized", strings.NewReader("abc"), -1, objstore.PutOptions{})
	if err != nil || u.Size != 3 {
		t.Fatalf("put of unknown size: %+v, %v", u, err)
	}
	if got := read(t, s, "dir/unsized", 0, -1); got != "abc" {
		t.Fatalf("unsized object = %q", got)
	}
	// An empty object is an object.
	e := mustPut(t, s, "dir/empty", "", objstore.PutOptions{IfNoneMatch: true})
	if e.Size != 0 {
		t.Fatalf("empty put info = %+v", e)
	}
	if got := read(t, s, "dir/empty", 0, -1); got != "" {
		t.Fatalf("empty object = %q", got)
	}
	if got := read(t, s, "dir/empty", 0, 10); got != "" {
		t.Fatalf("range of empty object = %q", got)
	}
}

func testStorageClass(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	rrs := objstore.PutOptions{StorageClass: "REDUCED_REDUNDANCY"}
	if p := mustPut(t, s, "wal/1", "x", rrs); p.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("put info class = %q", p.StorageClass)
	}
	mustPut(t, s, "wal/2", "y", objstore.PutOptions{StorageClass: "STANDARD"})
	mustPut(t, s, "wal/3", "z", objstore.PutOptions{})
	want := map[string]string{"wal/1": "REDUCED_REDUNDANCY", "wal/2": "STANDARD", "wal/3": "STANDARD"}
	for k, class := range want {
		if info, err := s.Stat(ctx, k); err != nil || info.StorageClass != class {
			t.Errorf("stat %s = %+v, %v; want class %s", k, info, err, class)
		}
	}
	for _, o := range list(t, s, "wal/") {
		if o.StorageClass != want[o.Key] {
			t.Errorf("list %s class = %q, want %s", o.Key, o.StorageClass, want[o.Key])
		}
	}
	// Replacing an object replaces its class.
	mustPut(t, s, "wal/1", "x", objstore.PutOptions{})
	if info, _ := s.Stat(ctx, "wal/1"); info.StorageClass != "STANDARD" {
		t.Fatalf("class after an unclassed overwrite = %q", info.StorageClass)
	}
}

func testCopy(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	src := mustPut(t, s, "src", "payload", objstore.PutOptions{StorageClass: "REDUCED_REDUNDANCY"})

	c, err := s.Copy(ctx, "src", "dst/plain", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Key != "dst/plain" || c.Size != 7 || c.StorageClass != "STANDARD" || c.ETag == "" {
		t.Fatalf("copy info = %+v", c)
	}
	if st, err := s.Stat(ctx, "dst/plain"); err != nil || st.ETag != c.ETag || st.StorageClass != "STANDARD" || st.Size != 7 {
		t.Fatalf("stat of copy = %+v, %v; copy returned %+v", st, err, c)
	}
	if got := read(t, s, "dst/plain", 0, -1); got != "payload" {
		t.Fatalf("copy holds %q", got)
	}

	c, err = s.Copy(ctx, "src", "dst/rrs", objstore.PutOptions{StorageClass: "REDUCED_REDUNDANCY"})
	if err != nil || c.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("copy with a class: %+v, %v", c, err)
	}
	if st, _ := s.Stat(ctx, "dst/rrs"); st.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("copy class = %q", st.StorageClass)
	}

	// Copy over an existing object, and conditional copies.
	if _, err := s.Copy(ctx, "src", "dst/plain", objstore.PutOptions{}); err != nil {
		t.Fatalf("copy over an existing key: %v", err)
	}
	mustPut(t, s, "target", "old", objstore.PutOptions{})
	if _, err := s.Copy(ctx, "src", "target", objstore.PutOptions{IfMatch: src.ETag}); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("copy with a wrong If-Match: %v", err)
	}
	if got := read(t, s, "target", 0, -1); got != "old" {
		t.Fatalf("failed conditional copy changed the target to %q", got)
	}
	cur, _ := s.Stat(ctx, "target")
	if _, err := s.Copy(ctx, "src", "target", objstore.PutOptions{IfMatch: cur.ETag}); err != nil {
		t.Fatalf("copy with the current If-Match: %v", err)
	}
	if got := read(t, s, "target", 0, -1); got != "payload" {
		t.Fatalf("conditional copy left %q", got)
	}
	if _, err := s.Copy(ctx, "src", "fresh", objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("create-only copy to a new key: %v", err)
	}
	if _, err := s.Copy(ctx, "nope", "other", objstore.PutOptions{}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("copy of a missing key: %v", err)
	}
	if _, err := s.Stat(ctx, "other"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("failed copy created its target: %v", err)
	}
}

func testMissing(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	// An untouched store: nothing exists, and nothing fails.
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("new store lists %v", keys(got))
	}
	if _, err := s.Stat(ctx, "a/b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, _, err := s.Get(ctx, "a/b", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, _, err := s.Get(ctx, "a/b", 5, 5); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ranged get missing: %v", err)
	}
	if _, _, err := s.Get(ctx, "a/b", 0, 0); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("empty get missing: %v", err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	// A prefix of a key is not a key.
	mustPut(t, s, "a/b/c", "x", objstore.PutOptions{})
	if _, err := s.Stat(ctx, "a/b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat of a key's parent: %v", err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("delete of a key's parent: %v", err)
	}
	if got := read(t, s, "a/b/c", 0, -1); got != "x" {
		t.Fatalf("deleting a parent changed the key: %q", got)
	}
}

func testInvalidKeys(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	mustPut(t, s, "ok", "x", objstore.PutOptions{})
	for _, k := range []string{"", "/abs", "a//b", "../x", "a/./b", "a/..", "dir/"} {
		if _, err := put(t, s, k, "v", objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		}
		if _, _, err := s.Get(ctx, k, 0, -1); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("get %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("stat %q: %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("delete %q: %v, want ErrInvalidKey", k, err)
		}
		if err := s.DeleteMany(ctx, []string{"ok", k}); !errors.Is(err, objstore.ErrInvalidKey) || objstore.IsRetryable(err) {
			t.Errorf("DeleteMany with %q: %v, want a final ErrInvalidKey", k, err)
		}
		if _, err := s.Copy(ctx, "ok", k, objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("copy to %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Copy(ctx, k, "ok2", objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("copy from %q: %v, want ErrInvalidKey", k, err)
		}
		if _, err := put(t, s, k, "v", objstore.PutOptions{}); objstore.IsRetryable(err) {
			t.Errorf("put %q: %v is retryable", k, err)
		}
	}
	if got := keys(list(t, s, "")); len(got) != 1 || got[0] != "ok" {
		t.Fatalf("after rejected writes the store lists %v", got)
	}
}

func testListStops(t *testing.T, b Backend) {
	s := b.New(t)
	for i := 0; i < 5; i++ {
		mustPut(t, s, fmt.Sprintf("k/%d", i), "v", objstore.PutOptions{})
	}
	stop := errors.New("enough")
	var seen []string
	err := s.List(context.Background(), "k/", func(o objstore.ObjectInfo) error {
		seen = append(seen, o.Key)
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || strings.Join(seen, " ") != "k/0 k/1" {
		t.Fatalf("list stopped with %v after %v", err, seen)
	}
}

func testCanceled(t *testing.T, b Backend) {
	s := b.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Put(ctx, "k", strings.NewReader("v"), 1, objstore.PutOptions{IfNoneMatch: true})
	if err == nil {
		t.Fatal("put with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) || objstore.IsRetryable(err) {
		t.Fatalf("put with a canceled context: %v (retryable %v), want context.Canceled, not retryable", err, objstore.IsRetryable(err))
	}
	if _, err := s.Stat(context.Background(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("canceled put created the key: %v", err)
	}

	mustPut(t, s, "k", "v", objstore.PutOptions{})
	err = s.DeleteMany(ctx, []string{"k", "missing"})
	if !errors.Is(err, context.Canceled) || objstore.IsRetryable(err) {
		t.Fatalf("DeleteMany with a canceled context: %v (retryable %v), want context.Canceled, not retryable", err, objstore.IsRetryable(err))
	}
	if _, err := s.Stat(context.Background(), "k"); err != nil {
		t.Fatalf("canceled DeleteMany deleted a key: %v", err)
	}
}

func testLargeObject(t *testing.T, b Backend) {
	s := b.New(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	info, err := s.Put(context.Background(), "big", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(big)) {
		t.Fatalf("size = %d", info.Size)
	}
	if got := read(t, s, "big", int64(len(big))-16, -1); got != "0123456789abcdef" {
		t.Fatalf("tail = %q", got)
	}
	if got := read(t, s, "big", 1<<19+3, 5); got != "34567" {
		t.Fatalf("middle = %q", got)
	}
	if got := read(t, s, "big", 0, -1); got != string(big) {
		t.Fatal("whole object differs")
	}
}

// ListDir lists one level: objects and "directories" (keys ending in /).
func testListDir(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	for _, k := range []string{"CURRENT", "000011.log/001/001", "000011.log/001/002", "000011.log/002/001", "000012.sst/001", "_shale/epoch/001", "a.b"} {
		mustPut(t, s, k, "x"+k, objstore.PutOptions{})
	}
	dir := func(prefix string) string {
		var out []string
		if err := s.ListDir(ctx, prefix, func(o objstore.ObjectInfo) error {
			e := o.Key
			if !strings.HasSuffix(e, "/") {
				e = fmt.Sprintf("%s:%d", e, o.Size)
			}
			out = append(out, e)
			return nil
		}); err != nil {
			t.Fatalf("ListDir(%q): %v", prefix, err)
		}
		return strings.Join(out, " ")
	}
	for prefix, want := range map[string]string{
		"":                "000011.log/ 000012.sst/ CURRENT:8 _shale/ a.b:4",
		"000011.log/":     "000011.log/001/ 000011.log/002/",
		"000011.log/001/": "000011.log/001/001:19 000011.log/001/002:19",
		"000012.sst/":     "000012.sst/001:15",
		"missing/":        "",
	} {
		if got := dir(prefix); got != want {
			t.Errorf("ListDir(%q) = %q, want %q", prefix, got, want)
		}
	}
	if err := s.ListDir(ctx, "000011.log", func(objstore.ObjectInfo) error { return nil }); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("ListDir without a trailing slash: %v", err)
	}
}

// DeleteMany removes many keys at once, more than one S3 request holds;
// missing keys, repeats and "directories" of other keys are not errors.
func testDeleteMany(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	const n = 2500
	var del, written []string
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("wal/%03d/%08d", i/100, i)
		del = append(del, k)
		if i%5 != 0 { // every fifth key is missing
			written = append(written, k)
		}
	}
	del = append(del, "wal/000", "nothing/here", del[1], del[n-1]) // a directory, a missing key, repeats
	kept := []string{"CURRENT", "wal/000/keep", "wal/0240", "wal/024/00002400.x"}
	putAll(t, s, append(append([]string(nil), written...), kept...))
	if got := len(list(t, s, "")); got != len(written)+len(kept) {
		t.Fatalf("wrote %d keys, list finds %d", len(written)+len(kept), got)
	}

	if err := s.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany of no keys: %v", err)
	}
	if err := s.DeleteMany(ctx, []string{}); err != nil {
		t.Fatalf("DeleteMany of an empty slice: %v", err)
	}
	if got := len(list(t, s, "")); got != len(written)+len(kept) {
		t.Fatalf("DeleteMany of no keys left %d keys", got)
	}

	start := time.Now()
	if err := s.DeleteMany(ctx, del); err != nil {
		t.Fatalf("DeleteMany of %d keys: %v", len(del), err)
	}
	t.Logf("DeleteMany of %d keys (%d stored) took %v", len(del), len(written), time.Since(start).Round(time.Millisecond))
	if got, want := strings.Join(keys(list(t, s, "")), " "), "CURRENT wal/000/keep wal/024/00002400.x wal/0240"; got != want {
		t.Fatalf("after DeleteMany the store lists %.300s\nwant %s", got, want)
	}
	for _, k := range kept {
		if got := read(t, s, k, 0, -1); got != "v"+k {
			t.Fatalf("DeleteMany changed %s to %q", k, got)
		}
	}
	for _, k := range []string{del[1], del[n-1], "wal/000/00000001"} {
		if _, err := s.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("stat %s after DeleteMany: %v", k, err)
		}
	}
	// No empty "directories" are left behind.
	var dirs []string
	if err := s.ListDir(ctx, "wal/", func(o objstore.ObjectInfo) error {
		dirs = append(dirs, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dirs, " "); got != "wal/000/ wal/024/ wal/0240" {
		t.Fatalf("ListDir(wal/) after DeleteMany = %q", got)
	}
	// Deleting deleted keys again is a no-op.
	if err := s.DeleteMany(ctx, del); err != nil {
		t.Fatalf("DeleteMany of deleted keys: %v", err)
	}
}

// putAll writes "v"+key to every key, a few at a time.
func putAll(t *testing.T, s objstore.Store, ks []string) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				v := "v" + k
				if _, err := s.Put(context.Background(), k, strings.NewReader(v), int64(len(v)), objstore.PutOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("put %s: %w", k, err):
					default:
					}
				}
			}
		}()
	}
	for _, k := range ks {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// Fencing's conditions hold for objects larger than the backend's part
// size too (large SSTs and MANIFESTs): on S3 the condition is checked when
// the multipart upload completes, and a failed one changes nothing.
func testConditionalPutInParts(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	part := b.PartSize
	if part == 0 {
		part = 1 << 20 // no parts: any object of a few MiB
	}
	size := 2*part + 123 // three parts
	object := func(seed int) []byte {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + seed*13 + i>>20)
		}
		return data
	}
	putBig := func(key string, data []byte, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
		return s.Put(ctx, key, bytes.NewReader(data), size, opts)
	}
	inParts := func(what string, info objstore.ObjectInfo) {
		t.Helper()
		if info.Size != size {
			t.Fatalf("%s: size %d, want %d", what, info.Size, size)
		}
		if b.PartSize == 0 {
			return
		}
		hash, parts, ok := strings.Cut(info.ETag, "-")
		if _, err := hex.DecodeString(hash); !ok || err != nil || len(hash) != 32 || parts != "3" {
			t.Fatalf("%s: ETag %q, want a 3-part multipart ETag \"<md5 hex>-3\" (was the object not uploaded in parts?)", what, info.ETag)
		}
	}
	holds := func(what, key string, data []byte, etag string) {
		t.Helper()
		r, info, err := s.Get(ctx, key, 0, -1)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(got, data) || info.ETag != etag {
			t.Fatalf("%s: %s holds %d other bytes (ETag %s, want %s)", what, key, len(got), info.ETag, etag)
		}
	}
	failed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrPreconditionFailed) || objstore.IsRetryable(err) {
			t.Fatalf("%s: %v (retryable %v), want a final ErrPreconditionFailed", what, err, objstore.IsRetryable(err))
		}
	}
	const key = "sst/000042.sst"
	v1, v2, v3 := object(1), object(2), object(3)

	// Create-only: a new key is created, in parts, of known or unknown size.
	first, err := putBig(key, v1, size, objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatalf("create-only put in parts of a new key: %v", err)
	}
	inParts("create-only put", first)
	holds("after a create-only put", key, v1, first.ETag)
	unsized, err := putBig("sst/000043.sst", v2, -1, objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatalf("create-only put of unknown size of a new key: %v", err)
	}
	inParts("create-only put of unknown size", unsized)

	// A second create-only put of the key fails, whatever its size, and the
	// first object's bytes stay.
	_, err = putBig(key, v2, size, objstore.PutOptions{IfNoneMatch: true})
	failed("second create-only put in parts", err)
	_, err = putBig(key, v2, -1, objstore.PutOptions{IfNoneMatch: true})
	failed("second create-only put of unknown size", err)
	_, err = put(t, s, key, "small", objstore.PutOptions{IfNoneMatch: true})
	failed("second create-only small put", err)
	holds("after failed create-only puts", key, v1, first.ETag)

	// If-Match with the current ETag replaces the object.
	second, err := putBig(key, v2, size, objstore.PutOptions{IfMatch: first.ETag})
	if err != nil {
		t.Fatalf("If-Match put in parts with the current ETag: %v", err)
	}
	inParts("If-Match put", second)
	if second.ETag == first.ETag {
		t.Fatal("If-Match put in parts kept the old ETag")
	}
	holds("after an If-Match put", key, v2, second.ETag)

	// If-Match with a stale ETag changes nothing, nor does If-Match on a
	// missing key create it.
	_, err = putBig(key, v3, size, objstore.PutOptions{IfMatch: first.ETag})
	failed("If-Match put in parts with a stale ETag", err)
	_, err = putBig(key, v3, -1, objstore.PutOptions{IfMatch: first.ETag})
	failed("If-Match put of unknown size with a stale ETag", err)
	holds("after failed If-Match puts", key, v2, second.ETag)
	_, err = putBig("sst/000044.sst", v3, size, objstore.PutOptions{IfMatch: second.ETag})
	failed("If-Match put in parts of a missing key", err)
	if _, err := s.Stat(ctx, "sst/000044.sst"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed If-Match put in parts created its key: %v", err)
	}
	if got := strings.Join(keys(list(t, s, "")), " "); got != "sst/000042.sst sst/000043.sst" {
		t.Fatalf("after conditional puts in parts the store lists %q", got)
	}
}

// The fencing race with large objects: an owner's conditional upload is
// under way (on S3 its multipart upload is initiated and its first part
// sent) when another owner's conditional put of the same key lands. The
// condition is checked when the slow upload completes, so it fails and the
// other owner's object stays.
func testConditionalPutInPartsOvertaken(t *testing.T, b Backend) {
	s := b.New(t)
	ctx := context.Background()
	part := b.PartSize
	if part == 0 {
		part = 1 << 20
	}
	size := 2*part + 123
	object := func(seed int) []byte {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*11 + seed*17 + i>>20)
		}
		return data
	}
	overtaken := func(what, key string, slow, fast objstore.PutOptions, fastSize int64) {
		t.Helper()
		stale, winner := object(1), object(2)
		if fastSize < size {
			winner = winner[:fastSize]
		}
		reached := make(chan struct{}) // the reader goroutine owns gate's fields
		gate := &gatedReader{r: bytes.NewReader(stale), at: part + 1, reached: reached, release: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			_, err := s.Put(ctx, key, gate, size, slow)
			done <- err
		}()
		select {
		case <-reached:
		case err := <-done:
			t.Fatalf("%s: the slow put ended before its gate: %v", what, err)
		}
		won, err := s.Put(ctx, key, bytes.NewReader(winner), fastSize, fast)
		close(gate.release)
		slowErr := <-done
		if err != nil {
			t.Fatalf("%s: the put overtaking an upload in flight: %v", what, err)
		}
		if !errors.Is(slowErr, objstore.ErrPreconditionFailed) || objstore.IsRetryable(slowErr) {
			t.Fatalf("%s: the overtaken upload: %v (retryable %v), want a final ErrPreconditionFailed", what, slowErr, objstore.IsRetryable(slowErr))
		}
		r, info, err := s.Get(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, winner) || info.ETag != won.ETag {
			t.Fatalf("%s: after the overtaken upload failed, %s holds %d other bytes (ETag %s, want %s), %v", what, key, len(got), info.ETag, won.ETag, err)
		}
	}
	createOnly := objstore.PutOptions{IfNoneMatch: true}
	overtaken("create-only, overtaken by a large put", "epoch/1", createOnly, createOnly, size)
	overtaken("create-only, overtaken by a small put", "epoch/2", createOnly, createOnly, 10)

	cur := mustPut(t, s, "MANIFEST", "v0", objstore.PutOptions{})
	ifMatch := objstore.PutOptions{IfMatch: cur.ETag}
	overtaken("If-Match, overtaken by a large put", "MANIFEST", ifMatch, ifMatch, size)
}

// gatedReader reads r, but stops once at offset at: it closes reached and
// waits for release.
type gatedReader struct {
	r                *bytes.Reader
	n, at            int64
	reached, release chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.n == g.at && g.reached != nil {
		close(g.reached)
		g.reached = nil
		<-g.release
	}
	if g.n < g.at && int64(len(p)) > g.at-g.n {
		p = p[:g.at-g.n]
	}
	n, err := g.r.Read(p)
	g.n += int64(n)
	return n, err
}
