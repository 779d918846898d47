package engine

import (
	"sync"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// committer merges concurrent non-durable writes into one RocksDB write:
// the first caller to find no write in progress becomes the leader, takes
// every write queued so far (its own included), applies them as one batch
// (one cgo call, one WAL append) and hands each its result; a write queued
// meanwhile becomes the next leader. RocksDB's own write group does the
// same, but its followers block OS threads on futexes, which on a busy
// 2-core machine cost more CPU than the writes; here they park goroutines.
//
// Each caller's mutations stay atomic (they are contiguous in one atomic
// batch) and a caller returns only after its write is in the WAL and the
// memtable, as with a direct write. Durable (sync) writes do not come
// here: they go to RocksDB directly. A writer that finds no write in
// progress leads at once (alone, release), without queueing.
type committer struct {
	mu    sync.Mutex
	busy  bool // a leader is writing
	queue []*pendingWrite
	spare []*pendingWrite // the previous group's slice, reused
	batch rocksshim.Batch // the leader's; only the leader touches it
}

// pendingWrite is one caller's write: either a serialized batch of its own
// or a single put or delete.
type pendingWrite struct {
	own        *rocksshim.Batch
	key, value []byte
	del        bool
	done       chan commitResult
}

type commitResult struct {
	err  error
	lead bool // the caller leads the next group instead
}

// Writes larger than this go to RocksDB on their own: copying them into a
// shared batch would cost more than the call it saves. A group stops
// growing past groupBytes.
const (
	coalesceMaxBytes = 256 << 10
	groupBytes       = 1 << 20
)

var pendingPool = sync.Pool{New: func() any { return &pendingWrite{done: make(chan commitResult, 1)} }}

// alone makes the caller the leader when no write is in progress (and so
// none is queued: writers queue only behind a leader); it then builds its
// batch in c.batch, applies it and calls release. A single writer thus
// skips the queue, and a concurrent one still merges behind it.
func (c *committer) alone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		return false
	}
	c.busy = true
	return true
}

// release ends a leadership taken with alone, handing it to the first
// queued writer, if any.
func (c *committer) release() {
	c.mu.Lock()
	var next *pendingWrite
	if len(c.queue) > 0 {
		next = c.queue[0]
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	if next != nil {
		next.done <- commitResult{lead: true}
	}
}

func (c *committer) write(p *pendingWrite, apply func(*rocksshim.Batch) error) error {
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if c.busy {
		c.mu.Unlock()
		r := <-p.done
		if !r.lead {
			return r.err
		}
		c.mu.Lock() // lead: busy is still set for us
	} else {
		c.busy = true
	}
	// Take the queue, up to groupBytes (p is in it: it was queued before
	// leadership was handed to it, and nobody took it since).
	n, size := 0, 0
	for n < len(c.queue) && (n == 0 || size < groupBytes) {
		size += c.queue[n].size()
		n++
	}
	group := append(c.spare[:0], c.queue[:n]...)
	c.spare = nil // ours until we give it back
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	c.mu.Unlock()

	c.batch.Reset()
	for _, w := range group {
		w.appendTo(&c.batch)
	}
	err := apply(&c.batch)

	c.mu.Lock()
	var next *pendingWrite
	if len(c.queue) > 0 {
		next = c.queue[0]
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, w := range group {
		if w != p {
			w.done <- commitResult{err: err}
		}
	}
	if next != nil {
		next.done <- commitResult{lead: true}
	}
	clear(group)
	c.mu.Lock()
	c.spare = group
	c.mu.Unlock()
	return err
}

func (p *pendingWrite) size() int {
	if p.own != nil {
		return p.own.Size()
	}
	return len(p.key) + len(p.value) + 16
}

func (p *pendingWrite) appendTo(b *rocksshim.Batch) {
	switch {
	case p.own != nil:
		b.Append(p.own)
	case p.del:
		b.Delete(p.key)
	default:
		b.Put(p.key, p.value)
	}
}
