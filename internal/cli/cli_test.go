package cli

import (
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"65536": 65536, "64KiB": 65536, "32MiB": 32 << 20, "1GiB": 1 << 30, "10B": 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "12MB", "-1", "x", "1.5GiB", "9223372036854775807KiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	for n, want := range map[uint64]string{0: "0", 100: "100", 4096: "4KiB", 1536 << 10: "1536KiB", 8 << 30: "8GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 5 * time.Minute: "5m", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 0: "0s"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
