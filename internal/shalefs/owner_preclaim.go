package shalefs

import (
	"context"
	"errors"
	"fmt"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// The checks an owner makes before it claims an epoch (Open, step 0). They
// read and never write: claiming an epoch deposes the live primary, so a
// primary that cannot open the database where it was pointed must find out
// first, and must leave no trace in a location that is not its database's.

// ErrNoDatabase: Config.Existing was set and the location does not hold
// the database.
var ErrNoDatabase = errors.New("no database at the location")

// checkExisting refuses a location that does not hold a database the
// caller knows exists (existing): no CURRENT (RocksDB writes it when it
// creates the database) or no epoch claim. A primary that opened a
// database left both, so their absence means the location is not the one
// the database was created in: its endpoint, region, bucket or prefix, or
// the account the credentials belong to, changed. Starting there would
// create an empty database beside the real one, whose primary, on the old
// location, nobody fences.
func checkExisting(url string, existing, current bool, epochs []uint64) error {
	if !existing {
		return nil
	}
	var what string
	switch {
	case !current && len(epochs) == 0:
		what = "holds no database"
	case !current:
		what = fmt.Sprintf("has epoch claims (up to %d) but no CURRENT: no primary ever created the database there", protocol.HigherEpoch(epochs, 0))
	case len(epochs) == 0:
		what = "has a CURRENT but no epoch claim: it is not a Shale database"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s %s, and --existing says the database was created before; "+
		"refusing to create a new, empty database there (nothing was claimed or written). "+
		"The store's endpoint, region, bucket or prefix, or the account of the credentials, probably changed since the database was created: "+
		"point them back at the database's location", ErrNoDatabase, url, what)
}

// preClaim is what the checks before the claim found, for afterClaim.
type preClaim struct {
	tiers  protocol.TierAction
	paired bool
	tiered bool
}

// beforeClaim runs the read-only checks: the database exists where
// Config.Existing says it does (top is the location's first level, epochs
// its claims), and the cold tier records agree with the cold store given.
func (f *Owner) beforeClaim(ctx context.Context, top []objstore.ObjectInfo, epochs []uint64) (preClaim, error) {
	current := false
	for _, o := range top {
		current = current || o.Key == layout.CurrentKey
	}
	if err := checkExisting(f.store.URL(), f.cfg.Existing, current, epochs); err != nil {
		return preClaim{}, err
	}
	// A clone's origin record (read-only): a clone that cannot read it
	// deposes nobody.
	if err := f.loadOrigin(ctx); err != nil {
		return preClaim{}, err
	}
	st, err := f.readTiers(ctx, true)
	if err != nil {
		return preClaim{}, err
	}
	action, err := protocol.DecideTiers(st.rec, st.mark, f.cfg.Cold != nil, st.coldEmpty, st.paired, true)
	if err != nil {
		return preClaim{}, err
	}
	return preClaim{tiers: action, paired: st.paired, tiered: st.rec != nil}, nil
}

// afterClaim writes what the checks before the claim left to write (the
// cold tier's records), checking them again, and puts the cold store in
// use. With nothing to write it costs no request.
func (f *Owner) afterClaim(ctx context.Context, pre preClaim) error {
	if pre.tiers == protocol.TiersOK && (!pre.tiered || pre.paired) {
		f.useCold()
		return nil
	}
	return f.checkTiers(ctx, true)
}
