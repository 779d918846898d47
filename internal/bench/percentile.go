package bench

import (
	"math"
	"slices"
	"time"
)

// Percentiles in Shale are by the nearest rank: the q-quantile of n values
// is the ceil(q*n)-th smallest, a value that was measured, never an average
// of two (the median of an even count is the lower middle one). rank is
// that rule, once: Percentile applies it to samples, Histogram.Quantile to
// its buckets. `shale bench`, the benchmark programs in hack/ and the e2e
// suite all report through them.

// rank is the position, from 1, of the q-quantile among n values, within
// 1..n (0 when n is 0).
func rank(q float64, n uint64) uint64 {
	if n == 0 {
		return 0
	}
	r := math.Ceil(q * float64(n))
	switch {
	case !(r >= 1): // also NaN
		return 1
	case r >= float64(n):
		return n
	}
	return uint64(r)
}

// Percentile is the q-quantile of values by the nearest rank (0 when there
// are none). It sorts a copy: for a few thousand samples; a Histogram holds
// any number in fixed memory.
func Percentile(values []time.Duration, q float64) time.Duration {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	return s[rank(q, uint64(len(s)))-1]
}
