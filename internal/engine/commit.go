package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// committer merges concurrent writes into one RocksDB write:
// the first caller to find no write in progress becomes the leader, takes
// every write queued so far (its own included), applies them as one batch
// (one cgo call, one WAL append) and hands each its result; a write queued
// meanwhile becomes the next leader. RocksDB's own write group does the
// same, but its followers block OS threads on futexes, which on a busy
// 2-core machine cost more CPU than the writes; here they park goroutines.
//
// Each caller's mutations stay atomic (they are contiguous in one atomic
// batch) and a caller returns only after its write is in the WAL and the
// memtable, as with a direct write. A DB has two: one for non-durable
// writes and one for durable ones, whose leader writes with sync=true, so
// a group is one WAL sync (one segment upload). Every member gets the
// leader's result: the group is one atomic batch, so "fenced" (not
// applied) or "outcome unknown" holds for all of them alike, as for the
// members of RocksDB's own write group (docs/fencing.md, "Group commit").
// A non-durable writer that finds no write in progress leads at once
// (alone, release), without queueing.
type committer struct {
	mu    sync.Mutex
	busy  bool // a leader is writing
	queue []*pendingWrite
	spare []*pendingWrite // the previous group's slice, reused
	batch rocksshim.Batch // the leader's; only the leader touches it

	// window, when positive, is the group-commit window of a durable
	// committer: a new leader waits up to window for the writers seen
	// around the previous group (last) before it writes. Without it,
	// writers that come back from one group after the next leader has
	// started its upload wait for that whole upload and then their own:
	// the groups alternate between a few writers and the rest, and most
	// writers wait about two uploads. A writer alone (last 1) never waits.
	window  time.Duration
	last    int           // the previous group's writers plus those queued when it ended
	skip    int           // groups to write without waiting, after a wait that failed
	waiting bool          // the leader waits for the queue to fill
	full    chan struct{} // wakes the waiting leader; buffered (1)
	timer   *time.Timer   // the leader's; only the leader touches it

	// pipelined: a durable committer over pipelined uploads (pipeline.go).
	// Its groups are answered after the next group started, so the window
	// paces them instead (pace): while groups are in flight (inflight), a
	// new leader starts no earlier than the spacing after the previous
	// group started (lastStart), so the uploads in flight carry more
	// writers each and cost fewer requests; once none is in flight (paced
	// wakes it) it waits as at depth 1 (fill).
	pipelined bool
	inflight  int
	lastStart time.Time
	recent    time.Duration // mean time from a pipelined group's start to its durability (EWMA)
	paced     bool          // the leader waits in pace; the last group in flight to become durable wakes it (full)

	groups, writes atomic.Uint64 // for metrics: groups written, writes in them
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

// grouped says whether a write goes through a committer (the caller picks
// the durable or non-durable one) rather than to RocksDB on its own.
// RocksDB's unordered and pipelined write modes order writes themselves,
// so merge is off with them.
func grouped(merge bool, size int) bool {
	return merge && size <= coalesceMaxBytes
}

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
	c.groups.Add(1)
	c.writes.Add(1)
	if next != nil {
		next.done <- commitResult{lead: true}
	}
}

