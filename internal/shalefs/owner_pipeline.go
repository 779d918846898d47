package shalefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// MaxWALPipelineDepth bounds Config.WALPipelineDepth (--wal-pipeline-depth):
// more uploads in flight gain nothing once they outnumber the writers
// waiting, and each is a hole a lost segment could hide in (RFC 0013).
const MaxWALPipelineDepth = 16

// pipeline keeps up to depth WAL segment uploads in flight and clears
// them strictly in order (docs/rfcs/0013-pipelined-writes.md). Every
// queued upload has a ticket, one counter for every log of this owner;
// done is the watermark: every ticket up to it is stored and cleared.
type pipeline struct {
	depth   uint64
	queueMu sync.Mutex // serializes queueing: ticket order = slot order
	mu      sync.Mutex
	cond    sync.Cond
	issued  uint64 // tickets queued
	done    uint64 // every ticket up to here stored and cleared
	failed  uint64 // the first ticket that failed for good (0: none)
	err     error  // its error, for every waiter at or after it
}

func newPipeline(depth int) *pipeline {
	p := &pipeline{depth: uint64(depth)}
	p.cond.L = &p.mu
	return p
}

// isWAL: RocksDB's write-ahead logs are pipelined; MANIFEST and CATALOG
// syncs stay synchronous (and drain the pipeline first).
func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// Ticket is the last ticket queued: a RocksDB write that returned had its
// sync's upload queued at or before it (engine.Pipeline).
func (f *Owner) Ticket() uint64 {
	if f.pipe == nil {
		return 0
	}
	f.pipe.mu.Lock()
	defer f.pipe.mu.Unlock()
	return f.pipe.issued
}

// Durable is the watermark: every upload up to this ticket is stored and
// cleared for acknowledgement, and so is every one before it.
func (f *Owner) Durable() uint64 {
	if f.pipe == nil {
		return 0
	}
	f.pipe.mu.Lock()
	defer f.pipe.mu.Unlock()
	return f.pipe.done
}

// WaitDurable waits until every upload up to ticket t is stored and
// cleared (nil), or one of them failed for good (the owner stopped: the
// error says whether the outcome is unknown).
func (f *Owner) WaitDurable(t uint64) error {
	if f.pipe == nil {
		return nil
	}
	p := f.pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.done < t && (p.failed == 0 || p.failed > t) {
		p.cond.Wait()
	}
	if p.done >= t {
		return nil
	}
	return p.err
}

// drain waits until every queued upload completed: a MANIFEST sync, a
// WAL's Close and the deletion of a log go after the uploads in flight
// (RFC 0013, step 5).
func (f *Owner) drain() error {
	if f.pipe == nil {
		return nil
	}
	p := f.pipe
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.done < p.issued && p.failed == 0 {
		p.cond.Wait()
	}
	if p.failed != 0 {
		return p.err
	}
	return nil
}

// queueSegment is a pipelined WAL sync: the bytes of log name not queued
// yet, up to size, become the log's next slot, uploaded in the background;
// it returns once the upload is queued, waiting while depth uploads are
// in flight (RFC 0013, step 1).
func (f *Owner) queueSegment(name string, st *file, size int64, activity Activity) error {
	p := f.pipe
	p.queueMu.Lock()
	defer p.queueMu.Unlock()
	p.mu.Lock()
	for p.issued-p.done >= p.depth && p.failed == 0 && f.FenceError() == nil {
		p.cond.Wait()
	}
	inFlight := p.issued > p.done
	p.mu.Unlock()
	if err := f.FenceError(); err != nil {
		fe := err.(*ErrFenced)
		if inFlight || fe.Cause != "" {
			// An upload of ours may land after the fence: not "definitely
			// not applied".
			return &ErrOutcomeUnknown{Fence: fe}
		}
		return err
	}
	st.mu.Lock()
	if st.qSeq == 0 {
		st.qSeq, st.qSize = st.nextSeq, st.size
	}
	if size <= st.qSize {
		st.mu.Unlock()
		return nil // queued already: the waiter's ticket covers it
	}
	from, seq := st.qSize, st.qSeq
	st.mu.Unlock()
	data := make([]byte, size-from)
	fh, err := os.Open(f.localPath(name))
	if err != nil {
		return err
	}
	_, err = fh.ReadAt(data, from)
	fh.Close()
	if err != nil {
		return fmt.Errorf("sync of %s: read local bytes %d-%d: %w", name, from, size, err)
	}
	f.stopMu.Lock()
	if f.stopped {
		f.stopMu.Unlock()
		return fmt.Errorf("sync of %s: the FileSystem is stopped", name)
	}
	f.wg.Add(1)
	f.stopMu.Unlock()
	st.mu.Lock()
	st.qSeq, st.qSize = seq+1, size
	st.mu.Unlock()
	p.mu.Lock()
	p.issued++
	t := p.issued
	p.mu.Unlock()
	go f.uploadQueued(name, st, seq, data, t, activity)
	return nil
}

