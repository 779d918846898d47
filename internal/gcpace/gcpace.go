// Package gcpace paces the Go collector of a Shale server: a fixed
// headroom over a small live heap instead of a fixed ratio.
//
// A server's Go heap is small (RocksDB's memory is not Go's: a primary
// under load holds 2-3 MiB of live Go objects) while every request
// allocates a few KiB (gRPC's streams, headers, contexts), so the
// collector's cost per request is its cost per cycle over the requests
// between cycles. At GOGC=100 a cycle came every few thousand requests;
// at 400 (what servers ran at before) every 16 MiB allocated, still 5-7%
// of the instructions of a unary Put or Get. Pace keeps the heap goal at
// live + Headroom while the live heap is small (GOGC up to 1600, a cycle
// every 64 MiB allocated) and returns to GOGC=400 as it grows, so a large
// live heap (a big Load or Write in flight) never gets a goal of many
// times itself.
package gcpace

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Headroom is how far the Go heap may grow over the live heap before a
// collection, while the live heap is under Headroom/MinPercent*100.
const Headroom = 64 << 20

// MinPercent and MaxPercent bound the GOGC Pace sets. MaxPercent keeps
// Go's own minimum heap goal (4 MiB × GOGC/100) within Headroom.
const (
	MinPercent = 400
	MaxPercent = Headroom / (4 << 20) * 100
)

// Percent is the GOGC for a live heap of live bytes: Headroom over it,
// within [MinPercent, MaxPercent].
func Percent(live uint64) int {
	if live == 0 {
		return MaxPercent
	}
	return int(min(max(Headroom*100/live, MinPercent), MaxPercent))
}

// retune says whether to move GOGC from cur to want: not for a change
// under an eighth, so that a live heap wavering by a few objects does not
// reset the collector's pacing every cycle.
func retune(cur, want int) bool {
	d := cur - want
	if d < 0 {
		d = -d
	}
	return d*8 > cur
}

var (
	once   sync.Once
	active *pacer // Pace's, once started
)

// Pace sets GOGC from the live heap after every collection, unless GOGC is
// set in the environment (then the runtime's own pacing, as asked). Call
// once, early; later calls do nothing.
func Pace() {
	if os.Getenv("GOGC") != "" {
		return
	}
	once.Do(func() {
		active = &pacer{cur: MaxPercent, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		debug.SetGCPercent(active.cur)
		active.arm()
	})
}

type pacer struct {
	mu     sync.Mutex
	cur    int
	sample []metrics.Sample
}

// arm registers a cleanup on a new unreachable object: it runs after the
// next collection, adjusts GOGC and arms again.
func (p *pacer) arm() {
	sentinel := new([32]byte) // not tiny-allocated: freed by the next cycle
	runtime.AddCleanup(sentinel, func(p *pacer) { p.adjust(); p.arm() }, p)
}

func (p *pacer) adjust() {
	p.mu.Lock()
	defer p.mu.Unlock()
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if want := Percent(p.sample[0].Value.Uint64()); retune(p.cur, want) {
		debug.SetGCPercent(want)
		p.cur = want
	}
}
