package protocol

import "testing"

func segs(sizes ...int64) []Segment {
	var s []Segment
	for i, n := range sizes {
		if n >= 0 {
			s = append(s, Segment{Seq: uint64(i + 1), Size: n})
		}
	}
	return s
}

func fold(first, last uint64, size int64) Segment { return Segment{Seq: first, Last: last, Size: size} }

func TestBuildLogVersion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		segs       []Segment
		sealed     bool
		sealSeq    uint64
		lastSeq    uint64
		size       int64
		data       int
		contiguous bool
	}{
		{"open log", segs(10, 20, 30), false, 0, 3, 60, 3, true},
		{"sealed", segs(10, 20, 0), true, 3, 3, 30, 2, true},
		// A stale owner's append lost to the seal: anything past the first
		// seal is not part of the log.
		{"data after a seal", segs(10, 0, 5), true, 2, 3, 10, 1, true},
		{"double seal", segs(10, 0, 0), true, 2, 3, 10, 1, true},
		{"only a seal", segs(0), true, 1, 1, 0, 0, true},
		{"gap", segs(10, -1, 30), false, 0, 3, 10, 1, false},
		{"empty", nil, false, 0, 0, 0, 0, true},
		// Folds: preferred to the segments they cover, which may be gone,
		// still there, or put back by a late retry with other bytes.
		{"folded", []Segment{{Seq: 1, Size: 10}, fold(1, 3, 60), {Seq: 4, Size: 5}}, false, 0, 4, 65, 2, true},
		{"folded, segments not deleted yet", append(segs(10, 20, 30, 5), fold(1, 3, 60)), false, 0, 4, 65, 2, true},
		{"folded, a segment put back", []Segment{{Seq: 1, Size: 10}, {Seq: 2, Size: 7}, fold(1, 3, 60)}, false, 0, 3, 60, 1, true},
		{"longest fold wins", []Segment{{Seq: 1, Size: 10}, fold(1, 3, 60), fold(1, 5, 90)}, false, 0, 5, 90, 1, true},
		{"chained folds", []Segment{{Seq: 1, Size: 10}, fold(1, 3, 60), fold(4, 6, 30), {Seq: 7, Size: 1}}, false, 0, 7, 91, 3, true},
		{"folded and sealed", []Segment{{Seq: 1, Size: 10}, fold(1, 3, 60), {Seq: 4, Size: 0}}, true, 4, 4, 60, 1, true},
		// A seal in a slot a fold covers was won after the fold freed the
		// slot: void, the writer went on past it (issue 22).
		{"seal in a folded slot", []Segment{{Seq: 1, Size: 10}, fold(1, 4, 60), {Seq: 3, Size: 0}, {Seq: 5, Size: 5}}, false, 0, 5, 65, 2, true},
		{"void seal, then a real one", []Segment{{Seq: 1, Size: 10}, fold(1, 4, 60), {Seq: 4, Size: 0}, {Seq: 5, Size: 5}, {Seq: 6, Size: 0}}, true, 6, 6, 65, 2, true},
		{"seal just after a fold", []Segment{{Seq: 1, Size: 10}, fold(1, 4, 60), {Seq: 5, Size: 0}, {Seq: 6, Size: 5}}, true, 5, 6, 60, 1, true},
		{"gap after a fold", []Segment{{Seq: 1, Size: 10}, fold(1, 3, 60), {Seq: 5, Size: 5}}, false, 0, 5, 60, 1, false},
	} {
		v := BuildLogVersion(1, tc.segs)
		if v.Sealed != tc.sealed || v.SealSeq != tc.sealSeq || v.LastSeq != tc.lastSeq || v.Size != tc.size ||
			len(v.Segments) != tc.data || v.Contiguous() != tc.contiguous {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

func TestChooseLogVersion(t *testing.T) {
	v := func(epoch uint64, sizes ...int64) LogVersion { return BuildLogVersion(epoch, segs(sizes...)) }
	for _, tc := range []struct {
		name     string
		versions []LogVersion
		want     uint64 // epoch; 0: none
	}{
		{"one", []LogVersion{v(1, 5, 0)}, 1},
		// A deposed owner re-created a name the new owner also allocated:
		// the higher epoch's is the log.
		{"collision", []LogVersion{v(1, 5, 0), v(2, 7)}, 2},
		{"collision reversed", []LogVersion{v(3, 7), v(2, 5, 0)}, 3},
		// Data segments deleted after the grace period, seal kept: no log.
		{"deleted", []LogVersion{v(1, 0)}, 0},
		{"deleted newer, older with data", []LogVersion{v(1, 4, 0), v(2, 0)}, 1},
	} {
		got, ok := ChooseLogVersion(tc.versions)
		if (tc.want == 0) == ok || (ok && got.Epoch != tc.want) {
			t.Errorf("%s: chose %+v (found %v), want epoch %d", tc.name, got, ok, tc.want)
		}
	}
}

func TestSealGap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segs     []Segment
		from, to uint64 // 0: no gap
	}{
		{"open log", segs(10, 20), 0, 0},
		{"sealed right after the log", segs(10, 20, 0), 0, 0},
		// A sealer won slot 5 with its stride and stopped before filling
		// slot 4: the writer may still store and acknowledge it.
		{"stride seal, fill not done", segs(10, 20, 30, -1, 0), 4, 4},
		{"two empty slots", segs(10, -1, -1, 0), 2, 3},
		// The fill won a slot a fold had freed (void) and stopped there.
		{"void seal in the fill", []Segment{{Seq: 1, Size: 10}, fold(1, 6, 60), {Seq: 6, Size: 0}, {Seq: 9, Size: 0}}, 7, 8},
		{"void seal, real seal after the fold", []Segment{{Seq: 1, Size: 10}, fold(1, 6, 60), {Seq: 6, Size: 0}, {Seq: 7, Size: 0}}, 0, 0},
		{"data in the gap's first slot", segs(10, 20, -1, 30, -1, 0), 0, 0}, // a hole: the open refuses
		{"deleted log", segs(-1, 20, -1, 0), 0, 0},
		{"only a seal", segs(0), 0, 0},
	} {
		from, to, ok := BuildLogVersion(1, tc.segs).SealGap(1)
		if ok != (tc.from != 0) || from != tc.from || to != tc.to {
			t.Errorf("%s: sealGap = %d, %d, %v; want %d, %d", tc.name, from, to, ok, tc.from, tc.to)
		}
	}
}

