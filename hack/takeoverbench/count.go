package main

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shale-rocks/shale/internal/objstore"
)

// counter is a set of named counts, safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *counter) add(name string, v int64) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[name] += v
	c.mu.Unlock()
}

// snapshot returns the counts and resets them.
func (c *counter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	if out == nil {
		out = map[string]int64{}
	}
	c.n = nil
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// countingStore counts the calls made to a Store, by operation, and the
// bytes moved by puts and gets. It knows nothing of the keys: methods the
// Store interface may gain later are passed through uncounted.
type countingStore struct {
	objstore.Store
	calls    counter
	putBytes atomic.Int64
	getBytes atomic.Int64
}

func (c *countingStore) reset() {
	c.calls.snapshot()
	c.putBytes.Store(0)
	c.getBytes.Store(0)
}

func (c *countingStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.calls.add("put", 1)
	if size > 0 {
		c.putBytes.Add(size)
	}
	return c.Store.Put(ctx, key, r, size, opts)
}

func (c *countingStore) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	c.calls.add("get", 1)
	r, info, err := c.Store.Get(ctx, key, offset, length)
	if err != nil {
		return r, info, err
	}
	return &countingReader{ReadCloser: r, n: &c.getBytes}, info, nil
}

func (c *countingStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.calls.add("stat", 1)
	return c.Store.Stat(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	c.calls.add("list", 1)
	return c.Store.List(ctx, prefix, fn)
}

func (c *countingStore) ListDir(ctx context.Context, dir string, fn func(objstore.ObjectInfo) error) error {
	c.calls.add("listdir", 1)
	return c.Store.ListDir(ctx, dir, fn)
}

func (c *countingStore) Delete(ctx context.Context, key string) error {
	c.calls.add("delete", 1)
	return c.Store.Delete(ctx, key)
}

func (c *countingStore) DeleteMany(ctx context.Context, keys []string) error {
	c.calls.add("deletemany", 1)
	c.calls.add("deletemany_keys", int64(len(keys)))
	return c.Store.DeleteMany(ctx, keys)
}

func (c *countingStore) Copy(ctx context.Context, src, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.calls.add("copy", 1)
	return c.Store.Copy(ctx, src, dst, opts)
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// countingTransport counts the HTTP requests an S3 client sends, by kind:
// what the server actually serves (a List call over many keys is one
// request per page of up to 1000).
type countingTransport struct {
	base http.RoundTripper
	reqs counter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.reqs.add(requestKind(r), 1)
	return t.base.RoundTrip(r)
}

// requestKind classifies an S3 request by method and query, never by key.
func requestKind(r *http.Request) string {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		if q.Has("list-type") || q.Has("delimiter") || q.Has("prefix") || q.Has("marker") {
			return "LIST"
		}
		if q.Has("location") {
			return "GET-location"
		}
		return "GET"
	case http.MethodPost:
		if q.Has("delete") {
			return "POST-delete"
		}
		return "POST"
	}
	return strings.ToUpper(r.Method)
}
