package shalefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// rangeDB writes a database of several tables on MinIO with owner epoch 1
// and returns its store and the model of its contents.
func rangeDB(t *testing.T) (objstore.Store, map[string]string) {
	t.Helper()
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "ranges")
	store := storeAt(t, srv, "s3://ranges/db")
	c1 := filepath.Join(t.TempDir(), "c1")
	f1 := openFS(t, store, 1, c1)
	d1 := openDB(t, f1, c1)
	model := map[string]string{}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 6000; i++ {
		k := fmt.Sprintf("k%06d", rng.Intn(20000))
		pad := make([]byte, 200+rng.Intn(400))
		for j := range pad {
			pad[j] = byte('a' + rng.Intn(26)) // little to compress: tables of some size
		}
		v := fmt.Sprintf("%s-%d-%s", k, i, pad)
		model[k] = v
		if err := d1.Put([]byte(k), []byte(v), false); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d1.Close()
	f1.Stop()
	return store, model
}

// Every key of a multi-table database reads back through Get, MultiGet
// and a full scan when no table is cached locally and the range cache is
// a fraction of the data; the range cache never exceeds its budget.
func TestRangeCacheReadsEveryKey(t *testing.T) {
	store, model := rangeDB(t)
	const budget = 64 << 10
	var gets atomic.Int64
	c2 := filepath.Join(t.TempDir(), "c2")
	f2, err := Open(context.Background(), Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 50 * time.Millisecond,
		CacheBytes: 1, RangeCacheBytes: budget, RangeBlockBytes: 16 << 10,
		Observe: func(r Request) {
			if r.Op == "get" && r.FileType == "sst" {
				gets.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()
	o := engine.DefaultOptions()
	o.FileSystem = f2
	o.BlockCacheBytes = 64 << 10 // reads must reach the file system
	d2, err := engine.Open(c2, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	f2.Serving()
	if n := dirTableBytes(t, c2); n != 0 {
		t.Fatalf("%d bytes of tables cached locally; want every table read from the store", n)
	}
	s, _ := d2.Stats()
	if s.SSTFiles < 3 {
		t.Fatalf("%d tables; want several", s.SSTFiles)
	}

	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok, err := d2.Get([]byte(k))
		if err != nil || !ok || string(v) != model[k] {
			t.Fatalf("Get %s: %v %v, %d bytes; want %d", k, ok, err, len(v), len(model[k]))
		}
	}
	// MultiGet of 32 keys from across the key space, some missing.
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 200; round++ {
		batch := make([][]byte, 32)
		for i := range batch {
			batch[i] = []byte(fmt.Sprintf("k%06d", rng.Intn(20000)))
		}
		vals, found, err := d2.MultiGet(batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range batch {
			want, ok := model[string(k)]
			if found[i] != ok || string(vals[i]) != want {
				t.Fatalf("MultiGet %s: found %v (want %v), %d bytes (want %d)", k, found[i], ok, len(vals[i]), len(want))
			}
		}
	}
	var seen []string
	if err := d2.Scan(engine.ScanOptions{}, func(k, v []byte) error {
		if model[string(k)] != string(v) {
			return fmt.Errorf("scan %s: %d bytes, want %d", k, len(v), len(model[string(k)]))
		}
		seen = append(seen, string(k))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, keys) {
		t.Fatalf("scan saw %d keys, want %d", len(seen), len(keys))
	}
	st := f2.RangeCacheStats()
	t.Logf("%d tables (%d bytes); range cache %+v; %d GETs", s.SSTFiles, s.LiveSSTBytes, st, gets.Load())
	if st.Peak > budget || st.Used > budget {
		t.Fatalf("range cache held %d bytes at most (%d now), budget %d", st.Peak, st.Used, budget)
	}
	if st.Hits == 0 || st.Misses == 0 || st.MultiReads == 0 {
		t.Fatalf("range cache: %d hits, %d misses, %d multi-range reads; want each", st.Hits, st.Misses, st.MultiReads)
	}
	if n := dirTableBytes(t, c2); n != 0 {
		t.Fatalf("%d bytes of tables cached locally", n)
	}
}

// MultiReadAt on a table in the store returns the right bytes for many
// ranges at once: inside blocks, across block boundaries, past the end,
// repeated, through the range cache and without it.
func TestMultiReadAtRanges(t *testing.T) {
	store, _ := rangeDB(t)
	for _, budget := range []int64{0, 40 << 10} {
		t.Run(fmt.Sprintf("cache%d", budget), func(t *testing.T) {
			c := filepath.Join(t.TempDir(), "c")
			f, err := OpenReader(context.Background(), Config{Store: store, CacheDir: c, CacheBytes: 1,
				RangeCacheBytes: budget, RangeBlockBytes: 4 << 10, NoReaderLease: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Stop()
			var tables []string
			for _, n := range f.List() {
				if strings.HasSuffix(n, ".sst") {
					tables = append(tables, n)
				}
			}
			if len(tables) == 0 {
				t.Fatal("no tables")
			}
			rng := rand.New(rand.NewSource(int64(budget)))
			for _, name := range tables {
				f.mu.Lock()
				st := *f.fileLocked(name)
				f.mu.Unlock()
				r, _, err := store.Get(context.Background(), layout.ObjectKey(name, st.epoch), 0, -1)
				if err != nil {
					t.Fatal(err)
				}
				whole, err := io.ReadAll(r)
				r.Close()
				if err != nil || int64(len(whole)) != st.size {
					t.Fatalf("%s: %d bytes, %v; listed %d", name, len(whole), err, st.size)
				}
				size := int64(len(whole))
				for round := 0; round < 3; round++ {
					offs := []int64{0, 4<<10 - 3, size - 10, size - 1, 8 << 10}
					lens := []int{100, 7, 50, 1, 4 << 10}
					for i := 0; i < 40; i++ {
						offs = append(offs, rng.Int63n(size))
						lens = append(lens, 1+rng.Intn(12<<10))
					}
					bufs := make([][]byte, len(offs))
					for i := range bufs {
						bufs[i] = make([]byte, lens[i])
					}
					got, err := f.MultiReadAt(name, offs, bufs, "foreground_read")
					if err != nil {
						t.Fatal(err)
					}
					for i := range offs {
						want := whole[offs[i]:min(offs[i]+int64(lens[i]), size)]
						if got[i] != len(want) || !bytes.Equal(bufs[i][:got[i]], want) {
							t.Fatalf("%s [%d, +%d): %d bytes, want %d (equal prefix: %v)", name, offs[i], lens[i], got[i], len(want), bytes.Equal(bufs[i][:min(got[i], len(want))], want[:min(got[i], len(want))]))
						}
					}
				}
			}
			if st := f.RangeCacheStats(); st.Peak > budget {
				t.Fatalf("range cache held %d bytes, budget %d", st.Peak, budget)
			}
		})
	}
}

// Cached ranges belong to one version of a table: when a later owner's
// table of the same name (a reused file number) replaces the listed
// version, reads return the new version's bytes, never cached ones of the
// old.
func TestRangeCacheKeysIncludeVersion(t *testing.T) {
	store, _ := rangeDB(t)
	c := filepath.Join(t.TempDir(), "c")
	f, err := OpenReader(context.Background(), Config{Store: store, CacheDir: c, CacheBytes: 1,
		RangeCacheBytes: 1 << 20, RangeBlockBytes: 4 << 10, NoReaderLease: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	var name string
	for _, n := range f.List() {
		if strings.HasSuffix(n, ".sst") {
			name = n
			break
		}
	}
	f.mu.Lock()
	old := *f.fileLocked(name)
	f.mu.Unlock()
	buf := make([]byte, 10<<10)
	if _, err := f.ReadAt(name, 0, buf, "foreground_read"); err != nil {
		t.Fatal(err)
	}
	if st := f.RangeCacheStats(); st.Used == 0 {
		t.Fatalf("nothing cached: %+v", st)
	}

	// A later owner's version of the name, as a reader's refresh finds it.
	newer := bytes.Repeat([]byte("new version "), 2000)
	if _, err := store.Put(context.Background(), layout.ObjectKey(name, old.epoch+1), bytes.NewReader(newer), int64(len(newer)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: layout.KindTable, epoch: old.epoch + 1, size: int64(len(newer)), tier: old.tier}
	f.mu.Unlock()

	n, err := f.ReadAt(name, 0, buf, "foreground_read")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:n], newer[:len(buf)]) {
		t.Fatalf("read %q..., want the new version's bytes", buf[:24])
	}
}

func dirTableBytes(t *testing.T, dir string) (n int64) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if layout.KindOf(e.Name()) == layout.KindTable {
			fi, err := e.Info()
			if err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// With a cache budget far below the data, tables are read from the store
// range by range and the cache directory stays within the budget.
func TestBoundedCacheReadsRemotely(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(t.TempDir(), "c1")
	f1 := openFS(t, store, 1, c1)
	d1 := openDB(t, f1, c1)
	val := strings.Repeat("x", 1000)
	for i := 0; i < 4000; i++ {
		d1.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(fmt.Sprintf("%s%d", val, i)), false)
		if i%1000 == 999 {
			if err := d1.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d1.Close()
	f1.Stop()

	const budget = 64 << 10
	var gets, getBytes atomic.Int64
	c2 := filepath.Join(t.TempDir(), "c2")
	f2, err := Open(ctx, Config{Store: store, CacheDir: c2, Epoch: 2, Lease: 50 * time.Millisecond, CacheBytes: budget,
		Observe: func(r Request) {
			if r.Op == "get" && r.FileType == "sst" {
				gets.Add(1)
				getBytes.Add(r.Bytes)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()
	d2 := openDB(t, f2, c2)
	defer d2.Close()
	f2.Serving()
	for i := 0; i < 4000; i += 7 {
		v, ok, err := d2.Get([]byte(fmt.Sprintf("k%05d", i)))
		if err != nil || !ok || string(v) != fmt.Sprintf("%s%d", val, i) {
			t.Fatalf("k%05d: %v %v", i, ok, err)
		}
	}
	if n := dirTableBytes(t, c2); n > budget {
		t.Fatalf("cache holds %d bytes of tables, budget %d", n, budget)
	}
	if gets.Load() == 0 {
		t.Fatal("no ranged reads from the store")
	}
	s, _ := d2.Stats()
	t.Logf("%d tables (%d bytes) read with %d ranged GETs (%d bytes); cache %d bytes", s.SSTFiles, s.LiveSSTBytes, gets.Load(), getBytes.Load(), dirTableBytes(t, c2))

	// A compaction reads every table from the store and writes a new one
	// that the budget cannot hold: it is uploaded and evicted.
	if err := d2.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4000; i += 13 {
		if v, ok, _ := d2.Get([]byte(fmt.Sprintf("k%05d", i))); !ok || string(v) != fmt.Sprintf("%s%d", val, i) {
			t.Fatalf("k%05d after compaction: %v", i, ok)
		}
	}
	if n := dirTableBytes(t, c2); n > budget {
		t.Fatalf("after compaction the cache holds %d bytes of tables, budget %d", n, budget)
	}
}
