package cache

import (
	"container/list"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"
)

// DefaultRangeBlock is the size of the aligned ranges the range cache
// fetches and keeps: large enough that a data block (4-16 KiB) rarely
// straddles two, small enough that a random read moves little more than
// it needs.
const DefaultRangeBlock = 64 << 10

// maxRunBlocks bounds one ranged GET of a read; a longer read (a
// readahead, a MultiRead's blocks) is fetched in concurrent GETs.
const maxRunBlocks = 16

// MaxFetchers bounds the concurrent GETs of one read or MultiRead.
const MaxFetchers = 16

// blockKey names one aligned range of one version of a table: the object
// key carries the writer's epoch, so a table rewritten under the same name
// by a later owner never hits blocks of the earlier version.
type blockKey struct {
	object string
	idx    int64
}

type blockEntry struct {
	key  blockKey
	data []byte
}

// fetch is an in-flight ranged GET of consecutive blocks; readers that
// need one of them wait for it rather than fetch it again.
type fetch struct {
	done chan struct{}
	data map[int64][]byte
	err  error
}

// Ranges keeps aligned ranges of tables read from the store, in memory,
// least recently used first out, never more than budget bytes.
type Ranges struct {
	budget int64
	block  int64

	mu       sync.Mutex
	used     int64
	peak     int64
	lru      list.List // of *blockEntry, most recent at the front
	entries  map[blockKey]*list.Element
	inflight map[blockKey]*fetch

	hits, misses, gets, multi atomic.Int64
}

// NewRanges is a range cache of budget bytes in blocks of block bytes
// (0: DefaultRangeBlock).
func NewRanges(budget, block int64) *Ranges {
	if block <= 0 {
		block = DefaultRangeBlock
	}
	return &Ranges{budget: budget, block: block, entries: map[blockKey]*list.Element{}, inflight: map[blockKey]*fetch{}}
}

// RangeStats describes a range cache.
type RangeStats struct {
	Budget, Used, Peak int64 // bytes; Peak is the most ever held
	Hits, Misses, Gets int64 // blocks found, blocks fetched, ranged GETs issued
	MultiReads         int64 // reads of several ranges at once (RocksDB's MultiRead)
	BlockSize          int64
}

