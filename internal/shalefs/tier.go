package shalefs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
)

// Tiered SST placement (docs/tiering.md, design §7). A database may have a
// second store, the cold tier (a bucket or server standing for HDD-class
// storage). RocksDB tells the FileSystem the temperature of each new table;
// a cold table is uploaded to the cold store, everything else (every log
// and small object too) to the hot one, under the same key layout. Where a
// table is recorded is the store that holds it: an object exists in
// exactly one tier, so every reader (a primary opening on an empty cache,
// a secondary, a compactor) lists both stores and finds every table
// whatever temperature the MANIFEST shows (RocksDB records none for remote
// compaction outputs: 9.11's CompactionServiceOutputFile, as 7.8.3's,
// carries no temperature). A deposed owner can only add objects of its own
// epoch, as in the hot store; deletes go through the same trash markers,
// and the trash loop deletes a trashed table's key in both stores.
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

// Tier is where a table lives.
type Tier uint8

const (
	TierHot Tier = iota
	TierCold
)

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
	if haveCold && KindOf(name) == KindTable && t == rocksshim.TemperatureCold {
		return TierCold
	}
	return TierHot
}

const (
	tiersKey       = "_shale/tiers"        // hot store: the cold tier of this database
	coldMarkerKey  = "_shale/tier"         // cold store: whose cold tier this is
	tiersPairedKey = "_shale/tiers-paired" // hot store: the marker was written
)

// tierRecord is _shale/tiers.
type tierRecord struct {
	ID        string    `json:"id"`
	Cold      string    `json:"cold"` // the cold store's URL when recorded (a hint)
	CreatedAt time.Time `json:"createdAt"`
}

// coldMarker is _shale/tier in the cold store.
type coldMarker struct {
	ID        string    `json:"id"`
	Hot       string    `json:"hot"` // the hot store's URL when recorded (a hint)
	CreatedAt time.Time `json:"createdAt"`
}

// tierAction is what checkTiers must do next.
type tierAction int

const (
	tiersOK         tierAction = iota
	tiersCreate                // write _shale/tiers, then the cold marker
	tiersCreateMark            // write the cold marker of an existing record
	tiersIgnoreCold            // readers: the database has no cold tier yet
)

// decideTiers checks the records of a database against the cold store this
// process was given. rec and mark are nil when missing; coldEmpty says the
// cold location holds no object at all; paired says _shale/tiers-paired
// exists (read by owners only); owner is false for readers, which write
// nothing. An error names the problem and the flag that fixes it.
func decideTiers(rec *tierRecord, mark *coldMarker, haveCold, coldEmpty, paired, owner bool) (tierAction, error) {
	switch {
	case rec == nil && !haveCold:
		return tiersOK, nil
	case rec != nil && !haveCold:
		return 0, fmt.Errorf("the database keeps cold tables in %s: pass --cold-db %s (and --cold-endpoint if that store has its own endpoint)", rec.Cold, rec.Cold)
	case mark != nil && (rec == nil || mark.ID != rec.ID):
		return 0, fmt.Errorf("--cold-db: the cold location is the cold tier of another database (whose hot tier is %s); give each database a cold location of its own", mark.Hot)
	case rec == nil && !owner:
		return tiersIgnoreCold, nil
	case rec == nil && !coldEmpty:
		return 0, errors.New("--cold-db: the cold location holds objects but no Shale cold tier; choose an empty location")
	case rec == nil:
		return tiersCreate, nil
	case mark == nil && !owner:
		return 0, fmt.Errorf("--cold-db: the cold location is not this database's cold tier (it has no marker; the database records %s)", rec.Cold)
	case mark == nil && paired:
		// Not a pairing interrupted between its writes: the marker was
		// there. Taking this location would hide every cold table.
		return 0, fmt.Errorf("--cold-db: the cold location has no marker of this database's cold tier, which was paired before (at %s): the cold tier was moved or emptied; pass --cold-db (and --cold-endpoint) of the location that holds it", rec.Cold)
	case mark == nil && !coldEmpty:
		return 0, fmt.Errorf("--cold-db: the cold location holds objects but is not this database's cold tier (the database records %s)", rec.Cold)
	case mark == nil:
		// The record was written but not the marker (a crash between the
		// two), or the cold tier moved to a new, empty location.
		return tiersCreateMark, nil
	}
	return tiersOK, nil
}

