package shalefs

// Activity is why a store request is made: the "activity" label of the
// I/O metrics (internal/iometrics) and what picks a read's retry policy.
type Activity uint8

const (
	ActForegroundRead  Activity = iota + 1 // RocksDB reading for a client
	ActForegroundWrite                     // RocksDB writing on a client's thread (DB open, manual flush)
	ActWAL                                 // WAL segments
	ActFlush                               // RocksDB's flush pool
	ActCompaction                          // RocksDB's compaction pool, remote compaction jobs
	ActOpen                                // opening: takeover, a reader's first listing, reads before RocksDB serves
	ActLease                               // ownership confirmations, reader leases
	ActTrash                               // deferred deletes
	ActFold                                // folding log segments
	ActCatchup                             // a reader's refresh
	ActBackground                          // anything else in the background
)

var activityNames = [...]string{
	ActForegroundRead:  "foreground_read",
	ActForegroundWrite: "foreground_write",
	ActWAL:             "wal",
	ActFlush:           "flush",
	ActCompaction:      "compaction",
	ActOpen:            "open",
	ActLease:           "lease",
	ActTrash:           "trash",
	ActFold:            "fold",
	ActCatchup:         "catchup",
	ActBackground:      "background",
}

// String is the activity's metrics label.
func (a Activity) String() string {
	if int(a) < len(activityNames) && activityNames[a] != "" {
		return activityNames[a]
	}
	return "background"
}

// activityOf reads the label the C++ FileSystem passes through the hooks
// (rocksshim.activityName); an unknown one is background work.
func activityOf(s string) Activity {
	switch s {
	case "foreground_read":
		return ActForegroundRead
	case "foreground_write":
		return ActForegroundWrite
	case "wal":
		return ActWAL
	case "flush":
		return ActFlush
	case "compaction":
		return ActCompaction
	case "open":
		return ActOpen
	}
	return ActBackground
}
