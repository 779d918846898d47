package backup

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

func seg(seq uint64) protocol.Segment  { return protocol.Segment{Seq: seq, Size: 10} }
func seal(seq uint64) protocol.Segment { return protocol.Segment{Seq: seq} }
func fold(first, last uint64) protocol.Segment {
	return protocol.Segment{Seq: first, Last: last, Size: 100}
}

func TestArchiveStep(t *testing.T) {
	type want struct {
		copy      []protocol.Segment
		next      uint64
		done, gap bool
	}
	for _, tc := range []struct {
		name    string
		next    uint64
		objs    []protocol.Segment
		trashed bool
		want    want
	}{
		{"new version, all segments", 1, []protocol.Segment{seg(1), seg(2), seg(3)}, false, want{[]protocol.Segment{seg(1), seg(2), seg(3)}, 4, false, false}},
		{"caught up", 4, []protocol.Segment{seg(1), seg(2), seg(3)}, false, want{nil, 4, false, false}},
		{"a fold where the segments were deleted", 2, []protocol.Segment{seg(1), fold(2, 5), seg(6)}, false, want{[]protocol.Segment{fold(2, 5), seg(6)}, 7, false, false}},
		{"a fold covering slots partly archived", 4, []protocol.Segment{seg(1), fold(2, 5)}, false, want{[]protocol.Segment{fold(2, 5)}, 6, false, false}},
		{"segments rather than a fold (their own store times)", 2, []protocol.Segment{seg(1), seg(2), seg(3), fold(2, 3), seg(4)}, false, want{[]protocol.Segment{seg(2), seg(3), seg(4)}, 5, false, false}},
		{"sealed: copy up to the seal and the seal", 2, []protocol.Segment{seg(1), seg(2), seal(3), seg(4)}, false, want{[]protocol.Segment{seg(2), seal(3)}, 4, true, false}},
		{"a void seal (a fold covers it) ends nothing", 1, []protocol.Segment{seg(1), fold(2, 3), seal(3), seg(4)}, false, want{[]protocol.Segment{seg(1), fold(2, 3), seg(4)}, 5, false, false}},
		{"a missing slot with a later one: an upload in flight, wait", 2, []protocol.Segment{seg(1), seg(3)}, false, want{nil, 2, false, false}},
		{"a seal above a missing slot: the sealer fills below, wait", 2, []protocol.Segment{seg(1), seal(5)}, false, want{nil, 2, false, false}},
		{"marked, listed whole after the marker: done", 2, []protocol.Segment{seg(1), seg(2)}, true, want{[]protocol.Segment{seg(2)}, 3, true, false}},
		{"marked with a missing slot: the trash took it", 2, []protocol.Segment{seg(1), seg(3)}, true, want{nil, 2, false, true}},
		{"segment 1 gone before the archive had it", 1, []protocol.Segment{seg(2), seg(3)}, false, want{nil, 1, false, true}},
		{"segment 1 gone, the archive had part of it", 3, []protocol.Segment{seg(3)}, true, want{[]protocol.Segment{seg(3)}, 4, false, true}},
		{"deleted whole before the archive finished it", 3, nil, false, want{nil, 3, false, true}},
		{"never written", 1, nil, false, want{nil, 1, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ArchiveStep(tc.next, tc.objs, tc.trashed)
			if len(got.Copy) != len(tc.want.copy) || got.Next != tc.want.next || got.Done != tc.want.done || got.Gap != tc.want.gap {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got.Copy {
				if got.Copy[i] != tc.want.copy[i] {
					t.Fatalf("copy %d: got %+v, want %+v", i, got.Copy[i], tc.want.copy[i])
				}
			}
		})
	}
}

func TestAdmitArchived(t *testing.T) {
	opened := map[uint64]*layout.OpenedRecord{
		2: {Epoch: 2, Logs: []layout.VersionRef{{Name: "000010.log", Epoch: 1}, {Name: "MANIFEST-000005", Epoch: 1}}},
		4: {Epoch: 4, Logs: []layout.VersionRef{{Name: "000020.log", Epoch: 2}}},
	}
	trashedBy := map[layout.VersionRef]uint64{
		{Name: "000007.log", Epoch: 1}: 1, // deleted by its owner before the takeover
		{Name: "000012.log", Epoch: 1}: 2, // trashed by the takeover: a deposed owner's
		{Name: "000018.log", Epoch: 2}: 2,
	}
	for _, tc := range []struct {
		name  string
		epoch uint64
		want  bool
	}{
		{"000010.log", 1, true},  // kept by the takeover of epoch 2
		{"000007.log", 1, true},  // its owner deleted it: history
		{"000012.log", 1, false}, // created after the takeover listed: a fenced owner's
		{"000013.log", 1, false}, // the same, never trashed
		{"000020.log", 2, true},  // kept by epoch 4 (epoch 3 never completed a takeover)
		{"000018.log", 2, true},  // deleted by its owner
		{"000021.log", 2, false}, // created by 2 after 4 listed
		{"000021.log", 3, false}, // epoch 3 never opened: the first takeover after it is 4's
		{"000030.log", 4, true},  // the last owner's
		{"000031.log", 5, true},  // a later one's
	} {
		if got := AdmitArchived(tc.name, tc.epoch, opened, trashedBy); got != tc.want {
			t.Errorf("%s epoch %d: admitted %v, want %v", tc.name, tc.epoch, got, tc.want)
		}
	}
	if !AdmitArchived("000001.log", 1, nil, nil) {
		t.Error("with no takeover every version is the owner's")
	}
}

func base(id string, seq uint64, created time.Time) Manifest {
	return Manifest{ID: id, Checkpoint: CheckpointRef{Sequence: seq, CreatedAt: created}}
}

func TestWindowAndBase(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ms := []Manifest{base("b0", 50, at(0)), base("b1", 100, at(10)), base("b2", 200, at(20)), base("b3", 300, at(30))}
	for _, tc := range []struct {
		name    string
		started time.Time
		gaps    []Gap
		want    string
	}{
		{"archive started before every base", at(-1), nil, "b0"},
		{"archive started after b0", at(5), nil, "b1"},
		{"a gap after b1: restarts at b2", at(-1), []Gap{{DetectedAt: at(15)}}, "b2"},
		{"the latest gap counts", at(-1), []Gap{{DetectedAt: at(25)}, {DetectedAt: at(15)}}, "b3"},
		{"no base after the gap", at(-1), []Gap{{DetectedAt: at(35)}}, ""},
	} {
		got, ok := WindowStart(ms, tc.started, tc.gaps)
		if ok != (tc.want != "") || ok && got.ID != tc.want {
			t.Errorf("%s: window starts at %q (%v), want %q", tc.name, got.ID, ok, tc.want)
		}
	}
	start := ms[1]
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Sequence: 150}, "b1"},
		{Target{Sequence: 200}, "b2"},
		{Target{Sequence: 99}, ""}, // before the window
		{Target{Sequence: 1000}, "b3"},
		{Target{Time: at(25)}, "b2"},
		{Target{Time: at(10)}, "b1"},
		{Target{Time: at(9)}, ""},
	} {
		got, ok := ChooseBase(ms, start, tc.t)
		if ok != (tc.want != "") || ok && got.ID != tc.want {
			t.Errorf("%v: base %q (%v), want %q", tc.t, got.ID, ok, tc.want)
		}
	}
}

