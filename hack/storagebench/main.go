// Command storagebench runs db_bench's fillrandom and readrandom against a
// Shale database (the engine on the Shale FileSystem, in process, as
// db_bench runs RocksDB in process), so hack/bench-storage.sh can compare
// local RocksDB, Shale on file:// and Shale on S3 with the same settings.
// It prints one line per benchmark in db_bench's format.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

var (
	benchmarks string
	histograms bool
)

func main() {
	db := flag.String("db", "", "database URL (file:///ABS/PATH or s3://BUCKET/PREFIX), or local:///ABS/PATH for the engine without the Shale FileSystem")
	cache := flag.String("cache-dir", "", "local cache directory")
	num := flag.Int("num", 1000000, "keys to write, and reads to do")
	keySize := flag.Int("key_size", 20, "key bytes")
	valueSize := flag.Int("value_size", 400, "value bytes (compressible to half)")
	cacheSize := flag.Uint64("cache_size", 16<<20, "block cache bytes")
	blockSize := flag.Int("block_size", 8192, "SST block bytes")
	seed := flag.Uint64("seed", 1, "random seed")
	hashIndex := flag.Int("data_block_index_type", 0, "1: a hash index in every data block (db_bench's flag)")
	flag.BoolVar(&histograms, "histograms", false, "keep RocksDB's histograms too (the engine's Tuning.RocksDBHistograms; off by default, as in Shale)")
	flag.StringVar(&benchmarks, "benchmarks", "fillrandom,readrandom", "fillrandom,readrandom or fillrandom alone")
	flag.Parse()
	if *db == "" || *cache == "" {
		fmt.Fprintln(os.Stderr, "storagebench: --db and --cache-dir are required")
		os.Exit(2)
	}
	if err := run(*db, *cache, *num, *keySize, *valueSize, *cacheSize, *blockSize, *seed, *hashIndex == 1); err != nil {
		fmt.Fprintln(os.Stderr, "storagebench:", err)
		os.Exit(1)
	}
}

func run(url, cache string, num, keySize, valueSize int, cacheSize uint64, blockSize int, seed uint64, hashIndex bool) error {
	o := engine.DefaultOptions()
	o.Tuning.DataBlockHashIndex = hashIndex
	o.Tuning.RocksDBHistograms = histograms
	o.BlockCacheBytes = cacheSize
	o.BlockSizeBytes = blockSize
	o.BottommostCompression = grocksdb.LZ4Compression // db_bench uses one compression type
	if dir, ok := strings.CutPrefix(url, "local://"); ok {
		// The engine alone: what the Go binding costs, without the store.
		d, err := engine.Open(dir, o)
		if err != nil {
			return err
		}
		defer d.Close()
		return bench(d, num, keySize, valueSize, seed)
	}
	store, err := objstore.Open(url)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var mu sync.Mutex
	requests := map[string]int{}
	observe := func(r shalefs.Request) {
		mu.Lock()
		requests[r.Op+" "+r.FileType+" "+r.Activity]++
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		keys := make([]string, 0, len(requests))
		for k := range requests {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("# store requests %-40s %d\n", k, requests[k])
		}
	}()
	fs, err := shalefs.Open(context.Background(), shalefs.Config{Store: store, CacheDir: cache, Logger: quiet, Observe: observe})
	if err != nil {
		return err
	}
	defer fs.Stop()
	o.FileSystem = fs
	d, err := engine.Open(cache, o)
	if err != nil {
		return err
	}
	defer d.Close()
	return bench(d, num, keySize, valueSize, seed)
}

func bench(d *engine.DB, num, keySize, valueSize int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed))
	// One key buffer, as db_bench reuses its key: the engine copies it.
	k := make([]byte, keySize)
	key := func(n uint64) []byte {
		binary.BigEndian.PutUint64(k, n)
		return k
	}
	// Values shrink to half under compression, as db_bench's: slices of a
	// 1 MiB pool built from 100-byte pieces of 50 random bytes repeated.
	pool := make([]byte, 0, 1<<20+valueSize)
	for len(pool) < 1<<20+valueSize {
		piece := make([]byte, 50)
		for i := range piece {
			piece[i] = byte(' ' + rng.IntN(95))
		}
		pool = append(append(pool, piece...), piece...)
	}
	pos := 0
	nextValue := func() []byte {
		if pos+valueSize > len(pool) {
			pos = 0
		}
		v := pool[pos : pos+valueSize]
		pos += valueSize
		return v
	}

	fillrandom(d, num, key, nextValue, rng, keySize, valueSize)
	if strings.Contains(benchmarks, "readrandom") {
		readrandom(d, num, key, rng)
	}
	return nil
}

// fillrandom and readrandom are functions of their own so that a profiler
// (callgrind --toggle-collect=main.fillrandom) can count them apart.
//
//go:noinline
func fillrandom(d *engine.DB, num int, key func(uint64) []byte, nextValue func() []byte, rng *rand.Rand, keySize, valueSize int) {
	start := time.Now()
	for i := 0; i < num; i++ {
		if err := d.Put(key(rng.Uint64N(uint64(num))), nextValue(), false); err != nil {
			fmt.Fprintln(os.Stderr, "storagebench:", err)
			os.Exit(1)
		}
	}
	report("fillrandom", num, time.Since(start), int64(num)*int64(keySize+valueSize))
}

//go:noinline
func readrandom(d *engine.DB, num int, key func(uint64) []byte, rng *rand.Rand) {
	start := time.Now()
	found := 0
	for i := 0; i < num; i++ {
		_, ok, err := d.Get(key(rng.Uint64N(uint64(num))))
		if err != nil {
			fmt.Fprintln(os.Stderr, "storagebench:", err)
			os.Exit(1)
		}
		if ok {
			found++
		}
	}
	report("readrandom", num, time.Since(start), 0)
	fmt.Printf("# readrandom found %d of %d\n", found, num)
}

func report(name string, ops int, d time.Duration, bytes int64) {
	micros := float64(d.Microseconds()) / float64(ops)
	line := fmt.Sprintf("%-12s : %11.3f micros/op %d ops/sec %.3f seconds %d operations;", name, micros, int64(float64(ops)/d.Seconds()), d.Seconds(), ops)
	if bytes > 0 {
		line += fmt.Sprintf(" %5.1f MB/s", float64(bytes)/d.Seconds()/(1<<20))
	}
	fmt.Println(line)
}
