package shalefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Remote compaction in the store (docs/compaction.md). A worker writes the
// outputs of one attempt of a job under layout.JobDir
// (_shale/compactions/<job>/<attempt>/). RocksDB on the primary installs
// each output with
// FileSystem::RenameFile(<worker's output dir>/<table>, <db>/<NNNNNN>.sst);
// Rename (installJobOutput) turns that into a server-side copy of the
// object to <NNNNNN>.sst.<epoch>, the key any table of this owner has, and
// deletes the job's object. Only outputs of an attempt the owner's
// compaction client accepted (ExpectJobOutputs) are installed, so nothing
// else a worker wrote can enter the database.

// jobExpect is a completed attempt whose outputs RocksDB is installing.
type jobExpect struct {
	attempt uint32
	outputs map[string]int64 // name -> size, until installed
	since   time.Time
}

// jobRegistry is the completed jobs of this owner that RocksDB installs.
type jobRegistry struct {
	mu   sync.Mutex
	jobs map[string]*jobExpect
}

func (f *Owner) jobs() *jobRegistry {
	r := &f.compactions
	r.mu.Lock()
	if r.jobs == nil {
		r.jobs = map[string]*jobExpect{}
	}
	r.mu.Unlock()
	return r
}

// NewJobID names a compaction job this owner submits.
func (f *Owner) NewJobID() string { return layout.JobID(f.epoch, newNonce()) }

// ExpectJobOutputs records that an attempt of a job this owner submitted
// completed with these outputs (name -> size, all present in the store):
// RocksDB is about to rename them into the database.
func (f *Owner) ExpectJobOutputs(job string, attempt uint32, outputs map[string]int64) {
	r := f.jobs()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(outputs))
	for k, v := range outputs {
		out[k] = v
	}
	r.jobs[job] = &jobExpect{attempt: attempt, outputs: out, since: time.Now()}
}

// ForgetJob drops the expectations of a job (RocksDB will not install it).
func (f *Owner) ForgetJob(job string) {
	r := f.jobs()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, job)
}

// expecting reports whether RocksDB may still install outputs of job.
func (f *Owner) expecting(job string) bool {
	r := f.jobs()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.jobs[job] != nil
}

