// Command putlatency measures one conditional PUT, the floor of a durable
// write: one client puts SIZE-byte objects under new keys with
// If-None-Match: *, one at a time, for DURATION, through Shale's own store
// client (internal/objstore), as a WAL segment upload does. It prints one
// JSON line: {"name":"put","size":..,"puts":..,"putsPerSec":..,"p50":µs,"p99":µs}.
// hack/bench-durable.sh runs it in each round, so the issue-29 target "p50
// at most 1.2x one conditional PUT's p50" compares figures of the same run.
//
//	putlatency -db s3://bench/putlat -size 8192 -duration 5s
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

func main() {
	db := flag.String("db", "", "store URL (s3://BUCKET/PREFIX, endpoint and keys from AWS_*; or file:///ABS/PATH)")
	size := flag.Int("size", 8192, "bytes per object (a durable group of 16-20 writes of 400 B is 7-9 KiB)")
	duration := flag.Duration("duration", 5*time.Second, "how long to put")
	flag.Parse()
	if err := run(*db, *size, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "putlatency:", err)
		os.Exit(1)
	}
}

func run(db string, size int, d time.Duration) error {
	if db == "" || size <= 0 || d <= 0 {
		return fmt.Errorf("want -db URL, -size > 0 and -duration > 0")
	}
	store, err := objstore.Open(db)
	if err != nil {
		return err
	}
	ctx := context.Background()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	run := time.Now().UnixNano()
	var lat []time.Duration
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		t := time.Now()
		key := fmt.Sprintf("putlatency/%d/%08d", run, i)
		if _, err := store.Put(ctx, key, bytes.NewReader(data), int64(size), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		lat = append(lat, time.Since(t))
	}
	secs := time.Since(start).Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"name": "put", "size": size, "puts": len(lat), "putsPerSec": float64(len(lat)) / secs,
		"p50": us(0.5), "p99": us(0.99),
	})
}