// apply writes the group's batch; a non-nil wait (pipelined durable
// writes, pipeline.go) is what the group still waits for before it is
// answered: the leader hands leadership on first, so the next group's
// write (and upload) starts while this one's upload is in flight.
func (c *committer) write(p *pendingWrite, apply func(*rocksshim.Batch) (wait func() error, err error)) error {
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if c.busy {
		c.arrived()
		c.mu.Unlock()
		r := <-p.done
		if !r.lead {
			return r.err
		}
		c.mu.Lock() // lead: busy is still set for us
	} else {
		c.busy = true
	}
	if c.pipelined {
		c.pace()
	} else {
		c.fill()
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
	var start time.Time
	if c.pipelined {
		start = time.Now()
		c.lastStart = start
	}
	c.mu.Unlock()

	c.batch.Reset()
	for _, w := range group {
		w.appendTo(&c.batch)
	}
	wait, err := apply(&c.batch)
	c.groups.Add(1)
	c.writes.Add(uint64(len(group)))

	c.mu.Lock()
	// The writers the next group can expect: this group's, which come
	// back, and those that queued meanwhile. A pipelined group (wait)
	// answers its writers only once its upload is durable, after the next
	// group started: that group expects only those queued already, and
	// overlaps its upload with this one's instead of waiting for them.
	c.last = len(group) + len(c.queue)
	if wait != nil {
		c.inflight++
	}
	var next *pendingWrite
	if len(c.queue) > 0 {
		next = c.queue[0]
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	if wait != nil {
		if next != nil {
			next.done <- commitResult{lead: true}
			next = nil
		}
		err = wait()
		took := time.Since(start)
		c.mu.Lock()
		c.inflight--
		if err == nil {
			c.learn(took)
		}
		if c.inflight == 0 && c.paced {
			// Nothing in flight: the waiting leader goes at once, as at
			// depth 1.
			c.paced = false
			c.full <- struct{}{}
		}
		c.mu.Unlock()
	}
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

// arrived is called with c.mu held after a writer joined the queue of a
// busy committer: it wakes a leader waiting for the queue to fill.
func (c *committer) arrived() {
	if c.waiting && len(c.queue) >= c.last {
		c.waiting = false
		c.full <- struct{}{}
	}
}

// fill is called by a new leader with c.mu held (and returns with it
// held): with a window, it waits until the queue holds as many writers as
// the previous group, or until the window ends.
//
// A wait that ends with fewer than half the expected writers says they do
// not come back in a loop (independent clients, each writing now and
// then): the next skipAfterMiss groups do not wait, so such traffic pays
// the window on one group in nine at most.
func (c *committer) fill() {
	if c.window <= 0 || len(c.queue) >= c.last {
		return
	}
	if c.skip > 0 {
		c.skip--
		return
	}
	c.sleep(c.window, &c.waiting)
	if 2*len(c.queue) < c.last {
		c.skip = skipAfterMiss
	}
}

// sleep waits, with c.mu released, for d or until a writer clears *flag
// and signals c.full (fill's arrivals, pace's last group durable).
func (c *committer) sleep(d time.Duration, flag *bool) {
	if c.full == nil {
		c.full = make(chan struct{}, 1)
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	*flag = true
	c.mu.Unlock()
	select {
	case <-c.full:
		c.timer.Stop()
	case <-c.timer.C:
	}
	c.mu.Lock()
	if !*flag {
		// Signalled after the timer fired, or before Stop: drain it.
		select {
		case <-c.full:
		default:
		}
	}
	*flag = false
}

// pace is fill for a pipelined committer, called the same way. With no
// group in flight it is fill: the previous group's writers are answered
// and come back, as at depth 1. While groups are in flight, the new
// leader starts its group once the spacing has passed since the previous
// group's start or, when the last group in flight becomes durable first,
// as with none in flight (docs/rfcs/0013-pipelined-writes.md, "When a
// group starts"). Waiting here applies nothing and takes no ticket: what
// is durable and what readers see do not depend on it.
func (c *committer) pace() {
	if c.window > 0 && c.inflight > 0 {
		wait := time.Until(c.lastStart.Add(c.spacing()))
		if wait <= 0 {
			return
		}
		c.sleep(wait, &c.paced)
		if c.inflight > 0 {
			return // the spacing passed
		}
	}
	c.fill()
}

// spacing is the least time between the starts of two pipelined groups
// while one is in flight: the window (a flush interval, as the peer's
// 2 ms) or, when larger, a fraction of the time a group recently took to
// become durable. A fixed interval shorter than an upload keeps
// upload/interval uploads in flight however busy the store: on a store
// whose PUTs cost its CPU or its disk's fsyncs, that many smaller uploads
// each cost a PUT and make every upload slower (issue 29: depth 4 with a
// 2 ms interval made 2.3x the PUTs of depth 1 and half its writes). Tied
// to the upload time, about 1/paceFraction + 1 uploads are in flight, each
// carrying the writers of a fraction of an upload time, and the spacing
// follows the store: slower uploads, fewer and larger groups.
func (c *committer) spacing() time.Duration {
	return max(c.window, c.recent/paceFraction)
}

// paceFraction: a new group starts at the earliest half an upload time
// after the previous one, so about two uploads are in flight.
const paceFraction = 2

// learn folds a pipelined group's time to durability into recent (an
// exponentially weighted mean over about 8 groups).
func (c *committer) learn(took time.Duration) {
	if c.recent == 0 {
		c.recent = took
		return
	}
	c.recent += (took - c.recent) / 8
}

// skipAfterMiss is how many groups go without waiting after a failed wait.
const skipAfterMiss = 8

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
