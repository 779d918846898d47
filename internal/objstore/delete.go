package objstore

import (
	"fmt"
	"strings"
)

// maxDeleteBatch is the most keys one S3 DeleteObjects request may name;
// the file store deletes in batches of the same size under one lock.
const maxDeleteBatch = 1000

// deleteKeys checks the keys of a DeleteMany and drops repeats (S3 may
// reject a DeleteObjects request naming a key twice), keeping their order.
func deleteKeys(keys []string) ([]string, error) {
	out := make([]string, 0, len(keys))
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return nil, fmt.Errorf("delete %d keys: %w", len(keys), err)
		}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, k)
	}
	return out, nil
}

// deleteError is a DeleteMany that left keys behind.
type deleteError struct {
	where  string  // the store
	total  int     // distinct keys asked for
	failed []error // one per key whose delete failed, each naming its key
	// skipped keys were not attempted: the call stopped after a request
	// failed as a whole, or because stopped (the caller's context) ended.
	skipped int
	stopped error
}

// maxNamedKeys is how many failed keys a deleteError's message names.
const maxNamedKeys = 3

func (e *deleteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "delete from %s: %d of %d keys not deleted", e.where, len(e.failed)+e.skipped, e.total)
	for i, err := range e.failed {
		if i == maxNamedKeys {
			fmt.Fprintf(&b, "; and %d more failed", len(e.failed)-maxNamedKeys)
			break
		}
		fmt.Fprintf(&b, "; %v", err)
	}
	if e.skipped > 0 {
		fmt.Fprintf(&b, "; %d not attempted", e.skipped)
		if e.stopped != nil {
			fmt.Fprintf(&b, " (%v)", e.stopped)
		}
	}
	return b.String()
}

func (e *deleteError) Unwrap() []error {
	errs := e.failed
	if e.stopped != nil {
		errs = append(errs[:len(errs):len(errs)], e.stopped)
	}
	return errs
}

// Retryable: repeating the call may delete every key only if every failure
// may go away.
func (e *deleteError) Retryable() bool {
	for _, err := range e.Unwrap() {
		if !IsRetryable(err) {
			return false
		}
	}
	return true
}

// result is nil when nothing was left behind, else e.
func (e *deleteError) result() error {
	if len(e.failed) == 0 && e.skipped == 0 {
		return nil
	}
	return e
}
