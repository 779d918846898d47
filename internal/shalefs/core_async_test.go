package shalefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
)

// failStore fails every GET of a table while armed (an object store that
// goes away in the middle of a read).
type failStore struct {
	objstore.Store
	armed atomic.Bool
}

var errInjected = errors.New("injected GET failure")

func (s *failStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if s.armed.Load() && strings.Contains(key, ".sst") {
		return nil, objstore.ObjectInfo{}, errInjected
	}
	return s.Store.Get(ctx, key, off, n)
}

// getLog records the foreground GETs of tables as intervals, to count
// them and to find how many were in flight at once.
type getLog struct {
	mu   sync.Mutex
	ends []time.Time
	durs []time.Duration
}

func (l *getLog) observe(r Request) {
	if r.Op != "get" || r.FileType != "sst" || r.Activity != ActForegroundRead.String() {
		return
	}
	l.mu.Lock()
	l.ends = append(l.ends, time.Now())
	l.durs = append(l.durs, r.Duration)
	l.mu.Unlock()
}

func (l *getLog) reset() {
	l.mu.Lock()
	l.ends, l.durs = nil, nil
	l.mu.Unlock()
}

// stats returns the number of GETs and the most in flight at once.
func (l *getLog) stats() (n, maxInFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type ev struct {
		t     time.Time
		delta int
	}
	var evs []ev
	for i, e := range l.ends {
		evs = append(evs, ev{e.Add(-l.durs[i]), 1}, ev{e, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t.Equal(evs[j].t) {
			return evs[i].delta < evs[j].delta // an end before a start at the same instant
		}
		return evs[i].t.Before(evs[j].t)
	})
	cur := 0
	for _, e := range evs {
		cur += e.delta
		maxInFlight = max(maxInFlight, cur)
	}
	return len(l.ends), maxInFlight
}

// asyncReader opens the database of store from an empty cache (a cold
// start) with every table left in the store.
func asyncReader(t *testing.T, store objstore.Store, epoch uint64, asyncIO bool, rangeCache int64, log *getLog, tune ...func(*engine.Tuning)) (*Owner, *engine.DB) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("c%d", epoch))
	f, err := Open(context.Background(), Config{Store: store, CacheDir: dir, Epoch: epoch, Lease: 50 * time.Millisecond,
		CacheBytes: 1, RangeCacheBytes: rangeCache, RangeBlockBytes: 16 << 10, Observe: log.observe})
	if err != nil {
		t.Fatal(err)
	}
	o := engine.DefaultOptions()
	o.FileSystem = f
	o.BlockCacheBytes = 64 << 10 // reads must reach the file system
	o.Tuning.AsyncIO = asyncIO
	o.Tuning.OptimizeMultiGetForIO = asyncIO
	for _, f := range tune {
		f(&o.Tuning)
	}
	d, err := engine.Open(dir, o)
	if err != nil {
		f.Stop()
		t.Fatal(err)
	}
	f.Serving()
	if n := dirTableBytes(t, dir); n != 0 {
		t.Fatalf("%d bytes of tables cached locally; want every table read from the store", n)
	}
	return f, d
}

