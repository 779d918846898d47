package shalefs

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Remote compaction in the store (docs/compaction.md). A worker writes the
// outputs of one attempt of a job under
//
//	_shale/compactions/<job>/<attempt>/<table>
//
// where <job> is "<20-digit epoch of the owner that submitted it>-<nonce>".
// RocksDB on the primary installs each output with
// FileSystem::RenameFile(<worker's output dir>/<table>, <db>/<NNNNNN>.sst);
// Rename (installJobOutput) turns that into a server-side copy of the
// object to <NNNNNN>.sst.<epoch>, the key any table of this owner has, and
// deletes the job's object. Only outputs of an attempt the owner's
// compaction client accepted (ExpectJobOutputs) are installed, so nothing
// else a worker wrote can enter the database.

// compactionsPrefix holds the job directories.
const compactionsPrefix = metaPrefix + "compactions/"

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

func (f *FS) jobs() *jobRegistry {
	r := &f.compactions
	r.mu.Lock()
	if r.jobs == nil {
		r.jobs = map[string]*jobExpect{}
	}
	r.mu.Unlock()
	return r
}

// NewJobID names a compaction job this owner submits.
func (f *FS) NewJobID() string { return pad(f.epoch) + "-" + newNonce() }

// JobEpoch is the epoch of the owner that submitted a job.
func JobEpoch(job string) (uint64, bool) {
	e, rest, ok := strings.Cut(job, "-")
	if !ok || rest == "" || strings.ContainsAny(rest, "/.") {
		return 0, false
	}
	return parseEpochPart(e)
}

// JobDir is the key prefix (with a trailing slash) of one attempt's
// outputs, relative to the database's root.
func JobDir(job string, attempt uint32) string {
	return compactionsPrefix + job + "/" + strconv.FormatUint(uint64(attempt), 10) + "/"
}

// parseJobOutput splits "_shale/compactions/<job>/<attempt>/<table>".
func parseJobOutput(key string) (job string, attempt uint32, name string, ok bool) {
	rest, found := strings.CutPrefix(key, compactionsPrefix)
	if !found {
		return "", 0, "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || KindOf(parts[2]) != KindTable {
		return "", 0, "", false
	}
	if _, ok := JobEpoch(parts[0]); !ok {
		return "", 0, "", false
	}
	a, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil || a == 0 {
		return "", 0, "", false
	}
	return parts[0], uint32(a), parts[2], true
}

// ExpectJobOutputs records that an attempt of a job this owner submitted
// completed with these outputs (name -> size, all present in the store):
// RocksDB is about to rename them into the database.
func (f *FS) ExpectJobOutputs(job string, attempt uint32, outputs map[string]int64) {
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
func (f *FS) ForgetJob(job string) {
	r := f.jobs()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, job)
}

// expecting reports whether RocksDB may still install outputs of job.
func (f *FS) expecting(job string) bool {
	r := f.jobs()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.jobs[job] != nil
}

// installJobOutput installs the output src (a path in a worker's output
// directory, as RocksDB's result names it) as the table dst.
func (f *FS) installJobOutput(src, dst string) error {
	if f.readOnly {
		return fmt.Errorf("rename %s to %s: %w", src, dst, ErrReadOnly)
	}
	i := strings.LastIndex(src, "/"+compactionsPrefix)
	if i < 0 {
		return fmt.Errorf("rename %s to %s: the Shale FileSystem renames only within the database or from a compaction job's output directory", src, dst)
	}
	key := src[i+1:]
	job, attempt, name, ok := parseJobOutput(key)
	if !ok || KindOf(dst) != KindTable {
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
	to := objectKey(dst, f.epoch)
	err := f.background().do(context.Background(), func(ctx context.Context) error {
		start := time.Now()
		info, err := f.store.Copy(ctx, key, to, objstore.PutOptions{StorageClass: f.cfg.TableStorageClass})
		f.observe("copy", dst, "compaction", info.Size, start, err)
		if err == nil && info.Size != size {
			err = fmt.Errorf("copied %d bytes, the job reported %d", info.Size, size)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("install compaction output %s as %s: %w", key, dst, err)
	}
	f.mu.Lock()
	f.files[dst] = &file{kind: KindTable, epoch: f.epoch, size: size}
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
	if err := f.del(ctx, key, dst, "compaction"); err != nil {
		f.cfg.Logger.Warn("could not delete an installed compaction output; the sweep will", "key", key, "err", err)
	}
	cancel()
	return nil
}

// sweepJob decides whether this owner deletes a job directory: a job of
// an older owner can never be installed by this one (it installs only
// its own jobs) nor by its submitter (deposed: its MANIFEST is sealed); a
// job of this owner that is neither running nor being installed is a
// leftover (fell back to local, or finished by a lost attempt); a job of
// a newer owner is none of this owner's business (it is deposed).
// Unrecognized names are left alone.
func sweepJob(job string, own uint64, inflight bool) bool {
	e, ok := JobEpoch(job)
	switch {
	case !ok:
		return false
	case e < own:
		return true
	case e == own:
		return !inflight
	}
	return false
}

// SweepCompactions deletes the job directories of compactions no owner
// will install (sweepJob); inflight reports the jobs this owner's client
// still waits for. Only the current owner sweeps: it confirms its
// ownership before deleting. It returns how many objects it deleted.
func (f *FS) SweepCompactions(ctx context.Context, inflight func(job string) bool) (int, error) {
	if f.readOnly {
		return 0, ErrReadOnly
	}
	if err := f.FenceError(); err != nil {
		return 0, err
	}
	objs, err := f.list(ctx, compactionsPrefix, "compaction")
	if err != nil {
		return 0, err
	}
	var keys []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, compactionsPrefix)
		job, _, _ := strings.Cut(rest, "/")
		if sweepJob(job, f.epoch, inflight(job) || f.expecting(job)) {
			keys = append(keys, o.Key)
		}
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := f.confirm(ctx, "compaction"); err != nil {
		return 0, err
	}
	if err := f.delMany(ctx, keys, "compaction"); err != nil {
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
func (f *FS) RemoveJob(ctx context.Context, job string) (int, error) {
	if f.readOnly {
		return 0, ErrReadOnly
	}
	if e, ok := JobEpoch(job); !ok || e != f.epoch {
		return 0, fmt.Errorf("remove compaction job %q: not a job of this owner (epoch %d)", job, f.epoch)
	}
	if f.expecting(job) {
		return 0, fmt.Errorf("remove compaction job %s: its outputs are being installed", job)
	}
	objs, err := f.list(ctx, compactionsPrefix+job+"/", "compaction")
	if err != nil {
		return 0, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	if err := f.delMany(ctx, keys, "compaction"); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// JobOutputKey is the key of one output of an attempt.
func JobOutputKey(job string, attempt uint32, name string) string {
	return path.Join(JobDir(job, attempt), name)
}

// JobOutputs lists the objects one attempt of a job wrote (name -> size).
func (f *FS) JobOutputs(ctx context.Context, job string, attempt uint32) (map[string]int64, error) {
	dir := JobDir(job, attempt)
	objs, err := f.list(ctx, dir, "compaction")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, o := range objs {
		out[strings.TrimPrefix(o.Key, dir)] = o.Size
	}
	return out, nil
}
