package primary

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// switchLease is the old primary's lease in these tests: long enough that
// a successor that waited it out would show (LeaseWaited), short enough
// that a failed test does not hang.
const switchLease = 3 * time.Second

// standby is a `shale primary --standby` started in the background: Start
// returns only once it took over.
type standby struct {
	addr    chan string // the address, once warm
	warm    shalefs.WarmReport
	done    chan struct{}
	srv     *Server
	err     error
	cancel  context.CancelFunc
	stopped sync.Once
}

func startStandby(t *testing.T, db string, epoch uint64) *standby {
	t.Helper()
	sb := &standby{addr: make(chan string, 1), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	sb.cancel = cancel
	cfg := Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{Epoch: epoch, Lease: switchLease, CacheDir: filepath.Join(t.TempDir(), "standby")},
		Standby: &StandbyConfig{Poll: 10 * time.Millisecond, Warmed: func(addr string, rep shalefs.WarmReport) {
			sb.warm = rep
			sb.addr <- addr
		}}}
	go func() {
		defer close(sb.done)
		sb.srv, sb.err = startCtx(ctx, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		<-sb.done
		if sb.srv != nil {
			sb.srv.Stop(time.Second)
		}
	})
	return sb
}

func dial(t *testing.T, addr string) kvv1.KVClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kvv1.NewKVClient(conn)
}

// TestSwitchoverKeepsEveryWrite: a stream of synced writes from several
// clients through a switchover (RFC 0012). Every acknowledged write is in
// the successor, every error a client saw is UNAVAILABLE (retryable), the
// successor waited no lease, and a standby refuses StepDown and writes
// while it waits. The longest gap in acknowledgements is logged.
func TestSwitchoverKeepsEveryWrite(t *testing.T) {
	storetest.ForEachBackend(t, testSwitchoverKeepsEveryWrite)
}

