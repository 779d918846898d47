package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
)

// cpuTime is the CPU this process (the client; MinIO is another process)
// has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPutChecksums measures what a conditional put (create-only, as
// Shale writes SSTs, WAL segments and manifests) costs the client, per
// transport, size and what the uploads carry:
//   - legacy: before issue 29: over TLS nothing on a single PUT and an MD5
//     on every part; over HTTP the payload's signature, and the MD5;
//   - crc32c: the default now: a CRC32C trailer or header (and over HTTP
//     the signature);
//   - none: SHALE_S3_CHECKSUM=none: over HTTP the signature only (no MD5),
//     over TLS an MD5 (nothing else proves the bytes).
//
// Each round puts one object with each mode, in turn, so that the modes
// share the machine's load; objects are deleted outside the measurement.
// Per mode: MODE-cpu-us, the client's user+system CPU per put
// (getrusage); MODE-ms, its wall time; and MODE/legacy-cpu, the ratio of
// CPU to legacy's in the same rounds.
//
//	go test -run '^$' -bench BenchmarkPutChecksums -benchtime 20x ./internal/objstore/
func BenchmarkPutChecksums(b *testing.B) {
	modes := []string{"legacy", objstore.ChecksumCRC32C, objstore.ChecksumNone}
	servers := map[string]*miniotest.Server{"https": miniotest.StartTLS(b), "http": miniotest.Start(b)}
	for _, scheme := range []string{"https", "http"} {
		servers[scheme].CreateBucket(b, "bench")
	}
	data := make([]byte, 32<<20)
	rand.New(rand.NewSource(29)).Read(data)
	ctx := context.Background()
	for _, scheme := range []string{"https", "http"} {
		for _, size := range []int{8 << 10, 32 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", scheme, size>>10), func(b *testing.B) {
				stores := map[string]*objstore.S3Store{}
				for _, mode := range modes {
					cfg := servers[scheme].S3Config()
					cfg.PartSize = 8 << 20 // 32 MiB in four parts
					cfg.Checksum = mode
					cfg.Logger = slog.New(slog.DiscardHandler)
					open := objstore.OpenS3
					if mode == "legacy" {
						cfg.Checksum = ""
						open = objstore.OpenS3Legacy
					}
					s, err := open("s3://bench/"+mode, cfg)
					if err != nil {
						b.Fatal(err)
					}
					stores[mode] = s
				}
				cpu := map[string]time.Duration{}
				wall := map[string]time.Duration{}
				b.SetBytes(int64(size) * int64(len(modes)))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range modes {
						mode := modes[(i+j)%len(modes)] // each mode first in turn
						s := stores[mode]
						key := fmt.Sprintf("%d", i)
						if size > 1<<20 {
							b.StopTimer()
							runtime.GC() // the previous put's garbage is not this one's
							b.StartTimer()
						}
						t0, c0 := time.Now(), cpuTime(b)
						if _, err := s.Put(ctx, key, bytes.NewReader(data[:size]), int64(size), objstore.PutOptions{IfNoneMatch: true}); err != nil {
							b.Fatal(err)
						}
						cpu[mode] += cpuTime(b) - c0
						wall[mode] += time.Since(t0)
						b.StopTimer()
						if err := s.Delete(ctx, key); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
				}
				for _, mode := range modes {
					b.ReportMetric(float64(cpu[mode].Microseconds())/float64(b.N), mode+"-cpu-us")
					b.ReportMetric(float64(wall[mode].Microseconds())/1e3/float64(b.N), mode+"-ms")
					if mode != "legacy" {
						b.ReportMetric(float64(cpu[mode])/float64(cpu["legacy"]), mode+"/legacy-cpu")
					}
				}
			})
		}
	}
}
