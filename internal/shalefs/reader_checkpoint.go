package shalefs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Readers of the checkpoint catalog (docs/rfcs/0010-checkpoints-and-
// clones.md, steps 9 and 15): `shale admin checkpoint list --db` and a
// server fixed at one checkpoint. They replay the catalog version the
// next owner would (the view of RFC 0007), writing nothing.

// readCatalog replays the live catalog version of the view (empty when
// no owner wrote one yet).
func (f *core) readCatalog(ctx context.Context) (map[string]layout.CatalogCheckpoint, error) {
	last, err := f.lastOpened(ctx, math.MaxUint64)
	if err != nil {
		return nil, err
	}
	markers, err := f.listRetry(ctx, layout.TrashPrefix, false)
	if err != nil {
		return nil, err
	}
	st, err := f.viewLog(ctx, layout.CatalogLog, trashedVersions(markers), last)
	if err != nil || st == nil {
		return map[string]layout.CatalogCheckpoint{}, err
	}
	live, err := f.replayCatalogFile(ctx, st, ActOpen)
	if err != nil {
		return nil, fmt.Errorf("checkpoint catalog (epoch %d): %w", st.epoch, err)
	}
	return live, nil
}

// ReadCheckpoints lists the checkpoints of the database in store as its
// next owner would replay them, writing nothing (no lease either).
func ReadCheckpoints(ctx context.Context, store objstore.Store) ([]CheckpointInfo, error) {
	cfg := Config{Store: store}
	cfg.defaults()
	c := newCore(cfg)
	top, err := c.listDir(ctx, "", ActOpen)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", store.URL(), err)
	}
	if err := recognize(top); err != nil {
		return nil, err
	}
	live, err := c.readCatalog(ctx)
	if err != nil {
		return nil, err
	}
	out := []CheckpointInfo{}
	for _, cp := range sortedLive(live) {
		out = append(out, infoOf(cp))
	}
	return out, nil
}

func sortedLive(live map[string]layout.CatalogCheckpoint) []layout.CatalogCheckpoint {
	return protocol.SortedCheckpoints(live)
}

// OpenCheckpointReader opens a read-only view fixed at checkpoint name:
// its tables (read by key, wherever the trash left them), its frozen
// MANIFEST copy, a CURRENT naming it, and no WAL. RocksDB opens on it and
// never catches up. Its reader lease (renewed with RenewLease) names the
// tables, so a checkpoint deleted while it serves keeps them until the
// lease lapses.
func OpenCheckpointReader(ctx context.Context, cfg Config, name string) (*Reader, CheckpointInfo, error) {
	cfg.defaults()
	f := &Reader{core: newCore(cfg)}
	if f.cfg.ReaderID == "" {
		f.cfg.ReaderID = defaultReaderID()
	}
	f.epoch = math.MaxUint64
	live, err := f.readCatalog(ctx)
	if err != nil {
		return nil, CheckpointInfo{}, err
	}
	c, ok := live[name]
	if !ok {
		return nil, CheckpointInfo{}, fmt.Errorf("%w: %q is not in the catalog of %s (deleted, expired, or never created; list them with `shale admin checkpoint list`)", ErrCheckpointNotFound, name, cfg.Store.URL())
	}
	var rec layout.CheckpointRecord
	err = f.background().do(ctx, func(ctx context.Context) error {
		b, _, err := f.get(ctx, layout.CheckpointRecordKey(c.ID), "", ActOpen)
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("checkpoint %q (id %s) has no record in the store: the store lost it", name, c.ID)
		}
		if err != nil {
			return err
		}
		rec, err = protocol.VerifyCheckpointRecord(c, b)
		if err != nil {
			return tampered(name, fmt.Sprintf("record %s does not match the catalog: %v", layout.CheckpointRecordKey(c.ID), err))
		}
		return nil
	})
	if err != nil {
		return nil, CheckpointInfo{}, err
	}
	if err := f.checkTiers(ctx, false); err != nil {
		return nil, CheckpointInfo{}, err
	}
	for _, fl := range rec.Files {
		st := &file{kind: layout.KindOf(fl.Name), epoch: fl.Epoch, size: fl.Size}
		if fl.Tier == "cold" {
			st.tier = TierCold
		}
		f.files[fl.Name] = st
	}
	f.files[rec.Manifest.Name] = &file{kind: layout.KindLog, size: rec.Manifest.Size, key: layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name)}
	f.current = []byte(rec.Current)
	f.files["CURRENT"] = &file{kind: layout.KindCurrent, size: int64(len(f.current))}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, CheckpointInfo{}, fmt.Errorf("cache dir: %w", err)
	}
	if err := f.prepareCache(); err != nil {
		return nil, CheckpointInfo{}, err
	}
	if err := f.writeCurrent(); err != nil {
		return nil, CheckpointInfo{}, err
	}
	if err := f.fetch(rec.Manifest.Name, ActOpen); err != nil {
		return nil, CheckpointInfo{}, err
	}
	if rec.Manifest.SHA256 != "" {
		b, err := os.ReadFile(f.localPath(rec.Manifest.Name))
		if err != nil {
			return nil, CheckpointInfo{}, err
		}
		if got := layout.Digest(b); got != rec.Manifest.SHA256 {
			return nil, CheckpointInfo{}, tampered(name, fmt.Sprintf("the MANIFEST copy %s does not match its record: its SHA-256 is %.12s..., the record's %.12s...",
				layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name), got, rec.Manifest.SHA256))
		}
	}
	f.rs.full = false
	if err := f.RenewLease(ctx); err != nil {
		return nil, CheckpointInfo{}, err
	}
	return f, infoOf(c), nil
}

