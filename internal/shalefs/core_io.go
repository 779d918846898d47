package shalefs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

func (f *core) observe(op, name string, activity Activity, n int64, start time.Time, err error) {
	if f.cfg.Observe != nil {
		f.cfg.Observe(Request{Op: op, FileType: FileType(name), Activity: activity.String(), Bytes: n, Duration: time.Since(start), Err: err})
	}
}

func (f *core) background() policy {
	return policy{Attempt: f.cfg.WriteTimeout, Total: f.cfg.RetryFor}
}

func (f *core) foreground() policy {
	return policy{Attempt: f.cfg.ReadTimeout, Total: 3 * f.cfg.ReadTimeout}
}

func (f *core) put(ctx context.Context, key, name string, activity Activity, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := f.store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	f.observe("put", name, activity, int64(len(data)), start, err)
	return info, err
}

func (f *core) get(ctx context.Context, key, name string, activity Activity) ([]byte, objstore.ObjectInfo, error) {
	start := time.Now()
	r, info, err := f.store.Get(ctx, key, 0, -1)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(r)
		r.Close()
	}
	f.observe("get", name, activity, int64(len(b)), start, err)
	return b, info, err
}

func (f *core) list(ctx context.Context, prefix string, activity Activity) ([]objstore.ObjectInfo, error) {
	start := time.Now()
	var out []objstore.ObjectInfo
	err := f.store.List(ctx, prefix, func(o objstore.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	f.observe("list", "", activity, 0, start, err)
	return out, err
}

func (f *core) listDir(ctx context.Context, dir string, activity Activity) ([]objstore.ObjectInfo, error) {
	start := time.Now()
	var out []objstore.ObjectInfo
	err := f.store.ListDir(ctx, dir, func(o objstore.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	f.observe("list", "", activity, 0, start, err)
	return out, err
}

// listRetry lists prefix (one level of it with dir) for a takeover,
// retrying failures.
func (f *core) listRetry(ctx context.Context, prefix string, dir bool) (out []objstore.ObjectInfo, err error) {
	err = f.background().do(ctx, func(ctx context.Context) error {
		if dir {
			out, err = f.listDir(ctx, prefix, ActOpen)
		} else {
			out, err = f.list(ctx, prefix, ActOpen)
		}
		return err
	})
	return out, err
}

// epochs lists the epochs taken in storage.
func (f *core) epochs(ctx context.Context, activity Activity) ([]uint64, error) {
	objs, err := f.list(ctx, layout.EpochPrefix, activity)
	if err != nil {
		return nil, err
	}
	var es []uint64
	for _, o := range objs {
		if e, ok := layout.ParseEpochKey(o.Key); ok {
			es = append(es, e)
		}
	}
	return es, nil
}

// ownerEpoch reads the highest epoch announced in _shale/owner. A store
// without the record (written by a build before it existed, or damaged)
// falls back to listing the claims, which is always right, only slower.
func (f *core) ownerEpoch(ctx context.Context, activity Activity) (uint64, error) {
	data, _, err := f.get(ctx, layout.OwnerKey, "", activity)
	if err == nil {
		if rec, err := layout.ParseOwnerEpochRecord(data); err == nil && rec.Epoch != 0 {
			return rec.Epoch, nil
		}
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return 0, err
	}
	es, err := f.epochs(ctx, activity)
	if err != nil {
		return 0, err
	}
	return protocol.HigherEpoch(es, 0), nil
}

// writeFileAtomic writes path through a temporary file of its own, so
// two fetches of one file never write into each other's bytes.
func writeFileAtomic(path string, data []byte) error {
	fh, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+fetchTempMark+"*")
	if err != nil {
		return err
	}
	_, err = fh.Write(data)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(fh.Name(), path)
	}
	if err != nil {
		os.Remove(fh.Name())
	}
	return err
}

// fetchTempMark is in the name of a fetch's temporary file (left behind
// only by a crash; the next open removes it).
const fetchTempMark = ".shale-fetch-"
