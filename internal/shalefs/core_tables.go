package shalefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/cache"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// SetEvictor implements rocksshim.FileSystemHooks.
func (f *core) SetEvictor(evict func(name string)) {
	f.cache.SetEvictor(evict)
}

// OpenTable implements rocksshim.FileSystemHooks: a table with a local
// copy is read locally; one without is fetched whole when it fits the
// cache budget, and otherwise read from the store range by range.
func (f *core) openTable(name string, activity Activity) error {
	if f.cache.Touch(name) {
		if _, err := os.Stat(f.localPath(name)); err == nil {
			return nil
		}
		f.cache.Forget(name)
	}
	if _, err := os.Stat(f.localPath(name)); err == nil {
		// Written by RocksDB before the FS accounted for it (cannot happen
		// after Close); account for it now.
		if fi, err := os.Stat(f.localPath(name)); err == nil {
			f.cache.Add(name, fi.Size())
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
	if f.cache.Budget() > 0 && size > f.cache.Budget()/8 || !f.cache.MakeRoom(size, name) {
		return rocksshim.ErrReadRemote
	}
	if err := f.fetch(name, activity); err != nil {
		return err
	}
	f.cache.Add(name, size)
	return nil
}

// MultiReadAt implements rocksshim.MultiReadHooks: ranged reads of one
// table, bufs[i] at offs[i], fetched concurrently. Foreground reads go
// through the range cache; flushes and compactions read each range once
// and straight from the store, so they do not push the hot blocks out.
func (f *core) multiRead(name string, offs []int64, bufs [][]byte, activity Activity) ([]int, error) {
	if activity == ActForegroundRead && !f.serving.Load() {
		activity = ActOpen
	}
	f.mu.Lock()
	st := f.fileLocked(name)
	var snap file
	if st != nil {
		snap = file{epoch: st.epoch, size: st.size, tier: st.tier, origin: st.origin}
	}
	f.mu.Unlock()
	if st == nil {
		return nil, fmt.Errorf("read %s: %w", name, os.ErrNotExist)
	}
	spans := make([]cache.Span, len(offs))
	for i := range offs {
		spans[i] = cache.Span{Off: offs[i], N: int64(len(bufs[i]))}
	}
	if c := f.rangeCache(); c != nil && (activity == ActForegroundRead || activity == ActOpen) {
		return c.Read(layout.ObjectKey(name, snap.epoch), snap.size, spans, bufs, f.rangeFetcher(name, &snap, activity))
	}
	got := make([]int, len(spans))
	if len(spans) == 1 {
		// RocksDB's ordinary Read: no goroutine for one GET.
		var err error
		got[0], err = f.readDirect(name, &snap, spans[0].Off, bufs[0], activity)
		return got, err
	}
	errs := make([]error, len(spans))
	var wg sync.WaitGroup
	sem := make(chan struct{}, cache.MaxFetchers)
	for i := range spans {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			got[i], errs[i] = f.readDirect(name, &snap, spans[i].Off, bufs[i], activity)
		}(i)
	}
	wg.Wait()
	return got, errors.Join(errs...)
}

// readDirect reads one range of a table with one ranged GET.
func (f *core) readDirect(name string, st *file, off int64, buf []byte, activity Activity) (int, error) {
	pol := f.background()
	if activity == ActForegroundRead {
		pol = f.foreground()
	}
	var n int
	err := pol.do(context.Background(), func(ctx context.Context) error {
		start := time.Now()
		store, key := f.objectAt(name, st)
		r, _, err := store.Get(ctx, key, off, int64(len(buf)))
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

// RangeCacheStats reports the range cache's size and counters.
func (f *core) RangeCacheStats() cache.RangeStats { return f.rangeCache().Stats() }

// rangeCache is the FS's range cache, nil when Config.RangeCacheBytes is 0.
func (f *core) rangeCache() *cache.Ranges {
	f.rangesOnce.Do(func() {
		if f.cfg.RangeCacheBytes > 0 {
			f.ranges = cache.NewRanges(f.cfg.RangeCacheBytes, f.cfg.RangeBlockBytes)
		}
	})
	return f.ranges
}

// rangeFetcher reads ranges of one version of a table (st) for the range
// cache, one ranged GET per attempt, under the read timeout and retry
// policy of the activity.
func (f *core) rangeFetcher(name string, st *file, activity Activity) cache.Fetcher {
	return func(off, n int64, fill func(r io.ReadCloser, err error) (int64, error)) error {
		pol := f.background()
		if activity == ActForegroundRead {
			pol = f.foreground()
		}
		return pol.do(context.Background(), func(ctx context.Context) error {
			start := time.Now()
			store, key := f.objectAt(name, st)
			r, _, err := store.Get(ctx, key, off, n)
			got, err := fill(r, err)
			f.observeTier(st.tier, "get", name, activity, got, start, err)
			return err
		})
	}
}
