package engine

import (
	"sync"

	"github.com/linxGnu/grocksdb"
)

// Pipeline is the FileSystem side of pipelined durable writes
// (shalefs.Owner with WALPipelineDepth > 1; docs/rfcs/0013-pipelined-writes.md):
// a WAL sync returns once its upload is queued, with a ticket; tickets
// become durable strictly in order.
type Pipeline interface {
	// Ticket is the last upload queued: a RocksDB write that returned had
	// its WAL sync queued at or before it.
	Ticket() uint64
	// Durable is the watermark: every upload up to it is stored and
	// cleared for acknowledgement.
	Durable() uint64
	// WaitDurable waits until the watermark reaches t, or an upload at or
	// before t failed for good (the owner stopped).
	WaitDurable(t uint64) error
}

// pipe is the engine side (RFC 0013, steps 6-8). RocksDB inserts a synced
// write group into the memtable as soon as Sync returns, so with early
// returns a durable write is visible before it is durable. Each durable
// write takes a snapshot just before it (under writeMu, so no other write
// lands between the snapshot and it) and queues it; reads use the snapshot
// of the oldest write not yet durable, so nobody reads a write that could
// still be lost, nor anything written after it.
type pipe struct {
	p Pipeline
	// writeMu is held around every RocksDB write in pipelined mode: the
	// snapshot before a durable write, and the ticket after it, belong to
	// that write alone.
	writeMu sync.Mutex
	mu      sync.Mutex // queue, last
	queue   []*inflight
	last    uint64 // ticket of the last durable write queued
}

// inflight is a durable write (a group) not yet known to be durable.
type inflight struct {
	snap   *grocksdb.Snapshot // taken just before its write
	ticket uint64
	set    bool // ticket known (its write returned)
	refs   int  // reads using snap
	popped bool
}

// durableWrite runs a durable RocksDB write in pipelined mode and returns
// what waits for it to be durable (nil error: acknowledge).
func (d *DB) durableWrite(write func() error) (wait func() error, err error) {
	ps := d.pipe
	ps.writeMu.Lock()
	ps.mu.Lock()
	e := &inflight{snap: d.db.NewSnapshot()}
	ps.queue = append(ps.queue, e)
	ps.mu.Unlock()
	if err := write(); err != nil {
		// RocksDB applied nothing of it (a failed sync leaves the group
		// out of the memtable): it hides nothing.
		ps.mu.Lock()
		for i, q := range ps.queue {
			if q == e {
				ps.queue = append(ps.queue[:i], ps.queue[i+1:]...)
				break
			}
		}
		ps.mu.Unlock()
		d.db.ReleaseSnapshot(e.snap)
		ps.writeMu.Unlock()
		return nil, err
	}
	t := ps.p.Ticket()
	ps.mu.Lock()
	e.ticket, e.set = t, true
	ps.last = t
	ps.mu.Unlock()
	ps.writeMu.Unlock()
	return func() error {
		if err := ps.p.WaitDurable(t); err != nil {
			return err
		}
		d.popDurable()
		return nil
	}, nil
}

// plainWrite runs a non-durable RocksDB write in pipelined mode: it is
// acknowledged only once every durable write before it is durable, so
// that its writer's next read (at the snapshot of the oldest durable
// write in flight) sees it (RFC 0013, invariant 4).
func (d *DB) plainWrite(write func() error) (wait func() error, err error) {
	ps := d.pipe
	ps.writeMu.Lock()
	err = write()
	ps.mu.Lock()
	t, behind := ps.last, len(ps.queue) > 0
	ps.mu.Unlock()
	ps.writeMu.Unlock()
	if err != nil || !behind {
		return nil, err
	}
	return func() error {
		if err := ps.p.WaitDurable(t); err != nil {
			return err
		}
		d.popDurable()
		return nil
	}, nil
}

// applyWith runs one committer group's RocksDB write (apply), in
// pipelined mode as durableWrite or plainWrite: the returned wait is
// called by the leader after it handed leadership on.
func (d *DB) applyWith(sync bool, apply func() error) (func() error, error) {
	switch {
	case d.pipe == nil:
		return nil, apply()
	case sync:
		return d.durableWrite(apply)
	default:
		return d.plainWrite(apply)
	}
}

// write runs a RocksDB write directly (not through a committer).
func (d *DB) write(sync bool, write func() error) error {
	switch {
	case d.pipe == nil:
		return write()
	default:
		wait, err := d.applyWith(sync, write)
		if err != nil || wait == nil {
			return err
		}
		return wait()
	}
}

// popDurable drops the writes at the head of the queue that are durable.
func (d *DB) popDurable() {
	ps := d.pipe
	ps.mu.Lock()
	defer ps.mu.Unlock()
	d.popLocked()
}

func (d *DB) popLocked() {
	ps := d.pipe
	if len(ps.queue) == 0 {
		return
	}
	durable := ps.p.Durable()
	n := 0
	for n < len(ps.queue) && ps.queue[n].set && ps.queue[n].ticket <= durable {
		e := ps.queue[n]
		e.popped = true
		if e.refs == 0 {
			d.db.ReleaseSnapshot(e.snap)
		}
		n++
	}
	if n > 0 {
		rest := copy(ps.queue, ps.queue[n:])
		clear(ps.queue[rest:])
		ps.queue = ps.queue[:rest]
	}
}

// readOptions are the options a read uses and what to call when it is
// done. In pipelined mode: the snapshot before the oldest durable write
// not yet durable, or a snapshot of the latest state (taken under the
// queue's lock, so no durable write can be applied between the look at
// the queue and the snapshot).
func (d *DB) readOptions() (*grocksdb.ReadOptions, func()) {
	ps := d.pipe
	if ps == nil {
		return d.ro, func() {}
	}
	ps.mu.Lock()
	d.popLocked()
	var e *inflight
	if len(ps.queue) > 0 {
		e = ps.queue[0]
		e.refs++
	} else {
		e = &inflight{snap: d.db.NewSnapshot(), popped: true, refs: 1}
	}
	ps.mu.Unlock()
	ro := d.newReadOptions()
	ro.SetSnapshot(e.snap)
	return ro, func() {
		ro.Destroy()
		ps.mu.Lock()
		e.refs--
		release := e.popped && e.refs == 0
		ps.mu.Unlock()
		if release {
			d.db.ReleaseSnapshot(e.snap)
		}
	}
}

// pipeSequence is the sequence number of the snapshot reads use while
// durable writes are in flight (ok false: none is, or not pipelined).
func (d *DB) pipeSequence() (uint64, bool) {
	ps := d.pipe
	if ps == nil {
		return 0, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	d.popLocked()
	if len(ps.queue) == 0 {
		return 0, false
	}
	return ps.queue[0].snap.GetSequenceNumber(), true
}

// releasePipe releases the snapshots of writes still queued (a pipeline
// that failed keeps them): RocksDB closes only without snapshots.
func (d *DB) releasePipe() {
	if d.pipe == nil {
		return
	}
	d.pipe.mu.Lock()
	defer d.pipe.mu.Unlock()
	for _, e := range d.pipe.queue {
		if e.refs == 0 {
			d.db.ReleaseSnapshot(e.snap)
		}
	}
	d.pipe.queue = nil
}
