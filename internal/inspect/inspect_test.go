package inspect

import (
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs"
)

func TestPrintFence(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		st   shalefs.FenceStatus
		want string
	}{
		{shalefs.FenceStatus{}, "epoch:     0 (no owner has opened file:///srv/db yet)\n"},
		{shalefs.FenceStatus{Epoch: 3, TakenAt: now.Add(-90 * time.Second), Owner: "host pid 7"},
			"epoch:     3\ntaken at:  2026-05-01T11:58:30Z (1m30s ago)\nowner:     host pid 7\nstate:     held (an owner may be serving; a new owner must use a higher epoch)\n"},
		{shalefs.FenceStatus{Epoch: 4, TakenAt: now, Owner: "host pid 8", Released: true},
			"epoch:     4\ntaken at:  2026-05-01T12:00:00Z (0s ago)\nowner:     host pid 8\nstate:     released (the owner shut down cleanly)\n"},
	} {
		var b strings.Builder
		(&Fence{URL: "file:///srv/db", Status: tc.st}).Print(&b, now)
		if b.String() != tc.want {
			t.Errorf("epoch %d:\n%s\nwant\n%s", tc.st.Epoch, b.String(), tc.want)
		}
	}
}

func TestPrintTiers(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	st := &shalefs.TierStatus{
		Tiers: []shalefs.TierReport{{Tier: "hot", Location: "s3://hot/db", Files: 3, Bytes: 3 << 20}, {Tier: "cold", Files: 0, Bytes: 0}},
	}
	var b strings.Builder
	PrintTiers(&b, st, now)
	want := "TIER  FILES  BYTES    LOCATION\nhot   3      3.0 MiB  s3://hot/db\ncold  0      0 B      (none: start the primary with --cold-db and --cold-after)\n\ncold share:       0.0% of table bytes\noldest hot data:  - (no hot table)\n"
	if b.String() != want {
		t.Errorf("%q\nwant\n%q", b.String(), want)
	}
	st.ColdFraction, st.OldestHotData, st.OldestHotTable = 0.25, now.Add(-time.Hour), "000012.sst"
	b.Reset()
	PrintTiers(&b, st, now)
	if !strings.Contains(b.String(), "cold share:       25.0% of table bytes\noldest hot data:  written 1h0m0s ago (2026-05-01T11:00:00Z, in 000012.sst)\n") {
		t.Errorf("%s", b.String())
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB", 5 << 40: "5120.0 GiB"} {
		if got := byteCount(n); got != want {
			t.Errorf("byteCount(%d) = %q, want %q", n, got, want)
		}
	}
}
