package bench

import (
	"math/bits"
	"time"
)

// Histogram is a histogram of durations in log-linear buckets, in the
// manner of HDR histograms: values below 2*histSub nanoseconds have a
// bucket each, and every power of two above is split into histSub equal
// buckets, so a bucket is less than 1/histSub (1.6%) of its values wide.
// Its memory is fixed (histBuckets counters), however long the run; min,
// max and the sum are exact. The zero value is empty and ready.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	min    time.Duration
	max    time.Duration
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits // buckets per power of two
	// values 0 .. 2*histSub-1 exactly, then histSub buckets for each of the
	// remaining shifts of a 63-bit value
	histBuckets = 2*histSub + (63-histSubBits-1)*histSub
)

// histIndex is the bucket of v nanoseconds.
func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1 // >= 1; v>>shift is in [histSub, 2*histSub)
	return 2*histSub + (shift-1)*histSub + int(v>>shift) - histSub
}

// histBounds is the range of values, in nanoseconds, that bucket i holds.
func histBounds(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i)
	}
	shift := (i-2*histSub)/histSub + 1
	top := uint64((i-2*histSub)%histSub + histSub)
	return top << shift, (top+1)<<shift - 1
}

// Record adds d (a negative one as 0).
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds o's values.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Quantile is the value at or below which a fraction q of the recorded
// values lie: the middle of the bucket holding the value of the nearest
// rank (percentile.go), kept within the exact min and max (which the
// smallest and the largest are). 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	r := rank(q, h.n)
	switch {
	case r == 0:
		return 0
	case r == 1:
		return h.min
	case r == h.n:
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= r {
			lo, hi := histBounds(i)
			v := time.Duration(lo + (hi-lo)/2)
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// Count is how many values were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest value recorded (0 when empty).
func (h *Histogram) Min() time.Duration { return h.min }

// Max is the largest value recorded (0 when empty).
func (h *Histogram) Max() time.Duration { return h.max }

// Mean is the values' mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
