package engine

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
)

// Per-call costs of the engine, 16 concurrent callers (as 16 gRPC clients
// on 2 cores): go test ./internal/engine -bench . -benchtime 200000x
func benchDB(b *testing.B) *DB {
	d, err := Open(b.TempDir(), DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	return d
}

func benchKey(dst []byte, n uint64) { binary.BigEndian.PutUint64(dst, n) }

func BenchmarkPut(b *testing.B) {
	d := benchDB(b)
	value := make([]byte, 400)
	var seed atomic.Uint64
	b.SetParallelism(benchPar)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		k := make([]byte, 20)
		for pb.Next() {
			benchKey(k, rng.Uint64N(1<<20))
			if err := d.Put(k, value, false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	d := benchDB(b)
	value := make([]byte, 400)
	k := make([]byte, 20)
	for i := uint64(0); i < 100000; i++ {
		benchKey(k, i)
		if err := d.Put(k, value, false); err != nil {
			b.Fatal(err)
		}
	}
	var seed atomic.Uint64
	b.SetParallelism(benchPar)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		k := make([]byte, 20)
		for pb.Next() {
			benchKey(k, rng.Uint64N(100000))
			if _, _, err := d.Get(k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var benchPar = func() int {
	if v := os.Getenv("PAR"); v != "" {
		n, _ := strconv.Atoi(v)
		return n
	}
	return 8
}()
