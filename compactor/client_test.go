package compactor

import (
	"strings"
	"testing"
)

// TestCheckOutputs: a result is installed only when RocksDB's result, the
// worker's report and the store agree on every output (a rename that
// fails after Wait said success would stop the database).
func TestCheckOutputs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		result   []string
		reported map[string]int64
		stored   map[string]int64
		want     string // "" = accepted
	}{
		{"agree", []string{"000012.sst", "000013.sst"}, map[string]int64{"000012.sst": 10, "000013.sst": 20}, map[string]int64{"000012.sst": 10, "000013.sst": 20}, ""},
		{"no outputs (every key deleted)", nil, map[string]int64{}, map[string]int64{}, ""},
		{"extra object in the store is ignored", []string{"000012.sst"}, map[string]int64{"000012.sst": 10}, map[string]int64{"000012.sst": 10, "LOG": 5}, ""},
		{"missing in the store", []string{"000012.sst"}, map[string]int64{"000012.sst": 10}, map[string]int64{}, "not in the store"},
		{"short in the store", []string{"000012.sst"}, map[string]int64{"000012.sst": 10}, map[string]int64{"000012.sst": 9}, "has 9 bytes in the store, the worker reported 10"},
		{"unreported output", []string{"000012.sst", "000013.sst"}, map[string]int64{"000012.sst": 10, "000014.sst": 1}, map[string]int64{"000012.sst": 10}, "did not report"},
		{"count differs", []string{"000012.sst"}, map[string]int64{"000012.sst": 10, "000013.sst": 1}, map[string]int64{"000012.sst": 10}, "names 1 outputs, the worker reported 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkOutputs(tc.result, tc.reported, tc.stored)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
