package shalefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// FenceStatus is who owns a database, as recorded in its store.
type FenceStatus struct {
	Epoch    uint64    `json:"epoch"` // 0: never opened
	TakenAt  time.Time `json:"takenAt,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	Released bool      `json:"released"` // the owner shut down cleanly
	Epochs   int       `json:"epochsTaken"`
}

// ReadFenceStatus reads the highest epoch claim of the database in store.
func ReadFenceStatus(ctx context.Context, store objstore.Store) (FenceStatus, error) {
	var st FenceStatus
	err := store.List(ctx, layout.EpochPrefix, func(o objstore.ObjectInfo) error {
		if e, ok := layout.ParseEpochKey(o.Key); ok {
			st.Epochs++
			st.Epoch = max(st.Epoch, e)
		}
		return nil
	})
	if err != nil || st.Epoch == 0 {
		return st, err
	}
	r, _, err := store.Get(ctx, layout.EpochKey(st.Epoch), 0, -1)
	if err != nil {
		return st, err
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return st, err
	}
	if c, err := layout.ParseEpochClaim(b); err == nil {
		st.TakenAt, st.Owner = c.TakenAt, c.Owner
	}
	_, err = store.Stat(ctx, layout.ReleasedKey(st.Epoch))
	switch {
	case err == nil:
		st.Released = true
	case !errors.Is(err, objstore.ErrNotFound):
		return st, err
	}
	return st, nil
}

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
	r, _, err := hot.Get(ctx, layout.TiersKey, 0, -1)
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
	rec, err := layout.ParseTierRecord(b)
	if err != nil {
		return "", fmt.Errorf("%s is unreadable: %w", layout.TiersKey, err)
	}
	return rec.Cold, nil
}

// listDatabase lists the live files of the database in hot (and cold) as
// its next owner would see them, writing nothing: the tier records are
// checked as a reader checks them, the log versions only listed.
func listDatabase(ctx context.Context, hot, cold objstore.Store) (map[string]*file, *core, error) {
	cfg := Config{Store: hot, Cold: cold}
	cfg.defaults()
	c := newCore(cfg)
	if err := c.checkTiers(ctx, false); err != nil {
		return nil, nil, err
	}
	last, err := c.lastOpened(ctx, math.MaxUint64)
	if err != nil {
		return nil, nil, err
	}
	files, err := c.listView(ctx, last)
	return files, &c, err
}

// ReadTierStatus lists the live tables of the database in hot (and cold)
// as a reader sees them, writing nothing (no lease either), and reads the
// properties of the hot tables to date their oldest data.
func ReadTierStatus(ctx context.Context, hot, cold objstore.Store) (TierStatus, error) {
	files, f, err := listDatabase(ctx, hot, cold)
	if err != nil {
		return TierStatus{}, err
	}
	st := TierStatus{Tiers: []TierReport{{Tier: "hot", Location: hot.URL()}, {Tier: "cold"}}}
	if c := f.coldStore(); c != nil {
		st.Tiers[1].Location = c.URL()
	}
	var hotNames []string
	for name, fl := range files {
		if fl.kind != layout.KindTable {
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
		props, err := tableProperties(ctx, hot, layout.ObjectKey(hotNames[i], fl.epoch), fl.size)
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
