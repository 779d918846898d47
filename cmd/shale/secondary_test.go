package main

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// startServing starts a shale process serving gRPC on addr and waits until
// its health check says SERVING.
func startServing(t *testing.T, addr string, args ...string) *proc {
	t.Helper()
	p := startShale(t, args...)
	p.addr = addr
	conn := dial(t, addr)
	deadline := time.Now().Add(waitDeadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if p.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("shale %s did not start serving on %s: %v\n%s", args[0], addr, err, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A primary process is killed with -9 while a secondary process serves
// reads without pause and writers keep writing; a new primary takes over
// with the next epoch on the same address (as behind a Service). The
// secondary follows without a restart: reads never fail for more than a
// short window (the failed reads and the longest gap are logged), a key it
// once served never goes missing, and every acknowledged write, the dead
// primary's and the new one's, becomes visible on it.
func TestSecondaryServesThroughPrimaryKill9(t *testing.T) {
	storetest.ForEachBackend(t, testSecondaryServesThroughPrimaryKill9)
}

func testSecondaryServesThroughPrimaryKill9(t *testing.T, loc storetest.Location) {
	db := loc.NewURL(t)
	paddr := freeAddr(t)
	primaryArgs := func(epoch string) []string {
		return []string{"primary", "--db", db, "--cache-dir", filepath.Join(t.TempDir(), "primary"), "--listen", paddr,
			"--metrics-listen", "", "--lease", "500ms", "--epoch", epoch}
	}
	a := startServing(t, paddr, primaryArgs("1")...)
	pkv := kvv1.NewKVClient(dial(t, paddr))
	if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("seed"), Value: []byte("0"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	saddr := freeAddr(t)
	sec := startServing(t, saddr, "secondary", "--db", db, "--cache-dir", filepath.Join(t.TempDir(), "secondary"), "--listen", saddr,
		"--metrics-listen", "", "--primary", paddr, "--catchup-interval", "200ms")
	skv := kvv1.NewKVClient(dial(t, saddr))

	// Acknowledged writes, in order, and which epoch's primary took them.
	var mu sync.Mutex
	var acked []string
	ackedBy := map[int]int{} // epoch -> writes acknowledged
	epoch := atomic.Int32{}
	epoch.Store(1)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("w%d/%06d", w, i)
				e := epoch.Load()
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := pkv.Put(wctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(k), Sync: true})
				cancel()
				if err != nil {
					// The primary is dead or deposed: the outcome is not
					// acknowledged, so nothing is expected of it.
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				acked = append(acked, k)
				if epoch.Load() == e {
					ackedBy[int(e)]++
				}
				mu.Unlock()
			}
		}(w)
	}

	// Readers read acknowledged keys from the secondary without pause.
	var reads, failed, timedOut, notYet atomic.Int64
	// Keys the secondary has served, each with when its first successful
	// read returned. A read that answers NotFound for a key breaks
	// monotonic reads only if it began after that: two readers' requests
	// in flight at once may be served either side of a catch-up.
	var seen sync.Map // key -> time.Time
	var lostMu sync.Mutex
	var lost []string
	var lastOK atomic.Int64
	lastOK.Store(time.Now().UnixNano())
	var gapMu sync.Mutex
	var longestGap time.Duration
	var firstErr atomic.Value
	readers := make(chan struct{})
	var rwg sync.WaitGroup
	for r := 0; r < 2; r++ {
		rwg.Add(1)
		go func(r int) {
			defer rwg.Done()
			rnd := rand.New(rand.NewSource(int64(r)))
			for ctx.Err() == nil {
				mu.Lock()
				if len(acked) == 0 {
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					continue
				}
				k := acked[rnd.Intn(len(acked))]
				mu.Unlock()
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				began := time.Now()
				resp, err := skv.Get(rctx, &kvv1.GetRequest{Key: []byte(k)})
				cancel()
				if ctx.Err() != nil {
					return
				}
				reads.Add(1)
				switch {
				case err == nil && string(resp.Value) == k:
					seen.LoadOrStore(k, time.Now())
				case status.Code(err) == codes.NotFound:
					notYet.Add(1) // acknowledged, not caught up yet
					if servedAt, ok := seen.Load(k); ok && servedAt.(time.Time).Before(began) {
						lostMu.Lock()
						lost = append(lost, k)
						lostMu.Unlock()
					}
				default:
					failed.Add(1)
					if status.Code(err) == codes.DeadlineExceeded {
						timedOut.Add(1) // a loaded machine; the gap says how long
					}
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", k, resp, err))
					continue
				}
				now := time.Now()
				gap := time.Duration(now.UnixNano() - lastOK.Swap(now.UnixNano()))
				gapMu.Lock()
				longestGap = max(longestGap, gap)
				gapMu.Unlock()
			}
		}(r)
	}
	go func() { rwg.Wait(); close(readers) }()

	// waitFor waits until cond holds, failing the test after waitDeadline.
	var why string // what cond found wrong last
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(waitDeadline)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s (%s)\nsecondary log:\n%s", what, waitDeadline, why, sec.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	seenCount := func() int {
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		return n
	}
	waitFor("200 writes acknowledged by the first primary, 50 served by the secondary", func() bool {
		mu.Lock()
		defer mu.Unlock()
		why = fmt.Sprintf("%d acknowledged, %d served", ackedBy[1], seenCount())
		return ackedBy[1] >= 200 && seenCount() >= 50
	})

	// kill -9 while writes are in flight; the next primary takes over.
	epoch.Store(2)
	killedAt := time.Now()
	a.kill9(t)
	b := startServing(t, paddr, primaryArgs("2")...)
	servingAfter := time.Since(killedAt)
	waitFor("200 writes acknowledged by the new primary", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ackedBy[2] >= 200
	})
	stop()
	wg.Wait()
	<-readers

	// Every acknowledged write reaches the secondary.
	mu.Lock()
	all := append([]string(nil), acked...)
	mu.Unlock()
	waitFor("every acknowledged write visible on the secondary", func() bool {
		for _, k := range all {
			if _, ok := seen.Load(k); ok {
				continue
			}
			resp, err := skv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(k)})
			if err != nil || string(resp.Value) != k {
				why = fmt.Sprintf("%s reads %v %v", k, resp, err)
				return false
			}
			seen.Store(k, time.Now())
		}
		return true
	})
	st, err := skv.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d reads on the secondary (%d not caught up yet, %d failed: %v), longest gap between successful reads %v; new primary serving %v after the kill; %d writes acknowledged (%d by epoch 1, %d by epoch 2); secondary at sequence %d",
		loc.Name, reads.Load(), notYet.Load(), failed.Load(), firstErr.Load(), longestGap.Round(time.Millisecond), servingAfter.Round(time.Millisecond),
		len(all), ackedBy[1], ackedBy[2], st.LatestSequence)
	if len(lost) > 0 {
		t.Errorf("%d keys the secondary had served went missing later, e.g. %v", len(lost), lost[:min(len(lost), 5)])
	}
	// The secondary never depends on the primary to serve: a read may
	// fail only in a short window (a loaded machine: generous).
	if longestGap > 10*time.Second {
		t.Errorf("the secondary served no read for %v", longestGap)
	}
	if n := failed.Load() - timedOut.Load(); n > 0 {
		t.Errorf("%d reads failed on the secondary (not by their deadline), first: %v", n, firstErr.Load())
	}
	b.cmd.Process.Kill()
}