// installJobOutput installs the output src (a path in a worker's output
// directory, as RocksDB's result names it) as the table dst.
func (f *Owner) installJobOutput(src, dst string) error {
	i := strings.LastIndex(src, "/"+layout.CompactionsPrefix)
	if i < 0 {
		return fmt.Errorf("rename %s to %s: the Shale FileSystem renames only within the database or from a compaction job's output directory", src, dst)
	}
	key := src[i+1:]
	job, attempt, name, ok := layout.ParseJobOutputKey(key)
	if !ok || layout.KindOf(dst) != layout.KindTable {
		return fmt.Errorf("rename %s to %s: not a compaction output installed as a table", src, dst)
	}
	r := f.jobs()
	r.mu.Lock()
	exp := r.jobs[job]
	size, known := int64(0), false
	if exp != nil && exp.attempt == attempt {
		size, known = exp.outputs[name]
	}
	r.mu.Unlock()
	if !known {
		return fmt.Errorf("rename %s to %s: %s is not an output of a compaction attempt this owner accepted", src, dst, key)
	}
	to := layout.ObjectKey(dst, f.epoch)
	err := f.background().do(context.Background(), func(ctx context.Context) error {
		start := time.Now()
		info, err := f.store.Copy(ctx, key, to, objstore.PutOptions{StorageClass: f.cfg.TableStorageClass})
		f.observe("copy", dst, ActCompaction, info.Size, start, err)
		if err == nil && info.Size != size {
			err = fmt.Errorf("copied %d bytes, the job reported %d", info.Size, size)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("install compaction output %s as %s: %w", key, dst, err)
	}
	f.mu.Lock()
	f.files[dst] = &file{kind: layout.KindTable, epoch: f.epoch, size: size}
	f.mu.Unlock()
	r.mu.Lock()
	if exp := r.jobs[job]; exp != nil {
		delete(exp.outputs, name)
		if len(exp.outputs) == 0 {
			delete(r.jobs, job)
		}
	}
	r.mu.Unlock()
	// The job's copy is no longer needed; a failed delete is swept later.
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.WriteTimeout)
	if err := f.del(ctx, key, dst, ActCompaction); err != nil {
		f.cfg.Logger.Warn("could not delete an installed compaction output; the sweep will", "key", key, "err", err)
	}
	cancel()
	return nil
}

// SweepCompactions deletes the job directories of compactions no owner will
// install (protocol.SweepJob); inflight reports the jobs this owner's
// client still waits for. Only the current owner sweeps: it confirms its
// ownership before deleting. It returns how many objects it deleted.
func (f *Owner) SweepCompactions(ctx context.Context, inflight func(job string) bool) (int, error) {
	if err := f.FenceError(); err != nil {
		return 0, err
	}
	objs, err := f.list(ctx, layout.CompactionsPrefix, ActCompaction)
	if err != nil {
		return 0, err
	}
	var keys []string
	for _, o := range objs {
		job := layout.JobOfKey(o.Key)
		if protocol.SweepJob(job, f.epoch, inflight(job) || f.expecting(job)) {
			keys = append(keys, o.Key)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := f.confirm(ctx, ActCompaction); err != nil {
		return 0, err
	}
	if err := f.delMany(ctx, keys, ActCompaction); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// RemoveJob deletes the directory of a job of this owner that RocksDB will
// not install (refused, abandoned, fallen back to local), every attempt of
// it, at once rather than at the next sweep: a worker wrote there with the
// store's credentials and only this owner removes it. A job of another
// owner, or one whose outputs are being installed, is left alone. An
// attempt that uploads after this is the sweep's (SweepCompactions). It
// returns how many objects it deleted.
func (f *Owner) RemoveJob(ctx context.Context, job string) (int, error) {
	if e, ok := layout.JobEpoch(job); !ok || e != f.epoch {
		return 0, fmt.Errorf("remove compaction job %q: not a job of this owner (epoch %d)", job, f.epoch)
	}
	if f.expecting(job) {
		return 0, fmt.Errorf("remove compaction job %s: its outputs are being installed", job)
	}
	objs, err := f.list(ctx, layout.JobPrefix(job), ActCompaction)
	if err != nil {
		return 0, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	if err := f.delMany(ctx, keys, ActCompaction); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// JobOutputs lists the objects one attempt of a job wrote (name -> size).
func (f *Owner) JobOutputs(ctx context.Context, job string, attempt uint32) (map[string]int64, error) {
	dir := layout.JobDir(job, attempt)
	objs, err := f.list(ctx, dir, ActCompaction)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, o := range objs {
		out[strings.TrimPrefix(o.Key, dir)] = o.Size
	}
	return out, nil
}

// InstallTable makes the object srcKey (a compaction output another
// process wrote, e.g. under _shale/compactions/<job>/) the table name of
// this owner: it finds srcKey in the hot store, else in the cold one, and
// copies it within that store to name's key of this epoch, so the table
// keeps the tier its writer chose from RocksDB's temperature. The source
// stays; its writer's job directory is cleaned up with the job.
func (f *Owner) InstallTable(ctx context.Context, srcKey, name string) (Tier, error) {
	if err := f.FenceError(); err != nil {
		return TierHot, err
	}
	if layout.KindOf(name) != layout.KindTable {
		return TierHot, fmt.Errorf("install %s: not a table name", name)
	}
	var tier Tier
	var info objstore.ObjectInfo
	err := f.background().do(ctx, func(ctx context.Context) error {
		var err error
		for _, t := range Tiers {
			if t == TierCold && f.coldStore() == nil {
				break
			}
			if info, err = f.tierStore(t).Stat(ctx, srcKey); err == nil {
				tier = t
				return nil
			}
			if !errors.Is(err, objstore.ErrNotFound) {
				return err
			}
		}
		return err
	})
	if err != nil {
		return TierHot, fmt.Errorf("install %s from %s: %w", name, srcKey, err)
	}
	err = f.background().do(ctx, func(ctx context.Context) error {
		start := time.Now()
		_, err := f.tierStore(tier).Copy(ctx, srcKey, layout.ObjectKey(name, f.epoch), objstore.PutOptions{StorageClass: f.cfg.TableStorageClass})
		f.observeTier(tier, "put", name, ActCompaction, info.Size, start, err)
		return err
	})
	if err != nil {
		return TierHot, fmt.Errorf("install %s from %s: %w", name, srcKey, err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: layout.KindTable, epoch: f.epoch, size: info.Size, tier: tier}
	f.mu.Unlock()
	return tier, nil
}

// JobOutputProps reads the properties of one output of a compaction job's
// attempt (size bytes) from the store: a block-based table whose footer,
// metaindex and properties parse, or an error naming what is wrong.
func (f *Owner) JobOutputProps(ctx context.Context, job string, attempt uint32, name string, size int64) (TableProps, error) {
	key := layout.JobOutputKey(job, attempt, name)
	var props map[string][]byte
	err := f.background().do(ctx, func(ctx context.Context) error {
		start := time.Now()
		var err error
		props, err = tableProperties(ctx, f.store, key, size)
		f.observe("get", name, ActCompaction, min(size, tailBytes), start, err)
		return err
	})
	if err != nil {
		return TableProps{}, fmt.Errorf("read the properties of %s: %w", key, err)
	}
	p, err := parseTableProps(props)
	if err != nil {
		return TableProps{}, fmt.Errorf("%s: %w", key, err)
	}
	return p, nil
}
