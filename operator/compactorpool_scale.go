package operator

import "time"

// scaleInput is what the worker count is decided from.
type scaleInput struct {
	min, max    int32
	concurrency int32 // jobs per worker
	// known: the scheduler's Stats were read; queued and running are its
	// counts.
	known           bool
	queued, running int64
	current         int32 // the worker Deployment's replicas now
	lastScale       time.Time
	scaleDownDelay  time.Duration
	now             time.Time
}

// desiredWorkers decides the number of workers: one slot per queued or
// running job, within [min, max],
// up at once and down only once scaleDownDelay has passed since the last
// change (jobs come in bursts: a level-0 compaction is often followed by
// more within a minute). Without Stats (the scheduler is down or not yet
// up) it changes nothing beyond the bounds: guessing low would kill the
// workers of running jobs, guessing high wastes machines.
func desiredWorkers(in scaleInput) int32 {
	clamp := func(n int32) int32 { return max(in.min, min(in.max, n)) }
	if !in.known {
		return clamp(in.current)
	}
	c := int64(max(in.concurrency, 1))
	need64 := (in.queued + in.running + c - 1) / c
	need := clamp(int32(min(need64, int64(in.max))))
	switch {
	case need > in.current:
		return need
	case need < in.current && in.now.Sub(in.lastScale) >= in.scaleDownDelay:
		return need
	}
	return clamp(in.current)
}