func testSwitchoverKeepsEveryWrite(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	a, err := startOwnerWith(t, db, shalefs.Config{Epoch: 1, Lease: switchLease})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Tables for the standby to warm.
	writeKeys(t, a.kv, 300, func(i int) string { return fmt.Sprintf("pre-%d", i) })
	if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}

	b := startStandby(t, db, 2)
	var bAddr string
	select {
	case bAddr = <-b.addr:
	case <-b.done:
		t.Fatalf("the standby stopped before it was warm: %v", b.err)
	}
	if b.warm.Tables == 0 {
		t.Fatalf("the standby warmed no table: %+v", b.warm)
	}
	bkv := dial(t, bAddr)
	// While it waits, a standby owns nothing.
	if _, err := bkv.StepDown(ctx, &kvv1.StepDownRequest{Epoch: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("StepDown on the standby: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := bkv.Put(ctx, &kvv1.PutRequest{Key: []byte("early"), Value: []byte("v"), Sync: true}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Put on the waiting standby: %v, want UNAVAILABLE", err)
	}
	// Nor does the primary step down for another epoch.
	if _, err := a.kv.StepDown(ctx, &kvv1.StepDownRequest{Epoch: 2}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("StepDown{epoch 2} on the primary of epoch 1: %v, want FAILED_PRECONDITION", err)
	}

	type ack struct {
		key string
		at  time.Time
		on  int // 0: the old primary, 1: the successor
	}
	var (
		mu       sync.Mutex
		acks     []ack
		badErrs  []error
		onB      atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		writers  = 4
		clients  = []kvv1.KVClient{a.kv, bkv}
		retrying atomic.Int64
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			on := 0
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%d-%06d", w, i)
				for {
					select {
					case <-stop:
						return
					default:
					}
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := clients[on].Put(cctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte(key), Sync: true})
					cancel()
					if err == nil {
						mu.Lock()
						acks = append(acks, ack{key, time.Now(), on})
						mu.Unlock()
						if on == 1 {
							onB.Add(1)
						}
						break
					}
					if status.Code(err) != codes.Unavailable {
						mu.Lock()
						badErrs = append(badErrs, fmt.Errorf("%s on %d: %w", key, on, err))
						mu.Unlock()
						return
					}
					// Retryable: try the other one (a client behind the -rw
					// Service would be sent to the successor).
					retrying.Add(1)
					on = 1 - on
					time.Sleep(time.Millisecond)
				}
			}
		}(w)
	}
	waitUntil(t, "the old primary acknowledged 200 writes", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acks) >= 200
	})
	resp, err := a.kv.StepDown(ctx, &kvv1.StepDownRequest{Epoch: 1})
	if err != nil {
		close(stop)
		wg.Wait()
		for _, e := range badErrs {
			t.Errorf("a client saw a non-retryable error: %v", e)
		}
		t.Fatalf("StepDown: %v", err)
	}
	// A second call returns the same answer.
	if again, err := a.kv.StepDown(ctx, &kvv1.StepDownRequest{Epoch: 1}); err != nil && status.Code(err) != codes.Unavailable {
		t.Errorf("a repeated StepDown: %v, want the same answer (or UNAVAILABLE once the server closes)", err)
	} else if err == nil && again.Epoch != 1 {
		t.Errorf("a repeated StepDown answered epoch %d", again.Epoch)
	}
	<-b.done
	if b.err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("the standby did not take over: %v", b.err)
	}
	waitUntil(t, "the successor acknowledged 100 writes", time.Minute, func() bool {
		return onB.Load() >= 100 || func() bool { mu.Lock(); defer mu.Unlock(); return len(badErrs) > 0 }()
	})
	close(stop)
	wg.Wait()
	for _, e := range badErrs {
		t.Errorf("a client saw a non-retryable error: %v", e)
	}
	if w := b.srv.LeaseWaited(); w != 0 {
		t.Errorf("the successor waited %s: a released database needs no lease wait", w)
	}
	if e := b.srv.Epoch(); e != 2 {
		t.Errorf("the successor has epoch %d, want 2", e)
	}

	sort.Slice(acks, func(i, j int) bool { return acks[i].at.Before(acks[j].at) })
	var gap time.Duration
	for i := 1; i < len(acks); i++ {
		gap = max(gap, acks[i].at.Sub(acks[i-1].at))
	}
	t.Logf("switchover: %d acknowledged writes (%d on the successor), %d retries; StepDown took %s (flush %s); longest gap between acknowledgements %s; warmed %d tables (%d bytes)",
		len(acks), onB.Load(), retrying.Load(), resp.Took.AsDuration().Round(time.Millisecond), resp.Flush.AsDuration().Round(time.Millisecond), gap.Round(time.Millisecond), b.warm.Tables, b.warm.Bytes)

	// Every acknowledged write, on either side, is in the successor.
	for _, k := range acks {
		g, err := bkv.Get(ctx, &kvv1.GetRequest{Key: []byte(k.key)})
		if err != nil || string(g.Value) != k.key {
			t.Fatalf("%s, acknowledged by %d, missing in the successor: %v", k.key, k.on, err)
		}
	}
	for i := 0; i < 300; i++ {
		if g, err := bkv.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("k%05d", i))}); err != nil || string(g.Value) != fmt.Sprintf("pre-%d", i) {
			t.Fatalf("a key written before the switchover: %v", err)
		}
	}
}

// TestStandbyDiesBeforeClaim: the standby stops while waiting (it claimed
// nothing); the old primary steps down all the same. A normal takeover
// with a later epoch opens with every write and, since the database was
// released, no lease wait.
func TestStandbyDiesBeforeClaim(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, be storetest.Location) {
		db := be.NewURL(t)
		a, err := startOwnerWith(t, db, shalefs.Config{Epoch: 1, Lease: switchLease})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		writeKeys(t, a.kv, 200, func(i int) string { return fmt.Sprintf("v-%d", i) })
		b := startStandby(t, db, 2)
		select {
		case <-b.addr:
		case <-b.done:
			t.Fatalf("the standby stopped before it was warm: %v", b.err)
		}
		b.cancel()
		<-b.done
		if !errors.Is(b.err, context.Canceled) {
			t.Fatalf("the cancelled standby: %v, want context.Canceled", b.err)
		}
		if _, err := a.kv.StepDown(ctx, &kvv1.StepDownRequest{Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		c, err := startOwnerWith(t, db, shalefs.Config{Epoch: 3, Lease: switchLease})
		if err != nil {
			t.Fatalf("a takeover after the standby died: %v", err)
		}
		if w := c.srv.LeaseWaited(); w != 0 {
			t.Errorf("the takeover waited %s after a release", w)
		}
		for i := 0; i < 200; i++ {
			g, err := c.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(fmt.Sprintf("k%05d", i))})
			if err != nil || string(g.Value) != fmt.Sprintf("v-%d", i) {
				t.Fatalf("key %d after the takeover: %v", i, err)
			}
		}
	})
}
