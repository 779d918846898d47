package shalefs

import "fmt"

// The errors of the fencing protocol (docs/fencing.md). Its pure
// decisions are package protocol's; the I/O around them is in takeover.go
// and fs.go.

// ErrFenced is the permanent error of an owner whose epoch was superseded,
// or (Cause set) that stopped itself because the store and its RocksDB
// may disagree (stopOwner).
type ErrFenced struct {
	Epoch, By uint64
	Cause     string
}

func (e *ErrFenced) Error() string {
	if e.Cause != "" {
		return fmt.Sprintf("stopped: epoch %d no longer writes (%s); the next primary reopens the database from the store", e.Epoch, e.Cause)
	}
	if e.By == 0 {
		return fmt.Sprintf("fenced: epoch %d superseded by a newer owner", e.Epoch)
	}
	return fmt.Sprintf("fenced: epoch %d superseded by %d", e.Epoch, e.By)
}

// ErrOutcomeUnknown is the error of a write whose bytes reached the store
// before this owner learned it was deposed: the new owner may have listed
// them (and then it serves them) or not. The write is neither acknowledged
// nor known to have failed, so it must never be reported as fenced
// ("definitely not applied"). The owner is fenced all the same.
type ErrOutcomeUnknown struct {
	Fence *ErrFenced
}

func (e *ErrOutcomeUnknown) Error() string {
	return "write outcome unknown (it may have been applied): " + e.Fence.Error()
}

func (e *ErrOutcomeUnknown) Unwrap() error { return e.Fence }

// Fenced marks the error for the C++ side: the owner stops (IOFenced).
func (e *ErrOutcomeUnknown) Fenced() bool { return true }

// OutcomeUnknown marks the error for the KV service (UNAVAILABLE).
func (e *ErrOutcomeUnknown) OutcomeUnknown() bool { return true }
