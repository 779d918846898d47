package bench

import (
	"bytes"
	"compress/flate"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Quantile is the nearest rank: the ceil(q*n)-th smallest value, exact up
// to 127 ns and the middle of its bucket (under 1.6% wide) above; q at or
// below the first rank is the exact min, at or above the last the exact
// max.
func TestHistogramQuantile(t *testing.T) {
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
	}{
		{"empty", nil, 0.5, 0},
		{"one value", []time.Duration{7 * time.Millisecond}, 0.99, 7 * time.Millisecond},
		{"p0 is the min", []time.Duration{4, 3, 2, 1}, 0, 1},
		{"p25 of 4: rank 1", []time.Duration{4, 3, 2, 1}, 0.25, 1},
		{"p50 of 4: rank 2, not the mean of the middle two", []time.Duration{4, 3, 2, 1}, 0.5, 2},
		{"p75 of 4: rank 3", []time.Duration{4, 3, 2, 1}, 0.75, 3},
		{"p99 of 4: rank 4, the max", []time.Duration{4, 3, 2, 1}, 0.99, 4},
		{"p50 of 1..100", ns(1, 100), 0.5, 50},
		{"p90 of 1..100", ns(1, 100), 0.9, 90},
		{"p99 of 1..100", ns(1, 100), 0.99, 99},
		{"p99.9 of 1..100: rank 100", ns(1, 100), 0.999, 100},
		{"p100 is the max", ns(1, 100), 1, 100},
		{"negative values count as 0", []time.Duration{-5, 10}, 0.5, 0},
		// 500 ns lies in the bucket [500, 503]: its middle.
		{"p50 of 1..1000: the bucket's middle", ns(1, 1000), 0.5, 501},
		// The bucket of 1 ms is [999424, 1007615] ns: its middle.
		{"p99 of 99 x 1ms and 1s", append(many(time.Millisecond, 99), time.Second), 0.99, 1003519},
		{"p99.9 of 99 x 1ms and 1s: the max", append(many(time.Millisecond, 99), time.Second), 0.999, time.Second},
		{"p50 kept within the exact min and max", many(time.Millisecond, 10), 0.5, time.Millisecond},
	} {
		var h Histogram
		for _, v := range tc.values {
			h.Record(v)
		}
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("%s: Quantile(%g) = %d ns, want %d ns", tc.name, tc.q, got, tc.want)
		}
		if h.Count() != uint64(len(tc.values)) {
			t.Errorf("%s: Count %d, want %d", tc.name, h.Count(), len(tc.values))
		}
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
