package node

import (
	"context"
	"fmt"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// StoreConfig names a node's stores.
type StoreConfig struct {
	DB string // the database's URL (--db)
	// ColdDB is the cold tier's URL (--cold-db; "": none), reached at
	// ColdEndpoint when that is set (--cold-endpoint: an s3:// cold tier on
	// its own server, with the same credentials).
	ColdDB, ColdEndpoint string
	// Store and Cold, when set, are used instead of opening DB and ColdDB
	// (tests wrap the stores); the checks still apply.
	Store, Cold objstore.Store
}

// Stores are a node's stores, open and checked.
type Stores struct {
	URL  string // the database's URL, normalized
	DB   objstore.Store
	Cold objstore.Store // nil: no cold tier
}

// bucketTimeout bounds the check that a bucket answers.
const bucketTimeout = 30 * time.Second

// OpenStores opens cfg's stores and checks them before anything is
// written: a bad URL, a missing bucket or bad credentials, and a cold tier
// that is the database's location or overlaps it (two listings would see
// each other's objects) are errors naming the flag to fix.
func OpenStores(cfg StoreConfig) (Stores, error) {
	u, err := objstore.ParseURL(cfg.DB)
	if err != nil {
		return Stores{}, fmt.Errorf("--db: %w", err)
	}
	s := Stores{URL: u.String(), DB: cfg.Store, Cold: cfg.Cold}
	if s.DB == nil {
		if s.DB, err = objstore.Open(s.URL); err != nil {
			return Stores{}, fmt.Errorf("--db: %w", err)
		}
	}
	if s3, ok := s.DB.(*objstore.S3Store); ok {
		// A missing bucket or bad credentials: say so before anything else.
		ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
		err := s3.CheckBucket(ctx)
		cancel()
		if err != nil {
			return Stores{}, fmt.Errorf("--db %s: %w", s.URL, err)
		}
	}
	if s.Cold == nil {
		if s.Cold, err = shalefs.OpenColdTier(cfg.ColdDB, cfg.ColdEndpoint); err != nil {
			return Stores{}, err
		}
	}
	if s.Cold != nil {
		if err := shalefs.CheckTierLocations(s.URL, s.Cold.URL(), cfg.ColdEndpoint == ""); err != nil {
			return Stores{}, err
		}
	}
	return s, nil
}
