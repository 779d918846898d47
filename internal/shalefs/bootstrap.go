package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Bootstrap of a clone (docs/rfcs/0010-checkpoints-and-clones.md, step
// 16): the clone's first primary runs it before it takes the directory
// over. Every write is create-only and every step repeatable: a retry
// after a crash finds its own objects and goes on; a key found with other
// content refuses, naming both. Epoch 0 is the bootstrap's: it claims
// nothing, so the first owner (epoch 1) takes over as from any
// predecessor, seals the epoch-0 MANIFEST and opens RocksDB on it.

// BootstrapConfig says which checkpoint of which database a clone starts
// from.
type BootstrapConfig struct {
	Store      objstore.Store // the clone's directory: empty, or holding only this bootstrap's objects
	Parent     string         // the parent database's store URL
	Checkpoint string         // the name of the parent's checkpoint
	CloneID    string         // this clone's id (the operator passes the RocksDB's UID)
	// OpenOrigin opens the parent's (and its origins') stores by URL
	// (default objstore.Open).
	OpenOrigin func(url string) (objstore.Store, error)
	Logger     *slog.Logger
	// Copy: the parent is in another store (step 20: protocol.CloneCopies
	// decides): every object the checkpoint names is copied into the
	// clone's directory as epoch 0 (server-side within one S3 endpoint,
	// else streamed), under pins released once all is copied; the clone
	// has no origin record and reads nothing of the parent afterwards.
	Copy bool
	// CopyParallel bounds the copies in flight (default 8; a streamed one
	// holds at most one part in memory).
	CopyParallel int
	// AfterCopy, for tests, runs after each object copied; an error stops
	// the bootstrap as a crash there would (nothing is undone).
	AfterCopy func(key string) error
}

// BootstrapReport says what a bootstrap did.
type BootstrapReport struct {
	// Done: the directory was bootstrapped already (CURRENT written);
	// nothing was read or written but the check.
	Done bool
	// Tables and TableBytes: the origin tables the clone shares (not
	// copied).
	Tables     int
	TableBytes int64
	// Copied: objects and bytes copied into the clone (the MANIFEST; with
	// Copy, every table too, Tables and TableBytes counting those);
	// Streamed: the bytes of those that passed through this process (0
	// for a server-side copy).
	CopiedObjects int
	CopiedBytes   int64
	Streamed      int64
	Pins          []string // the pins written, one per origin: URL + key
	Took          time.Duration
}

// ErrBootstrapRefused: the clone cannot start from that checkpoint (or in
// that directory); nothing it wrote is left but what the error says.
var ErrBootstrapRefused = errors.New("bootstrap refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBootstrapRefused}, args...)...)
}

// Bootstrap makes cfg.Store a clone of checkpoint cfg.Checkpoint of the
// database at cfg.Parent: (1) reads the parent's catalog and checkpoint
// record; (2) writes _shale/origin; (3) pins the tables in every origin
// directory; (4) copies the frozen MANIFEST as the epoch-0 log; (5)
// verifies the checkpoint is still in the parent's catalog, the parent is
// not being deleted, and (for a clone of a clone) the parent's own pins
// are still there, else deletes its pins and refuses; (6) writes CURRENT.
// Open then takes the clone over.
func Bootstrap(ctx context.Context, cfg BootstrapConfig) (rep BootstrapReport, err error) {
	defer func(start time.Time) { rep.Took = time.Since(start) }(time.Now())
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := layout.ValidCloneID(cfg.CloneID); err != nil {
		return rep, refuse("%v", err)
	}
	if err := layout.ValidCheckpointName(cfg.Checkpoint); err != nil {
		return rep, refuse("%v", err)
	}
	open := cfg.OpenOrigin
	if open == nil {
		open = func(url string) (objstore.Store, error) { return objstore.Open(url) }
	}
	clone := bootstrapCore(cfg.Store)

	// The clone's directory: empty, or this bootstrap's.
	mine, done, err := checkCloneDir(ctx, clone, cfg)
	if err != nil || done {
		rep.Done = done
		return rep, err
	}

	// 1. The parent's catalog and the checkpoint's record.
	pstore, err := open(cfg.Parent)
	if err != nil {
		return rep, fmt.Errorf("open the parent %s: %w", cfg.Parent, err)
	}
	parent := bootstrapCore(pstore)
	parent.cfg.OpenOrigin = open
	rec, err := parentCheckpoint(ctx, parent, cfg)
	if err != nil {
		return rep, err
	}
	if err := parent.loadOrigin(ctx); err != nil {
		return rep, fmt.Errorf("the parent %s: %w", cfg.Parent, err)
	}
	want, err := originRecordFor(ctx, parent, cfg, rec)
	if err != nil {
		return rep, err
	}
	if mine != nil && !mine.SameClone(want) {
		// Same clone id and checkpoint name, but another checkpoint (the
		// name was deleted and taken again) or parent URL.
		return rep, refuse("%s of %s names checkpoint %s of %s; asked for checkpoint %s of %s", layout.OriginKey, cfg.Store.URL(), mine.CheckpointID, mine.Parent, want.CheckpointID, want.Parent)
	}
	for _, f := range want.Files {
		rep.Tables++
		rep.TableBytes += f.Size
	}
	if cfg.Copy {
		return bootstrapCopy(ctx, cfg, open, clone, parent, pstore, layout.CopyRecord{OriginRecord: want, Copy: true}, rep)
	}

	// 2. The origin record, first: it claims the directory for this clone.
	if err := putOnceSame(ctx, clone, layout.OriginKey, want.Format(), func(got []byte) error {
		have, perr := layout.ParseOriginRecord(got)
		if perr == nil && have.SameClone(want) {
			return nil
		}
		return refuse("%w: %s of %s is clone %q of %s (checkpoint %s), not clone %q of %s (checkpoint %s)", layout.ErrForeignOrigin,
			layout.OriginKey, cfg.Store.URL(), have.CloneID, have.Parent, have.Checkpoint, want.CloneID, want.Parent, want.Checkpoint)
	}); err != nil {
		return rep, err
	}

	// 3. A pin in every origin directory.
	stores := make([]objstore.Store, len(want.Origins))
	stores[0] = pstore
	for i := 1; i < len(want.Origins); i++ {
		if stores[i], err = open(want.Origins[i].URL); err != nil {
			return rep, fmt.Errorf("open origin %s: %w", want.Origins[i].URL, err)
		}
	}
	for i, o := range want.Origins {
		pin := layout.PinRecord{Clone: cfg.Store.URL(), CloneID: cfg.CloneID, Checkpoint: cfg.Checkpoint, Files: []layout.VersionRef{}}
		for _, f := range want.Files {
			if f.Origin == i {
				pin.Files = append(pin.Files, layout.VersionRef{Name: f.Name, Epoch: f.Epoch})
			}
		}
		b := pin.Format()
		if err := putOnceSame(ctx, bootstrapCore(stores[i]), o.Pin, b, func(got []byte) error {
			return refuse("%s in %s holds another pin for clone %q (%s) than this bootstrap writes (%s): two bootstraps with one clone id?", o.Pin, o.URL, cfg.CloneID, got, b)
		}); err != nil {
			return rep, err
		}
		rep.Pins = append(rep.Pins, strings.TrimSuffix(o.URL, "/")+"/"+o.Pin)
	}

	// 4. The frozen MANIFEST, as segment 1 of the epoch-0 log.
	src := layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name)
	dst := layout.SegmentKey(rec.Manifest.Name, 0, 1)
	switch info, err := cfg.Store.Stat(ctx, dst); {
	case err == nil && info.Size == rec.Manifest.Size:
		// copied by an earlier attempt
	case err == nil:
		return rep, refuse("%s of %s is %d bytes; the checkpoint's MANIFEST %s of %s is %d", dst, cfg.Store.URL(), info.Size, src, cfg.Parent, rec.Manifest.Size)
	case !errors.Is(err, objstore.ErrNotFound):
		return rep, fmt.Errorf("stat %s: %w", dst, err)
	default:
		// Not create-only (a server-side copy cannot be on every S3):
		// the origin record claimed the directory for this clone, and
		// any writer of this key copies the same immutable bytes.
		var streamed int64
		err := clone.background().do(ctx, func(ctx context.Context) (err error) {
			var info objstore.ObjectInfo
			info, streamed, err = objstore.CopyAcross(ctx, pstore, src, cfg.Store, dst, objstore.PutOptions{})
			if err == nil && info.Size != rec.Manifest.Size {
				err = fmt.Errorf("copied %d bytes of %s, want %d", info.Size, src, rec.Manifest.Size)
			}
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("copy the checkpoint's MANIFEST: %w", err)
		}
		rep.CopiedObjects++
		rep.CopiedBytes += rec.Manifest.Size
		rep.Streamed += streamed
	}

	// 5. Verify, after every pin: the checkpoint still protects its
	// tables in the parent, the parent is not being deleted, and the
	// parent's own pins hold what it reads from its origins.
	if err := verifyParent(ctx, parent, pstore, stores, cfg, want); err != nil {
		for i, o := range want.Origins {
			if derr := stores[i].Delete(ctx, o.Pin); derr != nil {
				cfg.Logger.Warn("bootstrap refused; a pin is left", "pin", o.Pin, "origin", o.URL, "err", derr)
			}
		}
		return rep, err
	}

	// 6. CURRENT, last: the directory is a database from here on.
	if err := writeCloneCurrent(ctx, clone, cfg, rec.Current); err != nil {
		return rep, err
	}
	cfg.Logger.Info("clone bootstrapped", "parent", cfg.Parent, "checkpoint", cfg.Checkpoint, "clone", cfg.CloneID,
		"tables", rep.Tables, "tableBytes", rep.TableBytes, "copiedBytes", rep.CopiedBytes, "streamedBytes", rep.Streamed)
	return rep, nil
}

func bootstrapCore(s objstore.Store) *core {
	cfg := Config{Store: s}
	cfg.defaults()
	c := newCore(cfg)
	c.epoch = ^uint64(0)
	return &c
}

// checkCloneDir reads the clone's directory: empty (nil, false), this
// bootstrap's (its origin record; done when CURRENT is written), or
// anything else (refused).
func checkCloneDir(ctx context.Context, clone *core, cfg BootstrapConfig) (*layout.OriginRecord, bool, error) {
	// A copied clone claims its directory with _shale/copy, a shared one
	// with _shale/origin; a directory holding the other kind is not this
	// bootstrap's.
	key, other := layout.OriginKey, layout.CopyKey
	if cfg.Copy {
		key, other = other, key
	}
	switch _, err := clone.store.Stat(ctx, other); {
	case err == nil:
		return nil, false, refuse("%w: %s holds %s; this bootstrap (clone %q of checkpoint %s of %s, copy %v) writes %s: a clone started with other --clone-copy or store settings; delete the directory or start it as it was",
			layout.ErrForeignOrigin, cfg.Store.URL(), other, cfg.CloneID, cfg.Checkpoint, cfg.Parent, cfg.Copy, key)
	case !errors.Is(err, objstore.ErrNotFound):
		return nil, false, fmt.Errorf("stat %s: %w", other, err)
	}
	b, _, err := clone.get(ctx, key, "", ActOpen)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		top, err := clone.listDir(ctx, "", ActOpen)
		if err != nil {
			return nil, false, fmt.Errorf("list %s: %w", cfg.Store.URL(), err)
		}
		if len(top) > 0 {
			return nil, false, refuse("%s is not empty (it holds %q) and is no clone's: a clone starts in an empty directory", cfg.Store.URL(), top[0].Key)
		}
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read %s: %w", key, err)
	}
	var have layout.OriginRecord
	if cfg.Copy {
		var cr layout.CopyRecord
		cr, err = layout.ParseCopyRecord(b)
		have = cr.OriginRecord
	} else {
		have, err = layout.ParseOriginRecord(b)
	}
	if err != nil {
		return nil, false, refuse("%v", err)
	}
	if have.CloneID != cfg.CloneID || have.Checkpoint != cfg.Checkpoint || have.Parent != cfg.Parent {
		return nil, false, refuse("%w: %s of %s is clone %q of checkpoint %s of %s; asked for clone %q of checkpoint %s of %s", layout.ErrForeignOrigin,
			key, cfg.Store.URL(), have.CloneID, have.Checkpoint, have.Parent, cfg.CloneID, cfg.Checkpoint, cfg.Parent)
	}
	switch _, err := clone.store.Stat(ctx, layout.CurrentKey); {
	case err == nil:
		return &have, true, nil
	case !errors.Is(err, objstore.ErrNotFound):
		return nil, false, err
	}
	return &have, false, nil
}