// A secondary process is paused (SIGSTOP) past its lease TTL while the
// primary rewrites every key, compacts, and deletes the tables the
// secondary was reading (it keeps none in its cache, so it reads them from
// the store). Resumed, it never serves a read from what is gone: each read
// returns a value the key had or UNAVAILABLE (lease expired), until it has
// caught up and serves the new values.
func TestSecondaryPausedPastItsLease(t *testing.T) {
	storetest.ForEachBackend(t, testSecondaryPausedPastItsLease)
}

func testSecondaryPausedPastItsLease(t *testing.T, loc storetest.Location) {
	db := loc.NewURL(t)
	paddr := freeAddr(t)
	startServing(t, paddr, "primary", "--db", db, "--cache-dir", filepath.Join(t.TempDir(), "primary"), "--listen", paddr,
		"--metrics-listen", "", "--lease", "500ms", "--delete-grace", "100ms", "--epoch", "1")
	pkv := kvv1.NewKVClient(dial(t, paddr))
	ctx := context.Background()
	const keys = 100
	write := func(gen string) {
		t.Helper()
		for i := 0; i < keys; i++ {
			k := fmt.Sprintf("k%03d", i)
			if _, err := pkv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(gen), Sync: true}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pkv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	write("v1") // overlapping tables, so the compaction rewrites them all
	saddr := freeAddr(t)
	sec := startServing(t, saddr, "secondary", "--db", db, "--cache-dir", filepath.Join(t.TempDir(), "secondary"), "--listen", saddr,
		"--metrics-listen", "", "--primary", paddr, "--catchup-interval", "100ms", "--lease-ttl", "2s", "--cache-size", "1")
	skv := kvv1.NewKVClient(dial(t, saddr))
	// Caught up, by its sequence number: no read yet, so no block of the
	// tables is in its block cache and every read goes to the store.
	pst, err := pkv.Status(ctx, &kvv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitDeadline)
	for {
		st, err := skv.Status(ctx, &kvv1.StatusRequest{})
		if err == nil && st.LatestSequence >= pst.LatestSequence && st.Stats.SstFiles > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary did not catch up with the first writes: %v %v\n%s", st, err, sec.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	store, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	tables := func() map[string]bool {
		out := map[string]bool{}
		store.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
			if strings.Contains(o.Key, ".sst.") {
				out[o.Key] = true
			}
			return nil
		})
		return out
	}
	old := tables()
	if len(old) < 2 {
		t.Fatalf("%d tables in the store; the test wants some to delete", len(old))
	}

	if err := syscall.Kill(sec.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(sec.cmd.Process.Pid, syscall.SIGCONT)
		}
	}()
	write("v2")
	if _, err := pkv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(waitDeadline)
	for {
		left := 0
		now := tables()
		for k := range old {
			if now[k] {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the paused secondary's tables still in the store after %s", left, waitDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := syscall.Kill(sec.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	refused, old1, reads := 0, 0, 0
	deadline = time.Now().Add(waitDeadline)
	for done := false; !done; {
		done = true
		for i := 0; i < keys; i++ {
			k := fmt.Sprintf("k%03d", i)
			r, err := skv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
			reads++
			switch {
			case err == nil && string(r.Value) == "v2":
			case err == nil && string(r.Value) == "v1":
				old1++
				done = false
			case status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "replica lease expired"):
				refused++
				done = false
			default:
				t.Fatalf("a read of %s on the resumed secondary: %v %v (the tables it used are gone)\n%s", k, r, err, sec.stderr)
			}
		}
		if !done && time.Now().After(deadline) {
			t.Fatalf("the resumed secondary does not serve the new values after %s\n%s", waitDeadline, sec.stderr)
		}
	}
	t.Logf("%s: resumed after its tables were deleted: %d reads, %d refused (lease expired), %d of the old values, then all new", loc.Name, reads, refused, old1)
	if refused == 0 {
		t.Errorf("the resumed secondary never refused a read: its lease should have expired while it was paused")
	}
}
