package protocol

import "github.com/shale-rocks/shale/internal/shalefs/layout"

// SweepJob decides whether the owner of epoch own deletes a job directory
// of remote compaction: a job of an older owner can never be installed by
// this one (it installs only its own jobs) nor by its submitter (deposed:
// its MANIFEST is sealed); a job of this owner that is neither running nor
// being installed (inflight) is a leftover (fell back to local, or
// finished by a lost attempt); a job of a newer owner is none of this
// owner's business (it is deposed). Unrecognized names are left alone.
func SweepJob(job string, own uint64, inflight bool) bool {
	e, ok := layout.JobEpoch(job)
	switch {
	case !ok:
		return false
	case e < own:
		return true
	case e == own:
		return !inflight
	}
	return false
}
