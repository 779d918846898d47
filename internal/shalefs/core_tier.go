package shalefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// Tiered SST placement (docs/rfcs/0009-tiers.md, docs/tiering.md). A
// database may have a second store, the cold tier (a bucket or server
// standing for HDD-class storage). RocksDB tells the FileSystem the
// temperature of each new table; a cold table is uploaded to the cold
// store, everything else (every log and small object too) to the hot one,
// under the same key layout. Where a table is recorded is the store that
// holds it: an object exists in exactly one tier, so every reader (a
// primary opening on an empty cache, a secondary, a compactor) lists both
// stores and finds every table whatever temperature the MANIFEST shows
// (RocksDB records none for remote compaction outputs: 9.11's
// CompactionServiceOutputFile, as 7.8.3's, carries no temperature). A
// deposed owner can only
// add objects of its own epoch, as in the hot store; deletes go through the
// same trash markers, and the trash loop deletes a trashed table's key in
// both stores.
//
// Two records pair the stores, both created once with If-None-Match and
// never changed: _shale/tiers in the hot store names the cold location and
// a random identity, and _shale/tier in the cold store carries the same
// identity. A cold location that holds another database's marker is
// refused: tables of two databases under one prefix would overwrite each
// other (their names and epochs collide). A third, _shale/tiers-paired in
// the hot store, is written once the marker exists: a cold location
// without the marker is then a moved or emptied cold tier, not a pairing
// interrupted between its two writes, and is refused.

const (
	TierHot Tier = iota
	TierCold
)

// Tier is where a table lives.
type Tier uint8

func (t Tier) String() string {
	if t == TierCold {
		return "cold"
	}
	return "hot"
}

// Tiers lists the tiers in metric order.
var Tiers = []Tier{TierHot, TierCold}

// TierFor is the tier of a new file: a table RocksDB writes cold goes to
// the cold tier when there is one; anything else is hot (logs, CURRENT,
// small objects, and tables when there is no cold tier).
func TierFor(name string, t rocksshim.Temperature, haveCold bool) Tier {
	if haveCold && layout.KindOf(name) == layout.KindTable && t == rocksshim.TemperatureCold {
		return TierCold
	}
	return TierHot
}

// tierState is what the tier records of a database say (readTiers).
type tierState struct {
	rec       *layout.TierRecord
	mark      *layout.ColdMarker
	coldEmpty bool
	// paired: _shale/tiers-paired exists (read for owners of a tiered
	// database only).
	paired bool
}

// readTiers reads the tier records, writing nothing.
func (f *core) readTiers(ctx context.Context, owner bool) (st tierState, err error) {
	err = f.background().do(ctx, func(ctx context.Context) error {
		st = tierState{}
		// The marker first: it is written after the record, so a
		// marker seen here has its record visible below.
		var err error
		if f.cfg.Cold != nil {
			if st.mark, err = readColdMarker(ctx, f.cfg.Cold); err != nil {
				return err
			}
		}
		b, _, err := f.get(ctx, layout.TiersKey, "", ActOpen)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return err
		default:
			rec, err := layout.ParseTierRecord(b)
			st.rec = &rec
			if err != nil || rec.ID == "" {
				return fmt.Errorf("%s is unreadable (%v); refusing to open", layout.TiersKey, err)
			}
		}
		if owner && st.rec != nil {
			switch _, err := f.store.Stat(ctx, layout.TiersPairedKey); {
			case err == nil:
				st.paired = true
			case !errors.Is(err, objstore.ErrNotFound):
				return err
			}
		}
		if f.cfg.Cold != nil && st.mark == nil {
			st.coldEmpty, err = storeEmpty(ctx, f.cfg.Cold)
			return err
		}
		return nil
	})
	return st, err
}

