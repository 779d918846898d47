package compactor

import (
	"testing"
	"time"
)

func TestPick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		cands []Candidate
		want  int
	}{
		{"none", nil, -1},
		{"one", []Candidate{{DB: "a", Priority: 10}}, 0},
		{"lowest pass wins over priority", []Candidate{
			{DB: "hi", Priority: 100, Pass: 5},
			{DB: "lo", Priority: 1, Pass: 4},
		}, 1},
		{"tie on pass: higher priority", []Candidate{
			{DB: "lo", Priority: 1, Pass: 1},
			{DB: "hi", Priority: 30, Pass: 1},
		}, 1},
		{"tie on pass and priority: older job", []Candidate{
			{DB: "a", Priority: 10, Pass: 1, Oldest: t0.Add(time.Second)},
			{DB: "b", Priority: 10, Pass: 1, Oldest: t0},
		}, 1},
		{"full tie: name", []Candidate{
			{DB: "b", Priority: 10, Pass: 1, Oldest: t0},
			{DB: "a", Priority: 10, Pass: 1, Oldest: t0},
		}, 1},
		{"old job does not beat a lower pass", []Candidate{
			{DB: "old", Priority: 10, Pass: 2, Oldest: t0},
			{DB: "new", Priority: 10, Pass: 1, Oldest: t0.Add(time.Hour)},
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Pick(tc.cands); got != tc.want {
				t.Fatalf("Pick = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestActivate(t *testing.T) {
	for _, tc := range []struct {
		pass   uint64
		active []uint64
		want   uint64
	}{
		{0, nil, 0},               // alone: keeps its pass
		{5, nil, 5},               // alone
		{0, []uint64{3, 2, 4}, 2}, // idle with little pass: caught up to the lowest active
		{7, []uint64{3, 2, 4}, 7}, // ahead already: keeps its pass (no credit either way)
		{2, []uint64{2}, 2},       // equal
	} {
		if got := Activate(tc.pass, tc.active); got != tc.want {
			t.Errorf("Activate(%v, %v) = %v, want %v", tc.pass, tc.active, got, tc.want)
		}
	}
}

// TestPickOrder runs the pick order over backlogged databases: starts are
// proportional to priority, every database progresses, and a database that
// was idle does not take every worker when it comes back.
func TestPickOrder(t *testing.T) {
	type db struct {
		name string
		prio uint32
		pass uint64
		runs int
	}
	// run picks n times and returns the starts per database.
	run := func(dbs []*db, n int) map[string]int {
		for i := 0; i < n; i++ {
			var cands []Candidate
			for _, d := range dbs {
				cands = append(cands, Candidate{DB: d.name, Priority: d.prio, Pass: d.pass})
			}
			d := dbs[Pick(cands)]
			d.pass += stride(d.prio)
			d.runs++
		}
		out := map[string]int{}
		for _, d := range dbs {
			out[d.name] = d.runs
		}
		return out
	}
	// Integer strides round down, so a share may be off by one.
	near := func(got, want map[string]int) bool {
		for k, w := range want {
			if g := got[k]; g < w-1 || g > w+1 {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		name string
		dbs  []*db
		n    int
		want map[string]int
	}{
		{"equal priorities share equally", []*db{{name: "a", prio: 10}, {name: "b", prio: 10}}, 100, map[string]int{"a": 50, "b": 50}},
		{"30 vs 10: three to one", []*db{{name: "hi", prio: 30}, {name: "lo", prio: 10}}, 100, map[string]int{"hi": 75, "lo": 25}},
		{"100 vs 1: the low one still progresses", []*db{{name: "hi", prio: 100}, {name: "lo", prio: 1}}, 202, map[string]int{"hi": 200, "lo": 2}},
		{"three databases 1:2:5", []*db{{name: "a", prio: 1}, {name: "b", prio: 2}, {name: "c", prio: 5}}, 80, map[string]int{"a": 10, "b": 20, "c": 50}},
		{"unset priority is the default", []*db{{name: "unset", prio: 0}, {name: "ten", prio: 10}}, 100, map[string]int{"unset": 50, "ten": 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.dbs, tc.n); !near(got, tc.want) {
				t.Fatalf("starts %v, want %v (±1)", got, tc.want)
			}
		})
	}
	t.Run("an idle database is caught up when it returns", func(t *testing.T) {
		busy := &db{name: "busy", prio: 10}
		run([]*db{busy}, 1000) // alone for a long time: pass 100
		back := &db{name: "back", prio: 10}
		back.pass = Activate(back.pass, []uint64{busy.pass})
		busy.runs = 0
		if got := run([]*db{busy, back}, 10); !near(got, map[string]int{"busy": 5, "back": 5}) {
			t.Fatalf("after returning: %v, want an equal share, not a burst", got)
		}
	})
}
