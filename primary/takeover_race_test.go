package primary

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

func hookedStore(t *testing.T, db string) *storetest.Hooked {
	t.Helper()
	raw, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return &storetest.Hooked{Store: raw}
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(2 * time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Violation 1: A's first segment of a new WAL lands in the store, but its
// reply is held until B has opened; B lists the segment, seals the log after
// it and replays it. The write is on B, so A must not call it fenced
// (FAILED_PRECONDITION means "never applied"): it answers UNAVAILABLE,
// outcome unknown.
func TestFirstSegmentRacingTakeoverIsOutcomeUnknown(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		db := be.NewURL(t)
		hooked := hookedStore(t, db)
		var armed atomic.Bool
		landed, release := make(chan string, 1), make(chan struct{})
		hooked.AfterPut = func(key string, size int64, _ objstore.PutOptions, err error) error {
			if err == nil && size > 0 && strings.Contains(key, ".log/") && strings.HasSuffix(key, "/00000000000000000001") && armed.CompareAndSwap(true, false) {
				landed <- key
				<-release
			}
			return err
		}
		sc := blindOwner(1)
		sc.Store = hooked
		a, err := startOwnerWith(t, db, sc)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := 0; i < 20; i++ {
			if _, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte("A"), Sync: true}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil { // a new WAL
			t.Fatal(err)
		}
		armed.Store(true)
		errc := make(chan error, 1)
		go func() {
			_, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("raced"), Value: []byte("A"), Sync: true})
			errc <- err
		}()
		key := waitFor(t, landed, "A's first WAL segment to land")
		b := mustOwner(t, db, 2)
		close(release)
		err = waitFor(t, errc, "A's reply")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "outcome unknown") {
			t.Fatalf("A's write whose segment %s reached the store before B opened: %v; want UNAVAILABLE, outcome unknown", key, err)
		}
		// It was indeed applied: reporting it fenced would have been a lie.
		if r, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("raced")}); err != nil || string(r.Value) != "A" {
			t.Fatalf("B after listing A's segment: %v", err)
		}
		for i := 0; i < 20; i++ {
			if _, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("k%02d", i))}); err != nil {
				t.Fatalf("B lost A's acknowledged k%02d: %v", i, err)
			}
		}
	})
}

// Violation 2: B takes over a primary that is still running and flushing.
// Between B's first listing and its seal of the MANIFEST, A uploads a table
// and a MANIFEST edit naming it; B must open on the first try (it lists
// tables only after sealing) and serve everything A acknowledged.
func TestTakeoverOfFlushingPrimaryOpensFirstTime(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		db := be.NewURL(t)
		a, err := startOwnerWith(t, db, blindOwner(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		put := func(k string) {
			t.Helper()
			if _, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte("A"), Sync: true}); err != nil {
				t.Fatal(err)
			}
		}
		put("before")
		if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
		put("flushed-during-takeover")

		hooked := hookedStore(t, db)
		var held atomic.Bool
		sealing, release := make(chan string, 1), make(chan struct{})
		hooked.BeforePut = func(key string, size int64, opts objstore.PutOptions) error {
			if size == 0 && opts.IfNoneMatch && strings.HasPrefix(key, "MANIFEST-") && held.CompareAndSwap(false, true) {
				sealing <- key
				<-release
			}
			return nil
		}
		sc := blindOwner(2)
		sc.Store = hooked
		type result struct {
			o   *owner
			err error
		}
		bc := make(chan result, 1)
		go func() {
			o, err := startOwnerWith(t, db, sc)
			bc <- result{o, err}
		}()
		key := waitFor(t, sealing, "B to seal the MANIFEST")
		// A, unaware, flushes: a new table and a MANIFEST edit naming it.
		if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatalf("A's flush before B's seal of %s: %v", key, err)
		}
		close(release)
		r := waitFor(t, bc, "B to open")
		if r.err != nil {
			t.Fatalf("takeover of a flushing primary failed: %v", r.err)
		}
		for _, k := range []string{"before", "flushed-during-takeover"} {
			if _, err := r.o.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)}); err != nil {
				t.Fatalf("B lost %s: %v", k, err)
			}
		}
	})
}
