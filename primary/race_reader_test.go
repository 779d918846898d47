package primary

import (
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
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
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/secondary"
)

// raceReader is a secondary that reads through the takeovers of the
// fencing race: the last keys each writer attempted (where a write that
// never became durable would show first) and a sample of the keys it
// found before (which must never go missing: the race deletes nothing).
type raceReader struct {
	srv   *secondary.Server
	conn  *grpc.ClientConn
	kv    kvv1.KVClient
	reads atomic.Int64

	mu      sync.Mutex
	recent  [4][8]string // per writer, the last keys it attempted
	next    [4]int
	found   map[string]string
	foundKs []string
	err     error

	done chan struct{}
	wg   sync.WaitGroup
}

func newRaceReader(t *testing.T, db string) *raceReader {
	t.Helper()
	s, err := secondary.Start(secondary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "secondary")}, CatchupInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r := &raceReader{srv: s, conn: conn, kv: kvv1.NewKVClient(conn), found: map[string]string{}, done: make(chan struct{})}
	r.wg.Add(1)
	go r.loop()
	return r
}

// probe notes the key writer w is about to write.
func (r *raceReader) probe(w int, key string) {
	r.mu.Lock()
	r.recent[w][r.next[w]%8] = key
	r.next[w]++
	r.mu.Unlock()
}

func (r *raceReader) loop() {
	defer r.wg.Done()
	rng := rand.New(rand.NewSource(1))
	for {
		select {
		case <-r.done:
			return
		default:
		}
		r.mu.Lock()
		var keys []string
		for w := range r.recent {
			for _, k := range r.recent[w] {
				if k != "" {
					keys = append(keys, k)
				}
			}
		}
		for i := 0; i < 4 && len(r.foundKs) > 0; i++ {
			keys = append(keys, r.foundKs[rng.Intn(len(r.foundKs))])
		}
		r.mu.Unlock()
		for _, k := range keys {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := r.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
			cancel()
			r.reads.Add(1)
			r.mu.Lock()
			prev, seen := r.found[k]
			switch {
			case err == nil && seen && prev != string(resp.Value):
				r.fail(fmt.Errorf("the secondary returned %s=%s after %s", k, resp.Value, prev))
			case err == nil && !seen:
				r.found[k] = string(resp.Value)
				r.foundKs = append(r.foundKs, k)
			case status.Code(err) == codes.NotFound && seen:
				r.fail(fmt.Errorf("the secondary found %s=%s, then not: a write went backwards", k, prev))
			}
			r.mu.Unlock()
		}
	}
}

func (r *raceReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// failed returns the first inconsistency the reader saw.
func (r *raceReader) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// served returns every key the secondary returned, with its value.
func (r *raceReader) served() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.found))
	for k, v := range r.found {
		out[k] = v
	}
	return out
}

func (r *raceReader) stop() {
	close(r.done)
	r.wg.Wait()
	r.conn.Close()
	r.srv.Stop(time.Second)
}

// successorStore returns the store at db as a new owner of the fencing race
// sees it: each seal is sent a little late (up to 30 ms), as from a
// takeover that lists many logs before it seals them (the e2e run that
// lost writes sealed 280 ms after its listing), so the old owner's folds
// and their clean-up land in between; with pauseOpened, its takeover
// record is also held for that long, while the old owner, its writers
// and the secondary go on.
func successorStore(t *testing.T, db string, seed int64, pauseOpened time.Duration) objstore.Store {
	t.Helper()
	store, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewSource(seed))
	return &storetest.Hooked{Store: store, BeforePut: func(key string, size int64, opts objstore.PutOptions) error {
		switch {
		case strings.HasPrefix(key, "_shale/opened/"):
			time.Sleep(pauseOpened)
		case size == 0 && opts.IfNoneMatch && !strings.HasPrefix(key, "_shale/"):
			mu.Lock()
			d := time.Duration(rng.Intn(30)) * time.Millisecond
			mu.Unlock()
			time.Sleep(d)
		}
		return nil
	}}
}
