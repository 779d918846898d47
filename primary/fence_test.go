package primary

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// TestFenceByHand (RFC 0014): `shale fence` while a primary keeps writing,
// not asked to stop. The primary is blind (it confirms nothing in the
// background and acknowledges without confirming), so only the store's
// seals stop it: every write that started after the fence returned is
// refused (fenced or outcome unknown), none acknowledged; a read fails
// (its lease ran out during the fence's wait); every write acknowledged
// is served by the next primary, which waits no lease (the fence
// released its epoch); no write refused as fenced is there.
func TestFenceByHand(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		db := be.NewURL(t)
		const lease = 2 * time.Second
		a, err := startOwnerWith(t, db, shalefs.Config{Epoch: 1, Lease: lease, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		type result struct {
			key        string
			start, end time.Time
			err        error
		}
		var (
			mu      sync.Mutex
			results []result
			wg      sync.WaitGroup
			stop    = make(chan struct{})
			acked   int
			fenced  time.Time // when Fence returned
			after   = map[int]int{}
			writers = 4
		)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("w%d-%06d", w, i)
					start := time.Now()
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					_, err := a.kv.Put(cctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte(key), Sync: true})
					cancel()
					mu.Lock()
					results = append(results, result{key, start, time.Now(), err})
					if err == nil {
						acked++
					}
					if !fenced.IsZero() && start.After(fenced) {
						after[w]++
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(time.Millisecond) // a fenced primary answers at once
					}
				}
			}(w)
		}
		waitUntil(t, "200 acknowledged writes", time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return acked >= 200 })
		rep, err := Fence(ctx, FenceConfig{DB: db, Storage: shalefs.Config{Lease: lease}})
		done := time.Now()
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("fence: %v", err)
		}
		mu.Lock()
		fenced = done
		mu.Unlock()
		waitUntil(t, "every writer tried 20 writes after the fence", time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for w := 0; w < writers; w++ {
				if after[w] < 20 {
					return false
				}
			}
			return true
		})
		close(stop)
		wg.Wait()
		if rep.Epoch != 2 {
			t.Errorf("the fence took epoch %d, want 2", rep.Epoch)
		}
		if rep.LeaseWaited == 0 {
			t.Errorf("the fence waited no lease: the primary it fenced was serving reads")
		}
		// The deposed primary serves no read: its lease ran out while the
		// fence waited.
		if _, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("w0-000000")}); err == nil {
			t.Errorf("the fenced primary served a read after the fence returned")
		}

		b, err := startOwnerWith(t, db, shalefs.Config{Lease: lease})
		if err != nil {
			t.Fatalf("the next primary: %v", err)
		}
		if w := b.srv.LeaseWaited(); w != 0 {
			t.Errorf("the next primary waited %s: the fence released its epoch", w)
		}
		if e := b.srv.Epoch(); e != 3 {
			t.Errorf("the next primary has epoch %d, want 3", e)
		}
		var nAck, nAfter, nFenced, nUnknown int
		for _, r := range results {
			if r.start.After(done) {
				nAfter++
				if r.err == nil {
					t.Errorf("%s was acknowledged after the fence returned (started %s after it)", r.key, r.start.Sub(done))
				}
			}
			g, gerr := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(r.key)})
			switch c := status.Code(r.err); {
			case r.err == nil:
				nAck++
				if gerr != nil || string(g.Value) != r.key {
					t.Errorf("%s, acknowledged before the fence, is missing in the next primary: %v", r.key, gerr)
				}
			case c == codes.FailedPrecondition:
				nFenced++
				if gerr == nil {
					t.Errorf("%s was refused as fenced (never applied) but the next primary has it", r.key)
				}
			case c == codes.Unavailable:
				nUnknown++ // outcome unknown: either way is right
			default:
				t.Errorf("%s: %v, want FAILED_PRECONDITION or UNAVAILABLE", r.key, r.err)
			}
		}
		t.Logf("fence at epoch %d waited %s; %d writes acknowledged, %d started after the fence, %d refused as fenced, %d outcome unknown",
			rep.Epoch, rep.LeaseWaited.Round(time.Millisecond), nAck, nAfter, nFenced, nUnknown)
	})
}
