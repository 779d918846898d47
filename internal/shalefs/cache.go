package shalefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// tableCache accounts for the tables kept in the local cache directory
// and evicts the least recently opened ones beyond the budget. Logs and
// small objects are not counted: they are bounded by RocksDB's own limits.
type tableCache struct {
	mu     sync.Mutex
	budget int64 // 0: unbounded
	used   int64
	tables map[string]*cachedTable
	evict  func(name string) // makes open readers go remote

	// ranges holds aligned ranges of tables read from the store
	// (blockcache.go); built on first use from Config.RangeCacheBytes.
	rangesOnce sync.Once
	ranges     *rangeCache
}

type cachedTable struct {
	size     int64
	lastOpen time.Time
}

func (c *tableCache) add(name string, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.tables[name]; old != nil {
		c.used -= old.size
	}
	c.tables[name] = &cachedTable{size: size, lastOpen: time.Now()}
	c.used += size
}

func (c *tableCache) touch(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[name]; t != nil {
		t.lastOpen = time.Now()
		return true
	}
	return false
}

func (c *tableCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[name]; t != nil {
		c.used -= t.size
		delete(c.tables, name)
	}
}

// makeRoom evicts least recently opened tables (never keep) until need
// more bytes fit, and reports whether they do.
func (c *tableCache) makeRoom(need int64, keep string, dir string) bool {
	if c.budget <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if need > c.budget {
		return false
	}
	if c.used+need <= c.budget {
		return true
	}
	names := make([]string, 0, len(c.tables))
	for n := range c.tables {
		if n != keep {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return c.tables[names[i]].lastOpen.Before(c.tables[names[j]].lastOpen) })
	for _, n := range names {
		if c.used+need <= c.budget {
			break
		}
		if c.evict != nil {
			c.evict(n)
		}
		os.Remove(dir + "/" + n)
		c.used -= c.tables[n].size
		delete(c.tables, n)
	}
	return c.used+need <= c.budget
}

// SetEvictor implements rocksshim.FileSystemHooks.
func (f *FS) SetEvictor(evict func(name string)) {
	f.cache.mu.Lock()
	f.cache.evict = evict
	f.cache.mu.Unlock()
}

// OpenTable implements rocksshim.FileSystemHooks: a table with a local
// copy is read locally; one without is fetched whole when it fits the
// cache budget, and otherwise read from the store range by range.
func (f *FS) OpenTable(name, activity string) error {
	if f.cache.touch(name) {
		if _, err := os.Stat(f.localPath(name)); err == nil {
			return nil
		}
		f.cache.forget(name)
	}
	if _, err := os.Stat(f.localPath(name)); err == nil {
		// Written by RocksDB before the FS accounted for it (cannot happen
		// after Close); account for it now.
		if fi, err := os.Stat(f.localPath(name)); err == nil {
			f.cache.add(name, fi.Size())
		}
		return nil
	}
	size, ok := f.Stat(name)
	if !ok {
		return fmt.Errorf("open table %s: %w", name, os.ErrNotExist)
	}
	if readsRemotely(f.tierOf(name)) || (f.cfg.FetchWhole != nil && !f.cfg.FetchWhole(name)) {
		return rocksshim.ErrReadRemote
	}
	// Fetch whole only what leaves room for others: at most an eighth.
	if f.cache.budget > 0 && size > f.cache.budget/8 || !f.cache.makeRoom(size, name, f.cfg.CacheDir) {
		return rocksshim.ErrReadRemote
	}
	if err := f.Fetch(name, activity); err != nil {
		return err
	}
	f.cache.add(name, size)
	return nil
}

// ReadAt implements rocksshim.FileSystemHooks: a ranged read of a table.
func (f *FS) ReadAt(name string, off int64, buf []byte, activity string) (int, error) {
	got, err := f.MultiReadAt(name, []int64{off}, [][]byte{buf}, activity)
	if err != nil {
		return 0, err
	}
	return got[0], nil
}

// MultiReadAt implements rocksshim.MultiReadHooks: ranged reads of one
// table, bufs[i] at offs[i], fetched concurrently. Foreground reads go
// through the range cache; flushes and compactions read each range once
// and straight from the store, so they do not push the hot blocks out.
func (f *FS) MultiReadAt(name string, offs []int64, bufs [][]byte, activity string) ([]int, error) {
	if activity == "foreground_read" && !f.serving.Load() {
		activity = "open"
	}
	f.mu.Lock()
	st := f.fileLocked(name)
	var snap file
	if st != nil {
		snap = file{epoch: st.epoch, size: st.size, tier: st.tier}
	}
	f.mu.Unlock()
	if st == nil {
		return nil, fmt.Errorf("read %s: %w", name, os.ErrNotExist)
	}
	spans := make([]span, len(offs))
	for i := range offs {
		spans[i] = span{offs[i], int64(len(bufs[i]))}
	}
	if c := f.rangeCache(); c != nil && (activity == "foreground_read" || activity == "open") {
		return f.readRanges(c, name, &snap, spans, bufs, activity)
	}
	got := make([]int, len(spans))
	if len(spans) == 1 {
		// RocksDB's ordinary Read: no goroutine for one GET.
		var err error
		got[0], err = f.readDirect(name, &snap, spans[0].off, bufs[0], activity)
		return got, err
	}
	errs := make([]error, len(spans))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxFetchers)
	for i := range spans {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			got[i], errs[i] = f.readDirect(name, &snap, spans[i].off, bufs[i], activity)
		}(i)
	}
	wg.Wait()
	return got, errors.Join(errs...)
}

// readDirect reads one range of a table with one ranged GET.
func (f *FS) readDirect(name string, st *file, off int64, buf []byte, activity string) (int, error) {
	pol := f.background()
	if activity == "foreground_read" {
		pol = f.foreground()
	}
	var n int
	err := pol.do(context.Background(), func(ctx context.Context) error {
		start := time.Now()
		r, _, err := f.tierStore(st.tier).Get(ctx, layout.ObjectKey(name, st.epoch), off, int64(len(buf)))
		if err == nil {
			n, err = io.ReadFull(r, buf)
			r.Close()
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = nil // a read at the end of the table
			}
		}
		f.observeTier(st.tier, "get", name, activity, int64(n), start, err)
		return err
	})
	return n, err
}

// cacheVersionsDir, inside the cache directory, records which epoch's
// version of each cached table the local copy is: two owners can write
// different tables under one name (docs/fencing.md, Layout), so a copy is
// reused after a restart only if it is the version the store now serves.
const cacheVersionsDir = ".shale-versions"

func (f *FS) noteCachedVersion(name string, epoch uint64) {
	dir := filepath.Join(f.cfg.CacheDir, cacheVersionsDir)
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, name), []byte(layout.FormatNumber(epoch)), 0o644)
	}
}

// cachedVersion is the epoch of the local copy of a table, if recorded.
func (f *FS) cachedVersion(name string) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(f.cfg.CacheDir, cacheVersionsDir, name))
	if err != nil {
		return 0, false
	}
	return layout.ParseNumber(string(b))
}
