package shalefs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// What a refresh costs in store requests once the reader is open: nothing
// new (the owner record, the tails of the WAL and the MANIFEST, the top
// level), one synced write (plus its segment), and a flush (a new WAL, new
// tables, MANIFEST edits). docs/secondary.md quotes these figures.
func TestReaderRefreshCost(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		base, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		p := startTrapPrimaryGrace(t, base, 1, 0, time.Hour)
		p.put("a", 50)
		p.flush()
		p.put("b", 10)
		counting := storetest.NewCounting(base)
		c := filepath.Join(t.TempDir(), "secondary")
		r, err := OpenReader(context.Background(), Config{Store: counting, CacheDir: c, ReaderTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		d := openSecondary(t, r, c)
		open := counting.Summary()
		// The first catch-up renews nothing (the lease is fresh) but may
		// still fetch what RocksDB's open did not need.
		if err := catchUpOnce(r, d); err != nil {
			t.Fatal(err)
		}
		cost := func(what string, max map[string]int, act func()) {
			t.Helper()
			act()
			before, n := counting.Counts(), counting.Total()
			if err := catchUpOnce(r, d); err != nil {
				t.Fatal(err)
			}
			after := counting.Counts()
			var parts []string
			total := 0
			for _, op := range []string{"get", "list", "put", "stat", "delete"} {
				k := after[op] - before[op]
				total += k
				if k > 0 {
					parts = append(parts, fmt.Sprintf("%s=%d", op, k))
				}
				if k > max[op] {
					t.Errorf("%s: %d %s requests, want at most %d: %v", what, k, op, max[op], counting.Requests(n))
				}
			}
			t.Logf("%s: a catch-up after %s costs %d requests (%s)", loc.Name, what, total, strings.Join(parts, " "))
		}
		cost("nothing new", map[string]int{"get": 1, "list": 3}, func() {})
		cost("one synced write", map[string]int{"get": 2, "list": 3}, func() { p.put("c", 1) })
		cost("ten synced writes", map[string]int{"get": 11, "list": 3}, func() { p.put("d", 10) })
		// A flush: a new WAL and table, MANIFEST edits, the old WAL trashed.
		cost("a flush", map[string]int{"get": 8, "list": 8, "put": 1}, func() { p.flush(); p.put("e", 1) })
		// The next two catch-ups list the trash (a MANIFEST edit is
		// followed by deletes), find the old WAL's marker and drop it from
		// the view and the lease.
		cost("nothing new after the flush", map[string]int{"get": 1, "list": 4, "put": 1}, func() {})
		cost("nothing new after that", map[string]int{"get": 1, "list": 4}, func() {})
		cost("nothing new, later", map[string]int{"get": 1, "list": 3}, func() {})
		checkSecondary(t, p, d)
		t.Logf("%s: opening the reader and RocksDB cost %s", loc.Name, open)
	})
}

// hintOf is what the owner would announce now.
func hintOf(f *Owner) *Hint {
	logs, current := f.Tails()
	return &Hint{Epoch: f.Epoch(), Logs: logs, CurrentManifest: current}
}

