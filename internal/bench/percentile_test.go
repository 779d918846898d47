package bench

import (
	"bytes"
	"compress/flate"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Percentiles are by the nearest rank: the ceil(q*n)-th smallest value, a
// measured one. Percentile gives it exactly; a Histogram exactly up to
// 127 ns and as the middle of its bucket (under 1.6% wide) above, but q at
// or below the first rank is the exact min and at or above the last the
// exact max.
func TestPercentile(t *testing.T) {
	ns := func(from, to int) []time.Duration { // from..to nanoseconds
		var v []time.Duration
		for i := from; i <= to; i++ {
			v = append(v, time.Duration(i))
		}
		return v
	}
	many := func(d time.Duration, n int) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }
	for _, tc := range []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
		hist   time.Duration // the Histogram's, when not want
	}{
		{name: "empty", q: 0.5},
		{name: "one value", values: []time.Duration{7 * time.Millisecond}, q: 0.99, want: 7 * time.Millisecond},
		{name: "p0 is the min", values: []time.Duration{4, 3, 2, 1}, want: 1},
		{name: "p25 of 4: rank 1", values: []time.Duration{4, 3, 2, 1}, q: 0.25, want: 1},
		{name: "p50 of 4: rank 2, the lower middle, not the mean of two", values: []time.Duration{4, 3, 2, 1}, q: 0.5, want: 2},
		{name: "p50 of 5: the middle", values: []time.Duration{50, 10, 40, 20, 30}, q: 0.5, want: 30},
		{name: "p75 of 4: rank 3", values: []time.Duration{4, 3, 2, 1}, q: 0.75, want: 3},
		{name: "p99 of 4: rank 4, the max", values: []time.Duration{4, 3, 2, 1}, q: 0.99, want: 4},
		{name: "p50 of 1..100", values: ns(1, 100), q: 0.5, want: 50},
		{name: "p90 of 1..100", values: ns(1, 100), q: 0.9, want: 90},
		{name: "p99 of 1..100", values: ns(1, 100), q: 0.99, want: 99},
		{name: "p99.9 of 1..100: rank 100", values: ns(1, 100), q: 0.999, want: 100},
		{name: "p100 is the max", values: ns(1, 100), q: 1, want: 100},
		{name: "q above 1 is the max", values: ns(1, 100), q: 2, want: 100},
		{name: "q below 0 is the min", values: ns(1, 100), q: -1, want: 1},
		{name: "duplicates", values: []time.Duration{5, 5, 5, 9}, q: 0.75, want: 5},
		// 500 ns lies in the bucket [500, 503]: its middle.
		{name: "p50 of 1..1000", values: ns(1, 1000), q: 0.5, want: 500, hist: 501},
		// The bucket of 1 ms is [999424, 1007615] ns: its middle.
		{name: "p99 of 99 x 1ms and 1s", values: append(many(time.Millisecond, 99), time.Second), q: 0.99, want: time.Millisecond, hist: 1003519},
		{name: "p99.9 of 99 x 1ms and 1s: the max", values: append(many(time.Millisecond, 99), time.Second), q: 0.999, want: time.Second},
		{name: "p50 kept within the exact min and max", values: many(time.Millisecond, 10), q: 0.5, want: time.Millisecond},
	} {
		if got := Percentile(tc.values, tc.q); got != tc.want {
			t.Errorf("%s: Percentile(%g) = %d ns, want %d ns", tc.name, tc.q, got, tc.want)
		}
		var h Histogram
		for _, v := range tc.values {
			h.Record(v)
		}
		want := tc.want
		if tc.hist != 0 {
			want = tc.hist
		}
		if got := h.Quantile(tc.q); got != want {
			t.Errorf("%s: Histogram.Quantile(%g) = %d ns, want %d ns", tc.name, tc.q, got, want)
		}
		if h.Count() != uint64(len(tc.values)) {
			t.Errorf("%s: Count %d, want %d", tc.name, h.Count(), len(tc.values))
		}
	}
	// A negative duration is recorded as 0.
	var h Histogram
	h.Record(-5)
	h.Record(10)
	if h.Min() != 0 || h.Quantile(0.5) != 0 {
		t.Errorf("a negative value: min %s, p50 %s", h.Min(), h.Quantile(0.5))
	}
}

// The histogram's quantiles are within a bucket's width (under 2%) of the
// exact ones from sorted samples, and min, max and the mean are exact.
func TestHistogram(t *testing.T) {
	for i := range histBuckets {
		lo, hi := histBounds(i)
		if histIndex(lo) != i || histIndex(hi) != i || (i > 0 && histIndex(lo-1) != i-1) {
			t.Fatalf("bucket %d [%d, %d]: indexes %d %d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
	}
	if histIndex(1<<63-1) != histBuckets-1 {
		t.Fatalf("largest value in bucket %d of %d", histIndex(1<<63-1), histBuckets)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	var a, b Histogram
	var samples []time.Duration
	var sum time.Duration
	for i := range 100000 {
		// log-normal-ish: mostly around 1ms, a tail to seconds
		d := time.Duration(float64(time.Millisecond) * rng.ExpFloat64() * rng.ExpFloat64() * 3)
		samples = append(samples, d)
		sum += d
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	slices.Sort(samples)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := samples[int(q*float64(len(samples)))-1]
		got := a.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff < -0.02 || diff > 0.02 {
			t.Errorf("p%g: %s, exact %s (%.1f%% off)", q*100, got, exact, diff*100)
		}
	}
	if a.Min() != samples[0] || a.Max() != samples[len(samples)-1] || a.Quantile(1) != a.Max() || a.Mean() != sum/time.Duration(len(samples)) {
		t.Errorf("min %s max %s mean %s; want %s %s %s", a.Min(), a.Max(), a.Mean(), samples[0], samples[len(samples)-1], sum/time.Duration(len(samples)))
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram")
	}
}

// Values compress about as much as --compression-ratio says.
func TestValueCompressibility(t *testing.T) {
	size := func(ratio float64) int {
		p := newValuePool(4000, ratio, 7)
		rng := rand.New(rand.NewPCG(1, 1))
		var b bytes.Buffer
		w, _ := flate.NewWriter(&b, flate.BestSpeed)
		for range 50 {
			v := p.get(rng)
			if len(v) != 4000 {
				t.Fatalf("value of %d bytes", len(v))
			}
			w.Write(v)
		}
		w.Close()
		return b.Len()
	}
	// flate also entropy-codes the printable bytes; compare with
	// incompressible values rather than with the raw size.
	full := size(1)
	for _, ratio := range []float64{0.25, 0.5} {
		if got := float64(size(ratio)) / float64(full); got < ratio-0.1 || got > ratio+0.1 {
			t.Errorf("--compression-ratio %g: values compress to %.2f of incompressible ones", ratio, got)
		}
	}
}
