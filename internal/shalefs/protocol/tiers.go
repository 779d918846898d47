package protocol

import (
	"errors"
	"fmt"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TierAction is what an opener must do next about the tier records.
type TierAction int

const (
	// TiersOK: the records agree with the stores given.
	TiersOK TierAction = iota
	// TiersCreate: write _shale/tiers, then the cold marker.
	TiersCreate
	// TiersCreateMark: write the cold marker of an existing record.
	TiersCreateMark
	// TiersIgnoreCold: a reader given a cold store for a database that has
	// no cold tier yet leaves it unused (and checks again later).
	TiersIgnoreCold
)

// DecideTiers checks the tier records of a database against the cold store
// an opener was given (haveCold). rec and mark are nil when missing;
// coldEmpty says the cold location holds no object at all; paired says
// _shale/tiers-paired exists (read by owners only); owner is false for
// readers, which write nothing. An error names the problem and the flag
// that fixes it.
func DecideTiers(rec *layout.TierRecord, mark *layout.ColdMarker, haveCold, coldEmpty, paired, owner bool) (TierAction, error) {
	switch {
	case rec == nil && !haveCold:
		return TiersOK, nil
	case rec != nil && !haveCold:
		return 0, fmt.Errorf("the database keeps cold tables in %s: pass --cold-db %s (and --cold-endpoint if that store has its own endpoint)", rec.Cold, rec.Cold)
	case mark != nil && (rec == nil || mark.ID != rec.ID):
		return 0, fmt.Errorf("--cold-db: the cold location is the cold tier of another database (whose hot tier is %s); give each database a cold location of its own", mark.Hot)
	case rec == nil && !owner:
		return TiersIgnoreCold, nil
	case rec == nil && !coldEmpty:
		return 0, errors.New("--cold-db: the cold location holds objects but no Shale cold tier; choose an empty location")
	case rec == nil:
		return TiersCreate, nil
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
		return TiersCreateMark, nil
	}
	return TiersOK, nil
}