// walWriter writes RocksDB's log format (db/log_writer.cc), so the reader
// is checked against the layout RocksDB writes, fragments included.
type walWriter struct{ b []byte }

func (w *walWriter) record(payload []byte) {
	first := true
	for {
		left := walBlockSize - len(w.b)%walBlockSize
		if left < walHeaderSize {
			w.b = append(w.b, make([]byte, left)...)
			left = walBlockSize
		}
		n := min(len(payload), left-walHeaderSize)
		last := n == len(payload)
		typ := byte(3)
		switch {
		case first && last:
			typ = 1
		case first:
			typ = 2
		case last:
			typ = 4
		}
		crc := crc32.Checksum(append([]byte{typ}, payload[:n]...), castagnoli)
		crc = (crc>>15 | crc<<17) + 0xa282ead8
		h := make([]byte, walHeaderSize)
		binary.LittleEndian.PutUint32(h, crc)
		binary.LittleEndian.PutUint16(h[4:], uint16(n))
		h[6] = typ
		w.b = append(append(w.b, h...), payload[:n]...)
		payload, first = payload[n:], false
		if last {
			return
		}
	}
}

func (w *walWriter) batch(seq uint64, count uint32, size int) int {
	p := make([]byte, 12+size)
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint32(p[8:], count)
	w.record(p)
	return len(w.b)
}