// A refresh guided by the owner's hint fetches just the new segments: one
// GET per new segment and no LIST for synced writes; the top level after a
// MANIFEST edit. It follows folds (the hint falls short and the reader
// lists), flushes, MANIFEST switches and a takeover (a hint of an epoch it
// does not know yet), losing nothing.
func TestReaderRefreshHinted(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		base, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		p := startTrapPrimaryGrace(t, base, 1, 0, time.Hour)
		p.put("a", 50)
		p.flush()
		p.put("b", 10)
		counting := storetest.NewCounting(base)
		c := filepath.Join(t.TempDir(), "secondary")
		r, err := OpenReader(context.Background(), Config{Store: counting, CacheDir: c, ReaderTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		d := openSecondary(t, r, c)
		if err := catchUpOnce(r, d); err != nil {
			t.Fatal(err)
		}
		hinted := func(what string, maxOps map[string]int, act func()) {
			t.Helper()
			act()
			before, n := counting.Counts(), counting.Total()
			if err := r.RefreshHinted(context.Background(), hintOf(p.fs)); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if err := d.TryCatchUp(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkSecondary(t, p, d)
			after := counting.Counts()
			var parts []string
			for _, op := range []string{"get", "list", "put", "stat", "delete"} {
				k := after[op] - before[op]
				if k > 0 {
					parts = append(parts, fmt.Sprintf("%s=%d", op, k))
				}
				if m, ok := maxOps[op]; ok && k > m {
					t.Errorf("%s: %d %s requests, want at most %d: %v", what, k, op, m, counting.Requests(n))
				}
			}
			t.Logf("%s: a hinted catch-up after %s: %s", loc.Name, what, strings.Join(parts, " "))
		}
		hinted("nothing new", map[string]int{"get": 0, "list": 0}, func() {})
		hinted("one synced write", map[string]int{"get": 1, "list": 0}, func() { p.put("c", 1) })
		hinted("ten synced writes", map[string]int{"get": 10, "list": 0}, func() { p.put("d", 10) })
		hinted("a flush", map[string]int{"list": 1}, func() { p.flush(); p.put("e", 1) })
		hinted("a compaction", map[string]int{}, func() { p.put("a0", 5); p.flush(); p.db.Compact(nil, nil); p.put("f", 1) })
		hinted("300 synced writes (folded)", map[string]int{}, func() { p.put("g", 300) })
		hinted("more synced writes", map[string]int{}, func() { p.put("h", 20) })

		// A takeover: the new owner's hint names an epoch the reader has
		// not seen open; it lists instead, and follows.
		want, gone := p.want, p.gone
		p.stop()
		p = startTrapPrimaryGrace(t, base, 2, 0, time.Hour)
		p.want, p.gone = want, gone
		p.put("i", 10)
		hinted("a takeover", map[string]int{}, func() {})
		hinted("a write after the takeover", map[string]int{"get": 1, "list": 0}, func() { p.put("j", 1) })
	})
}

// The owner folds segments the hint names and deletes them before the
// reader fetches them: the hint falls short, the reader lists the store
// and finds the fold, and loses nothing.
func TestReaderHintFoldedAway(t *testing.T) {
	base, err := objstore.Open("file://" + filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "primary")
	f1, err := Open(context.Background(), Config{Store: base, CacheDir: cache, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: 4})
	if err != nil {
		t.Fatal(err)
	}
	d1 := openDB(t, f1, cache)
	p := &trapPrimary{t: t, store: base, fs: f1, db: d1, want: map[string]string{}, gone: map[string]bool{}}
	t.Cleanup(p.stop)
	p.put("a", 3)
	counting := storetest.NewCounting(base)
	c := filepath.Join(t.TempDir(), "secondary")
	r, err := OpenReader(context.Background(), Config{Store: counting, CacheDir: c})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	d := openSecondary(t, r, c)
	if err := catchUpOnce(r, d); err != nil {
		t.Fatal(err)
	}
	checkSecondary(t, p, d)

	p.put("b", 12)
	// Tails skips a log whose lock is busy (a fold or a sync under way:
	// the hint may fall short by design); take the hint once it names
	// the WAL, as the next announcement would.
	var h *Hint
	var wal LogTail
	for deadline := time.Now().Add(time.Minute); wal.Name == ""; {
		h = hintOf(f1)
		for _, l := range h.Logs {
			if strings.HasSuffix(l.Name, ".log") {
				wal = l
			}
		}
		if wal.Name == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no hint names the WAL in a minute: %+v", h.Logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Wait until the segments after the reader's are folded and deleted.
	deadline := time.Now().Add(time.Minute)
	for {
		data, folds, _ := versionObjects(t, base, wal.Name, wal.Epoch)
		if folds >= 2 && data < int(wal.LastSegment) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not folded: %d segments, %d folds", wal.Name, data, folds)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := counting.Total()
	if err := r.RefreshHinted(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if err := d.TryCatchUp(); err != nil {
		t.Fatal(err)
	}
	checkSecondary(t, p, d)
	listed := false
	for _, req := range counting.Requests(n) {
		listed = listed || strings.HasPrefix(req, "list "+wal.Name)
	}
	if !listed {
		t.Fatalf("the reader did not list %s after the hint fell short: %v", wal.Name, counting.Requests(n))
	}
}
