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