// pipelineDepthRecord is the depth an epoch claim records: omitted (0)
// for 1, so claims of owners that do not pipeline are as before.
func pipelineDepthRecord(depth int) int {
	if depth <= 1 {
		return 0
	}
	return depth
}

// claimDepth is the WAL pipeline depth epoch e's claim records: 1 when it
// records none (every claim written before RFC 0013) or is gone.
func (f *Owner) claimDepth(ctx context.Context, e uint64) (uint64, error) {
	if d, ok := f.claimDepths.Load(e); ok {
		return d.(uint64), nil
	}
	var depth uint64 = 1
	err := f.background().do(ctx, func(ctx context.Context) error {
		b, _, err := f.get(ctx, layout.EpochKey(e), "", ActOpen)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if c, perr := layout.ParseEpochClaim(b); perr == nil && c.WALPipelineDepth > 1 {
			depth = uint64(c.WALPipelineDepth)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the claim of epoch %d: %w", e, err)
	}
	f.claimDepths.Store(e, depth)
	return depth, nil
}

// uploadQueued stores one queued slot (RFC 0004 steps 1-2), then, once
// every earlier ticket completed, clears it (step 3) and moves the
// watermark; or fails the pipeline and stops the owner (RFC 0013, step 4).
func (f *Owner) uploadQueued(name string, st *file, seq uint64, data []byte, t uint64, activity Activity) {
	defer f.wg.Done()
	stored, err := f.putSegment(name, seq, data, activity, true)
	p := f.pipe
	p.mu.Lock()
	for p.done != t-1 && p.failed == 0 {
		p.cond.Wait()
	}
	if p.failed != 0 {
		// An earlier upload failed: this one is never cleared, whether it
		// landed (beyond the hole the next owner seals) or not.
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if err == nil {
		err = f.clearSegment(name, st, seq, stored, activity)
	}
	p.mu.Lock()
	defer func() {
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	if err == nil {
		p.done = t
		return
	}
	if !definitelyNotStored(err) || p.issued > t {
		// This slot, or a later one, may be in the store.
		f.outcomeUnknown.Store(true)
	}
	if f.FenceError() == nil {
		err = f.stopOwner(fmt.Errorf("sync of %s (slot %d) failed: %w", name, seq, err))
	} else if f.outcomeUnknown.Load() {
		err = &ErrOutcomeUnknown{Fence: f.fenced.Load()}
	}
	p.failed, p.err = t, err
}

// clearSegment is RFC 0004 steps 3-4 for one stored slot, in order: the
// first segment of a log, or one stored on an old confirmation, is
// confirmed (after it landed); a fence learned meanwhile makes it outcome
// unknown; then the log's stored size moves over it.
func (f *Owner) clearSegment(name string, st *file, seq uint64, stored int64, activity Activity) error {
	if protocol.ConfirmBeforeAck(seq, time.Duration(f.leaseNow()), time.Duration(f.lastConfirm.Load()), f.cfg.AckFresh) {
		if err := f.confirmBeforeAck(name, activity); err != nil {
			return err
		}
	}
	if fe := f.FenceError(); fe != nil {
		return &ErrOutcomeUnknown{Fence: fe.(*ErrFenced)}
	}
	st.mu.Lock()
	st.segments = append(st.segments, protocol.Segment{Seq: seq, Size: stored})
	st.nextSeq = seq + 1
	st.size += stored
	st.unfolded++
	fold := f.cfg.FoldSegments > 0 && st.unfolded >= f.cfg.FoldSegments
	st.mu.Unlock()
	if fold {
		f.foldLater(name, st)
	}
	if f.cfg.OnDurable != nil {
		f.cfg.OnDurable()
	}
	return nil
}
