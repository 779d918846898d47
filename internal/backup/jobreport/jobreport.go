// Package jobreport is what a `shale backup` command run by the operator
// reports through its Pod's termination message (--report): one JSON
// object, read back by the operator (pure Go: the operator does not link
// RocksDB).
package jobreport

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Report is a backup's, a verify's or a restore's outcome.
type Report struct {
	// Command: create, verify, restore, delete or prune.
	Command string `json:"command"`
	ID      string `json:"id,omitempty"`
	// Bytes and Objects the backup names; CopiedBytes and CopiedObjects
	// what this run copied.
	Bytes         int64 `json:"bytes,omitempty"`
	Objects       int64 `json:"objects,omitempty"`
	CopiedBytes   int64 `json:"copiedBytes,omitempty"`
	CopiedObjects int64 `json:"copiedObjects,omitempty"`
	// Sequence and Time of the backup's checkpoint.
	Sequence uint64    `json:"sequence,omitempty"`
	Time     time.Time `json:"time,omitzero"`
	// Completed is when the backup was published.
	Completed time.Time `json:"completed,omitzero"`
	// Keys a verify counted.
	Keys int64 `json:"keys,omitempty"`
	// SourceKeys: the source checkpoint's count in the backup's manifest
	// (create --count-source-keys), which a verify compared Keys with;
	// nil: none recorded, not compared.
	SourceKeys *int64 `json:"sourceKeys,omitempty"`
	// Deleted: the backups a prune deleted.
	Deleted []string `json:"deleted,omitempty"`
}

// MaxSize is the kubelet's limit on a termination message.
const MaxSize = 4096

// Write writes r to path ("" writes nothing).
func Write(path string, r Report) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > MaxSize {
		r.Deleted = nil
		b, _ = json.Marshal(r)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--report %s: %w", path, err)
	}
	return nil
}

// Parse reads a termination message.
func Parse(msg string) (Report, error) {
	var r Report
	if err := json.Unmarshal([]byte(msg), &r); err != nil {
		return r, fmt.Errorf("the Job's termination message is not its report (%v): %.200q", err, msg)
	}
	return r, nil
}
