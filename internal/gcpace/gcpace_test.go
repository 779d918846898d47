package gcpace

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, MaxPercent},
		{1 << 20, MaxPercent},  // 1 MiB: capped, Go's minimum goal stays within the headroom
		{4 << 20, MaxPercent},  // 4 MiB: 64 MiB over it is GOGC=1600
		{8 << 20, 800},         // 8 MiB: 64 MiB over it
		{16 << 20, MinPercent}, // 16 MiB: 64 MiB over it is GOGC=400
		{1 << 30, MinPercent},  // a large live heap: never under 400, never many times itself
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
	if MaxPercent != 1600 {
		t.Errorf("MaxPercent = %d, want 1600 (Go's minimum goal, 4 MiB × GOGC/100, = Headroom)", MaxPercent)
	}
}

func TestRetune(t *testing.T) {
	for _, c := range []struct {
		cur, want int
		move      bool
	}{
		{1600, 1600, false},
		{1600, 1500, false}, // under an eighth
		{1600, 1300, true},
		{400, 440, false},
		{400, 800, true},
	} {
		if got := retune(c.cur, c.want); got != c.move {
			t.Errorf("retune(%d, %d) = %v, want %v", c.cur, c.want, got, c.move)
		}
	}
}

// gogc is the collector's current GOGC.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// collectUntil runs collections until GOGC is want (the pacer adjusts
// after each cycle, on the cleanup goroutine).
func collectUntil(t *testing.T, want int) {
	t.Helper()
	for i := 0; i < 10000 && gogc() != want; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if got := gogc(); got != want {
		t.Fatalf("GOGC = %d after collections, want %d", got, want)
	}
}

// A server's collector runs at GOGC=1600 over a small live heap, drops to
// 400 while a large one is live, and comes back when it is freed; GOGC
// set in the environment is left alone.
func TestPace(t *testing.T) {
	t.Setenv("GOGC", "")
	Pace()
	collectUntil(t, MaxPercent)
	live := make([][]byte, 64)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	collectUntil(t, MinPercent)
	runtime.KeepAlive(live)
	live = nil
	collectUntil(t, MaxPercent)
}