// TestSealGapPipelined: a writer with depth D > 1 leaves holes in its
// window (RFC 0013); the sealer takes them in order from the log's end.
func TestSealGapPipelined(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segs     []Segment
		depth    uint64
		from, to uint64 // 0: no gap
	}{
		// Slot 3 in flight, 4 landed; the stride sealed 5.
		{"hole below the stride's seal", segs(10, 20, -1, 30, 0), 4, 3, 4},
		{"same at depth 1: the store lost data", segs(10, 20, -1, 30, 0), 1, 0, 0},
		{"holes at 2 and 4", segs(10, -1, 30, -1, 50, 0), 3, 2, 5},
		// The hole was sealed: the log ends there, data after it is not the log's.
		{"hole sealed", segs(10, 20, 0, 30, 0), 4, 0, 0},
		{"unsealed: the stride goes first", segs(10, 20, -1, 30), 4, 0, 0},
		{"slot 1 in flight: a deleted log", segs(-1, 20, 0), 4, 0, 0},
		{"folded prefix, then a hole", []Segment{{Seq: 1, Size: 10}, fold(1, 4, 40), {Seq: 6, Size: 5}, {Seq: 7, Size: 0}}, 4, 5, 6},
	} {
		from, to, ok := BuildLogVersion(1, tc.segs).SealGap(tc.depth)
		if ok != (tc.from != 0) || from != tc.from || to != tc.to {
			t.Errorf("%s: sealGap(%d) = %d, %d, %v; want %d, %d", tc.name, tc.depth, from, to, ok, tc.from, tc.to)
		}
	}
}

func TestLostData(t *testing.T) {
	for _, tc := range []struct {
		name  string
		segs  []Segment
		depth uint64
		want  bool
	}{
		{"window after the seal", segs(10, 20, 0, 30, 40, 50), 4, false}, // seal 3, data up to 6 = 3+4-1
		{"data D past the seal", segs(10, 20, 0, 30, 40, 50, 60), 4, true},
		{"depth 1: ignored as before", segs(10, 20, 0, 30, 40, 50, 60), 1, false},
		{"unsealed", segs(10, 20, -1, -1, -1, -1, -1, 30), 4, false},
		{"nothing after the seal", segs(10, 20, 0), 4, false},
		// Emptied by the trash loop; a seal won in freed slot 1, and a
		// deposed writer's late upload in freed slot 3 (the model's find).
		{"emptied, late upload past a seal", segs(0, -1, 30), 2, false},
	} {
		if got := BuildLogVersion(1, tc.segs).LostData(tc.depth); got != tc.want {
			t.Errorf("%s: LostData(%d) = %v, want %v", tc.name, tc.depth, got, tc.want)
		}
	}
}

func TestHeadDeleted(t *testing.T) {
	for _, c := range []struct {
		segs        []Segment
		head, contg bool
	}{
		{[]Segment{{Seq: 1, Size: 5}, {Seq: 2, Size: 5}, {Seq: 3, Size: 0}}, false, true},
		{[]Segment{{Seq: 4, Size: 5}, {Seq: 9, Size: 0}}, true, false},  // emptied, a late segment put back
		{[]Segment{{Seq: 1, Size: 5}, {Seq: 3, Size: 5}}, false, false}, // a hole: data lost
		{[]Segment{{Seq: 2, Size: 0}}, false, true},                     // seal only
		{[]Segment{fold(1, 3, 60), {Seq: 4, Size: 0}}, true, true},      // folded, then emptied
		{[]Segment{fold(1, 3, 60), {Seq: 2, Size: 5}}, true, true},      // emptied, a late retry put back
		{[]Segment{{Seq: 1, Size: 5}, fold(1, 3, 60)}, false, true},     // folded
	} {
		v := BuildLogVersion(1, c.segs)
		if v.HeadDeleted() != c.head || v.Contiguous() != c.contg {
			t.Errorf("%v: headDeleted %v contiguous %v, want %v %v", c.segs, v.HeadDeleted(), v.Contiguous(), c.head, c.contg)
		}
	}
}
