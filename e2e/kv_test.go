//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// newConn connects to a KV server at addr (a tcpproxy address), over TLS
// with the e2e client's certificate of the database behind it.
// Reconnects are retried every 50-250 ms, so that a client notices a new
// primary as soon as the Service routes to it (gRPC's default backoff
// would add seconds to every measured failover).
func newConn(addr string) (*grpc.ClientConn, error) {
	cfg, err := clientConfig(addr)
	if err != nil {
		return nil, err
	}
	opts, err := cfg.DialOptions()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))...)
}

// dial is a client of the KV server at addr for the rest of t.
func dial(t *testing.T, addr string) kvv1.KVClient {
	t.Helper()
	conn, err := newConn(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return kvv1.NewKVClient(conn)
}

// kvClient is a client of the main database's NAME-rw Service.
func (s *suite) kvClient(t *testing.T) kvv1.KVClient {
	t.Helper()
	return dial(t, s.rwAddr(t))
}

// callFresh runs fn with a client on a new connection to addr, retrying
// (on a new connection each time) until it succeeds. A connection made
// while a Service switches primaries can be stuck with a server that is
// gone; a new one goes where the Service now points.
func callFresh(t *testing.T, addr, what string, fn func(ctx context.Context, kv kvv1.KVClient) error) {
	t.Helper()
	eventually(t, 2*time.Minute, what, func() (bool, string) {
		conn, err := newConn(addr)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fn(c, kvv1.NewKVClient(conn)); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// rwAddr is a host address reaching the main database's NAME-rw Service,
// kept for the whole run.
func (s *suite) rwAddr(t *testing.T) string {
	t.Helper()
	if s.rw == "" {
		s.rw = s.serviceProxy(s.top, s.db+"-rw", kvPort)
	}
	return s.rw
}

// ledger remembers what the database must hold: every write acknowledged
// (its last acknowledged value), and every key whose write was refused
// with FAILED_PRECONDITION ("fenced: never applied") and never
// acknowledged afterwards. Writes that failed otherwise may or may not
// have happened and are not checked.
type ledger struct {
	mu      sync.Mutex
	acked   map[string]string
	refused map[string]bool
}

func newLedger() *ledger {
	return &ledger{acked: map[string]string{}, refused: map[string]bool{}}
}

func (l *ledger) ack(key, value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[key] = value
	delete(l.refused, key)
}

func (l *ledger) refuse(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.acked[key]; !ok {
		l.refused[key] = true
	}
}

func (l *ledger) counts() (acked, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.refused)
}

// verifyLedger reads every acknowledged key back (MultiGet, in chunks)
// and checks that no refused key exists.
func (s *suite) verifyLedger(t *testing.T, addr string) {
	t.Helper()
	verifyLedgerOf(t, addr, s.ledger)
}

// verifyLedgerOf is verifyLedger for the ledger of another database.
func verifyLedgerOf(t *testing.T, addr string, l *ledger) {
	t.Helper()
	l.mu.Lock()
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	want := make(map[string]string, len(l.acked))
	for k, v := range l.acked {
		want[k] = v
	}
	refused := make([]string, 0, len(l.refused))
	for k := range l.refused {
		refused = append(refused, k)
	}
	l.mu.Unlock()
	sort.Strings(keys)

	var lost, wrong []string
	for chunk := range slices.Chunk(keys, 500) {
		res := multiGet(t, addr, chunk)
		for i, r := range res {
			switch {
			case !r.Found:
				lost = append(lost, chunk[i])
			case string(r.Value) != want[chunk[i]]:
				wrong = append(wrong, fmt.Sprintf("%s=%q (acknowledged %q)", chunk[i], r.Value, want[chunk[i]]))
			}
		}
	}
	var appeared []string
	for chunk := range slices.Chunk(refused, 500) {
		for i, r := range multiGet(t, addr, chunk) {
			if r.Found {
				appeared = append(appeared, chunk[i])
			}
		}
	}
	if len(lost) > 0 || len(wrong) > 0 || len(appeared) > 0 {
		t.Fatalf("of %d acknowledged writes, %d are lost (%v) and %d have another value (%v); %d of %d writes refused as fenced exist anyway (%v)",
			len(keys), len(lost), first(lost, 10), len(wrong), first(wrong, 10), len(appeared), len(refused), first(appeared, 10))
	}
	t.Logf("all %d acknowledged writes are there with their values; none of %d writes refused as fenced is", len(keys), len(refused))
}

func first(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// multiGet reads keys, retrying while the database is unavailable (a
// check right after a failover may meet a Service still switching over).
func multiGet(t *testing.T, addr string, keys []string) []*kvv1.MultiGetResponse_Result {
	t.Helper()
	req := &kvv1.MultiGetRequest{}
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(k))
	}
	var res *kvv1.MultiGetResponse
	callFresh(t, addr, "a MultiGet to succeed", func(c context.Context, kv kvv1.KVClient) (err error) {
		res, err = kv.MultiGet(c, req)
		return err
	})
	if len(res.Results) != len(keys) {
		t.Fatalf("MultiGet of %d keys returned %d results", len(keys), len(res.Results))
	}
	return res.Results
}

// kvStatus asks the server behind addr for its role and epoch, retrying
// while it is unavailable.
func kvStatus(t *testing.T, addr string) *kvv1.StatusResponse {
	t.Helper()
	var st *kvv1.StatusResponse
	callFresh(t, addr, "a Status call to succeed", func(c context.Context, kv kvv1.KVClient) (err error) {
		st, err = kv.Status(c, &kvv1.StatusRequest{})
		return err
	})
	return st
}

// put writes one key with sync=true and records the outcome in the ledger.
func (s *suite) put(ctx context.Context, kv kvv1.KVClient, key, value string) error {
	return putTo(ctx, kv, s.ledger, key, value)
}

// putTo is put recording into ledger l (another database's).
func putTo(ctx context.Context, kv kvv1.KVClient, l *ledger, key, value string) error {
	_, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte(value), Sync: true})
	switch status.Code(err) {
	case codes.OK:
		l.ack(key, value)
	case codes.FailedPrecondition:
		l.refuse(key)
	}
	return err
}

