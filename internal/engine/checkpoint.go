package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md, steps 2-4): the
// engine's half is to hold file deletions, flush at one sequence number
// S with writes paused only for the memtable switch, and list the live
// files and the MANIFEST bytes that describe the state at S.

// CheckpointState is what CaptureCheckpoint found.
type CheckpointState struct {
	Sequence     uint64
	Manifest     string // "MANIFEST-000012"
	ManifestSize uint64
	Tables       []string
}

// HoldDeletes stops RocksDB from deleting obsolete files until release
// is called (DisableFileDeletions; release is EnableFileDeletions, which
// counts: one per hold).
func (d *DB) HoldDeletes() (release func() error, err error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer d.leave()
	if err := d.db.DisableFileDeletions(); err != nil {
		return nil, err
	}
	return func() error {
		if err := d.enter(); err != nil {
			return err
		}
		defer d.leave()
		return d.db.EnableFileDeletions()
	}, nil
}

// CaptureCheckpoint flushes every write up to one sequence number S and
// returns S with the live tables and MANIFEST bytes at it. The caller
// holds deletes (HoldDeletes), so nothing listed is deleted meanwhile.
//
// Under the write gate (taken shared by every write path) it reads S,
// takes a snapshot at S (so no compaction zeroes a sequence number above
// it, which would hide a later write in a table from the check below),
// and switches the memtable: Flush with wait=false, which in RocksDB 9.11
// switches before it returns (DBImpl::FlushMemTable: SwitchMemtable in
// the write thread, then only the wait is skipped). Writes pause for that
// only. It then waits until no immutable memtable is left (every write up
// to S is in a table, its MANIFEST edit synced) and lists the live files
// with the MANIFEST size (GetLiveFiles without a flush, under RocksDB's
// mutex). A table holding a sequence number above S (later writes filled
// a memtable that flushed meanwhile, or a compaction merged one in) sends
// it round again; the third attempt holds the gate across the whole
// flush, so no write can come in between.
//
// abort, when set, is asked while waiting: a flush that failed for good
// (the FileSystem was fenced) leaves its memtable unflushed forever.
func (d *DB) CaptureCheckpoint(ctx context.Context, abort func() error) (CheckpointState, error) {
	if err := d.enter(); err != nil {
		return CheckpointState{}, err
	}
	defer d.leave()
	for attempt := 1; ; attempt++ {
		st, ok, err := d.captureOnce(ctx, attempt >= 3, abort)
		if err != nil || ok {
			return st, err
		}
	}
}

func (d *DB) captureOnce(ctx context.Context, holdGate bool, abort func() error) (CheckpointState, bool, error) {
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(holdGate)
	d.gate.Lock()
	seq := d.db.GetLatestSequenceNumber()
	snap := d.db.NewSnapshot()
	err := d.db.Flush(fo)
	if !holdGate {
		d.gate.Unlock()
	}
	defer d.db.ReleaseSnapshot(snap)
	if err == nil && !holdGate {
		err = d.waitImmutableFlushed(ctx, abort)
	}
	var names []string
	var msize uint64
	if err == nil {
		names, msize, err = rocksshim.LiveFileNames(d.db)
	}
	var live []rocksshim.LiveFile
	if err == nil {
		live = rocksshim.LiveFiles(d.db)
	}
	if holdGate {
		d.gate.Unlock()
	}
	if err != nil {
		return CheckpointState{}, false, fmt.Errorf("checkpoint flush: %w", err)
	}
	meta := map[string]rocksshim.LiveFile{}
	for _, f := range live {
		meta[strings.TrimPrefix(f.Name, "/")] = f
	}
	st := CheckpointState{Sequence: seq, ManifestSize: msize}
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "MANIFEST-"):
			st.Manifest = n
		case strings.HasSuffix(n, ".sst"):
			m, ok := meta[n]
			if !ok || m.LargestSeqno > seq {
				// Compacted away between the two listings, or holding a
				// write after S: round again.
				return st, false, nil
			}
			st.Tables = append(st.Tables, n)
		case strings.HasSuffix(n, ".blob"):
			return st, false, fmt.Errorf("checkpoint: blob files (%s) are not supported", n)
		}
	}
	if st.Manifest == "" {
		return st, false, fmt.Errorf("checkpoint: RocksDB listed no MANIFEST")
	}
	return st, true, nil
}

// waitImmutableFlushed waits until RocksDB holds no immutable memtable:
// every memtable switched before the call is flushed.
func (d *DB) waitImmutableFlushed(ctx context.Context, abort func() error) error {
	errs0, _ := d.db.GetIntProperty("rocksdb.background-errors")
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if abort != nil {
			if err := abort(); err != nil {
				return err
			}
		}
		if errs, _ := d.db.GetIntProperty("rocksdb.background-errors"); errs > errs0 {
			return fmt.Errorf("a flush failed while waiting for it (RocksDB background error)")
		}
		n, ok := d.db.GetIntProperty("rocksdb.num-immutable-mem-table")
		if !ok {
			return fmt.Errorf("rocksdb.num-immutable-mem-table is unavailable")
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
