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
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

func main() {
	db := flag.String("db", "", "database URL (file:///ABS/PATH or s3://BUCKET/PREFIX)")
	cache := flag.String("cache-dir", "", "local cache directory")
	num := flag.Int("num", 1000000, "keys to write, and reads to do")
	keySize := flag.Int("key_size", 20, "key bytes")
	valueSize := flag.Int("value_size", 400, "value bytes (compressible to half)")
	cacheSize := flag.Uint64("cache_size", 16<<20, "block cache bytes")
	blockSize := flag.Int("block_size", 8192, "SST block bytes")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *db == "" || *cache == "" {
		fmt.Fprintln(os.Stderr, "storagebench: --db and --cache-dir are required")
		os.Exit(2)
	}
	if err := run(*db, *cache, *num, *keySize, *valueSize, *cacheSize, *blockSize, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "storagebench:", err)
		os.Exit(1)
	}
}

func run(url, cache string, num, keySize, valueSize int, cacheSize uint64, blockSize int, seed uint64) error {
	store, err := objstore.Open(url)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fs, err := shalefs.Open(context.Background(), shalefs.Config{Store: store, CacheDir: cache, Logger: quiet})
	if err != nil {
		return err
	}
	defer fs.Stop()
	o := engine.DefaultOptions()
	o.FileSystem = fs
	o.BlockCacheBytes = cacheSize
	o.BlockSizeBytes = blockSize
	o.BottommostCompression = grocksdb.LZ4Compression // db_bench uses one compression type
	d, err := engine.Open(cache, o)
	if err != nil {
		return err
	}
	defer d.Close()

	rng := rand.New(rand.NewPCG(seed, seed))
	key := func(n uint64) []byte {
		k := make([]byte, keySize)
		binary.BigEndian.PutUint64(k, n)
		return k
	}
	// Values shrink to half under compression, as db_bench's default.
	half := make([]byte, valueSize/2)
	for i := range half {
		half[i] = byte(' ' + rng.IntN(95))
	}
	value := append(append([]byte{}, half...), half...)

	start := time.Now()
	for i := 0; i < num; i++ {
		if err := d.Put(key(rng.Uint64N(uint64(num))), value, false); err != nil {
			return err
		}
	}
	report("fillrandom", num, time.Since(start), int64(num)*int64(keySize+valueSize))

	start = time.Now()
	found := 0
	for i := 0; i < num; i++ {
		_, ok, err := d.Get(key(rng.Uint64N(uint64(num))))
		if err != nil {
			return err
		}
		if ok {
			found++
		}
	}
	report("readrandom", num, time.Since(start), 0)
	fmt.Printf("# readrandom found %d of %d\n", found, num)
	return nil
}

func report(name string, ops int, d time.Duration, bytes int64) {
	micros := float64(d.Microseconds()) / float64(ops)
	line := fmt.Sprintf("%-12s : %11.3f micros/op %d ops/sec %.3f seconds %d operations;", name, micros, int64(float64(ops)/d.Seconds()), d.Seconds(), ops)
	if bytes > 0 {
		line += fmt.Sprintf(" %5.1f MB/s", float64(bytes)/d.Seconds()/(1<<20))
	}
	fmt.Println(line)
}