// parentCheckpoint reads the checkpoint's record from the parent's
// catalog (as its next owner would replay it).
func parentCheckpoint(ctx context.Context, parent *core, cfg BootstrapConfig) (layout.CheckpointRecord, error) {
	var rec layout.CheckpointRecord
	top, err := parent.listDir(ctx, "", ActOpen)
	if err != nil {
		return rec, fmt.Errorf("list the parent %s: %w", cfg.Parent, err)
	}
	if len(top) == 0 {
		return rec, refuse("the parent %s is empty: no database there", cfg.Parent)
	}
	if err := recognize(top); err != nil {
		return rec, refuse("the parent %s: %v", cfg.Parent, err)
	}
	live, err := parent.readCatalog(ctx)
	if err != nil {
		return rec, fmt.Errorf("the parent's catalog: %w", err)
	}
	c, ok := live[cfg.Checkpoint]
	if !ok {
		return rec, refuse("checkpoint %q is not in the catalog of %s (deleted, expired or never created; list them with `shale admin checkpoint list --db %s`)", cfg.Checkpoint, cfg.Parent, cfg.Parent)
	}
	b, _, err := parent.get(ctx, layout.CheckpointRecordKey(c.ID), "", ActOpen)
	if err != nil {
		return rec, fmt.Errorf("read checkpoint %q (id %s) of %s: %w", cfg.Checkpoint, c.ID, cfg.Parent, err)
	}
	// Checked against the catalog entry, as a checkpoint server does: a
	// record changed in the store would make the clone read other tables.
	if rec, err = protocol.VerifyCheckpointRecord(c, b); err != nil {
		return rec, refuse("checkpoint %q of %s: record %s does not match the parent's catalog: %v; it changed in the store after the checkpoint was created, so no clone is made from it", cfg.Checkpoint, cfg.Parent, layout.CheckpointRecordKey(c.ID), err)
	}
	return rec, nil
}

