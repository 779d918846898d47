package compactor

import "time"

// Scheduling across databases (paper §7.2's open challenge: prioritizing
// remote compactions of many databases). The scheduler uses stride
// scheduling: every database has a virtual time, its pass, that advances
// by 1/priority each time one of its jobs starts, and a free worker takes
// the oldest job of the database with the lowest pass. Under contention a
// database therefore starts jobs in proportion to its priority, and every
// database with queued work keeps progressing: one busy database cannot
// starve the others, whatever its priority, because its pass runs ahead
// of theirs.

// MinPriority and MaxPriority bound a database's scheduling weight.
const (
	MinPriority     = 1
	MaxPriority     = 100
	DefaultPriority = 10
)

// Candidate is a database with queued jobs, as a free worker sees it.
type Candidate struct {
	DB       string
	Priority uint32
	// Pass is the database's virtual time (see above).
	Pass uint64
	// Oldest is when its oldest queued job was queued.
	Oldest time.Time
}

// Pick returns the index of the candidate whose oldest job starts next:
// the lowest pass; on a tie the higher priority, then the older job,
// then the name (so the order never depends on map iteration). -1 when
// there is none.
func Pick(cands []Candidate) int {
	best := -1
	for i, c := range cands {
		if best < 0 || before(c, cands[best]) {
			best = i
		}
	}
	return best
}

func before(a, b Candidate) bool {
	switch {
	case a.Pass != b.Pass:
		return a.Pass < b.Pass
	case a.Priority != b.Priority:
		return a.Priority > b.Priority
	case !a.Oldest.Equal(b.Oldest):
		return a.Oldest.Before(b.Oldest)
	}
	return a.DB < b.DB
}

// stride is how far a database's pass advances per started job: integer
// arithmetic, so the order is the same on every machine.
func stride(priority uint32) uint64 {
	return strideUnit / uint64(clampPriority(priority))
}

// strideUnit is the pass one job of priority 1 costs.
const strideUnit = 1 << 32

// Activate is the pass of a database that had nothing queued or running
// and now has a job: it may not have saved up credit while it was idle
// (that would let it take every worker for a while), so it starts no
// lower than the lowest pass among the databases already active. With no
// other database active it keeps its pass.
func Activate(pass uint64, active []uint64) uint64 {
	if len(active) == 0 {
		return pass
	}
	floor := active[0]
	for _, p := range active[1:] {
		floor = min(floor, p)
	}
	return max(pass, floor)
}

// clampPriority maps 0 (unset) to the default and bounds the rest.
func clampPriority(p uint32) uint32 {
	switch {
	case p == 0:
		return DefaultPriority
	case p > MaxPriority:
		return MaxPriority
	}
	return p
}
