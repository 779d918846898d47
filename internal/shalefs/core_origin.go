package shalefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Origin tables (docs/rfcs/0010-checkpoints-and-clones.md, step 17). A
// clone's _shale/origin names the tables it starts with and the database
// each lives in. Every FileSystem of the clone (owner, secondary,
// compaction worker: all check the tiers at open, which loads the record)
// adds them to its listing as versions of epoch 0, as the cold tier's are
// merged (core_tier.go), minus trashed ones, and reads them by key where
// they live, never listing there. Any version the clone writes has an
// epoch of 1 or more and outranks them; RocksDB numbers its new files
// above the frozen MANIFEST's next file number, so no name is both.

// originTable is where one origin table is read.
type originTable struct {
	store objstore.Store
	key   string // <name>.<epoch at the origin>
	size  int64
	cold  bool
}

// originState is a clone's origin record, with its stores opened.
type originState struct {
	rec      layout.OriginRecord
	tables   map[string]*originTable
	detached bool // _shale/detached: no tables
}

// openOrigin opens an origin's store (Config.OpenOrigin, else by URL with
// the environment's credentials).
func (f *core) openOrigin(url string) (objstore.Store, error) {
	if f.cfg.OpenOrigin != nil {
		return f.cfg.OpenOrigin(url)
	}
	return objstore.Open(url)
}

// loadOrigin reads _shale/origin once (nothing: not a clone) and opens the
// stores it names. An unreadable record refuses the open: without it the
// clone's MANIFEST names tables nobody can find.
func (f *core) loadOrigin(ctx context.Context) error {
	if f.originLoaded.Load() {
		return nil
	}
	var b []byte
	err := f.background().do(ctx, func(ctx context.Context) (err error) {
		b, _, err = f.get(ctx, layout.OriginKey, "", ActOpen)
		if errors.Is(err, objstore.ErrNotFound) {
			b, err = nil, nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", layout.OriginKey, err)
	}
	if b == nil {
		f.originLoaded.Store(true)
		return nil
	}
	rec, err := layout.ParseOriginRecord(b)
	if err != nil {
		return fmt.Errorf("%w; refusing to open the clone", err)
	}
	st := &originState{rec: rec, tables: map[string]*originTable{}}
	// Detached (step 18): the pins are released, the origin tables no
	// longer the clone's; the record stays (where it came from).
	var detached bool
	err = f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.store.Stat(ctx, layout.DetachedKey)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		detached = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("stat %s: %w", layout.DetachedKey, err)
	}
	if detached {
		st.detached = true
		f.origin.Store(st)
		f.originLoaded.Store(true)
		return nil
	}
	hot := make([]objstore.Store, len(rec.Origins))
	cold := make([]objstore.Store, len(rec.Origins))
	for i, o := range rec.Origins {
		if hot[i], err = f.openOrigin(o.URL); err != nil {
			return fmt.Errorf("open origin %s of the clone: %w", o.URL, err)
		}
	}
	for _, t := range rec.Files {
		ot := &originTable{store: hot[t.Origin], key: layout.ObjectKey(t.Name, t.Epoch), size: t.Size}
		if t.Tier == "cold" {
			o := rec.Origins[t.Origin]
			if cold[t.Origin] == nil {
				if cold[t.Origin], err = f.openOrigin(o.ColdURL); err != nil {
					return fmt.Errorf("open the cold tier %s of origin %s: %w", o.ColdURL, o.URL, err)
				}
			}
			ot.store, ot.cold = cold[t.Origin], true
		}
		st.tables[t.Name] = ot
	}
	f.origin.Store(st)
	f.originLoaded.Store(true)
	return nil
}

// originOf is the origin table name is read from at epoch 0 (nil: none).
func (f *core) originOf(name string) *originTable {
	if o := f.origin.Load(); o != nil {
		return o.tables[name]
	}
	return nil
}

// Origin is the clone's origin record (nil: not a clone).
func (f *core) Origin() *layout.OriginRecord {
	if o := f.origin.Load(); o != nil {
		return &o.rec
	}
	return nil
}

// addOriginTables adds the origin tables to files as versions of epoch
// 0, minus trashed ones: a version of the clone's own (any epoch above 0)
// wins.
func (f *core) addOriginTables(files map[string]*file, trashed map[layout.VersionRef]bool) {
	o := f.origin.Load()
	if o == nil {
		return
	}
	for name, ot := range o.tables {
		if trashed[layout.VersionRef{Name: name, Epoch: 0}] || files[name] != nil {
			continue
		}
		st := &file{kind: layout.KindTable, epoch: 0, size: ot.size, origin: ot}
		if ot.cold {
			st.tier = TierCold
		}
		files[name] = st
	}
}

// objectAt is where version st of table or object name is read: its
// origin, or its tier of this database.
func (f *core) objectAt(name string, st *file) (objstore.Store, string) {
	if st.origin != nil {
		return st.origin.store, st.origin.key
	}
	return f.tierStore(st.tier), layout.ObjectKey(name, st.epoch)
}

// getAt reads a whole object of st (a table or object) wherever it lives.
func (f *core) getAt(ctx context.Context, name string, st *file, activity Activity) ([]byte, error) {
	store, key := f.objectAt(name, st)
	start := time.Now()
	r, _, err := store.Get(ctx, key, 0, -1)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(r)
		r.Close()
	}
	f.observeTier(st.tier, "get", name, activity, int64(len(b)), start, err)
	return b, err
}
