package primary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// owner is a primary started on a shared store for the fencing tests.
type owner struct {
	srv  *Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
}

func startOwner(t *testing.T, db string, epoch uint64) (*owner, error) {
	return startOwnerWith(t, db, shalefs.Config{Epoch: epoch, Lease: 100 * time.Millisecond})
}

// blindOwner never re-confirms its ownership in the background, so only the
// object store's conditional writes can stop it: what fencing relies on.
// Nor does its trash loop (nothing is due within an hour).
func blindOwner(epoch uint64) shalefs.Config {
	return shalefs.Config{Epoch: epoch, Lease: 100 * time.Millisecond, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, DeleteGrace: time.Hour}
}

// raceOwner is a blind owner whose deleted files go after 100ms, shorter
// than a round of TestFencingRace, so long runs exercise physical deletes
// (and seal deletes) under the race too, and the store does not pile up
// every takeover. Its trash passes confirm ownership, so it may notice a
// fence that way too.
func raceOwner(epoch uint64) shalefs.Config {
	c := blindOwner(epoch)
	c.DeleteGrace = 100 * time.Millisecond
	// Folds every few syncs, so takeovers race folds and their clean-up
	// (issue 22: a seal in a slot a fold freed lost acknowledged writes).
	c.FoldSegments = 4
	return c
}

func startOwnerWith(t *testing.T, db string, sc shalefs.Config) (*owner, error) {
	t.Helper()
	sc.CacheDir = filepath.Join(t.TempDir(), "cache")
	// A blind owner (ConfirmEvery and IdleConfirmEvery of an hour)
	// confirms nothing in the background, its readiness check included.
	blind := sc.ConfirmEvery >= time.Hour && sc.IdleConfirmEvery >= time.Hour
	s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc, NoReadinessCheck: blind})
	if err != nil {
		return nil, err
	}
	return dialOwner(t, s), nil
}

func (o *owner) stop() {
	if o.srv != nil {
		o.srv.Stop(time.Second)
		o.conn.Close()
		o.srv = nil
	}
}

func mustOwner(t *testing.T, db string, epoch uint64) *owner {
	t.Helper()
	o, err := startOwner(t, db, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func storeKeys(t *testing.T, db string) string {
	t.Helper()
	s, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.List(context.Background(), "", func(o objstore.ObjectInfo) error {
		fmt.Fprintf(&b, "%s %d %s\n", o.Key, o.Size, o.ETag)
		return nil
	})
	return b.String()
}

// Test 3 of the issue: A (epoch 1) serving, B opens with epoch 2; A's next
// synced write fails FAILED_PRECONDITION and A stops; B holds every write
// A acknowledged.
func TestZombieIsFenced(t *testing.T) { storetest.ForEachBackend(t, testZombieIsFenced) }

func testZombieIsFenced(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	a := mustOwner(t, db, 1)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte(fmt.Sprintf("a%03d", i)), Value: []byte("A"), Sync: true}); err != nil {
			t.Fatal(err)
		}
	}
	b := mustOwner(t, db, 2)

	_, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("late"), Value: []byte("A"), Sync: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fenced: epoch 1 superseded by 2") {
		t.Fatalf("zombie write: %v, want FAILED_PRECONDITION fenced: epoch 1 superseded by 2", err)
	}
	for _, call := range []func() error{
		func() error { _, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("a001")}); return err },
		func() error {
			_, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("nosync"), Value: []byte("A")})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("fenced primary served a request: %v", err)
		}
	}
	select {
	case err := <-a.srv.Done():
		var fe *shalefs.ErrFenced
		if !errors.As(err, &fe) || fe.By != 2 {
			t.Fatalf("A's Done = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fenced primary did not report it within 5s")
	}
	for i := 0; i < 50; i++ {
		r, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("a%03d", i))})
		if err != nil || string(r.Value) != "A" {
			t.Fatalf("B lost A's acknowledged a%03d: %v", i, err)
		}
	}
	for _, k := range []string{"late", "nosync"} {
		if _, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)}); status.Code(err) != codes.NotFound {
			t.Fatalf("write %q that A reported failed is visible on B: %v", k, err)
		}
	}
}

