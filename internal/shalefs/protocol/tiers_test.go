package protocol

import (
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func TestDecideTiers(t *testing.T) {
	rec := &layout.TierRecord{ID: "a", Cold: "s3://cold/db"}
	mine := &layout.ColdMarker{ID: "a", Hot: "s3://hot/db"}
	other := &layout.ColdMarker{ID: "b", Hot: "s3://hot/other"}
	for _, tc := range []struct {
		name            string
		rec             *layout.TierRecord
		mark            *layout.ColdMarker
		haveCold, empty bool
		owner           bool
		want            TierAction
		err             string
	}{
		{"no tiering", nil, nil, false, false, true, TiersOK, ""},
		{"new cold tier", nil, nil, true, true, true, TiersCreate, ""},
		{"new cold tier, location not empty", nil, nil, true, false, true, 0, "holds objects but no Shale cold tier"},
		{"tiered, cold given", rec, mine, true, false, true, TiersOK, ""},
		{"tiered, cold missing", rec, nil, false, false, true, 0, "pass --cold-db s3://cold/db"},
		{"reader, tiered, cold missing", rec, nil, false, false, false, 0, "pass --cold-db s3://cold/db"},
		{"another database's cold tier", rec, other, true, false, true, 0, "cold tier of another database (whose hot tier is s3://hot/other)"},
		{"another database's, new here", nil, other, true, false, true, 0, "cold tier of another database"},
		{"record without marker: finish it", rec, nil, true, true, true, TiersCreateMark, ""},
		{"record without marker, location used", rec, nil, true, false, true, 0, "not this database's cold tier"},
		{"reader: record without marker", rec, nil, true, true, false, 0, "not this database's cold tier"},
		{"reader before the primary recorded it", nil, nil, true, true, false, TiersIgnoreCold, ""},
		{"reader, tiered", rec, mine, true, false, false, TiersOK, ""},
		{"reader, another database's", rec, other, true, false, false, 0, "another database"},
	} {
		got, err := DecideTiers(tc.rec, tc.mark, tc.haveCold, tc.empty, false, tc.owner)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: DecideTiers = %v, %v; want error containing %q", tc.name, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: DecideTiers = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	// Paired before (_shale/tiers-paired): a cold location without the
	// marker is a moved or emptied cold tier, never one to mark.
	for _, empty := range []bool{true, false} {
		if got, err := DecideTiers(rec, nil, true, empty, true, true); err == nil || !strings.Contains(err.Error(), "moved or emptied") || !strings.Contains(err.Error(), "s3://cold/db") {
			t.Errorf("paired, marker missing (empty %v): DecideTiers = %v, %v; want a refusal naming the recorded location", empty, got, err)
		}
	}
	if got, err := DecideTiers(rec, mine, true, false, true, true); err != nil || got != TiersOK {
		t.Errorf("paired, marker present: DecideTiers = %v, %v; want TiersOK", got, err)
	}
}