// checkTiers runs protocol.DecideTiers against the stores, writing the
// records it asks for (owners only), and puts the configured cold store
// (f.cfg.Cold) in use once they agree. An owner runs it after claiming its
// epoch, and before that preflightTiers, which writes nothing, so a
// misconfigured primary deposes nobody (preclaim.go). A reader given a cold
// store for a database that has not recorded one yet leaves it pending:
// Refresh checks again (adoptPendingCold), since the primary may record it
// later.
//
// It loads a clone's origin record first: every FileSystem checks the
// tiers before its first listing.
func (f *core) checkTiers(ctx context.Context, owner bool) error {
	if err := f.loadOrigin(ctx); err != nil {
		return err
	}
	pol := f.background()
	for attempt := 0; attempt < 5; attempt++ {
		st, err := f.readTiers(ctx, owner)
		if err != nil {
			return err
		}
		rec := st.rec
		action, err := protocol.DecideTiers(rec, st.mark, f.cfg.Cold != nil, st.coldEmpty, st.paired, owner)
		if err != nil {
			return err
		}
		switch action {
		case protocol.TiersOK:
			if owner && rec != nil && !st.paired {
				// A database paired before the note existed.
				if err := f.notePaired(ctx); err != nil {
					return err
				}
			}
			f.useCold()
			return nil
		case protocol.TiersIgnoreCold:
			if !f.coldPending.Load() {
				f.cfg.Logger.Info("--cold-db not used yet: the database has no cold tier yet (its primary records it when it starts with --cold-db)")
			}
			f.coldPending.Store(true)
			return nil
		case protocol.TiersCreate:
			rec = &layout.TierRecord{ID: newNonce() + newNonce(), Cold: f.cfg.Cold.URL(), CreatedAt: time.Now().UTC()}
			b := rec.Format()
			err = pol.do(ctx, func(ctx context.Context) error {
				_, err := f.put(ctx, layout.TiersKey, "", ActOpen, b, objstore.PutOptions{IfNoneMatch: true})
				if errors.Is(err, objstore.ErrPreconditionFailed) {
					if got, _, gerr := f.get(ctx, layout.TiersKey, "", ActOpen); gerr == nil && bytes.Equal(got, b) {
						return nil // our own write, whose reply was lost
					}
				}
				return err
			})
			if errors.Is(err, objstore.ErrPreconditionFailed) {
				continue // another opener recorded a cold tier: check it
			}
			if err != nil {
				return fmt.Errorf("record the cold tier: %w", err)
			}
			fallthrough
		case protocol.TiersCreateMark:
			m := layout.ColdMarker{ID: rec.ID, Hot: f.store.URL(), CreatedAt: time.Now().UTC()}
			b := m.Format()
			err = pol.do(ctx, func(ctx context.Context) error {
				_, err := f.cfg.Cold.Put(ctx, layout.ColdMarkerKey, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true})
				if errors.Is(err, objstore.ErrPreconditionFailed) {
					if got, gerr := readColdMarker(ctx, f.cfg.Cold); gerr == nil && got != nil && got.ID == m.ID {
						return nil
					}
				}
				return err
			})
			if errors.Is(err, objstore.ErrPreconditionFailed) {
				continue // another database took the location: refused next round
			}
			if err != nil {
				return fmt.Errorf("mark the cold tier: %w", err)
			}
			if err := f.notePaired(ctx); err != nil {
				return err
			}
			f.cfg.Logger.Info("cold tier recorded", "cold", f.cfg.Cold.URL())
			f.useCold()
			return nil
		}
	}
	return errors.New("the cold tier records keep changing; refusing to open")
}

// notePaired writes _shale/tiers-paired (once; its content is only a
// time): from then on a cold location without the marker is refused.
func (f *core) notePaired(ctx context.Context) error {
	b := layout.TiersPaired{PairedAt: time.Now().UTC()}.Format()
	err := f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, layout.TiersPairedKey, "", ActOpen, b, objstore.PutOptions{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return nil // written already (by us, a lost reply, or an earlier owner)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("note the cold tier's pairing: %w", err)
	}
	return nil
}

func readColdMarker(ctx context.Context, cold objstore.Store) (*layout.ColdMarker, error) {
	r, _, err := cold.Get(ctx, layout.ColdMarkerKey, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return nil, err
	}
	m, err := layout.ParseColdMarker(b)
	if err != nil || m.ID == "" {
		return nil, fmt.Errorf("%s in the cold store is unreadable (%v)", layout.ColdMarkerKey, err)
	}
	return &m, nil
}

