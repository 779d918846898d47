package primary

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// The readiness probe (issue 28) says whether the primary can serve: with
// MinIO stopped, its health turns NOT_SERVING (so Kubernetes takes it out
// of the NAME-rw Service, and the operator sees it not ready); with MinIO
// back, SERVING again without a restart; and no write acknowledged before,
// during or after the outage is lost.
func TestReadinessFollowsStore(t *testing.T) {
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "ready")
	db := "s3://ready/db"
	const lease = time.Second
	// RetryFor outlasts the outage: a synced write waits for the store
	// (past RetryFor the primary stops for good, issue 22, and the
	// operator fails over; that is not what this test is about).
	a, err := startOwnerWith(t, db, shalefs.Config{Epoch: 1, Lease: lease, RetryFor: time.Minute, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	health := healthpb.NewHealthClient(a.conn)
	ctx := context.Background()
	// waitFor polls the health service (as the kubelet does) until it
	// answers want, and returns how long that took.
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) time.Duration {
		t.Helper()
		start := time.Now()
		for deadline := start.Add(60 * time.Second); ; {
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && r.Status == want {
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("health still not %v after %v: %v %v", want, time.Since(start), r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)

	// Synced writes all along; those acknowledged must survive.
	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("k%06d", i)
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			_, err := a.kv.Put(cctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte("v" + k), Sync: true})
			cancel()
			if err == nil {
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			} else {
				t.Errorf("put %s: %v", k, err)
				return
			}
		}
	}()
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	for n := ackedCount(); ackedCount() < n+20; {
		time.Sleep(10 * time.Millisecond)
	}

	srv.Stop()
	took := waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	t.Logf("NOT_SERVING %v after MinIO stopped (lease %v)", took.Round(time.Millisecond), lease)
	srv.Restart(t)
	took = waitFor(healthpb.HealthCheckResponse_SERVING)
	t.Logf("SERVING again %v after MinIO restarted", took.Round(time.Millisecond))
	for n := ackedCount(); ackedCount() < n+20; {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-done

	// Read everything acknowledged back through a new owner that opens
	// from the store alone.
	a.stop()
	b := mustOwner(t, db, 2)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range acked {
		r, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
		for deadline := time.Now().Add(30 * time.Second); status.Code(err) == codes.Unavailable && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			r, err = b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
		}
		if err != nil || string(r.Value) != "v"+k {
			t.Fatalf("acknowledged %s lost across the outage: %v", k, err)
		}
	}
	t.Logf("%d acknowledged writes kept", len(acked))
}

// How fresh ownership must be for SERVING: a lease's half while the
// primary is used, the idle confirmation interval (plus half a lease)
// while it is not, so that readiness adds no request to an idle primary.
func TestReadinessMaxAge(t *testing.T) {
	const lease, idle = 5 * time.Second, 30 * time.Second
	for _, tc := range []struct {
		sinceActivity, want time.Duration
	}{
		{0, lease / 2},
		{10 * time.Second, lease / 2},
		{idle - time.Millisecond, lease / 2},
		{idle, idle + lease/2},
		{time.Hour, idle + lease/2},
	} {
		if got := readinessMaxAge(lease, idle, tc.sinceActivity); got != tc.want {
			t.Errorf("last activity %v ago: max age %v, want %v", tc.sinceActivity, got, tc.want)
		}
	}
}

// An idle primary's readiness costs no store request beyond the owner's own
// confirmation per IdleConfirmEvery (docs/cost.md's idle figure), and it
// stays SERVING throughout.
func TestIdlePrimaryReadinessRequests(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	raw, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	store := storetest.NewCounting(raw)
	const lease, idle = 200 * time.Millisecond, time.Second
	a, err := startOwnerWith(t, db, shalefs.Config{Store: store, Epoch: 1, Lease: lease, IdleConfirmEvery: idle, DeleteGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	health := healthpb.NewHealthClient(a.conn)
	ctx := context.Background()
	// The writes of the open count as activity for IdleConfirmEvery: let
	// that pass (measured, not slept blindly).
	for start := time.Now(); time.Since(start) < idle+lease; {
		time.Sleep(50 * time.Millisecond)
	}
	const window = 3 * time.Second
	from := store.Total()
	for start := time.Now(); time.Since(start) < window; {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("idle primary: health %v %v, want SERVING", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	reqs := store.Requests(from)
	allowed := int(window/idle) + 1
	for _, r := range reqs {
		if r != "get "+layout.OwnerKey {
			t.Errorf("idle primary sent %q", r)
		}
	}
	if len(reqs) > allowed {
		t.Errorf("idle primary sent %d requests in %v, at most %d allowed (one GET per %v): %s", len(reqs), window, allowed, idle, strings.Join(reqs, ", "))
	}
	t.Logf("idle for %v: %d requests", window, len(reqs))
}
