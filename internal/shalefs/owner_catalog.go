package shalefs

import (
	"bytes"
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

// Checkpoints (docs/rfcs/0010-checkpoints-and-clones.md, steps 1-13). The
// catalog is a log of Shale's own, CATALOG, written through the same sync
// path as a WAL (syncLocked: create-only segments, a seal fences,
// confirmation before the first segment is acknowledged) but never shown
// to RocksDB. Every takeover seals it; the new owner replays it and writes
// its own snapshot as segment 1 of its version before RocksDB opens.

// Checkpoint errors the KV service maps to gRPC codes.
var (
	ErrCheckpointExists   = errors.New("checkpoint exists")
	ErrCheckpointNotFound = errors.New("checkpoint not found")
	ErrCheckpointInvalid  = errors.New("invalid checkpoint request")
)

// ErrCheckpointOutcomeUnknown: the catalog entry may have landed. The
// checkpoint is kept as if created (its files protected) until an append
// or the next owner's replay settles it; a retry with the same request id
// tells.
type ErrCheckpointOutcomeUnknown struct{ Err error }

func (e *ErrCheckpointOutcomeUnknown) Error() string {
	return fmt.Sprintf("checkpoint outcome unknown (it may have been created; retry with the same request id, or list the checkpoints, to find out): %v", e.Err)
}
func (e *ErrCheckpointOutcomeUnknown) Unwrap() error { return e.Err }

// OutcomeUnknown marks the error for the KV service.
func (e *ErrCheckpointOutcomeUnknown) OutcomeUnknown() bool { return true }

// CheckpointCapture is what the engine captured for a checkpoint with
// file deletions held (steps 2-4): the sequence number, the MANIFEST and
// the number of its bytes that describe the state at it, and every live
// table.
type CheckpointCapture struct {
	Sequence     uint64
	Manifest     string // "MANIFEST-000012"
	ManifestSize int64
	Tables       []string // "000015.sst", ...
}

// CheckpointRequest asks for a checkpoint.
type CheckpointRequest struct {
	Name, RequestID string
	Expires         time.Time // zero: never
}

// CheckpointInfo describes one checkpoint.
type CheckpointInfo struct {
	Name, ID, RequestID string
	Epoch, Sequence     uint64
	CreatedAt, Expires  time.Time
	Tables              int
	Bytes               int64
}

func infoOf(c layout.CatalogCheckpoint) CheckpointInfo {
	e, _ := layout.CheckpointEpoch(c.ID)
	tables := 0
	for _, r := range c.Files {
		if layout.KindOf(r.Name) == layout.KindTable {
			tables++
		}
	}
	return CheckpointInfo{Name: c.Name, ID: c.ID, RequestID: c.RequestID, Epoch: e, Sequence: c.Sequence, CreatedAt: c.CreatedAt, Expires: c.Expires, Tables: tables, Bytes: c.Bytes}
}

// catalogState is the owner's catalog in memory.
type catalogState struct {
	// opMu serializes creates, deletes and expiries (held across uploads).
	opMu sync.Mutex
	// mu guards the maps (never held across a network call): the trash
	// loop reads them.
	mu   sync.Mutex
	live map[string]layout.CatalogCheckpoint
	// unsynced: entries in the local catalog file whose segment is not
	// known to be stored (an append failed with its outcome unknown). Their
	// creates protect as if live; their deletes do not unprotect yet. The
	// next append uploads them again (putSegment adopts a slot holding
	// them).
	unsynced []layout.CatalogEntry
	// inFlight: ids of creates writing their record: not swept.
	inFlight map[string]bool
}

// CheckpointSweepEvery is how often the owner deletes checkpoint
// directories no catalog entry names (step 10).
const checkpointSweepEvery = 10 * time.Minute

// openCatalog replays the catalog version the takeover kept, writes this
// owner's snapshot as segment 1 of its own version, and trashes the older
// version (step 8). Called after the opened record, before RocksDB opens
// and before the trash loop starts.
func (f *Owner) openCatalog(ctx context.Context) error {
	f.ck.live = map[string]layout.CatalogCheckpoint{}
	f.ck.inFlight = map[string]bool{}
	f.mu.Lock()
	old := f.files[layout.CatalogLog]
	f.mu.Unlock()
	if old != nil {
		live, err := f.replayCatalogFile(ctx, old, ActOpen)
		if err != nil {
			return fmt.Errorf("checkpoint catalog (epoch %d): %w; refusing to open", old.epoch, err)
		}
		f.ck.live = live
	}
	snap := layout.CatalogEntry{Op: layout.CatalogSnapshot, Checkpoints: protocol.SortedCheckpoints(f.ck.live), At: time.Now().UTC()}
	if err := os.WriteFile(f.localPath(layout.CatalogLog), snap.Format(), 0o644); err != nil {
		return fmt.Errorf("checkpoint catalog: %w", err)
	}
	st := &file{kind: layout.KindLog, epoch: f.epoch, nextSeq: 1, ownLog: true}
	f.mu.Lock()
	f.files[layout.CatalogLog] = st
	f.mu.Unlock()
	st.mu.Lock()
	err := f.syncLocked(layout.CatalogLog, st, int64(len(snap.Format())), ActOpen)
	st.mu.Unlock()
	if err != nil {
		return fmt.Errorf("write the checkpoint catalog's snapshot: %w", err)
	}
	if old != nil && old.epoch != f.epoch {
		if err := f.trash(ctx, layout.CatalogLog, old.epoch); err != nil {
			return err
		}
	}
	return f.sweepCheckpoints(ctx)
}

// replayCatalogFile reads one catalog version and replays it.
func (f *core) replayCatalogFile(ctx context.Context, st *file, activity Activity) (map[string]layout.CatalogCheckpoint, error) {
	var data []byte
	err := f.background().do(ctx, func(ctx context.Context) (err error) {
		data, err = f.readLog(ctx, layout.CatalogLog, st, activity)
		return err
	})
	if err != nil {
		return nil, err
	}
	entries, err := layout.ParseCatalog(data)
	if err != nil {
		return nil, err
	}
	return protocol.ReplayCatalog(entries)
}

// appendCatalog appends entries to this owner's catalog version and syncs
// it (with any earlier entries whose outcome was unknown). On success
// every unsynced entry is applied to the live catalog. Callers hold
// ck.opMu.
func (f *Owner) appendCatalog(entries ...layout.CatalogEntry) error {
	f.mu.Lock()
	st := f.files[layout.CatalogLog]
	f.mu.Unlock()
	if st == nil || !st.ownLog {
		if err := f.FenceError(); err != nil {
			return err
		}
		return errors.New("the checkpoint catalog is not open")
	}
	if len(entries) > 0 {
		var buf bytes.Buffer
		for _, e := range entries {
			buf.Write(e.Format())
		}
		fh, err := os.OpenFile(f.localPath(layout.CatalogLog), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = fh.Write(buf.Bytes())
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("checkpoint catalog: %w", err)
		}
		f.ck.mu.Lock()
		f.ck.unsynced = append(f.ck.unsynced, entries...)
		f.ck.mu.Unlock()
	}
	fi, err := os.Stat(f.localPath(layout.CatalogLog))
	if err != nil {
		return err
	}
	st.mu.Lock()
	err = f.syncLocked(layout.CatalogLog, st, fi.Size(), ActBackground)
	st.mu.Unlock()
	f.ck.mu.Lock()
	defer f.ck.mu.Unlock()
	switch {
	case err == nil:
		for _, e := range f.ck.unsynced {
			switch e.Op {
			case layout.CatalogCreate:
				f.ck.live[e.Checkpoint.Name] = *e.Checkpoint
			case layout.CatalogDelete:
				if c, ok := f.ck.live[e.Name]; ok && c.ID == e.ID {
					delete(f.ck.live, e.Name)
				}
			}
		}
		f.ck.unsynced = nil
		return nil
	case definitelyNotStored(err):
		// A seal held the slot: nothing of this append (nor of an earlier
		// one whose outcome was unknown: it aimed at the same slot) is in
		// any catalog, ever.
		f.ck.unsynced = nil
		return err
	}
	return &ErrCheckpointOutcomeUnknown{Err: err}
}

// pendingLocked returns the checkpoints whose create may have landed
// (ck.mu held).
func (f *Owner) pendingLocked() []layout.CatalogCheckpoint {
	var out []layout.CatalogCheckpoint
	for _, e := range f.ck.unsynced {
		if e.Op == layout.CatalogCreate {
			out = append(out, *e.Checkpoint)
		}
	}
	return out
}

// checkpointProtected is what the trash loop keeps for checkpoints (step
// 12a): every version a live or pending checkpoint names, from memory.
func (f *Owner) checkpointProtected() map[layout.VersionRef]bool {
	f.ck.mu.Lock()
	defer f.ck.mu.Unlock()
	if f.ck.live == nil {
		return nil
	}
	p := protocol.CatalogProtects(f.ck.live, f.pendingLocked())
	// A create writing its record protects its tables too: the MANIFEST
	// it copies names them, and deletes are held meanwhile anyway.
	return p
}

// Checkpoints lists the live checkpoints (and those whose create's
// outcome is unknown, which are kept as if live).
func (f *Owner) Checkpoints() []CheckpointInfo {
	f.ck.mu.Lock()
	defer f.ck.mu.Unlock()
	all := map[string]layout.CatalogCheckpoint{}
	for n, c := range f.ck.live {
		all[n] = c
	}
	for _, c := range f.pendingLocked() {
		all[c.Name] = c
	}
	var out []CheckpointInfo
	for _, c := range protocol.SortedCheckpoints(all) {
		out = append(out, infoOf(c))
	}
	return out
}

// lookupLocked finds a live or pending checkpoint by name (ck.mu held).
func (f *Owner) lookupLocked(name string) (layout.CatalogCheckpoint, bool, bool) {
	for i := len(f.ck.unsynced) - 1; i >= 0; i-- {
		if e := f.ck.unsynced[i]; e.Op == layout.CatalogCreate && e.Checkpoint.Name == name {
			return *e.Checkpoint, true, true
		}
	}
	c, ok := f.ck.live[name]
	return c, ok, false
}

// settle syncs entries whose outcome is unknown, so a retry learns it.
func (f *Owner) settle() error {
	f.ck.mu.Lock()
	n := len(f.ck.unsynced)
	f.ck.mu.Unlock()
	if n == 0 {
		return nil
	}
	return f.appendCatalog()
}

// CreateCheckpoint creates a checkpoint (steps 1, 5 and 6). capture runs
// steps 2-4 with file deletions held by the caller until this returns
// (step 7 is the caller's, whatever happened).
func (f *Owner) CreateCheckpoint(ctx context.Context, req CheckpointRequest, capture func(context.Context) (CheckpointCapture, error)) (CheckpointInfo, error) {
	if err := layout.ValidCheckpointName(req.Name); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointInvalid, err)
	}
	now := time.Now().UTC()
	if !req.Expires.IsZero() && !req.Expires.After(now) {
		return CheckpointInfo{}, fmt.Errorf("%w: expiry %s is not in the future (now %s)", ErrCheckpointInvalid, req.Expires.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	f.ck.opMu.Lock()
	defer f.ck.opMu.Unlock()
	if err := f.FenceError(); err != nil {
		return CheckpointInfo{}, err
	}
	if err := f.settle(); err != nil {
		return CheckpointInfo{}, err
	}
	f.ck.mu.Lock()
	old, taken, _ := f.lookupLocked(req.Name)
	f.ck.mu.Unlock()
	if taken {
		if req.RequestID != "" && old.RequestID == req.RequestID {
			return infoOf(old), nil // a retry of a create that landed
		}
		return CheckpointInfo{}, fmt.Errorf("%w: %q (id %s, created %s); delete it first or choose another name", ErrCheckpointExists, req.Name, old.ID, old.CreatedAt.Format(time.RFC3339))
	}
	id := layout.CheckpointID(f.epoch, newNonce())
	f.ck.mu.Lock()
	f.ck.inFlight[id] = true
	f.ck.mu.Unlock()
	defer func() {
		f.ck.mu.Lock()
		delete(f.ck.inFlight, id)
		f.ck.mu.Unlock()
	}()

	notCreated := func(err error) error {
		var fe *ErrFenced
		if errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("checkpoint %q not created: %w", req.Name, err)
	}
	cp, err := capture(ctx)
	if err != nil {
		return CheckpointInfo{}, notCreated(err)
	}
	rec, err := f.checkpointRecord(id, req, now, cp)
	if err != nil {
		return CheckpointInfo{}, notCreated(err)
	}
	// Step 5: the MANIFEST copy, then the record; nothing is a checkpoint
	// yet (a sweep removes them if no entry follows). Each names the
	// next one's digest (the entry the record's, the record the copy's),
	// so a server refuses either if it changed in the store.
	manifest := make([]byte, cp.ManifestSize)
	fh, err := os.Open(f.localPath(cp.Manifest))
	if err == nil {
		_, err = fh.ReadAt(manifest, 0)
		fh.Close()
	}
	if err != nil {
		return CheckpointInfo{}, notCreated(fmt.Errorf("read %s: %w", cp.Manifest, err))
	}
	rec.Manifest.SHA256 = layout.Digest(manifest)
	recBytes := rec.Format()
	for _, o := range []struct {
		key  string
		data []byte
	}{{layout.CheckpointManifestKey(id, cp.Manifest), manifest}, {layout.CheckpointRecordKey(id), recBytes}} {
		if err := f.putOnce(ctx, o.key, o.data); err != nil {
			return CheckpointInfo{}, notCreated(err)
		}
	}
	// Step 6: commit. The entry protects from before the append.
	c := layout.CatalogCheckpoint{Name: req.Name, ID: id, RequestID: req.RequestID, CreatedAt: now, Expires: rec.Expires, Sequence: cp.Sequence, RecordSHA256: layout.Digest(recBytes)}
	for _, fl := range rec.Files {
		c.Files = append(c.Files, layout.VersionRef{Name: fl.Name, Epoch: fl.Epoch})
		c.Bytes += fl.Size
	}
	if err := f.appendCatalog(layout.CatalogEntry{Op: layout.CatalogCreate, Checkpoint: &c, At: now}); err != nil {
		return CheckpointInfo{}, err
	}
	f.cfg.Logger.Info("checkpoint created", "name", req.Name, "id", id, "sequence", cp.Sequence, "tables", len(cp.Tables))
	return infoOf(c), nil
}

// putOnce writes a create-only object of a checkpoint; finding our own
// bytes there (a lost reply) is success.
func (f *Owner) putOnce(ctx context.Context, key string, data []byte) error {
	return f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, key, "", ActBackground, data, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			if got, _, gerr := f.get(ctx, key, "", ActBackground); gerr == nil && bytes.Equal(got, data) {
				return nil
			}
		}
		return err
	})
}