// tampered is the refusal to serve a checkpoint whose record or MANIFEST
// copy changed in the store after it was created.
func tampered(name, what string) error {
	return fmt.Errorf("checkpoint %q: %s; it changed in the store after the checkpoint was created (damaged, or written by hand), so it is not served. The catalog still protects the checkpoint's tables: restore the object from a backup, or delete the checkpoint (shale admin checkpoint delete %s)", name, what, name)
}

// RenewLease publishes the reader's lease if due (a reader fixed at a
// checkpoint has no refresh to do it).
func (f *Reader) RenewLease(ctx context.Context) error { return f.publishLease(ctx) }

// ReadCheckpointRecord reads checkpoint name of the database in store as
// a checkpoint server does, writing nothing: the catalog replayed as its
// next owner would, and the record checked against the catalog's entry (a
// record changed in the store is refused, naming it). A backup copies
// what it names (docs/rfcs/0011-backups-and-point-in-time-restore.md).
func ReadCheckpointRecord(ctx context.Context, store objstore.Store, name string) (layout.CheckpointRecord, error) {
	cfg := Config{Store: store}
	cfg.defaults()
	c := newCore(cfg)
	c.epoch = math.MaxUint64
	top, err := c.listDir(ctx, "", ActOpen)
	if err != nil {
		return layout.CheckpointRecord{}, fmt.Errorf("list %s: %w", store.URL(), err)
	}
	if len(top) == 0 {
		return layout.CheckpointRecord{}, fmt.Errorf("%s is empty: no database there", store.URL())
	}
	if err := recognize(top); err != nil {
		return layout.CheckpointRecord{}, err
	}
	live, err := c.readCatalog(ctx)
	if err != nil {
		return layout.CheckpointRecord{}, err
	}
	cp, ok := live[name]
	if !ok {
		return layout.CheckpointRecord{}, fmt.Errorf("%w: %q is not in the catalog of %s (deleted, expired, or never created; list them with `shale admin checkpoint list --db %s`)", ErrCheckpointNotFound, name, store.URL(), store.URL())
	}
	var rec layout.CheckpointRecord
	err = c.background().do(ctx, func(ctx context.Context) error {
		b, _, err := c.get(ctx, layout.CheckpointRecordKey(cp.ID), "", ActOpen)
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("checkpoint %q (id %s) has no record in %s: the store lost it", name, cp.ID, store.URL())
		}
		if err != nil {
			return err
		}
		if rec, err = protocol.VerifyCheckpointRecord(cp, b); err != nil {
			return tampered(name, fmt.Sprintf("record %s does not match the catalog: %v", layout.CheckpointRecordKey(cp.ID), err))
		}
		return nil
	})
	return rec, err
}
