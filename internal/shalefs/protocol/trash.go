package protocol

import "time"

// The trash rules: when an owner may physically delete a file it trashed,
// and how reader leases hold that back. Every duration here is on the
// owner's clock's wait reading, which never runs faster than real time
// (shalefs/clock.go): another machine's wall clock, or a step of this
// one's, can never shorten a wait.

// TrashDue reports whether a trash marker is due for a delete pass, age
// after this owner first saw it: once the delete grace is over, until the
// pass that deleted its data and (for a log) its seals removed it. A log
// whose data is gone waits for its seals (SealsDue); sealsAfter < 0 means
// its seals never go.
func TrashDue(age, grace time.Duration, dataGone bool, sealsAfter time.Duration) bool {
	return age >= grace && !(dataGone && (sealsAfter < 0 || age < sealsAfter))
}

// SealsAfter is how long after its trash marker a log version may lose its
// seals, given the AckFresh of the owner that wrote it (from its claim; 0
// when the claim does not say): 3×AckFresh, never less than the delete
// grace. That owner acknowledges no write unless it confirmed its
// ownership within AckFresh, so once a seal is gone, a segment it puts in
// the freed slot is never acknowledged without a confirmation that finds
// it deposed. Negative (never) when AckFresh is unknown: the seals stay.
func SealsAfter(grace, ackFresh time.Duration) time.Duration {
	if ackFresh <= 0 {
		return -1
	}
	return max(grace, 3*ackFresh)
}

// SealsDue reports whether a trashed log's seals (and its marker) may go,
// age after the marker was first seen.
func SealsDue(age, sealsAfter time.Duration) bool {
	return sealsAfter >= 0 && age >= sealsAfter
}

// LeaseProtects reports whether a reader lease still protects the file
// versions it names: it changed (was renewed) less than its TTL ago, as
// this owner saw it (changed: when this owner saw it change). Liveness is
// judged without comparing clocks across machines.
func LeaseProtects(now, changed, ttl time.Duration) bool {
	return now-changed < ttl
}

// ReaderLeaseFresh reports whether a reader renewed its lease within its
// TTL (on its clock's lease reading): only then has the owner deleted
// nothing its view uses, and it may serve reads.
func ReaderLeaseFresh(now, renewed, ttl time.Duration) bool {
	return now-renewed < ttl
}

// RenewReaderLease reports whether a reader writes its lease again: when
// the files of its view changed, or a third of its TTL passed since the
// last renewal.
func RenewReaderLease(filesChanged bool, now, renewed, ttl time.Duration) bool {
	return filesChanged || now-renewed >= ttl/3
}
