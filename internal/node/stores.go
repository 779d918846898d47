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

// bucketTimeout bounds the check that a bucket answers, retries included.
const bucketTimeout = time.Minute

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
		if err := checkBucket(s3, bucketTimeout); err != nil {
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

// checkBucket asks whether the bucket answers, again and again while the
// failure is one that may pass (the store unreachable or failing, a Pod's
// DNS not answering yet) until timeout; an answer (no such bucket, refused
// credentials) ends it at once. A node that gave up on a transient failure
// would exit, and a primary's exit is a failover to the next epoch.
func checkBucket(s3 *objstore.S3Store, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	delay := 250 * time.Millisecond
	for {
		err := s3.CheckBucket(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil: // the last attempt ran out of time
			return fmt.Errorf("no answer for %s: %w", timeout, err)
		case !objstore.IsRetryable(err):
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer for %s: %w", timeout, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 4*time.Second)
	}
}