func putReq(key, value string) *kvv1.PutRequest {
	return &kvv1.PutRequest{Key: []byte(key), Value: []byte(value), Sync: true}
}

// ack is one acknowledged write of a writer.
type ack struct {
	at    time.Time
	epoch uint64
}

// writer writes keys PREFIX/000000001, ... with sync=true in a loop, one at
// a time, each attempt bounded by 3 s, and records when each was
// acknowledged and by which epoch's primary. After a failed write it
// drops its connection and makes a new one, as a client library that
// wants to find the new primary soon would: the old connection may lead
// to a frozen or vanished primary.
type writer struct {
	s      *suite
	addr   string
	prefix string
	stop   chan struct{}
	done   chan struct{}
	// ledger records the outcomes (the suite's, unless another database's);
	// pace, if set, is the pause after each acknowledged write.
	ledger *ledger
	pace   time.Duration

	mu     sync.Mutex
	acks   []ack
	errs   int
	lastEr error
	// codes counts the failed writes by gRPC code (a switchover must show
	// only retryable ones).
	codes map[codes.Code]int
}

func (s *suite) startWriter(t *testing.T, addr, prefix string) *writer {
	return s.startWriterTo(t, addr, prefix, s.ledger, 0)
}

// startWriterTo is startWriter recording into ledger l, pausing pace after
// each acknowledged write (a few writes a second, not as fast as it can).
func (s *suite) startWriterTo(t *testing.T, addr, prefix string, l *ledger, pace time.Duration) *writer {
	w := &writer{s: s, addr: addr, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{}), ledger: l, pace: pace}
	go w.loop()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) loop() {
	defer close(w.done)
	var conn *grpc.ClientConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var epoch uint64 // of the primary that acknowledged the last write; 0 = unknown
	for i := 1; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		if conn == nil {
			var err error
			if conn, err = newConn(w.addr); err != nil {
				w.mu.Lock()
				w.errs++
				w.lastEr = err
				w.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				continue
			}
			epoch = 0
		}
		kv := kvv1.NewKVClient(conn)
		key := fmt.Sprintf("%s/%09d", w.prefix, i)
		value := fmt.Sprintf("%s-%d", key, time.Now().UnixNano())
		c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := putTo(c, kv, w.ledger, key, value)
		at := time.Now()
		if err == nil && epoch == 0 {
			// First success on this connection: ask who answered. The
			// Status call uses the same connection, so the same primary.
			if st, serr := kv.Status(c, &kvv1.StatusRequest{}); serr == nil {
				epoch = st.Epoch
			}
		}
		cancel()
		w.mu.Lock()
		if err == nil {
			w.acks = append(w.acks, ack{at: at, epoch: epoch})
		} else {
			w.errs++
			w.lastEr = err
			if w.codes == nil {
				w.codes = map[codes.Code]int{}
			}
			w.codes[status.Code(err)]++
		}
		w.mu.Unlock()
		if err != nil {
			conn.Close()
			conn = nil
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		} else if w.pace > 0 {
			select {
			case <-w.stop:
				return
			case <-time.After(w.pace):
			}
		}
	}
}

// halt stops the writer and waits for its last write.
func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// since returns the writer's acknowledgements after t.
func (w *writer) since(t time.Time) []ack {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := sort.Search(len(w.acks), func(i int) bool { return w.acks[i].at.After(t) })
	return slices.Clone(w.acks[i:])
}

func (w *writer) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := fmt.Sprintf("%d writes acknowledged, %d failed", len(w.acks), w.errs)
	if len(w.acks) > 0 {
		a := w.acks[len(w.acks)-1]
		s += fmt.Sprintf("; last ack %s ago by epoch %d", time.Since(a.at).Round(time.Millisecond), a.epoch)
	}
	if w.lastEr != nil {
		s += fmt.Sprintf("; last error: %v", w.lastEr)
	}
	return s
}

// waitAcks waits until the writer has n acknowledgements after t from a
// primary with the given epoch, and returns the first of them.
func (w *writer) waitAcks(t *testing.T, after time.Time, epoch uint64, n int, timeout time.Duration) ack {
	t.Helper()
	var firstAck ack
	eventually(t, timeout, fmt.Sprintf("%d writes acknowledged by the primary of epoch %d", n, epoch), func() (bool, string) {
		got := 0
		for _, a := range w.since(after) {
			if a.epoch == epoch {
				if got == 0 {
					firstAck = a
				}
				got++
			}
		}
		return got >= n, w.state()
	})
	return firstAck
}

// counts is how many writes were acknowledged and how many failed.
func (w *writer) counts() (acked, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks), w.errs
}

// lastErr is the last failed write's error.
func (w *writer) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastEr
}