// The write path alone fences: an owner that has not noticed the new epoch
// fails its next synced write on the seal the new owner put in its WAL.
func TestZombieFencedByStore(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) { testZombieFencedByStoreDepth(t, be, 1) })
}

// testZombieFencedByStoreDepth runs with A's WAL pipeline depth (RFC 0013).
func testZombieFencedByStoreDepth(t *testing.T, be storetest.Location, depth int) {
	db := be.NewURL(t)
	a, err := startOwnerWith(t, db, pipelinedOwner(1, depth))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("before"), Value: []byte("A"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	b := mustOwner(t, db, 2)
	if err := a.srv.fs.FenceError(); err != nil {
		t.Fatalf("A noticed the fence without writing (%v); the test would not exercise the store", err)
	}
	_, err = a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("after"), Value: []byte("A"), Sync: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fenced: epoch 1 superseded by 2") {
		t.Fatalf("zombie synced write: %v", err)
	}
	if r, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("before")}); err != nil || string(r.Value) != "A" {
		t.Fatalf("B lost A's acknowledged write: %v", err)
	}
	if _, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("after")}); status.Code(err) != codes.NotFound {
		t.Fatalf("A's fenced write is visible on B: %v", err)
	}
	// Nor does it appear later: restart B's successor and look again.
	b.stop()
	c := mustOwner(t, db, 3)
	if _, err := c.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("after")}); status.Code(err) != codes.NotFound {
		t.Fatalf("A's fenced write appeared after another takeover: %v", err)
	}
}

// Test 4: a stale start (epoch 1 after epoch 2) refuses to open, naming
// both epochs, and changes nothing in the store.
func TestStaleEpochRefused(t *testing.T) { storetest.ForEachBackend(t, testStaleEpochRefused) }

func testStaleEpochRefused(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	b := mustOwner(t, db, 2)
	b.kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v"), Sync: true})
	before := storeKeys(t, db)
	for _, e := range []uint64{1, 2} {
		_, err := startOwner(t, db, e)
		want := fmt.Sprintf("epoch %d is not above epoch 2 already taken in storage", e)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("stale start with epoch %d: %v, want one line containing %q", e, err, want)
		}
	}
	if after := storeKeys(t, db); after != before {
		t.Fatalf("a refused start changed the store:\n%s\nvs\n%s", before, after)
	}
	if _, err := b.kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("the owner stopped serving after a refused stale start: %v", err)
	}
}

// Test 5: rounds of A writing concurrently with sync=true while B takes
// over; after each round every write A acknowledged is on B. SHALE_STRESS_ROUNDS
// sets the number of rounds (make stress runs thousands).
// getRetrying reads key as a client would: UNAVAILABLE (the read lease is
// being confirmed, slowly on a loaded machine) is retried for a while.
func getRetrying(kv kvv1.KVClient, key string) (*kvv1.GetResponse, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(key)})
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SHALE_STRESS_PIPELINE sets the old owners' WAL pipeline depth (make
// stress STRESS_PIPELINE=D; RFC 0013); TestFencingRacePipelined runs it at 4.
func TestFencingRace(t *testing.T) {
	depth := 1
	if n, err := strconv.Atoi(os.Getenv("SHALE_STRESS_PIPELINE")); err == nil && n > 0 {
		depth = n
	}
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) { testFencingRace(t, be, depth) })
}