// readAll returns what a full scan, some bounded scans and MultiGets of
// 32 keys read, in one comparable form.
func readAll(t *testing.T, d *engine.DB) []string {
	t.Helper()
	var out []string
	if err := d.Scan(engine.ScanOptions{}, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	for i := 0; i < 20; i++ {
		start := fmt.Sprintf("k%06d", i*1000)
		out = append(out, "scan from "+start)
		if err := d.Scan(engine.ScanOptions{Start: []byte(start), Limit: 300, Reverse: i%4 == 3}, func(k, v []byte) error {
			out = append(out, string(k)+"="+string(v))
			return nil
		}); err != nil {
			t.Fatalf("scan from %s: %v", start, err)
		}
	}
	rng := rand.New(rand.NewSource(11))
	for round := 0; round < 100; round++ {
		batch := make([][]byte, 32)
		for i := range batch {
			batch[i] = []byte(fmt.Sprintf("k%06d", rng.Intn(20000)))
		}
		vals, found, err := d.MultiGet(batch)
		if err != nil {
			t.Fatalf("MultiGet: %v", err)
		}
		for i, k := range batch {
			out = append(out, fmt.Sprintf("get %s %v %s", k, found[i], vals[i]))
		}
	}
	return out
}

// With async_io, scans and MultiGets of a database whose tables all stay
// in the store read exactly what the synchronous path reads (and what
// was written), and a single scanning thread has several GETs in flight:
// RocksDB's asynchronous prefetch and seeks reach the store in parallel.
func TestAsyncIOReadsRemoteTables(t *testing.T) {
	store, model := rangeDB(t)
	var log getLog

	f, d := asyncReader(t, store, 2, false, 0, &log)
	s, _ := d.Stats()
	if s.SSTFiles < 3 {
		t.Fatalf("%d tables; want several", s.SSTFiles)
	}
	want := readAll(t, d)
	syncGets, _ := log.stats()
	log.reset()
	if err := d.Scan(engine.ScanOptions{}, func(k, v []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	syncScanGets, syncInFlight := log.stats()
	d.Close()
	f.Stop()

	// The synchronous path reads what was written.
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if want[i] != k+"="+model[k] {
			t.Fatalf("sync scan, key %d: %.40q, want %.40q", i, want[i], k+"="+model[k])
		}
	}

	for _, rc := range []int64{0, 256 << 10} {
		log.reset()
		f, d := asyncReader(t, store, uint64(3+rc>>10), true, rc, &log)
		got := readAll(t, d)
		if !reflect.DeepEqual(got, want) {
			for i := range min(len(got), len(want)) {
				if got[i] != want[i] {
					t.Fatalf("range cache %d: async read %d differs: %.60q, sync %.60q", rc, i, got[i], want[i])
				}
			}
			t.Fatalf("range cache %d: async read %d results, sync %d", rc, len(got), len(want))
		}
		gets, _ := log.stats()
		log.reset()
		if err := d.Scan(engine.ScanOptions{}, func(k, v []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		scanGets, inFlight := log.stats()
		t.Logf("range cache %d: GETs of tables for all reads: sync %d, async %d; one full scan: sync %d GETs (at most %d at once), async %d (at most %d at once); range cache %+v",
			rc, syncGets, gets, syncScanGets, syncInFlight, scanGets, inFlight, f.RangeCacheStats())
		if rc == 0 && inFlight < 2 {
			t.Errorf("a full scan with async_io had at most %d GET in flight; want RocksDB's asynchronous reads concurrent with its reads", inFlight)
		}
		if rc > 0 && f.RangeCacheStats().Misses == 0 {
			t.Errorf("range cache not filled by async reads: %+v", f.RangeCacheStats())
		}
		d.Close()
		f.Stop()
	}
}

// A store failing in the middle of asynchronous reads makes the scan or
// MultiGet fail with an IO error (never a short or wrong result, never a
// crash), and once it is back every key reads again.
func TestAsyncIOReadErrors(t *testing.T) {
	base, model := rangeDB(t)
	store := &failStore{Store: base}
	var log getLog
	f, d := asyncReader(t, store, 2, true, 0, &log)
	defer f.Stop()
	defer d.Close()
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	for _, after := range []int{1, 100, 1000, 3000} {
		var seen []string
		err := d.Scan(engine.ScanOptions{}, func(k, v []byte) error {
			if model[string(k)] != string(v) {
				return fmt.Errorf("scan %s: %d bytes, want %d", k, len(v), len(model[string(k)]))
			}
			seen = append(seen, string(k))
			if len(seen) == after {
				store.armed.Store(true)
			}
			return nil
		})
		store.armed.Store(false)
		if err == nil || !strings.Contains(err.Error(), errInjected.Error()) {
			t.Fatalf("scan with the store failing after %d keys: %v (%d keys); want the injected error", after, err, len(seen))
		}
		if !reflect.DeepEqual(seen, keys[:len(seen)]) {
			t.Fatalf("scan failing after %d keys saw %d keys out of order or missing", after, len(seen))
		}
		t.Logf("store failing after %d keys: scan stopped after %d: %v", after, len(seen), err)

		store.armed.Store(true)
		batch := make([][]byte, 32)
		for i := range batch {
			batch[i] = []byte(keys[(after*7+i*97)%len(keys)])
		}
		_, _, err = d.MultiGet(batch)
		store.armed.Store(false)
		if err == nil || !strings.Contains(err.Error(), errInjected.Error()) {
			t.Fatalf("MultiGet with the store failing: %v; want the injected error", err)
		}
	}

	// Back: nothing lost, nothing stuck.
	var seen []string
	if err := d.Scan(engine.ScanOptions{}, func(k, v []byte) error {
		if model[string(k)] != string(v) {
			return fmt.Errorf("scan %s: %d bytes, want %d", k, len(v), len(model[string(k)]))
		}
		seen = append(seen, string(k))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, keys) {
		t.Fatalf("scan after the store came back saw %d keys, want %d", len(seen), len(keys))
	}
	vals, found, err := d.MultiGet([][]byte{[]byte(keys[0]), []byte(keys[len(keys)/2]), []byte(keys[len(keys)-1])})
	if err != nil || !found[0] || !found[1] || !found[2] || string(vals[1]) != model[keys[len(keys)/2]] {
		t.Fatalf("MultiGet after the store came back: %v %v", found, err)
	}
}

// tableGets records when each GET of a table began and ended (its body
// closed), to find how many different tables were read at once.
type tableGets struct {
	objstore.Store
	mu   sync.Mutex
	on   bool
	gets []tableGet
}

type tableGet struct {
	key        string
	start, end time.Time
}

type closeHook struct {
	io.ReadCloser
	done func()
}

func (c *closeHook) Close() error {
	err := c.ReadCloser.Close()
	c.done()
	return err
}

func (s *tableGets) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	s.mu.Lock()
	on := s.on
	s.mu.Unlock()
	if !on || !strings.Contains(key, ".sst") {
		return s.Store.Get(ctx, key, off, n)
	}
	start := time.Now()
	r, info, err := s.Store.Get(ctx, key, off, n)
	if err != nil {
		return r, info, err
	}
	return &closeHook{ReadCloser: r, done: func() {
		s.mu.Lock()
		s.gets = append(s.gets, tableGet{key, start, time.Now()})
		s.mu.Unlock()
	}}, info, nil
}

func (s *tableGets) record(on bool) {
	s.mu.Lock()
	s.on = on
	if on {
		s.gets = nil
	}
	s.mu.Unlock()
}

// maxTablesAtOnce is the most different tables with a GET in flight at
// the same instant.
func (s *tableGets) maxTablesAtOnce() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	most := 0
	for _, g := range s.gets {
		// At g's start: the tables whose GETs span that instant.
		tables := map[string]bool{}
		for _, h := range s.gets {
			if !h.start.After(g.start) && h.end.After(g.start) {
				tables[h.key] = true
			}
		}
		most = max(most, len(tables))
	}
	return most
}

// A MultiGet of 32 keys spread over several tables left in the store
// reads those tables concurrently with --optimize-multiget-for-io (the
// engine splits it; RocksDB's synchronous MultiGet visits one table after
// another), and reads exactly what the synchronous path reads.
func TestAsyncMultiGetReadsTablesAtOnce(t *testing.T) {
	base, model := rangeDB(t)
	store := &tableGets{Store: base}
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	multiGets := func(d *engine.DB) []string {
		var out []string
		rng := rand.New(rand.NewSource(5))
		for round := 0; round < 50; round++ {
			batch := make([][]byte, 32)
			for i := range batch {
				batch[i] = []byte(fmt.Sprintf("k%06d", rng.Intn(20000))) // some missing, some twice
			}
			vals, found, err := d.MultiGet(batch)
			if err != nil {
				t.Fatalf("MultiGet: %v", err)
			}
			for i, k := range batch {
				if want, ok := model[string(k)]; found[i] != ok || string(vals[i]) != want {
					t.Fatalf("MultiGet %s: found %v, %d bytes; want found %v, %d bytes", k, found[i], len(vals[i]), ok, len(want))
				}
				out = append(out, fmt.Sprintf("%s %v %s", k, found[i], vals[i]))
			}
		}
		return out
	}
	var log getLog
	var want []string
	for _, async := range []bool{false, true} {
		f, d := asyncReader(t, store, map[bool]uint64{false: 2, true: 3}[async], async, 0, &log)
		if s, _ := d.Stats(); s.SSTFiles < 3 {
			t.Fatalf("%d tables; want several", s.SSTFiles)
		}
		store.record(true)
		got := multiGets(d)
		store.record(false)
		most := store.maxTablesAtOnce()
		t.Logf("async %v: at most %d tables read at once by 50 MultiGets of 32 keys (%d GETs of tables)", async, most, len(store.gets))
		d.Close()
		f.Stop()
		if !async {
			want = got
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("async MultiGets read %d results, differing from the sync path's %d", len(got), len(want))
		}
		if most < 2 {
			t.Errorf("with --optimize-multiget-for-io at most %d table was read at once; want a MultiGet's tables read concurrently", most)
		}
	}
}

// --scan-readahead makes a scan of tables left in the store read ahead at
// once and in large steps: fewer GETs (round trips to the store) for the
// same scans, with and without async_io, and the same pairs read. Scans
// that stop with a readahead in flight (Limit) exercise AbortIO, which no
// longer waits for the GET.
func TestScanReadaheadFewerGets(t *testing.T) {
	store, _ := rangeDB(t)
	scans := func(d *engine.DB) []string {
		var out []string
		for i := 0; i < 20; i++ {
			start := fmt.Sprintf("k%06d", i*997)
			out = append(out, "scan from "+start)
			if err := d.Scan(engine.ScanOptions{Start: []byte(start), Limit: 1000}, func(k, v []byte) error {
				out = append(out, string(k)+"="+string(v))
				return nil
			}); err != nil {
				t.Fatalf("scan from %s: %v", start, err)
			}
		}
		return out
	}
	var log getLog
	epoch := uint64(2)
	var want []string
	for _, async := range []bool{false, true} {
		gets := map[uint64]int{}
		for _, ra := range []uint64{0, 1 << 20} {
			log.reset()
			f, d := asyncReader(t, store, epoch, async, 0, &log, func(t *engine.Tuning) { t.ScanReadahead = ra })
			epoch++
			got := scans(d)
			gets[ra], _ = log.stats()
			d.Close()
			f.Stop()
			if want == nil {
				want = got
			} else if !reflect.DeepEqual(got, want) {
				t.Fatalf("async %v, scan readahead %d: %d pairs read, differing from the sync path's %d", async, ra, len(got), len(want))
			}
		}
		t.Logf("async %v: 20 scans of 1,000 pairs made %d GETs of tables with RocksDB's readahead, %d with --scan-readahead 1MiB", async, gets[0], gets[1<<20])
		if gets[1<<20] >= gets[0] {
			t.Errorf("async %v: --scan-readahead 1MiB made %d GETs, RocksDB's readahead %d; want fewer", async, gets[1<<20], gets[0])
		}
	}
}

// gateStore holds back, while armed, every GET of a table that starts in
// [from, to): a readahead that never arrives.
type gateStore struct {
	objstore.Store
	from, to int64
	armed    atomic.Bool
	held     atomic.Int64
	release  chan struct{}
}

func (s *gateStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if s.armed.Load() && strings.Contains(key, ".sst") && off >= s.from && off < s.to {
		s.held.Add(1)
		<-s.release
	}
	return s.Store.Get(ctx, key, off, n)
}

// A scan that stops (Limit) while RocksDB's asynchronous readahead is
// still reading returns without waiting for that GET: AbortIO leaves it to
// finish into its own buffer. (It waited, so every short scan paid a round
// trip to the store for data it dropped.)
func TestAsyncScanDoesNotWaitForDroppedReadahead(t *testing.T) {
	base, model := rangeDB(t)
	store := &gateStore{Store: base, from: 32 << 10, to: 256 << 10, release: make(chan struct{})}
	var log getLog
	f, d := asyncReader(t, store, 2, true, 0, &log, func(t *engine.Tuning) { t.ScanReadahead = 64 << 10 })
	defer f.Stop()
	defer d.Close()
	defer close(store.release)
	scan := func(start string) ([]string, error) {
		var got []string
		err := d.Scan(engine.ScanOptions{Start: []byte(start), Limit: 10}, func(k, v []byte) error {
			got = append(got, string(k))
			return nil
		})
		return got, err
	}
	// The tables' index and filter blocks into the block cache, with data
	// from their ends.
	if _, err := scan("k019900"); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := keys[:10]
	store.armed.Store(true)
	done := make(chan error, 1)
	var got []string
	go func() {
		var err error
		got, err = scan("")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scan read %q, want %q", got, want)
		}
		t.Logf("scan of 10 pairs returned with %d readahead GETs held back", store.held.Load())
		if store.held.Load() == 0 {
			t.Fatalf("no readahead GET was held back: the test did not exercise a dropped readahead")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a scan of 10 pairs did not return in 20s with %d readahead GETs held back: it waits for a readahead it dropped", store.held.Load())
	}
}
