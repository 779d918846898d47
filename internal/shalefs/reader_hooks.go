package shalefs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// What a reader answers the C++ FileSystem's writes: RocksDB opened as a
// secondary (or a compaction worker's) writes only local files; anything
// else is refused with ErrReadOnly, and deletes are left to the primary.

// Create records nothing: a reader's RocksDB creates local files only.
func (f *Reader) Create(name string) error {
	k := layout.KindOf(name)
	if k == layout.KindLocal || k == layout.KindCurrent {
		return nil
	}
	return fmt.Errorf("create %s: %w", name, ErrReadOnly)
}

// Sync refuses logs: the primary writes them.
func (f *Reader) Sync(name string, size int64, activity string) error {
	if layout.KindOf(name) != layout.KindLog {
		return nil
	}
	return fmt.Errorf("sync %s: %w", name, ErrReadOnly)
}

// Close refuses managed files: the primary writes them.
func (f *Reader) Close(name string, size int64, activity string) error {
	switch layout.KindOf(name) {
	case layout.KindLog:
		return f.Sync(name, size, activity)
	case layout.KindTable, layout.KindObject:
		return fmt.Errorf("close %s: %w", name, ErrReadOnly)
	}
	return nil
}

// Rename lets local files be renamed and refuses the rest.
func (f *Reader) Rename(src, dst string) error {
	if strings.Contains(src, "/") || layout.KindOf(dst) != layout.KindLocal {
		return fmt.Errorf("rename %s to %s: %w", src, dst, ErrReadOnly)
	}
	return nil
}

// Delete refuses CURRENT and otherwise does nothing: the primary deletes;
// a secondary only forgets.
func (f *Reader) Delete(name string) error {
	if layout.KindOf(name) == layout.KindCurrent {
		return fmt.Errorf("delete CURRENT: refused")
	}
	return nil
}

// ReadAllowed reports whether this reader may serve reads: its lease is
// fresh (reader_lease.go).
func (f *Reader) ReadAllowed() error {
	if !f.readerMayServe() {
		return fmt.Errorf("replica lease expired (not renewed within %s): files this replica reads may have been deleted; it serves again after its next catch-up", f.cfg.ReaderTTL)
	}
	return nil
}

// Stop drops the reader's lease and stops its background work.
func (f *Reader) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	f.dropLease(ctx)
	cancel()
	f.stopLoops()
}

// FenceError is always nil: a reader claims no epoch, so nothing fences
// it (kvserver.Guard).
func (f *Reader) FenceError() error { return nil }