// Stats reports the range cache's size and counters (zero for nil).
func (c *Ranges) Stats() RangeStats {
	if c == nil {
		return RangeStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return RangeStats{Budget: c.budget, Used: c.used, Peak: c.peak, Hits: c.hits.Load(), Misses: c.misses.Load(), Gets: c.gets.Load(), MultiReads: c.multi.Load(), BlockSize: c.block}
}

// Span is a byte range [Off, Off+N) of a file.
type Span struct{ Off, N int64 }

// Fetcher reads [off, off+n) of one object: for each attempt (it retries
// as it sees fit) it issues one ranged GET and hands its result to fill,
// which consumes and closes the body and returns the bytes it read and
// the error the attempt ends with.
type Fetcher func(off, n int64, fill func(r io.ReadCloser, err error) (int64, error)) error

// blocksOf returns the sorted distinct indexes of the block-aligned
// ranges covering spans, clipped at the file's size.
func blocksOf(spans []Span, block, size int64) []int64 {
	seen := map[int64]bool{}
	var idx []int64
	for _, s := range spans {
		end := min(s.Off+s.N, size)
		if s.N <= 0 || s.Off >= end {
			continue
		}
		for i := s.Off / block; i*block < end; i++ {
			if !seen[i] {
				seen[i] = true
				idx = append(idx, i)
			}
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	return idx
}

// runsOf groups sorted block indexes into runs of consecutive ones, each
// of at most maxRun blocks: one ranged GET per run.
func runsOf(idx []int64, maxRun int) [][]int64 {
	var runs [][]int64
	for _, i := range idx {
		if n := len(runs); n > 0 {
			last := runs[n-1]
			if last[len(last)-1] == i-1 && len(last) < maxRun {
				runs[n-1] = append(last, i)
				continue
			}
		}
		runs = append(runs, []int64{i})
	}
	return runs
}

// copyOut fills buf with the bytes of [off, off+len(buf)) from blocks,
// clipped at size, and returns how many it copied.
func copyOut(buf []byte, off, block, size int64, blocks map[int64][]byte) int {
	end := min(off+int64(len(buf)), size)
	n := 0
	for pos := off; pos < end; {
		b := blocks[pos/block]
		in := pos % block
		if in >= int64(len(b)) {
			break // a short block: the store's copy ended early
		}
		c := copy(buf[pos-off:end-off], b[in:])
		n += c
		pos += int64(c)
	}
	return n
}

// Read reads spans of one object (one version of a table, size bytes)
// into bufs through the cache: cached blocks are copied, missing ones
// fetched in concurrent ranged GETs of consecutive blocks, shared with
// concurrent readers. It returns the bytes read per span.
func (c *Ranges) Read(object string, size int64, spans []Span, bufs [][]byte, get Fetcher) ([]int, error) {
	if len(spans) > 1 {
		c.multi.Add(1)
	}
	idx := blocksOf(spans, c.block, size)
	have := make(map[int64][]byte, len(idx))
	var mine []int64
	var waits []*fetch
	c.mu.Lock()
	for _, i := range idx {
		k := blockKey{object, i}
		if e := c.entries[k]; e != nil {
			c.lru.MoveToFront(e)
			have[i] = e.Value.(*blockEntry).data
			c.hits.Add(1)
		} else if w := c.inflight[k]; w != nil {
			waits = append(waits, w)
		} else {
			mine = append(mine, i)
		}
	}
	runs := runsOf(mine, maxRunBlocks)
	fetches := make([]*fetch, len(runs))
	for r, run := range runs {
		fetches[r] = &fetch{done: make(chan struct{})}
		for _, i := range run {
			c.inflight[blockKey{object, i}] = fetches[r]
		}
	}
	c.mu.Unlock()
	c.misses.Add(int64(len(mine)))

	fetchOne := func(run []int64, ft *fetch) {
		ft.data, ft.err = c.fetchRun(size, run, get)
		c.mu.Lock()
		for _, i := range run {
			k := blockKey{object, i}
			delete(c.inflight, k)
			if ft.err == nil {
				c.insertLocked(k, ft.data[i])
			}
		}
		c.mu.Unlock()
		close(ft.done)
	}
	if len(runs) == 1 {
		// The usual miss of a Get: one GET, no goroutine.
		fetchOne(runs[0], fetches[0])
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, MaxFetchers)
		for r, run := range runs {
			wg.Add(1)
			sem <- struct{}{}
			go func(run []int64, ft *fetch) {
				defer wg.Done()
				defer func() { <-sem }()
				fetchOne(run, ft)
			}(run, fetches[r])
		}
		wg.Wait()
	}
	var err error
	for _, ft := range append(fetches, waits...) {
		<-ft.done
		if ft.err != nil {
			if err == nil {
				err = ft.err
			}
			continue
		}
		for i, b := range ft.data {
			have[i] = b
		}
	}
	if err != nil {
		return nil, err
	}
	got := make([]int, len(spans))
	for i, s := range spans {
		got[i] = copyOut(bufs[i], s.Off, c.block, size, have)
	}
	return got, nil
}

// fetchRun reads consecutive blocks of an object with one ranged GET per
// attempt of get.
func (c *Ranges) fetchRun(size int64, run []int64, get Fetcher) (map[int64][]byte, error) {
	off := run[0] * c.block
	end := min((run[len(run)-1]+1)*c.block, size)
	var out map[int64][]byte
	err := get(off, end-off, func(r io.ReadCloser, err error) (int64, error) {
		c.gets.Add(1)
		var n int64
		if err == nil {
			out = make(map[int64][]byte, len(run))
			for _, i := range run {
				b := make([]byte, min((i+1)*c.block, end)-i*c.block)
				var m int
				m, err = io.ReadFull(r, b)
				n += int64(m)
				if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
					// The store's copy is shorter than the listing said: keep
					// what came, never cache it as whole.
					err = errShortRange
				}
				if err != nil {
					break
				}
				out[i] = b
			}
			r.Close()
		}
		return n, err
	})
	return out, err
}

var errShortRange = errors.New("table shorter in the store than listed")

// insertLocked adds a block, evicting the least recently used ones so
// the cache never holds more than its budget.
func (c *Ranges) insertLocked(k blockKey, data []byte) {
	n := int64(len(data))
	if n > c.budget {
		return
	}
	if _, ok := c.entries[k]; ok {
		return
	}
	for c.used+n > c.budget {
		e := c.lru.Back()
		be := e.Value.(*blockEntry)
		c.lru.Remove(e)
		delete(c.entries, be.key)
		c.used -= int64(len(be.data))
	}
	c.entries[k] = c.lru.PushFront(&blockEntry{key: k, data: data})
	c.used += n
	c.peak = max(c.peak, c.used)
}
