package primary

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Pipelined durable writes (docs/rfcs/0013-pipelined-writes.md) at depth 4.

func pipelinedOwner(epoch uint64, depth int) shalefs.Config {
	c := blindOwner(epoch)
	c.WALPipelineDepth = depth
	return c
}

// isWALSegment: a WAL segment's key (not a MANIFEST's, not a seal).
func isWALSegment(key string, size int64) bool {
	return size > 0 && strings.Contains(key, ".log/")
}

type putResult struct{ err error }

func putAsync(kv kvv1.KVClient, key string) <-chan putResult {
	ch := make(chan putResult, 1)
	go func() {
		_, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(key), Value: []byte("v-" + key), Sync: true})
		ch <- putResult{err}
	}()
	return ch
}

func scanKeys(t *testing.T, kv kvv1.KVClient) []string {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			keys = append(keys, string(p.Key))
		}
	}
}

// A durable write whose upload is held is in RocksDB's memtable (the WAL
// sync returned once the upload was queued), but no read on the primary
// finds it, through Get, MultiGet or Scan, until it is acknowledged; nor
// does a later durable write that is already stored.
func TestPipelineHidesUnacknowledgedWrites(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		hs := hookedStore(t, db)
		var armed atomic.Bool
		held, release := make(chan string, 1), make(chan struct{})
		hs.BeforePut = func(key string, size int64, _ objstore.PutOptions) error {
			if isWALSegment(key, size) && armed.CompareAndSwap(true, false) {
				held <- key
				<-release
			}
			return nil
		}
		sc := pipelinedOwner(1, 4)
		sc.Store = hs
		a, err := startOwnerWith(t, db, sc)
		if err != nil {
			t.Fatal(err)
		}
		// On a failure, let the held upload go before the owner stops (it
		// drains its uploads when RocksDB closes the WAL).
		var releaseOnce sync.Once
		let := func() { releaseOnce.Do(func() { close(release) }) }
		t.Cleanup(let)
		ctx := context.Background()
		if r := <-putAsync(a.kv, "before"); r.err != nil {
			t.Fatal(r.err)
		}
		armed.Store(true)
		first := putAsync(a.kv, "held")
		key := waitFor(t, held, "the held upload")
		// A second durable write: its upload lands, but it comes after the
		// held one, so it is neither acknowledged nor visible either.
		second := putAsync(a.kv, "later")
		checkHidden := func(when string) {
			t.Helper()
			for _, k := range []string{"held", "later"} {
				if _, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)}); status.Code(err) != codes.NotFound {
					t.Fatalf("%s: Get %s while %s is held: %v; want NotFound", when, k, key, err)
				}
			}
			r, err := a.kv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: [][]byte{[]byte("before"), []byte("held"), []byte("later")}})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Results[0].Found || r.Results[1].Found || r.Results[2].Found {
				t.Fatalf("%s: MultiGet before, held, later: %v; want only before", when, r.Results)
			}
			if keys := scanKeys(t, a.kv); strings.Join(keys, ",") != "before" {
				t.Fatalf("%s: Scan while %s is held: %v; want [before]", when, key, keys)
			}
		}
		checkHidden("at once")
		select {
		case r := <-first:
			t.Fatalf("the write was answered while its upload is held: %v", r.err)
		case r := <-second:
			t.Fatalf("a later write was answered before an earlier one: %v", r.err)
		default:
		}
		checkHidden("again")
		let()
		if r := <-first; r.err != nil {
			t.Fatal(r.err)
		}
		if r := <-second; r.err != nil {
			t.Fatal(r.err)
		}
		for _, k := range []string{"before", "held", "later"} {
			if _, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)}); err != nil {
				t.Fatalf("Get %s after the acknowledgement: %v", k, err)
			}
		}
	})
}

// Slot n's upload fails for good while slot n+1 lands: both writers are
// answered UNAVAILABLE (outcome unknown), never acknowledged, the owner
// stops; the next owner seals the hole at n and serves every acknowledged
// write and neither of the two.
func TestPipelineFailedMiddleUpload(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		hs := hookedStore(t, db)
		var mu sync.Mutex
		armed, failKey := false, ""
		held, release := make(chan string, 1), make(chan struct{})
		landed := make(chan string, 16)
		hs.BeforePut = func(key string, size int64, _ objstore.PutOptions) error {
			if !isWALSegment(key, size) {
				return nil
			}
			mu.Lock()
			if armed {
				armed, failKey = false, key
				mu.Unlock()
				held <- key
				<-release
				return errors.New("injected: this upload fails for good")
			}
			fail := key == failKey
			mu.Unlock()
			if fail {
				return errors.New("injected: this upload fails for good")
			}
			return nil
		}
		hs.AfterPut = func(key string, size int64, _ objstore.PutOptions, err error) error {
			if err == nil && isWALSegment(key, size) {
				landed <- key
			}
			return err
		}
		sc := pipelinedOwner(1, 4)
		sc.Store, sc.RetryFor = hs, 300*time.Millisecond
		a, err := startOwnerWith(t, db, sc)
		if err != nil {
			t.Fatal(err)
		}
		var releaseOnce sync.Once
		let := func() { releaseOnce.Do(func() { close(release) }) }
		t.Cleanup(let)
		if r := <-putAsync(a.kv, "acked"); r.err != nil {
			t.Fatal(r.err)
		}
		for len(landed) > 0 {
			<-landed
		}
		mu.Lock()
		armed = true
		mu.Unlock()
		first := putAsync(a.kv, "slot-n")
		n := waitFor(t, held, "slot n's upload")
		second := putAsync(a.kv, "slot-n+1")
		if got := waitFor(t, landed, "slot n+1's upload"); got == n {
			t.Fatalf("slot n landed: %s", got)
		}
		let()
		for _, r := range []struct {
			key string
			ch  <-chan putResult
		}{{"slot-n", first}, {"slot-n+1", second}} {
			if err := (<-r.ch).err; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "outcome unknown") {
				t.Fatalf("%s: %v; want UNAVAILABLE, outcome unknown", r.key, err)
			}
		}
		if a.srv.fs.FenceError() == nil {
			t.Fatal("the owner went on after a WAL upload failed for good")
		}
		if _, err := a.kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte("slot-n+1")}); err == nil {
			t.Fatal("the stopped owner served slot n+1's write")
		}
		a.stop()

		b := mustOwner(t, db, 2)
		if _, err := getRetrying(b.kv, "acked"); err != nil {
			t.Fatalf("the acknowledged write on the next owner: %v", err)
		}
		for _, k := range []string{"slot-n", "slot-n+1"} {
			if _, err := getRetrying(b.kv, k); status.Code(err) != codes.NotFound {
				t.Fatalf("%s on the next owner: %v; want NotFound (the log ends at the hole)", k, err)
			}
		}
		// And the database goes on: B writes and a third owner has it all.
		if r := <-putAsync(b.kv, "on-b"); r.err != nil {
			t.Fatal(r.err)
		}
		b.stop()
		c := mustOwner(t, db, 3)
		for _, k := range []string{"acked", "on-b"} {
			if _, err := getRetrying(c.kv, k); err != nil {
				t.Fatalf("%s on the third owner: %v", k, err)
			}
		}
	})
}

// A zombie at depth 4: the existing fencing tests with uploads in flight.
func TestZombieFencedByStorePipelined(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) { testZombieFencedByStoreDepth(t, loc, 4) })
}

func TestFencingRacePipelined(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) { testFencingRace(t, loc, 4) })
}