func TestReadWAL(t *testing.T) {
	var w walWriter
	e1 := w.batch(1, 1, 10)
	e2 := w.batch(2, 3, 40000) // crosses a block: first, last
	e3 := w.batch(5, 1, 70000) // first, middle, last
	got, err := ReadWAL(w.b)
	if err != nil {
		t.Fatal(err)
	}
	want := []WALBatch{{1, 1, e1}, {2, 3, e2}, {5, 1, e3}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("batch %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Cut inside the last record: the complete batches only.
	if got, err := ReadWAL(w.b[:e3-100]); err != nil || len(got) != 2 {
		t.Fatalf("cut: got %+v, %v", got, err)
	}
	bad := append([]byte(nil), w.b...)
	bad[20] ^= 1
	if _, err := ReadWAL(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a flipped byte: %v", err)
	}
}

func TestPlanReplay(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// WAL 10: batches 1..3 (in the base: S=3); WAL 12: 4, 5-6 (one batch), 7;
	// WAL 15: 8. One archived object per batch, stored at second = its seq.
	mk := func(name string, num uint64, batches ...[2]uint64) ArchivedWAL {
		w := ArchivedWAL{Name: name, Number: num}
		var ww walWriter
		for _, b := range batches {
			w.Ends = append(w.Ends, ww.batch(b[0], uint32(b[1]), 5))
			w.Stored = append(w.Stored, sec(int(b[0]+b[1]-1)))
		}
		w.Data = ww.b
		return w
	}
	w10 := mk("000010.log", 10, [2]uint64{1, 1}, [2]uint64{2, 2})
	w12 := mk("000012.log", 12, [2]uint64{4, 1}, [2]uint64{5, 2}, [2]uint64{7, 1})
	w15 := mk("000015.log", 15, [2]uint64{8, 1})
	wals := []ArchivedWAL{w15, w12, w10}
	for _, tc := range []struct {
		name string
		t    Target
		last uint64
		cuts []Cut
		err  string
	}{
		{"to sequence 7", Target{Sequence: 7}, 7, []Cut{{"000012.log", w12.Ends[2]}}, ""},
		{"a batch crossing the target is left out whole", Target{Sequence: 5}, 4, []Cut{{"000012.log", w12.Ends[0]}}, ""},
		{"to the end", Target{Sequence: 100}, 8, []Cut{{"000012.log", len(w12.Data)}, {"000015.log", len(w15.Data)}}, ""},
		{"the base itself", Target{Sequence: 3}, 3, nil, ""},
		{"to a time", Target{Time: sec(6).Add(500 * time.Millisecond)}, 6, []Cut{{"000012.log", w12.Ends[1]}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanReplay(wals, 3, tc.t)
			if err != nil {
				t.Fatal(err)
			}
			if p.Last != tc.last || p.End != 8 || len(p.Cuts) != len(tc.cuts) {
				t.Fatalf("got %+v, want last %d cuts %+v", p, tc.last, tc.cuts)
			}
			for i := range p.Cuts {
				if p.Cuts[i] != tc.cuts[i] {
					t.Fatalf("cut %d: %+v, want %+v", i, p.Cuts[i], tc.cuts[i])
				}
			}
		})
	}
	// A time target takes a prefix: a later batch stored early (an upload
	// out of order) does not come in before the one below it.
	ooo := mk("000012.log", 12, [2]uint64{4, 1}, [2]uint64{5, 2}, [2]uint64{7, 1})
	ooo.Stored[1] = sec(20)
	if p, err := PlanReplay([]ArchivedWAL{w10, ooo}, 3, Target{Time: sec(10)}); err != nil || p.Last != 4 {
		t.Fatalf("out of order: %+v, %v", p, err)
	}
	// A fold whose segments the archive lacks: a time inside its span is
	// refused (its writes were stored somewhere in it), outside is fine.
	folded := mk("000012.log", 12, [2]uint64{4, 1}, [2]uint64{5, 2}, [2]uint64{7, 1})
	folded.Ends = []int{folded.Ends[0], folded.Ends[2]}
	folded.Stored = []time.Time{sec(4), sec(9)}
	folded.Folds = []bool{false, true}
	if _, err := PlanReplay([]ArchivedWAL{w10, folded}, 3, Target{Time: sec(6)}); err == nil || !strings.Contains(err.Error(), "only as one fold") {
		t.Fatalf("a time inside a fold's span: %v", err)
	}
	if p, err := PlanReplay([]ArchivedWAL{w10, folded}, 3, Target{Time: sec(9)}); err != nil || p.Last != 7 {
		t.Fatalf("a time after a fold: %+v, %v", p, err)
	}
	if p, err := PlanReplay([]ArchivedWAL{w10, folded}, 3, Target{Sequence: 6}); err != nil || p.Last != 6 {
		t.Fatalf("a sequence inside a fold: %+v, %v", p, err)
	}
	// A hole (WAL 12 missing) refuses a target past it, naming it.
	_, err := PlanReplay([]ArchivedWAL{w10, w15}, 3, Target{Sequence: 8})
	if err == nil || !strings.Contains(err.Error(), "skip sequences 4 to 7") {
		t.Fatalf("a hole: %v", err)
	}
	// ... and a hole past the target does not matter.
	if p, err := PlanReplay([]ArchivedWAL{w10, mk("000012.log", 12, [2]uint64{4, 1}), w15}, 3, Target{Sequence: 4}); err != nil || p.Last != 4 {
		t.Fatalf("a hole past the target: %+v, %v", p, err)
	}
}
