package backup

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Which archived WALs a prune takes (RFC 0011 step 23a): a name goes
// whole, only when every version is finished, readable and ends at or
// below the window's start.
func TestPruneArchive(t *testing.T) {
	v := func(name string, e uint64, finished, readable bool, last uint64) ArchivedLog {
		return ArchivedLog{Ref: layout.VersionRef{Name: name, Epoch: e}, Finished: finished, Readable: readable, Last: last}
	}
	const s0 = 100
	for _, tc := range []struct {
		name string
		logs []ArchivedLog
		want []string // name/epoch
	}{
		{"nothing archived", nil, nil},
		{"below the window's start: goes", []ArchivedLog{v("000005.log", 1, true, true, 60)}, []string{"000005.log/1"}},
		{"ending at the start exactly: goes (the base holds it)", []ArchivedLog{v("000005.log", 1, true, true, s0)}, []string{"000005.log/1"}},
		{"one batch above the start: kept (a restore from the first base replays it)", []ArchivedLog{v("000005.log", 1, true, true, s0+1)}, nil},
		{"not finished (a live WAL, or one still being archived): kept", []ArchivedLog{v("000009.log", 2, false, true, 10)}, nil},
		{"unreadable (its head is missing in the archive): kept", []ArchivedLog{v("000005.log", 1, true, false, 0)}, nil},
		{"no batch at all: goes", []ArchivedLog{v("000006.log", 1, true, true, 0)}, []string{"000006.log/1"}},
		{"a name with a version above the start keeps all its versions", []ArchivedLog{
			v("000010.log", 1, true, true, 90), v("000010.log", 2, true, true, 120)}, nil},
		{"a name with an unfinished version keeps all its versions", []ArchivedLog{
			v("000010.log", 1, true, true, 90), v("000010.log", 2, false, true, 95)}, nil},
		{"every version below: all go", []ArchivedLog{
			v("000010.log", 1, true, true, 90), v("000010.log", 2, true, true, 95)}, []string{"000010.log/1", "000010.log/2"}},
		{"mixed names decide apart", []ArchivedLog{
			v("000004.log", 1, true, true, 40), v("000007.log", 1, true, true, 99), v("000008.log", 1, true, true, 130),
			v("000011.log", 2, false, true, 0), v("000003.log", 1, true, false, 0)}, []string{"000004.log/1", "000007.log/1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range PruneArchive(tc.logs, s0) {
				got = append(got, fmt.Sprintf("%s/%d", r.Name, r.Epoch))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("pruned %v, want %v", got, tc.want)
			}
		})
	}
}