// originRecordFor is the clone's origin record: every table of the
// checkpoint with where it lives (the parent, or for a table the parent
// reads from its own origin, that origin), its epoch, size and tier there.
func originRecordFor(ctx context.Context, parent *core, cfg BootstrapConfig, rec layout.CheckpointRecord) (layout.OriginRecord, error) {
	pin := layout.PinKey(cfg.CloneID)
	out := layout.OriginRecord{CloneID: cfg.CloneID, Parent: cfg.Parent, Checkpoint: cfg.Checkpoint, CheckpointID: rec.ID,
		Sequence: rec.Sequence, Current: rec.Current, Manifest: rec.Manifest,
		Origins: []layout.Origin{{URL: cfg.Parent, Pin: pin}}, Files: []layout.OriginFile{}}
	index := map[string]int{cfg.Parent: 0}
	origin := func(url, cold string) int {
		i, ok := index[url]
		if !ok {
			i = len(out.Origins)
			index[url] = i
			out.Origins = append(out.Origins, layout.Origin{URL: url, Pin: pin})
		}
		if cold != "" {
			out.Origins[i].ColdURL = cold
		}
		return i
	}
	pOrigin := parent.Origin()
	var pCold string
	for _, f := range rec.Files {
		if layout.KindOf(f.Name) != layout.KindTable {
			continue // IDENTITY, OPTIONS: the clone writes its own
		}
		if f.Epoch == 0 && pOrigin != nil {
			i := slices.IndexFunc(pOrigin.Files, func(o layout.OriginFile) bool { return o.Name == f.Name })
			if i < 0 {
				return out, fmt.Errorf("checkpoint %q of %s names %s of epoch 0, which its %s does not", cfg.Checkpoint, cfg.Parent, f.Name, layout.OriginKey)
			}
			of := pOrigin.Files[i]
			o := pOrigin.Origins[of.Origin]
			cold := ""
			if of.Tier == "cold" {
				cold = o.ColdURL
			}
			out.Files = append(out.Files, layout.OriginFile{Name: f.Name, Origin: origin(o.URL, cold), Epoch: of.Epoch, Size: of.Size, Tier: of.Tier})
			continue
		}
		if f.Tier == "cold" && pCold == "" {
			st, err := parent.readTiers(ctx, false)
			if err != nil {
				return out, err
			}
			if st.rec == nil || st.rec.Cold == "" {
				return out, fmt.Errorf("checkpoint %q of %s names cold table %s, but the parent records no cold tier", cfg.Checkpoint, cfg.Parent, f.Name)
			}
			pCold = st.rec.Cold
		}
		cold := ""
		if f.Tier == "cold" {
			cold = pCold
		}
		tier := f.Tier
		if tier == "hot" {
			tier = ""
		}
		out.Files = append(out.Files, layout.OriginFile{Name: f.Name, Origin: origin(cfg.Parent, cold), Epoch: f.Epoch, Size: f.Size, Tier: tier})
	}
	return out, out.Validate()
}

