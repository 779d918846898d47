//go:build bench

package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
)

// The archive's lag under ~1,000 synced writes/s for 30 s, with the
// archiver's defaults (a figure for docs/backup.md, not an assertion).
// Built only with the bench tag (make bench-archive-lag), so the default
// test run neither runs nor skips it.
func TestArchiveLagUnderLoad(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	bak := open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p := startArchivingEvery(t, db, loc, 0)
	const writers, rate, dur = 64, 1000, 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * writers / rate)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err := p.kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(fmt.Sprintf("w%02d-%07d", w, i)), Value: bytes.Repeat([]byte("x"), 100), Sync: true})
				if err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	waitFor(t, "the archive to catch up", func() bool { return p.srv.Archiver().Status().CaughtUpAt.After(start.Add(elapsed)) })
	lags := p.srv.Archiver().Lags()
	slices.Sort(lags)
	q := func(f float64) time.Duration { return lags[int(f*float64(len(lags)-1))] }
	t.Logf("%d synced writes in %v (%.0f/s); %d objects archived (%d index objects); lag p50 %v, p99 %v, max %v",
		done.Load(), elapsed.Round(time.Millisecond), float64(done.Load())/elapsed.Seconds(), len(lags), len(keysUnder(t, bak, backup.ArchiveIndexPrefix)),
		q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
}