var errNotEmpty = errors.New("not empty")

func storeEmpty(ctx context.Context, s objstore.Store) (bool, error) {
	err := s.ListDir(ctx, "", func(objstore.ObjectInfo) error { return errNotEmpty })
	if errors.Is(err, errNotEmpty) {
		return false, nil
	}
	return err == nil, err
}

// useCold puts the configured cold store in use (the records agree).
func (f *core) useCold() {
	if f.cfg.Cold != nil {
		f.cold.Store(&coldRef{f.cfg.Cold})
	}
	f.coldPending.Store(false)
}

// coldRef holds the cold store in use.
type coldRef struct{ store objstore.Store }

// coldStore is the cold store in use, nil if none (yet).
func (f *core) coldStore() objstore.Store {
	if c := f.cold.Load(); c != nil {
		return c.store
	}
	return nil
}

// tierStore is the store of a tier.
func (f *core) tierStore(t Tier) objstore.Store {
	if c := f.coldStore(); t == TierCold && c != nil {
		return c
	}
	return f.store
}

// tierOf is the tier of a managed file (hot when unknown).
func (f *core) tierOf(name string) Tier {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.fileLocked(name); st != nil {
		return st.tier
	}
	return TierHot
}

// observeTier records a request on a table's tier.
func (f *core) observeTier(t Tier, op, name string, activity Activity, n int64, start time.Time, err error) {
	if f.cfg.Observe == nil {
		return
	}
	r := Request{Op: op, FileType: FileType(name), Activity: activity.String(), Bytes: n, Duration: time.Since(start), Err: err}
	if layout.KindOf(name) == layout.KindTable || t == TierCold {
		r.Tier = t.String()
	}
	f.cfg.Observe(r)
}

// listColdTables adds the tables of the cold store to files (a listing of
// the hot store): per name the highest epoch's version, minus trashed
// ones. A version in both stores (never written so; an interrupted move
// could leave one) is read from the hot store.
//
// A clone's origin tables are added here too, from memory (core_origin.go).
func (f *core) listColdTables(ctx context.Context, files map[string]*file, trashed map[layout.VersionRef]bool) error {
	f.addOriginTables(files, trashed)
	cold := f.coldStore()
	if cold == nil {
		return nil
	}
	var objs []objstore.ObjectInfo
	err := f.background().do(ctx, func(ctx context.Context) error {
		objs = nil
		start := time.Now()
		err := cold.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
			objs = append(objs, o)
			return nil
		})
		f.observeTier(TierCold, "list", "", ActOpen, 0, start, err)
		return err
	})
	if err != nil {
		return fmt.Errorf("list the cold tier %s: %w", cold.URL(), err)
	}
	mergeColdTables(files, objs, trashed)
	return nil
}

// mergeColdTables is listColdTables' decision, on listings.
func mergeColdTables(files map[string]*file, cold []objstore.ObjectInfo, trashed map[layout.VersionRef]bool) {
	for _, o := range cold {
		name, e, ok := layout.ParseObjectKey(o.Key)
		if !ok || layout.KindOf(name) != layout.KindTable || trashed[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: layout.KindTable, epoch: e, size: o.Size, tier: TierCold}
		}
	}
}

// TierUsage is what one tier holds of the live database.
type TierUsage struct {
	Tier  string `json:"tier"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// TierUsage counts the live tables per tier, as this FS sees them (tables
// being written are not counted until they are stored).
func (f *core) TierUsage() []TierUsage {
	out := []TierUsage{{Tier: TierHot.String()}, {Tier: TierCold.String()}}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.files {
		if st.kind != layout.KindTable || st.size == 0 {
			continue // not a table, or one still being written
		}
		out[st.tier].Files++
		out[st.tier].Bytes += st.size
	}
	return out
}

// HasColdTier reports whether this FS uses a cold store.
func (f *core) HasColdTier() bool { return f.coldStore() != nil }
