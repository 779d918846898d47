package storetest

import (
	"context"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Counting wraps a store and counts the requests that reach it, by
// operation (put, get, stat, list, delete, copy), as the store would bill
// them: a DeleteMany is one request per 1000 keys, as S3 DeleteObjects.
type Counting struct {
	objstore.Store
	mu     sync.Mutex
	counts map[string]int
	keys   []string // "op key" of every request, in order
}

// NewCounting wraps s.
func NewCounting(s objstore.Store) *Counting { return &Counting{Store: s, counts: map[string]int{}} }

func (c *Counting) note(op, key string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[op] += n
	c.keys = append(c.keys, op+" "+key)
}

// Counts returns the requests so far by operation.
func (c *Counting) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Total is the number of requests so far.
func (c *Counting) Total() int {
	n := 0
	for _, v := range c.Counts() {
		n += v
	}
	return n
}

// Requests lists "op key" of the requests since request number from.
func (c *Counting) Requests(from int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if from > len(c.keys) {
		return nil
	}
	return append([]string(nil), c.keys[from:]...)
}

// Summary is a short "op=n ..." description, sorted.
func (c *Counting) Summary() string {
	var parts []string
	for k, v := range c.Counts() {
		parts = append(parts, k+"="+strconv.Itoa(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (c *Counting) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.note("put", key, 1)
	return c.Store.Put(ctx, key, r, size, opts)
}

func (c *Counting) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	c.note("get", key, 1)
	return c.Store.Get(ctx, key, off, n)
}

func (c *Counting) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.note("stat", key, 1)
	return c.Store.Stat(ctx, key)
}

func (c *Counting) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	c.note("list", prefix, 1)
	return c.Store.List(ctx, prefix, fn)
}

func (c *Counting) ListDir(ctx context.Context, dir string, fn func(objstore.ObjectInfo) error) error {
	c.note("list", dir, 1)
	return c.Store.ListDir(ctx, dir, fn)
}

func (c *Counting) Delete(ctx context.Context, key string) error {
	c.note("delete", key, 1)
	return c.Store.Delete(ctx, key)
}

func (c *Counting) DeleteMany(ctx context.Context, keys []string) error {
	if len(keys) > 0 {
		c.note("delete", keys[0], (len(keys)+999)/1000)
	}
	return c.Store.DeleteMany(ctx, keys)
}

func (c *Counting) Copy(ctx context.Context, src, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.note("copy", dst, 1)
	return c.Store.Copy(ctx, src, dst, opts)
}
