package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Rename is called before RocksDB renames src to dst locally; it publishes
// dst (CURRENT with If-Match, IDENTITY and OPTIONS whole).
func (f *Owner) Rename(src, dst string) error {
	if err := f.writable(); err != nil {
		return err
	}
	if strings.Contains(src, "/") {
		return f.installJobOutput(src, dst) // a remote compaction's output
	}
	switch layout.KindOf(dst) {
	case layout.KindCurrent:
		return f.replaceCurrent(f.localPath(src))
	case layout.KindObject:
		if err := f.upload(dst, f.localPath(src), ActFlush); err != nil {
			return err
		}
		f.dropLocalOnly(src)
		return nil
	case layout.KindTable, layout.KindLog:
		return fmt.Errorf("rename %s to %s: renaming tables or logs is not supported by the Shale FileSystem", src, dst)
	}
	return nil
}

func (f *Owner) dropLocalOnly(name string) {
	f.mu.Lock()
	delete(f.files, name)
	f.mu.Unlock()
}

// currentObject is what the store holds for CURRENT: RocksDB's content
// and a trailer line unique to this write (layout.CurrentObject).
func (f *Owner) currentObject(content []byte) []byte {
	return layout.CurrentObject(content, f.epoch, newNonce())
}

// replaceCurrent writes CURRENT from a local file, conditional on the etag
// this owner last wrote: a newer owner rewrote CURRENT when it opened, so
// a stale owner's update fails here. Only a CURRENT written by a newer
// owner (its trailer names its epoch) or a newer epoch in the store fences
// this owner; a failed read-back or our own earlier write is retried.
func (f *Owner) replaceCurrent(path string) error {
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	data := f.currentObject(content)
	f.currentMu.Lock()
	defer f.currentMu.Unlock()
	err = f.background().do(context.Background(), func(ctx context.Context) error {
		opts := objstore.PutOptions{IfMatch: f.currentETag, StorageClass: f.cfg.LogStorageClass}
		if f.currentETag == "" {
			opts = objstore.PutOptions{IfNoneMatch: true, StorageClass: f.cfg.LogStorageClass}
		}
		info, err := f.put(ctx, layout.CurrentKey, "CURRENT", ActFlush, data, opts)
		if err == nil {
			f.currentETag = info.ETag
			return nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return err
		}
		got, ginfo, gerr := f.get(ctx, layout.CurrentKey, "CURRENT", ActFlush)
		if gerr != nil {
			return retryLater(fmt.Errorf("CURRENT changed and cannot be read back: %w", gerr))
		}
		switch e := layout.CurrentEpoch(got); {
		case bytes.Equal(got, data):
			f.currentETag = ginfo.ETag // our attempt landed; its reply was lost
			return nil
		case e == f.epoch:
			// An earlier update of ours landed after we gave up on it:
			// build on it.
			f.currentETag = ginfo.ETag
			return retryLater(errors.New("CURRENT holds an earlier update of this owner; retrying on top of it"))
		case e > f.epoch:
			return f.setFenced(e)
		}
		if err := f.confirm(ctx, ActFlush); err != nil {
			return err
		}
		return retryLater(fmt.Errorf("CURRENT was changed by epoch %d, below ours, and no newer owner exists", layout.CurrentEpoch(got)))
	})
	if err != nil {
		if f.FenceError() == nil {
			// The update may have landed: the store may name a MANIFEST
			// that RocksDB, told it failed, will delete.
			return f.stopOwner(fmt.Errorf("update of CURRENT failed: %w", err))
		}
		return err
	}
	f.mu.Lock()
	f.files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(content))}
	f.mu.Unlock()
	f.storedCurrent.Store(manifestOf(content))
	if f.cfg.OnDurable != nil {
		f.cfg.OnDurable() // readers follow the MANIFEST switch at once
	}
	return nil
}