// verifyParent is step 5: after the pins are written, the checkpoint is
// still in the parent's catalog (a delete entry stored after this read
// finds the pins in its trash loop's listing: RFC 0010, "GC racing a
// pin"), the parent carries no _shale/deleting, and where the parent is
// itself a clone, its pins in its origins are still there (a pin deleted
// once never comes back).
func verifyParent(ctx context.Context, parent *core, pstore objstore.Store, stores []objstore.Store, cfg BootstrapConfig, want layout.OriginRecord) error {
	live, err := parent.readCatalog(ctx)
	if err != nil {
		return fmt.Errorf("verify the parent's catalog: %w", err)
	}
	if c, ok := live[cfg.Checkpoint]; !ok || c.ID != want.CheckpointID {
		return refuse("checkpoint %q of %s was deleted or expired while the clone was pinning its tables", cfg.Checkpoint, cfg.Parent)
	}
	switch _, err := pstore.Stat(ctx, layout.DeletingKey); {
	case err == nil:
		return refuse("the parent %s is being deleted (%s)", cfg.Parent, layout.DeletingKey)
	case !errors.Is(err, objstore.ErrNotFound):
		return err
	}
	if po := parent.Origin(); po != nil {
		for i := 1; i < len(want.Origins); i++ {
			key := layout.PinKey(po.CloneID)
			switch _, err := stores[i].Stat(ctx, key); {
			case errors.Is(err, objstore.ErrNotFound):
				return refuse("the parent %s no longer pins its tables in %s (%s is gone: it detached or was deleted)", cfg.Parent, want.Origins[i].URL, key)
			case err != nil:
				return err
			}
		}
	}
	return nil
}