func testFencingRace(t *testing.T, be storetest.Location, depth int) {
	rounds := 4
	if n, err := strconv.Atoi(os.Getenv("SHALE_STRESS_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	db := be.NewURL(t)
	first := raceOwner(1)
	first.WALPipelineDepth = depth
	cur, err := startOwnerWith(t, db, first)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]string{}
	var refused []string // writes answered FAILED_PRECONDITION: never applied, ever
	fencedByStore := 0
	// A secondary reads through every takeover: the keys being written
	// (where a write that never became durable would show) and acknowledged
	// ones. What it ever returned must be on every later owner, and a key it
	// found is never missing later (nothing is deleted).
	sec := newRaceReader(t, db)
	defer sec.stop()
	for round := 1; round <= rounds; round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var stop atomic.Bool
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					k, v := fmt.Sprintf("r%d/w%d/%05d", round, w, i), fmt.Sprint(round)
					sec.probe(w, k)
					_, err := cur.kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true})
					if err != nil {
						switch status.Code(err) {
						case codes.FailedPrecondition:
							mu.Lock()
							refused = append(refused, k)
							mu.Unlock()
						case codes.Unavailable: // outcome unknown: either way is right
						default:
							t.Errorf("round %d: unexpected error %v", round, err)
						}
						return
					}
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}(w)
		}
		// Flushes start new WALs, whose first segments need a confirmation
		// and, during a takeover, may be stored by the old owner after the
		// new one listed the store (never durable, never to be served).
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := cur.kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
					return
				}
				time.Sleep(15 * time.Millisecond)
			}
		}()
		time.Sleep(time.Duration(20+round%7*15) * time.Millisecond)
		nc := raceOwner(uint64(round + 1))
		nc.WALPipelineDepth = depth
		// Seals go a little late, racing the old owner's folds; every third
		// successor also pauses before it records its takeover.
		pause := time.Duration(0)
		if round%3 == 0 {
			pause = 150 * time.Millisecond
		}
		nc.Store = successorStore(t, db, int64(round), pause)
		next, err := startOwnerWith(t, db, nc)
		if err != nil {
			t.Fatal(err)
		}
		// The old owner's writers run on until a write hits a seal.
		deadline := time.Now().Add(10 * time.Second)
		for cur.srv.fs.FenceError() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if cur.srv.fs.FenceError() != nil {
			fencedByStore++
		}
		stop.Store(true)
		wg.Wait()
		cur.stop()
		// Every write of this round, and a sample of the earlier ones (all
		// of them after the last round), must be on the new owner.
		checked := 0
		for k, v := range acked {
			if !strings.HasPrefix(k, fmt.Sprintf("r%d/", round)) && round != rounds && checked > 200 {
				continue
			}
			checked++
			r, err := getRetrying(next.kv, k)
			if err != nil || string(r.Value) != v {
				t.Fatalf("round %d: acknowledged %s=%s missing on epoch %d: %v", round, k, v, round+1, err)
			}
		}
		// A write reported fenced never appears, on this owner or a later one.
		for _, k := range refused {
			if _, err := getRetrying(next.kv, k); status.Code(err) != codes.NotFound {
				t.Fatalf("round %d: %s was reported fenced (FAILED_PRECONDITION) but is visible on epoch %d: %v", round, k, round+1, err)
			}
		}
		// What the secondary served was durable: it is on the new owner.
		if err := sec.failed(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for k, v := range sec.served() {
			r, err := getRetrying(next.kv, k)
			if err != nil || string(r.Value) != v {
				t.Fatalf("round %d: the secondary served %s=%s, which epoch %d does not have (%v): a write that never became durable", round, k, v, round+1, err)
			}
		}
		cur = next
		if round%100 == 0 {
			t.Logf("round %d: %d acknowledged writes kept, %d fenced writes absent so far", round, len(acked), len(refused))
		}
	}
	if fencedByStore != rounds {
		t.Fatalf("only %d of %d deposed owners were stopped by the store", fencedByStore, rounds)
	}
	t.Logf("%d rounds, %d acknowledged writes all kept, %d fenced writes all absent; the secondary served %d keys in %d reads, all durable, none went missing", rounds, len(acked), len(refused), len(sec.served()), sec.reads.Load())
}