// tierState is what the tier records of a database say (readTiers).
type tierState struct {
	rec       *tierRecord
	mark      *coldMarker
	coldEmpty bool
	// paired: _shale/tiers-paired exists (read for owners of a tiered
	// database only).
	paired bool
}

// readTiers reads the tier records, writing nothing.
func (f *FS) readTiers(ctx context.Context, owner bool) (st tierState, err error) {
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
		b, _, err := f.get(ctx, tiersKey, "", "open")
		switch {
		case errors.Is(err, objstore.ErrNotFound):
		case err != nil:
			return err
		default:
			st.rec = &tierRecord{}
			if err := json.Unmarshal(b, st.rec); err != nil || st.rec.ID == "" {
				return fmt.Errorf("%s is unreadable (%v); refusing to open", tiersKey, err)
			}
		}
		if owner && st.rec != nil {
			switch _, err := f.store.Stat(ctx, tiersPairedKey); {
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

// checkTiers runs decideTiers against the stores, writing the records it
// asks for (owners only), and puts the configured cold store (f.cfg.Cold)
// in use once they agree. An owner runs it after claiming its epoch, and
// before that preflightTiers, which writes nothing, so a misconfigured
// primary deposes nobody (preclaim.go). A reader given a cold store for a
// database that has not recorded one yet leaves it pending: Refresh checks
// again (adoptPendingCold), since the primary may record it later.
func (f *FS) checkTiers(ctx context.Context, owner bool) error {
	pol := f.background()
	for attempt := 0; attempt < 5; attempt++ {
		st, err := f.readTiers(ctx, owner)
		if err != nil {
			return err
		}
		rec := st.rec
		action, err := decideTiers(rec, st.mark, f.cfg.Cold != nil, st.coldEmpty, st.paired, owner)
		if err != nil {
			return err
		}
		switch action {
		case tiersOK:
			if owner && rec != nil && !st.paired {
				// A database paired before the note existed.
				if err := f.notePaired(ctx); err != nil {
					return err
				}
			}
			f.useCold()
			return nil
		case tiersIgnoreCold:
			if !f.coldPending.Load() {
				f.cfg.Logger.Info("--cold-db not used yet: the database has no cold tier yet (its primary records it when it starts with --cold-db)")
			}
			f.coldPending.Store(true)
			return nil
		case tiersCreate:
			rec = &tierRecord{ID: newNonce() + newNonce(), Cold: f.cfg.Cold.URL(), CreatedAt: time.Now().UTC()}
			b, _ := json.Marshal(rec)
			err = pol.do(ctx, func(ctx context.Context) error {
				_, err := f.put(ctx, tiersKey, "", "open", b, objstore.PutOptions{IfNoneMatch: true})
				if errors.Is(err, objstore.ErrPreconditionFailed) {
					if got, _, gerr := f.get(ctx, tiersKey, "", "open"); gerr == nil && bytes.Equal(got, b) {
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
		case tiersCreateMark:
			m := coldMarker{ID: rec.ID, Hot: f.store.URL(), CreatedAt: time.Now().UTC()}
			b, _ := json.Marshal(m)
			err = pol.do(ctx, func(ctx context.Context) error {
				_, err := f.cfg.Cold.Put(ctx, coldMarkerKey, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true})
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
func (f *FS) notePaired(ctx context.Context) error {
	b, _ := json.Marshal(struct {
		PairedAt time.Time `json:"pairedAt"`
	}{time.Now().UTC()})
	err := f.background().do(ctx, func(ctx context.Context) error {
		_, err := f.put(ctx, tiersPairedKey, "", "open", b, objstore.PutOptions{IfNoneMatch: true})
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

func readColdMarker(ctx context.Context, cold objstore.Store) (*coldMarker, error) {
	r, _, err := cold.Get(ctx, coldMarkerKey, 0, -1)
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
	var m coldMarker
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return nil, fmt.Errorf("%s in the cold store is unreadable (%v)", coldMarkerKey, err)
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
func (f *FS) useCold() {
	if f.cfg.Cold != nil {
		f.cold.Store(&coldRef{f.cfg.Cold})
	}
	f.coldPending.Store(false)
}

// coldRef holds the cold store in use.
type coldRef struct{ store objstore.Store }

// coldStore is the cold store in use, nil if none (yet).
func (f *FS) coldStore() objstore.Store {
	if c := f.cold.Load(); c != nil {
		return c.store
	}
	return nil
}

// adoptPendingCold checks the tier records again for a reader whose cold
// store was not in use yet, once per Refresh until the database records
// its cold tier (one GET of _shale/tiers and one of the cold marker).
func (f *FS) adoptPendingCold(ctx context.Context) error {
	if !f.coldPending.Load() {
		return nil
	}
	return f.checkTiers(ctx, false)
}

// tierStore is the store of a tier.
func (f *FS) tierStore(t Tier) objstore.Store {
	if c := f.coldStore(); t == TierCold && c != nil {
		return c
	}
	return f.store
}

// CreateWithTemperature implements rocksshim.TemperatureHooks: Create, and
// the tier the file will be uploaded to.
func (f *FS) CreateWithTemperature(name string, t rocksshim.Temperature) error {
	if err := f.Create(name); err != nil {
		return err
	}
	if tier := TierFor(name, t, f.coldStore() != nil); tier != TierHot {
		f.mu.Lock()
		if st := f.files[name]; st != nil {
			st.tier = tier
		}
		f.mu.Unlock()
	}
	return nil
}

// tierOf is the tier of a managed file (hot when unknown).
func (f *FS) tierOf(name string) Tier {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.fileLocked(name); st != nil {
		return st.tier
	}
	return TierHot
}

// observeTier records a request on a table's tier.
func (f *FS) observeTier(t Tier, op, name, activity string, n int64, start time.Time, err error) {
	if f.cfg.Observe == nil {
		return
	}
	r := Request{Op: op, FileType: FileType(name), Activity: activity, Bytes: n, Duration: time.Since(start), Err: err}
	if KindOf(name) == KindTable || t == TierCold {
		r.Tier = t.String()
	}
	f.cfg.Observe(r)
}

// putFileIn uploads a local file to the store of tier t.
func (f *FS) putFileIn(ctx context.Context, t Tier, key, name, activity, path string, opts objstore.PutOptions) error {
	if t == TierHot {
		return f.putFile(ctx, key, name, activity, path, opts)
	}
	start := time.Now()
	n, err := putLocalFile(ctx, f.tierStore(t), key, path, opts)
	f.observeTier(t, "put", name, activity, n, start, err)
	return err
}

// getObject reads a whole table or object of st from its tier.
func (f *FS) getObject(ctx context.Context, name string, st *file, activity string) ([]byte, error) {
	start := time.Now()
	r, _, err := f.tierStore(st.tier).Get(ctx, objectKey(name, st.epoch), 0, -1)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(r)
		r.Close()
	}
	f.observeTier(st.tier, "get", name, activity, int64(len(b)), start, err)
	return b, err
}

// readsRemotely: a cold table is never copied into the local cache, which
// holds the hot working set; RocksDB reads it range by range (its index
// and filter blocks then live in the block cache).
func readsRemotely(t Tier) bool { return t == TierCold }

// listColdTables adds the tables of the cold store to files (a listing of
// the hot store): per name the highest epoch's version, minus trashed
// ones. A version in both stores (never written so; an interrupted move
// could leave one) is read from the hot store.
func (f *FS) listColdTables(ctx context.Context, files map[string]*file, trashed map[versionRef]bool) error {
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
		f.observeTier(TierCold, "list", "", "open", 0, start, err)
		return err
	})
	if err != nil {
		return fmt.Errorf("list the cold tier %s: %w", cold.URL(), err)
	}
	mergeColdTables(files, objs, trashed)
	return nil
}

// mergeColdTables is listColdTables' decision, on listings.
func mergeColdTables(files map[string]*file, cold []objstore.ObjectInfo, trashed map[versionRef]bool) {
	for _, o := range cold {
		name, e, ok := parseObjectKey(o.Key)
		if !ok || KindOf(name) != KindTable || trashed[versionRef{name, e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: KindTable, epoch: e, size: o.Size, tier: TierCold}
		}
	}
}

// deleteCold deletes trashed table versions from the cold store: a trash
// marker does not say which tier held the table, and deleting a missing
// key is not an error, so every trashed table key is deleted in both.
func (f *FS) deleteCold(ctx context.Context, keys []string) error {
	cold := f.coldStore()
	if cold == nil {
		return nil
	}
	var tables []string
	for _, k := range keys {
		if name, _, ok := parseObjectKey(k); ok && KindOf(name) == KindTable {
			tables = append(tables, k)
		}
	}
	if len(tables) == 0 {
		return nil
	}
	start := time.Now()
	err := cold.DeleteMany(ctx, tables)
	f.observeTier(TierCold, "delete", FileOfKey(tables[0]), "trash", 0, start, err)
	return err
}

// TierUsage is what one tier holds of the live database.
type TierUsage struct {
	Tier  string `json:"tier"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
}

// TierUsage counts the live tables per tier, as this FS sees them (tables
// being written are not counted until they are stored).
func (f *FS) TierUsage() []TierUsage {
	out := []TierUsage{{Tier: TierHot.String()}, {Tier: TierCold.String()}}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.files {
		if st.kind != KindTable || st.size == 0 {
			continue // not a table, or one still being written
		}
		out[st.tier].Files++
		out[st.tier].Bytes += st.size
	}
	return out
}

// HasColdTier reports whether this FS uses a cold store.
func (f *FS) HasColdTier() bool { return f.coldStore() != nil }

// OpenColdTier opens the cold tier named by --cold-db and --cold-endpoint
// (nil, nil when url is empty) and checks that an S3 bucket is reachable.
func OpenColdTier(url, endpoint string) (objstore.Store, error) {
	if url == "" {
		if endpoint != "" {
			return nil, errors.New("--cold-endpoint needs --cold-db: the cold tier's location (s3://BUCKET/PREFIX)")
		}
		return nil, nil
	}
	cold, err := OpenTierStore(url, endpoint)
	if err != nil {
		return nil, fmt.Errorf("--cold-db: %w", err)
	}
	if s3, ok := cold.(*objstore.S3Store); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s3.CheckBucket(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("--cold-db %s: %w", cold.URL(), err)
		}
	}
	return cold, nil
}

// OpenTierStore opens a cold tier's store: like objstore.Open, with the
// S3 endpoint replaced by endpoint when one is given (a cold tier on its own
// server uses the same credentials, as an ObjectStore's cold tier does).
func OpenTierStore(rawURL, endpoint string) (objstore.Store, error) {
	u, err := objstore.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if endpoint == "" {
		return objstore.Open(u.String())
	}
	if u.Scheme != "s3" {
		return nil, fmt.Errorf("--cold-endpoint applies to s3:// cold tiers, not %s", u.Scheme+"://")
	}
	c := objstore.S3ConfigFromEnv()
	c.Endpoint = strings.TrimSuffix(endpoint, "/")
	return objstore.OpenS3(u.String(), c)
}

func putLocalFile(ctx context.Context, s objstore.Store, key, path string, opts objstore.PutOptions) (int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return 0, err
	}
	_, err = s.Put(ctx, key, fh, st.Size(), opts)
	return st.Size(), err
}

// CheckTierLocations refuses a cold location that is the hot one or lies
// inside it or around it on the same server: the two listings would see
// each other's objects.
func CheckTierLocations(hotURL, coldURL string, sameServer bool) error {
	if !sameServer {
		return nil
	}
	h, c := strings.TrimSuffix(hotURL, "/")+"/", strings.TrimSuffix(coldURL, "/")+"/"
	if strings.HasPrefix(h, c) || strings.HasPrefix(c, h) {
		return fmt.Errorf("--cold-db %s overlaps --db %s: give the cold tier a location of its own (another bucket, or a prefix outside the database's)", coldURL, hotURL)
	}
	return nil
}

// TierStatus is the placement of a database's live tables, as `shale
// admin tiers` prints it.
type TierStatus struct {
	Tiers []TierReport `json:"tiers"`
	// ColdFraction is the share of table bytes in the cold tier.
	ColdFraction float64 `json:"coldFraction"`
	// OldestHotData is when the oldest data in the hot tier was written
	// (RocksDB's creation time of the oldest ancestor of a hot table).
	OldestHotData  time.Time `json:"oldestHotData,omitempty"`
	OldestHotTable string    `json:"oldestHotTable,omitempty"`
}

// TierReport is one tier's line.
type TierReport struct {
	Tier     string `json:"tier"`
	Location string `json:"location,omitempty"` // "" when the database has no such tier
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
}

// RecordedColdTier returns the cold location a database recorded ("" if it
// has no cold tier): a hint, written when the tier was created.
func RecordedColdTier(ctx context.Context, hot objstore.Store) (string, error) {
	r, _, err := hot.Get(ctx, tiersKey, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return "", err
	}
	var rec tierRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return "", fmt.Errorf("%s is unreadable: %w", tiersKey, err)
	}
	return rec.Cold, nil
}

// ReadTierStatus lists the live tables of the database in hot (and cold)
// as a reader sees them, writing nothing (no lease either), and reads the
// properties of the hot tables to date their oldest data.
func ReadTierStatus(ctx context.Context, hot, cold objstore.Store) (TierStatus, error) {
	f := &FS{cfg: Config{Store: hot, Cold: cold}, store: hot, files: map[string]*file{}, fencedCh: make(chan struct{}), stop: make(chan struct{}), readOnly: true, epoch: math.MaxUint64}
	f.cfg.defaults()
	if err := f.checkTiers(ctx, false); err != nil {
		return TierStatus{}, err
	}
	last, err := f.lastOpened(ctx, f.epoch)
	if err != nil {
		return TierStatus{}, err
	}
	files, err := f.listStore(ctx, last, false)
	if err != nil {
		return TierStatus{}, err
	}
	st := TierStatus{Tiers: []TierReport{{Tier: "hot", Location: hot.URL()}, {Tier: "cold"}}}
	if c := f.coldStore(); c != nil {
		st.Tiers[1].Location = c.URL()
	}
	var hotNames []string
	for name, fl := range files {
		if fl.kind != KindTable {
			continue
		}
		st.Tiers[fl.tier].Files++
		st.Tiers[fl.tier].Bytes += fl.size
		if fl.tier == TierHot {
			hotNames = append(hotNames, name)
		}
	}
	if total := st.Tiers[0].Bytes + st.Tiers[1].Bytes; total > 0 {
		st.ColdFraction = float64(st.Tiers[1].Bytes) / float64(total)
	}
	times := make([]time.Time, len(hotNames))
	err = parallel(ctx, len(hotNames), openParallelism, func(ctx context.Context, i int) error {
		fl := files[hotNames[i]]
		props, err := tableProperties(ctx, hot, objectKey(hotNames[i], fl.epoch), fl.size)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // deleted since the listing
		}
		if err != nil {
			return fmt.Errorf("read the properties of %s: %w", hotNames[i], err)
		}
		times[i] = dataTime(props)
		return nil
	})
	if err != nil {
		return TierStatus{}, err
	}
	for i, t := range times {
		if !t.IsZero() && (st.OldestHotData.IsZero() || t.Before(st.OldestHotData)) {
			st.OldestHotData, st.OldestHotTable = t, hotNames[i]
		}
	}
	return st, nil
}

// InstallTable makes the object srcKey (a compaction output another
// process wrote, e.g. under _shale/compactions/<job>/) the table name of
// this owner: it finds srcKey in the hot store, else in the cold one, and
// copies it within that store to name's key of this epoch, so the table
// keeps the tier its writer chose from RocksDB's temperature. The source
// stays; its writer's job directory is cleaned up with the job.
func (f *FS) InstallTable(ctx context.Context, srcKey, name string) (Tier, error) {
	if err := f.FenceError(); err != nil {
		return TierHot, err
	}
	if f.readOnly {
		return TierHot, fmt.Errorf("install %s: %w", name, ErrReadOnly)
	}
	if KindOf(name) != KindTable {
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
		_, err := f.tierStore(tier).Copy(ctx, srcKey, objectKey(name, f.epoch), objstore.PutOptions{StorageClass: f.cfg.TableStorageClass})
		f.observeTier(tier, "put", name, "compaction", info.Size, start, err)
		return err
	})
	if err != nil {
		return TierHot, fmt.Errorf("install %s from %s: %w", name, srcKey, err)
	}
	f.mu.Lock()
	f.files[name] = &file{kind: KindTable, epoch: f.epoch, size: info.Size, tier: tier}
	f.mu.Unlock()
	return tier, nil
}
