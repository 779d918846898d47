package main

import (
	"math"
	"math/bits"
	"time"
)

// latencyHist is a histogram of durations in log-linear buckets, in the
// manner of HDR histograms: values below 2*histSub nanoseconds have a
// bucket each, and every power of two above is split into histSub equal
// buckets, so a bucket is less than 1/histSub (1.6%) of its values wide.
// Its memory is fixed (histBuckets counters), however long the run; min,
// max and the sum are exact.
type latencyHist struct {
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

func (h *latencyHist) record(d time.Duration) {
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

func (h *latencyHist) merge(o *latencyHist) {
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

// quantile is the value at or below which a fraction q of the recorded
// values lie: the middle of the bucket holding the ceil(q*n)-th smallest
// value, kept within the exact min and max (which the smallest and the
// largest are).
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	switch {
	case rank <= 1:
		return h.min
	case rank >= h.n:
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			v := time.Duration(lo + (hi-lo)/2)
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

func (h *latencyHist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
