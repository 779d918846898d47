package engine

import (
	"sync"
	"testing"
	"time"
)

// heldPipeline stands in for the FileSystem's upload pipeline (pure
// bookkeeping: which tickets are durable); RocksDB is real. Every
// Ticket call is a new upload queued; nothing is durable until release.
type heldPipeline struct {
	mu      sync.Mutex
	cond    sync.Cond
	issued  uint64
	durable uint64
	queued  chan uint64 // a ticket handed out
	waiting chan uint64 // someone waits for this ticket
}

func newHeldPipeline() *heldPipeline {
	p := &heldPipeline{queued: make(chan uint64, 16), waiting: make(chan uint64, 16)}
	p.cond.L = &p.mu
	return p
}

func (p *heldPipeline) Ticket() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.issued++
	p.queued <- p.issued
	return p.issued
}

func (p *heldPipeline) Durable() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.durable
}

func (p *heldPipeline) WaitDurable(t uint64) error {
	p.waiting <- t
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.durable < t {
		p.cond.Wait()
	}
	return nil
}

func (p *heldPipeline) release(t uint64) {
	p.mu.Lock()
	p.durable = t
	p.cond.Broadcast()
	p.mu.Unlock()
}

func recv(t *testing.T, ch <-chan uint64, what string) uint64 {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		return 0
	}
}

// RFC 0013 in the engine: a durable write whose upload is not durable is
// in RocksDB but no read sees it, nor anything written after it; a
// non-durable write made meanwhile is answered only once the durable
// write before it is, so its writer's next read finds it.
func TestPipelineHoldsReadsAndAcks(t *testing.T) {
	p := newHeldPipeline()
	o := DefaultOptions()
	o.Pipeline = p
	d, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// On a failure, make everything durable before Close waits for the
	// writes still waiting.
	defer p.release(1 << 62)
	if err := d.Put([]byte("k0"), []byte("v"), false); err != nil { // nothing in flight: at once
		t.Fatal(err)
	}
	durable := make(chan error, 1)
	go func() { durable <- d.Put([]byte("k1"), []byte("v"), true) }()
	t1 := recv(t, p.queued, "the durable write's ticket")
	recv(t, p.waiting, "the durable write waiting")
	notFound := func(key string) {
		t.Helper()
		if _, ok, err := d.Get([]byte(key)); err != nil || ok {
			t.Fatalf("Get %s before k1 is durable: found %v (%v)", key, ok, err)
		}
		if _, found, err := d.MultiGet([][]byte{[]byte(key)}); err != nil || found[0] {
			t.Fatalf("MultiGet %s before k1 is durable: %v (%v)", key, found, err)
		}
		if err := d.Scan(ScanOptions{}, func(k, _ []byte) error {
			if string(k) == key {
				t.Fatalf("Scan found %s before k1 is durable", key)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	notFound("k1")
	if _, ok, _ := d.Get([]byte("k0")); !ok {
		t.Fatal("k0, written before, is not found")
	}
	plain := make(chan error, 1)
	go func() { plain <- d.Put([]byte("k2"), []byte("v"), false) }()
	select {
	case err := <-plain:
		t.Fatalf("a non-durable write after k1 was answered (%v) before k1 is durable: its writer would not read it back", err)
	case got := <-p.waiting:
		if got != t1 {
			t.Fatalf("the non-durable write waits for ticket %d, want %d", got, t1)
		}
	}
	notFound("k2")
	select {
	case err := <-durable:
		t.Fatalf("k1 answered before durable: %v", err)
	default:
	}
	p.release(t1)
	if err := <-durable; err != nil {
		t.Fatal(err)
	}
	if err := <-plain; err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		if _, ok, err := d.Get([]byte(k)); err != nil || !ok {
			t.Fatalf("Get %s once durable: found %v (%v)", k, ok, err)
		}
	}
	if seq := d.LatestSequence(); seq < 3 {
		t.Fatalf("LatestSequence %d once every write is durable; want 3", seq)
	}
}