// putOnceSame creates key with b; a key already there is accepted when
// same (given its content) says so, else its error refuses.
func putOnceSame(ctx context.Context, c *core, key string, b []byte, same func(got []byte) error) error {
	err := c.background().do(ctx, func(ctx context.Context) error {
		_, err := c.put(ctx, key, "", ActOpen, b, objstore.PutOptions{IfNoneMatch: true})
		return err
	})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		if err != nil {
			return fmt.Errorf("write %s in %s: %w", key, c.store.URL(), err)
		}
		return nil
	}
	got, _, err := c.get(ctx, key, "", ActOpen)
	if err != nil {
		return fmt.Errorf("read %s in %s: %w", key, c.store.URL(), err)
	}
	if bytes.Equal(got, b) {
		return nil
	}
	return same(got)
}

// writeCloneCurrent writes the clone's CURRENT (step 16.6), naming the
// frozen MANIFEST; one already there naming it is this bootstrap's.
func writeCloneCurrent(ctx context.Context, clone *core, cfg BootstrapConfig, current string) error {
	cur := layout.CurrentObject([]byte(current), 0, newNonce())
	return putOnceSame(ctx, clone, layout.CurrentKey, cur, func(got []byte) error {
		if bytes.Equal(layout.CurrentContent(got), []byte(current)) {
			return nil
		}
		return refuse("CURRENT of %s names %q, the checkpoint's MANIFEST is %q", cfg.Store.URL(), strings.TrimSpace(string(layout.CurrentContent(got))), strings.TrimSpace(current))
	})
}