// checkpointRecord names the version of every table the capture lists
// (and IDENTITY), as this owner's listing has them.
func (f *Owner) checkpointRecord(id string, req CheckpointRequest, now time.Time, cp CheckpointCapture) (layout.CheckpointRecord, error) {
	rec := layout.CheckpointRecord{Name: req.Name, ID: id, Epoch: f.epoch, RequestID: req.RequestID, CreatedAt: now, Expires: req.Expires.UTC(), Sequence: cp.Sequence,
		Current: cp.Manifest + "\n", Manifest: layout.CheckpointManifest{Name: cp.Manifest, Size: cp.ManifestSize}}
	if req.Expires.IsZero() {
		rec.Expires = time.Time{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	names := append([]string(nil), cp.Tables...)
	if _, ok := f.files["IDENTITY"]; ok {
		names = append(names, "IDENTITY")
	}
	for _, n := range names {
		st := f.files[n]
		if st == nil || st.ownLog || st.kind == layout.KindLog {
			return rec, fmt.Errorf("table %s is not in the store's listing", n)
		}
		tier := ""
		if st.tier == TierCold {
			tier = "cold"
		}
		cf := layout.CheckpointFile{Name: n, Epoch: st.epoch, Size: st.size, Tier: tier}
		if st.origin != nil {
			// An origin table of this clone: its location is the origin
			// (a clone of this clone reads it there: RFC 0010 step 19).
			cf.Location = st.origin.store.URL()
		}
		rec.Files = append(rec.Files, cf)
	}
	return rec, nil
}

// DeleteCheckpoint deletes a checkpoint by name (step 11): it stops
// protecting its files once the delete entry is stored.
func (f *Owner) DeleteCheckpoint(ctx context.Context, name string) error {
	f.ck.opMu.Lock()
	defer f.ck.opMu.Unlock()
	if err := f.FenceError(); err != nil {
		return err
	}
	if err := f.settle(); err != nil {
		return err
	}
	f.ck.mu.Lock()
	c, ok := f.ck.live[name]
	f.ck.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q (list them with `shale admin checkpoint list`)", ErrCheckpointNotFound, name)
	}
	return f.appendCatalog(layout.CatalogEntry{Op: layout.CatalogDelete, Name: name, ID: c.ID, Reason: "deleted", At: time.Now().UTC()})
}

// expireCheckpoints appends a delete entry for every checkpoint whose
// expiry passed on this owner's wall clock.
func (f *Owner) expireCheckpoints() error {
	f.ck.mu.Lock()
	if f.ck.live == nil {
		f.ck.mu.Unlock()
		return nil
	}
	names := protocol.ExpiredCheckpoints(f.ck.live, time.Now())
	f.ck.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	f.ck.opMu.Lock()
	defer f.ck.opMu.Unlock()
	var entries []layout.CatalogEntry
	f.ck.mu.Lock()
	for _, n := range names {
		if c, ok := f.ck.live[n]; ok {
			entries = append(entries, layout.CatalogEntry{Op: layout.CatalogDelete, Name: n, ID: c.ID, Reason: "expired", At: time.Now().UTC()})
		}
	}
	f.ck.mu.Unlock()
	if err := f.appendCatalog(entries...); err != nil {
		return err
	}
	f.cfg.Logger.Info("checkpoints expired", "names", strings.Join(names, ","))
	return nil
}

// sweepCheckpoints deletes the checkpoint directories no live or pending
// checkpoint names (step 10): a create that failed before its commit, or
// a deposed owner's whose entry met a seal.
func (f *Owner) sweepCheckpoints(ctx context.Context) error {
	var dirs []objstore.ObjectInfo
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		dirs, err = f.listDir(ctx, layout.CheckpointsPrefix, ActTrash)
		return err
	}); err != nil {
		return err
	}
	f.ck.mu.Lock()
	named := map[string]bool{}
	for _, c := range f.ck.live {
		named[c.ID] = true
	}
	for _, c := range f.pendingLocked() {
		named[c.ID] = true
	}
	var gone []string
	for _, d := range dirs {
		id := layout.CheckpointOfKey(d.Key)
		if id != "" && protocol.SweepCheckpointDir(id, named, f.epoch, f.ck.inFlight[id]) {
			gone = append(gone, id)
		}
	}
	f.ck.mu.Unlock()
	for _, id := range gone {
		if err := f.confirm(ctx, ActTrash); err != nil {
			return err
		}
		var objs []objstore.ObjectInfo
		if err := f.background().do(ctx, func(ctx context.Context) (err error) {
			objs, err = f.list(ctx, layout.CheckpointDir(id), ActTrash)
			return err
		}); err != nil {
			return err
		}
		keys := make([]string, len(objs))
		for i, o := range objs {
			keys[i] = o.Key
		}
		if err := f.delMany(ctx, keys, ActTrash); err != nil {
			return err
		}
		f.cfg.Logger.Info("swept a checkpoint directory no catalog entry names", "id", id)
	}
	return nil
}
