package protocol

import (
	"testing"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// TestSweepJob: which job directories an owner deletes (docs/fencing.md,
// remote compaction).
func TestSweepJob(t *testing.T) {
	for _, tc := range []struct {
		name     string
		job      string
		own      uint64
		inflight bool
		want     bool
	}{
		{"older owner's job", layout.FormatNumber(4) + "-a", 5, false, true},
		{"older owner's job its client still waits for", layout.FormatNumber(4) + "-a", 5, true, true},
		{"own job, finished or abandoned", layout.FormatNumber(5) + "-a", 5, false, true},
		{"own job in flight", layout.FormatNumber(5) + "-a", 5, true, false},
		{"newer owner's job: this owner is deposed", layout.FormatNumber(6) + "-a", 5, false, false},
		{"not a job name", "junk", 5, false, false},
	} {
		if got := SweepJob(tc.job, tc.own, tc.inflight); got != tc.want {
			t.Errorf("%s: SweepJob = %v, want %v", tc.name, got, tc.want)
		}
	}
}
