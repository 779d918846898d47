package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The "done when" on the CLI: after a load with a short
// --cold-after, `shale admin tiers` shows both tiers in use, with or
// without --cold-db (the database recorded its cold tier).
func TestAdminTiersAfterLoad(t *testing.T) {
	root := t.TempDir()
	db, cold := "file://"+filepath.Join(root, "db"), "file://"+filepath.Join(root, "cold")
	const coldAfter = 3 * time.Second
	p := startPrimary(t, db, filepath.Join(root, "cache"), "--cold-db", cold, "--cold-after", coldAfter.String())
	a := "--addr=" + p.addr
	put := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if code, _, e := shale("kv", "put", a, "--sync=false", fmt.Sprintf("%s-%04d", prefix, i), strings.Repeat("v", 100)); code != 0 {
				t.Fatalf("put: %s", e)
			}
		}
	}
	run := func(args ...string) string {
		t.Helper()
		code, out, e := shale(args...)
		if code != 0 {
			t.Fatalf("shale %q: exit %d: %s", args, code, e)
		}
		return out
	}
	// RocksDB samples (sequence number, time) once a second here; the old
	// keys need one sample after them before their flush (docs/tiering.md).
	// Two seconds, not one: on a loaded machine RocksDB's periodic task
	// runs late, and without a sample between the old keys and the next
	// writes those map to a time among the old keys'.
	put("old", 300)
	oldWritten := time.Now()
	for time.Since(oldWritten) < 2200*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
	}
	run("kv", "flush", a)
	for i := 0; time.Since(oldWritten) < coldAfter+2200*time.Millisecond; i++ {
		run("kv", "put", a, "--sync=false", "trickle", fmt.Sprint(i))
		time.Sleep(50 * time.Millisecond)
	}
	put("new", 300)
	newWritten := time.Now()
	run("kv", "flush", a)
	run("kv", "compact", a)
	if time.Since(newWritten) >= coldAfter {
		t.Skip("the machine is too slow for a 3s cold-after: the recent keys aged before the compaction")
	}
	for _, args := range [][]string{
		{"admin", "tiers", "--db", db, "--cold-db", cold, "-o", "json"},
		{"admin", "tiers", "--db", db, "-o", "json"}, // the recorded cold tier
	} {
		var st struct {
			Tiers []struct {
				Tier, Location string
				Files          int
				Bytes          int64
			}
			ColdFraction  float64
			OldestHotData time.Time
		}
		if err := json.Unmarshal([]byte(run(args...)), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Tiers) != 2 || st.Tiers[0].Files == 0 || st.Tiers[1].Files == 0 || st.Tiers[1].Location != cold || st.ColdFraction <= 0 {
			t.Fatalf("shale %q: %+v; want both tiers in use", args, st)
		}
		if st.OldestHotData.IsZero() || st.OldestHotData.Before(oldWritten.Add(-time.Second)) {
			t.Fatalf("shale %q: oldest hot data %v, but the old keys (written at %v) are cold", args, st.OldestHotData, oldWritten)
		}
	}
	out := run("admin", "tiers", "--db", db)
	for _, want := range []string{"TIER  FILES", "hot ", "cold ", cold, "cold share:", "oldest hot data:  written"} {
		if !strings.Contains(out, want) {
			t.Errorf("admin tiers output lacks %q:\n%s", want, out)
		}
	}

	// kill -9, then a new primary on an empty cache: every key reads back,
	// the old ones from the cold tier, and the placement is unchanged.
	before := run("admin", "tiers", "--db", db, "-o", "json")
	p.kill9(t)
	p = startPrimary(t, db, filepath.Join(root, "cache2"), "--cold-db", cold, "--cold-after", coldAfter.String())
	a = "--addr=" + p.addr
	for _, k := range []string{"old-0000", "old-0299", "new-0000", "new-0299"} {
		if got := run("kv", "get", a, k); got != strings.Repeat("v", 100)+"\n" {
			t.Fatalf("after kill -9 and a restart on an empty cache: %s = %q", k, got)
		}
	}
	if after := run("admin", "tiers", "--db", db, "-o", "json"); tierFiles(t, after) != tierFiles(t, before) {
		t.Fatalf("placement changed across the restart: %s, then %s", before, after)
	}

	// Usage and configuration errors.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"admin", "tiers"}, 2, "admin tiers: --db is required"},
		{[]string{"admin", "tiers", "--db", db, "--cold-db", "file://" + filepath.Join(root, "elsewhere")}, 1, "not this database's cold tier"},
		{[]string{"primary", "--db", db, "--cold-after", "0s"}, 2, `for "--cold-after" flag: must be positive`},
	} {
		code, _, e := shale(tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("shale %q: exit %d, %q; want exit %d and %q", tc.args, code, e, tc.code, tc.want)
		}
	}
}

// tierFiles summarises admin tiers' JSON as "hot files/cold files".
func tierFiles(t *testing.T, out string) string {
	t.Helper()
	var st struct{ Tiers []struct{ Files int } }
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Tiers) != 2 {
		t.Fatalf("admin tiers -o json: %q: %v", out, err)
	}
	return fmt.Sprintf("%d/%d", st.Tiers[0].Files, st.Tiers[1].Files)
}

// `shale kv set-tiering` changes a running primary's cold-after, which
// `kv status` then reports; without a cold tier it is refused, naming the
// flag that gives one.
func TestKVSetTiering(t *testing.T) {
	root := t.TempDir()
	db, cold := "file://"+filepath.Join(root, "db"), "file://"+filepath.Join(root, "cold")
	p := startPrimary(t, db, filepath.Join(root, "cache"), "--cold-db", cold)
	a := "--addr=" + p.addr
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"kv", "status", a}, 0, "cold-after:          off"},
		{[]string{"kv", "set-tiering", a, "1h"}, 0, "cold-after: 1h0m0s (was off)"},
		{[]string{"kv", "status", a}, 0, "cold-after:          1h0m0s"},
		{[]string{"kv", "set-tiering", a, "90s"}, 0, "cold-after: 1m30s (was 1h0m0s)"},
		{[]string{"kv", "set-tiering", a, "off"}, 0, "cold-after: off (was 1m30s)"},
		{[]string{"kv", "set-tiering", a, "500ms"}, 2, `COLD-AFTER "500ms": want a duration of at least 1s, such as 24h, or off`},
		{[]string{"kv", "set-tiering", a, "soon"}, 2, `COLD-AFTER "soon"`},
	} {
		code, out, e := shale(tc.args...)
		if code != tc.code || !strings.Contains(out+e, tc.out) {
			t.Errorf("shale %q: exit %d, %q %q; want exit %d with %q", tc.args, code, out, e, tc.code, tc.out)
		}
	}
	plain := startPrimary(t, "file://"+filepath.Join(root, "plain"), filepath.Join(root, "plain-cache"))
	code, _, e := shale("kv", "set-tiering", "--addr="+plain.addr, "1h")
	if code != 1 || !strings.Contains(e, "restart it with --cold-db") {
		t.Errorf("set-tiering on a primary without a cold tier: exit %d, %q; want 1 naming --cold-db", code, e)
	}
}
