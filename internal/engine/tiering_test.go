package engine

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

func TestCutoffSeq(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := func(sec int, seq uint64) seqSample {
		return seqSample{at: t0.Add(time.Duration(sec) * time.Second), seq: seq}
	}
	samples := []seqSample{s(0, 10), s(5, 20), s(10, 30)}
	for _, tc := range []struct {
		now  int
		want uint64
		ok   bool
	}{
		{now: 9, want: 0, ok: false},   // no sample is 10s old: nothing is known old
		{now: 10, want: 10, ok: true},  // the first sample is exactly old enough
		{now: 14, want: 10, ok: true},  // the second is 9s old: keys after 10 may be recent
		{now: 15, want: 20, ok: true},  // a later old-enough sample wins
		{now: 100, want: 30, ok: true}, // everything sampled is old
	} {
		got, ok := cutoffSeq(samples, t0.Add(time.Duration(tc.now)*time.Second), 10*time.Second)
		if got != tc.want || ok != tc.ok {
			t.Errorf("now=%d: cutoffSeq = %d, %v; want %d, %v", tc.now, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := cutoffSeq(nil, t0, time.Second); ok {
		t.Error("cutoffSeq of no samples reported a cutoff")
	}
}

func TestPruneSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := func(sec int, seq uint64) seqSample {
		return seqSample{at: t0.Add(time.Duration(sec) * time.Second), seq: seq}
	}
	samples := []seqSample{s(0, 10), s(5, 20), s(10, 30), s(15, 40)}
	for _, tc := range []struct {
		now  int
		want []seqSample
	}{
		{now: 5, want: samples},                            // none old: keep all
		{now: 15, want: samples[1:]},                       // s(5) is the latest old one
		{now: 24, want: samples[2:]},                       // s(10) is 14s old, s(15) 9s
		{now: 100, want: []seqSample{samples[3]}},          // keep the newest
		{now: 10, want: samples[0:]},                       // s(0) exactly old enough
		{now: 20, want: []seqSample{s(10, 30), s(15, 40)}}, // s(10) exactly old enough
	} {
		now := t0.Add(time.Duration(tc.now) * time.Second)
		got := pruneSamples(append([]seqSample(nil), samples...), now, 10*time.Second)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("now=%d: pruneSamples = %v, want %v", tc.now, got, tc.want)
		}
		// Pruning never changes the answer.
		a, aok := cutoffSeq(samples, now, 10*time.Second)
		b, bok := cutoffSeq(got, now, 10*time.Second)
		if a != b || aok != bok {
			t.Errorf("now=%d: cutoff %d,%v before pruning, %d,%v after", tc.now, a, aok, b, bok)
		}
	}
}

func TestPickAgeOut(t *testing.T) {
	now := time.Unix(10000, 0)
	old, fresh := now.Add(-time.Hour), now.Add(-time.Second)
	f := func(name string, level int, smallest uint64, created time.Time, busy bool) rocksshim.LiveFile {
		return rocksshim.LiveFile{Name: name, Level: level, SmallestSeqno: smallest, CreationTime: created, BeingCompacted: busy}
	}
	files := []rocksshim.LiveFile{
		f("a.sst", 5, 50, old, false),          // holds keys up to the cutoff: chosen
		f("b.sst", 5, 101, old, false),         // every key recent: no
		f("c.sst", 5, 0, old, false),           // zeroed sequence numbers are old: chosen first
		f("d.sst", 5, 10, old, true),           // being compacted: no
		f("e.sst", 5, 20, fresh, false),        // just written (maybe by this pass): not yet
		f("f.sst", 6, 1, old, false),           // already in the last level
		f("g.sst", 4, 1, old, false),           // above the penultimate level: RocksDB moves it
		f("h.sst", 0, 1, old, false),           // L0 likewise
		f("i.sst", 5, 100, time.Time{}, false), // creation time unknown: judged by its keys
	}
	for _, tc := range []struct {
		name  string
		last  int
		limit int
		want  []string
	}{
		{"all candidates, oldest keys first", 6, 10, []string{"c.sst", "a.sst", "i.sst"}},
		{"limit", 6, 2, []string{"c.sst", "a.sst"}},
		{"three levels", 2, 10, nil},
		{"one level: no penultimate level", 0, 10, nil},
	} {
		got := pickAgeOut(files, tc.last, 100, now, time.Minute, tc.limit)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: pickAgeOut = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAgeOutBackoff(t *testing.T) {
	tick, coldAfter := time.Second, 10*time.Second
	for _, tc := range []struct {
		prev  time.Duration
		moved bool
		want  time.Duration
	}{
		{0, true, 0},                               // progress: no rest
		{8 * time.Second, true, 0},                 // progress resets a long rest
		{0, false, time.Second},                    // first miss: one tick
		{time.Second, false, 2 * time.Second},      // then doubling
		{8 * time.Second, false, 10 * time.Second}, // up to cold-after
		{10 * time.Second, false, 10 * time.Second},
	} {
		if got := ageOutBackoff(tc.prev, tick, coldAfter, tc.moved); got != tc.want {
			t.Errorf("ageOutBackoff(%s, moved=%v) = %s, want %s", tc.prev, tc.moved, got, tc.want)
		}
	}
	// A cold-after shorter than the tick still rests one tick.
	if got := ageOutBackoff(0, time.Second, time.Millisecond, false); got != time.Second {
		t.Errorf("short cold-after: %s, want 1s", got)
	}
}

func TestKeepCompactionLocal(t *testing.T) {
	for _, tc := range []struct {
		out, levels int
		coldAfter   time.Duration
		want        bool
	}{
		{6, 7, time.Hour, true},  // into the last level with placement on
		{5, 7, time.Hour, false}, // above it: one output level
		{6, 7, 0, false},         // no tiering: one output level
		{2, 3, time.Hour, true},
	} {
		if got := KeepCompactionLocal(tc.out, tc.levels, tc.coldAfter); got != tc.want {
			t.Errorf("KeepCompactionLocal(%d, %d, %s) = %v, want %v", tc.out, tc.levels, tc.coldAfter, got, tc.want)
		}
	}
}

// tierEntries counts the keys in cold (last-level, MANIFEST temperature
// cold) and hot tables.
func tierEntries(t *testing.T, d *DB) (cold, hot uint64) {
	t.Helper()
	for _, f := range d.LiveFiles() {
		if f.Temperature == rocksshim.TemperatureCold {
			cold += f.Entries
		} else {
			hot += f.Entries
		}
	}
	return cold, hot
}

// TestTieredPlacement runs RocksDB 7.8.3's per-key placement with Shale's
// options on a local directory: a compaction into the last level puts
// keys older than ColdAfter in cold tables and recent ones in hot tables
// above, and the age-out pass later moves the recent ones too once they
// are old, without a manual compaction.
func TestTieredPlacement(t *testing.T) {
	const coldAfter = 3 * time.Second
	o := DefaultOptions()
	o.ColdAfter = coldAfter
	d, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const n = 2000
	put := func(prefix string) {
		for i := 0; i < n; i++ {
			// Old and recent keys interleave: placement is per key.
			if err := d.Put([]byte(fmt.Sprintf("k%05d-%s", i, prefix)), []byte(prefix), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	// RocksDB ages keys by (sequence number, time) samples it takes once a
	// second at this setting and stores in the tables it flushes; a key
	// counts as old once a sample taken after it is ColdAfter old. So the
	// writes below are followed by a sample before their flush, and one
	// key keeps being overwritten meanwhile, as in a live database (an idle
	// one's last sample keeps moving forward, and a key flushed before any
	// sample follows it stays hot until a later one: docs/tiering.md).
	trickleUntil := func(cond func() bool) {
		for i := 0; !cond(); i++ {
			if err := d.Put([]byte("trickle"), []byte(fmt.Sprint(i)), false); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	since := func(t0 time.Time, d time.Duration) func() bool {
		return func() bool { return time.Since(t0) >= d }
	}
	put("old")
	oldWritten := time.Now()
	trickleUntil(since(oldWritten, 1200*time.Millisecond))
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	trickleUntil(since(oldWritten, coldAfter+1200*time.Millisecond))
	put("new")
	newWritten := time.Now()
	// No writes now: RocksDB's sample after the new keys (and the trickle
	// key's last version) is in the table flushed next.
	for !since(newWritten, 1200*time.Millisecond)() {
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if time.Since(newWritten) >= coldAfter {
		t.Skip("the machine is too slow for a 3s cold-after: the recent keys aged before the compaction")
	}
	// Placement follows sequence numbers, so the cold keys are the oldest
	// ones: 2000 cold means the old keys, and the trickle key may be on
	// either side.
	// (The trickle key may be absent too, if a loaded machine spent the
	// whole wait flushing.)
	cold, hot := tierEntries(t, d)
	total := cold + hot
	if cold < n || cold > n+1 || hot < n || hot > n+1 || total < 2*n || total > 2*n+1 {
		t.Fatalf("after the compaction: %d keys cold, %d hot; want the %d old ones cold and the %d new ones hot (files %+v)", cold, hot, n, n, d.LiveFiles())
	}
	for _, f := range d.LiveFiles() {
		if (f.Temperature == rocksshim.TemperatureCold) != (f.Level == 6) {
			t.Fatalf("table %s at L%d is %s: only last-level tables are cold", f.Name, f.Level, f.Temperature)
		}
	}

	// No manual compaction: the age-out pass moves the now old keys into
	// the last level.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cold, hot = tierEntries(t, d)
		if cold == total && hot == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("age-out: %d keys cold, %d hot after 30s, want all %d cold (%+v; files %+v)", cold, hot, total, d.AgeOutStats(), d.LiveFiles())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := d.AgeOutStats(); st.Moved == 0 {
		t.Fatalf("the keys went cold but the age-out pass moved nothing: %+v", st)
	}
	for i := 0; i < n; i++ {
		for _, p := range []string{"old", "new"} {
			v, ok, err := d.Get([]byte(fmt.Sprintf("k%05d-%s", i, p)))
			if err != nil || !ok || string(v) != p {
				t.Fatalf("key %d-%s: %q %v %v", i, p, v, ok, err)
			}
		}
	}
}

// TestSetColdAfterLive changes ColdAfter of an open database (RocksDB's
// SetOptions, 9.x): keys kept hot under a 1h cold-after go cold without a
// restart or a manual compaction once the cold-after is 2s, and with
// tiering turned off a compaction writes no cold table.
func TestSetColdAfterLive(t *testing.T) {
	o := DefaultOptions()
	o.ColdAfter = time.Hour
	d, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	const n = 2000
	for i := 0; i < n; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%05d", i)), []byte("v"), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if cold, hot := tierEntries(t, d); cold != 0 || hot != n {
		t.Fatalf("with a 1h cold-after: %d keys cold, %d hot; want all %d hot", cold, hot, n)
	}
	oldSeq := d.LatestSequence()
	// oldHot: a hot table holds one of the keys written so far.
	oldHot := func() bool {
		for _, f := range d.LiveFiles() {
			if f.Temperature != rocksshim.TemperatureCold && f.SmallestSeqno <= oldSeq {
				return true
			}
		}
		return false
	}

	const coldAfter = 2 * time.Second
	if err := d.SetColdAfter(coldAfter); err != nil {
		t.Fatal(err)
	}
	if got := d.ColdAfter(); got != coldAfter {
		t.Fatalf("ColdAfter() = %s after SetColdAfter(%s)", got, coldAfter)
	}
	// A trickle of writes among the keys, as in a live database: RocksDB
	// ages a key by the (sequence number, time) samples in the tables a
	// compaction reads, and the table written under the 1h setting (one
	// sample every 36s) holds none after its keys: they age once a
	// compaction merges it with a table flushed after the change, whose
	// samples (every second now) say when they were written.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if !oldHot() {
			break
		}
		if time.Now().After(deadline) {
			cold, _ := tierEntries(t, d)
			t.Fatalf("30s after the change to %s, keys written before it are still hot (%d keys cold in all, %d written before; age-out %+v; files %+v)", coldAfter, cold, n, d.AgeOutStats(), d.LiveFiles())
		}
		if err := d.Put([]byte(fmt.Sprintf("k%05d-%d", i%n, i)), []byte("v"), false); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := d.SetColdAfter(0); err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, f := range d.LiveFiles() {
		before[f.Name] = true
	}
	for i := 0; i < n; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%05d-off", i)), []byte("v"), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range d.LiveFiles() {
		if !before[f.Name] && f.Temperature == rocksshim.TemperatureCold {
			t.Fatalf("tiering off, the compaction wrote table %s at L%d cold: want every new table hot (files %+v)", f.Name, f.Level, d.LiveFiles())
		}
	}
	for i := 0; i < n; i++ {
		if _, ok, err := d.Get([]byte(fmt.Sprintf("k%05d", i))); err != nil || !ok {
			t.Fatalf("key %d: %v %v", i, ok, err)
		}
	}
	if err := d.SetColdAfter(-time.Second); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("SetColdAfter(-1s) = %v, want an error naming the negative value", err)
	}
}
