// Command loadbench is the in-process baseline of hack/bench-load.sh: it
// loads a key<TAB>value file into a Shale engine on a store (the Shale
// FileSystem, in this process, as an embedded LSM loads), parsing with the
// same reader as `shale kv load`, in batches of the same size, non-durable
// until one sync at the end. Parsing and writing run in two goroutines, as
// the client and the server of `shale kv load` do. With --generate it
// writes the input file instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvload"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
)

func main() {
	db := flag.String("db", "", "database URL (file:///ABS/PATH or s3://BUCKET/PREFIX)")
	cache := flag.String("cache-dir", "", "local cache directory")
	input := flag.String("input", "", "key<TAB>value file to load (or to write with --generate)")
	generate := flag.Int("generate", 0, "write this many random pairs to --input and exit")
	keySize := flag.Int("key_size", 20, "key bytes (--generate)")
	valueSize := flag.Int("value_size", 400, "value bytes, compressible to half (--generate)")
	batch := flag.Int("batch-size", 1<<20, "bytes of keys and values per batch")
	flag.Parse()
	var err error
	if *generate > 0 {
		err = gen(*input, *generate, *keySize, *valueSize)
	} else if *db == "" || *cache == "" || *input == "" {
		err = errors.New("--db, --cache-dir and --input are required")
	} else {
		err = load(*db, *cache, *input, *batch)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// gen writes n pairs with random keys (decimal, zero-padded) and printable
// values made of a repeated half, so they compress to about half.
func gen(path string, n, keySize, valueSize int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := make([]byte, 0, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	line := make([]byte, keySize+1+valueSize+1)
	for i := 0; i < n; i++ {
		k := rng.Uint64N(1 << 62)
		for j := keySize - 1; j >= 0; j-- {
			line[j] = byte('0' + k%10)
			k /= 10
		}
		line[keySize] = '\t'
		v := line[keySize+1 : keySize+1+valueSize]
		half := (valueSize + 1) / 2
		for j := 0; j < half; j++ {
			v[j] = byte('a' + rng.IntN(26))
		}
		for j := half; j < valueSize; j++ {
			v[j] = v[j-half]
		}
		line[len(line)-1] = '\n'
		w = append(w, line...)
		if len(w) > 1<<20-len(line) {
			if _, err := f.Write(w); err != nil {
				return err
			}
			w = w[:0]
		}
	}
	if _, err := f.Write(w); err != nil {
		return err
	}
	return f.Close()
}

func load(url, cache, input string, batchBytes int) error {
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
	d, err := engine.Open(cache, o)
	if err != nil {
		return err
	}
	defer d.Close()
	fs.Serving()

	in, err := os.Open(input)
	if err != nil {
		return err
	}
	defer in.Close()
	start := time.Now()
	batches, free := make(chan *rocksshim.Batch, 1), make(chan *rocksshim.Batch, 2)
	var pairs, size int64
	var parseErr error
	go func() {
		defer close(batches)
		r := kvload.NewReader(in, kvload.TSV)
		b, n := new(rocksshim.Batch), 0
		for {
			k, v, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parseErr = err
				return
			}
			b.Put(k, v)
			n += len(k) + len(v)
			pairs++
			size += int64(len(k) + len(v))
			if n >= batchBytes {
				batches <- b
				select {
				case b = <-free:
					b.Reset()
				default:
					b = new(rocksshim.Batch)
				}
				n = 0
			}
		}
		batches <- b
	}()
	for b := range batches {
		if err := d.WriteBatch(b, false); err != nil {
			return err
		}
		select {
		case free <- b:
		default:
		}
	}
	if parseErr != nil {
		return parseErr
	}
	if err := d.SyncWAL(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("{\"pairs\": %d, \"bytes\": %d, \"seconds\": %.3f, \"pairsPerSec\": %.0f, \"mbPerSec\": %.2f}\n",
		pairs, size, secs, float64(pairs)/secs, float64(size)/1e6/secs)
	return nil
}
