package shalefs

import (
	"os"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Hints for readers. An owner announces, with each notification (KV.Watch),
// what it has stored of the logs it writes; a reader driven by the
// notification fetches exactly the segments it lacks, by key, instead of
// listing the store (RefreshHinted). A hint only saves requests: the data
// still comes from the store, and when a hint falls short (a segment
// folded away, an unknown epoch, a MANIFEST CURRENT does not name yet) the
// reader lists the store as without one.

// LogTail is what an owner has stored of one log it writes.
type LogTail struct {
	Name        string
	Epoch       uint64
	LastSegment uint64 // highest segment slot stored
	Bytes       int64
}

// Hint is what an owner announced: its epoch, its logs, and the MANIFEST
// its CURRENT names.
type Hint struct {
	Epoch           uint64
	Logs            []LogTail
	CurrentManifest string
}

// Tails returns what this owner has stored of the logs it writes, and the
// MANIFEST its CURRENT names in the store. A log whose segment is being
// uploaded right now is left out: the notification that follows the
// upload announces it.
func (f *Owner) Tails() ([]LogTail, string) {
	f.mu.Lock()
	type own struct {
		name string
		st   *file
	}
	var logs []own
	for name, st := range f.files {
		if st.kind == layout.KindLog && st.ownLog && name != layout.CatalogLog { // the catalog is Shale's: readers replay it when asked
			logs = append(logs, own{name, st})
		}
	}
	f.mu.Unlock()
	var tails []LogTail
	for _, l := range logs {
		if !l.st.mu.TryLock() {
			continue
		}
		if l.st.nextSeq > 1 {
			tails = append(tails, LogTail{Name: l.name, Epoch: l.st.epoch, LastSegment: l.st.nextSeq - 1, Bytes: l.st.size})
		}
		l.st.mu.Unlock()
	}
	if m, ok := f.storedCurrent.Load().(string); ok {
		return tails, m
	}
	// Not replaced since the takeover: the local copy is the store's.
	cur, _ := os.ReadFile(f.localPath("CURRENT"))
	return tails, manifestOf(layout.CurrentContent(cur))
}
