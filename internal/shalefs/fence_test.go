package shalefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

func TestChooseEpoch(t *testing.T) {
	for _, tc := range []struct {
		existing  []uint64
		requested uint64
		want      uint64
		stale     bool
	}{
		{nil, 0, 1, false},
		{nil, 7, 7, false},
		{[]uint64{1, 2}, 0, 3, false},
		{[]uint64{1, 5, 2}, 6, 6, false},
		{[]uint64{1, 5, 2}, 9, 9, false},
		{[]uint64{1, 5, 2}, 5, 0, true}, // equal is not above
		{[]uint64{1, 5, 2}, 3, 0, true},
	} {
		got, err := chooseEpoch(tc.existing, tc.requested)
		var se *ErrStaleEpoch
		if tc.stale != errors.As(err, &se) || got != tc.want {
			t.Errorf("chooseEpoch(%v, %d) = %d, %v", tc.existing, tc.requested, got, err)
		}
		if tc.stale && (se.Requested != tc.requested || se.Highest != 5) {
			t.Errorf("stale error names %d and %d", se.Requested, se.Highest)
		}
	}
}

func TestHigherEpoch(t *testing.T) {
	for _, tc := range []struct {
		existing []uint64
		mine     uint64
		want     uint64
	}{
		{[]uint64{1}, 1, 0},
		{[]uint64{1, 2}, 1, 2},
		{[]uint64{1, 3, 2}, 2, 3},
		{[]uint64{4}, 5, 0},
	} {
		if got := higherEpoch(tc.existing, tc.mine); got != tc.want {
			t.Errorf("higherEpoch(%v, %d) = %d, want %d", tc.existing, tc.mine, got, tc.want)
		}
	}
}

func segs(sizes ...int64) []segment {
	var s []segment
	for i, n := range sizes {
		if n >= 0 {
			s = append(s, segment{seq: uint64(i + 1), size: n})
		}
	}
	return s
}

func fold(first, last uint64, size int64) segment { return segment{seq: first, last: last, size: size} }

func TestBuildLogVersion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		segs       []segment
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
		{"folded", []segment{{seq: 1, size: 10}, fold(1, 3, 60), {seq: 4, size: 5}}, false, 0, 4, 65, 2, true},
		{"folded, segments not deleted yet", append(segs(10, 20, 30, 5), fold(1, 3, 60)), false, 0, 4, 65, 2, true},
		{"folded, a segment put back", []segment{{seq: 1, size: 10}, {seq: 2, size: 7}, fold(1, 3, 60)}, false, 0, 3, 60, 1, true},
		{"longest fold wins", []segment{{seq: 1, size: 10}, fold(1, 3, 60), fold(1, 5, 90)}, false, 0, 5, 90, 1, true},
		{"chained folds", []segment{{seq: 1, size: 10}, fold(1, 3, 60), fold(4, 6, 30), {seq: 7, size: 1}}, false, 0, 7, 91, 3, true},
		{"folded and sealed", []segment{{seq: 1, size: 10}, fold(1, 3, 60), {seq: 4, size: 0}}, true, 4, 4, 60, 1, true},
		// A seal in a slot a fold covers was won after the fold freed the
		// slot: void, the writer went on past it (issue 22).
		{"seal in a folded slot", []segment{{seq: 1, size: 10}, fold(1, 4, 60), {seq: 3, size: 0}, {seq: 5, size: 5}}, false, 0, 5, 65, 2, true},
		{"void seal, then a real one", []segment{{seq: 1, size: 10}, fold(1, 4, 60), {seq: 4, size: 0}, {seq: 5, size: 5}, {seq: 6, size: 0}}, true, 6, 6, 65, 2, true},
		{"seal just after a fold", []segment{{seq: 1, size: 10}, fold(1, 4, 60), {seq: 5, size: 0}, {seq: 6, size: 5}}, true, 5, 6, 60, 1, true},
		{"gap after a fold", []segment{{seq: 1, size: 10}, fold(1, 3, 60), {seq: 5, size: 5}}, false, 0, 5, 60, 1, false},
	} {
		v := buildLogVersion(1, tc.segs)
		if v.sealed != tc.sealed || v.sealSeq != tc.sealSeq || v.lastSeq != tc.lastSeq || v.size != tc.size ||
			len(v.segments) != tc.data || v.contiguous() != tc.contiguous {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

func TestChooseLogVersion(t *testing.T) {
	v := func(epoch uint64, sizes ...int64) logVersion { return buildLogVersion(epoch, segs(sizes...)) }
	for _, tc := range []struct {
		name     string
		versions []logVersion
		want     uint64 // epoch; 0: none
	}{
		{"one", []logVersion{v(1, 5, 0)}, 1},
		// A deposed owner re-created a name the new owner also allocated:
		// the higher epoch's is the log.
		{"collision", []logVersion{v(1, 5, 0), v(2, 7)}, 2},
		{"collision reversed", []logVersion{v(3, 7), v(2, 5, 0)}, 3},
		// Data segments deleted after the grace period, seal kept: no log.
		{"deleted", []logVersion{v(1, 0)}, 0},
		{"deleted newer, older with data", []logVersion{v(1, 4, 0), v(2, 0)}, 1},
	} {
		got, ok := chooseLogVersion(tc.versions)
		if (tc.want == 0) == ok || (ok && got.epoch != tc.want) {
			t.Errorf("%s: chose %+v (found %v), want epoch %d", tc.name, got, ok, tc.want)
		}
	}
}

func TestKindAndKeys(t *testing.T) {
	for name, want := range map[string]Kind{
		"000012.sst": KindTable, "000012.blob": KindTable, "000011.log": KindLog, "MANIFEST-000005": KindLog,
		"CURRENT": KindCurrent, "IDENTITY": KindObject, "OPTIONS-000007": KindObject,
		"OPTIONS-000007.dbtmp": KindLocal, "000001.dbtmp": KindLocal, "LOCK": KindLocal, "LOG": KindLocal,
		"LOG.old.123": KindLocal, "SHALE-OWNER.lock": KindLocal, "x.log": KindLocal, "_shale": KindLocal,
	} {
		if got := KindOf(name); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", name, got, want)
		}
	}
	if n, e, s, l, ok := parseSegmentKey(segmentKey("000011.log", 3, 42)); !ok || n != "000011.log" || e != 3 || s != 42 || l != 42 {
		t.Errorf("segment key round trip: %s %d %d %d %v", n, e, s, l, ok)
	}
	if n, e, s, l, ok := parseSegmentKey(foldKey("000011.log", 3, 1, 256)); !ok || n != "000011.log" || e != 3 || s != 1 || l != 256 {
		t.Errorf("fold key round trip: %s %d %d %d %v", n, e, s, l, ok)
	}
	// A fold sorts after the last segment it covers, before the next one.
	if k := foldKey("000011.log", 3, 1, 256); !(segmentKey("000011.log", 3, 256) < k && k < segmentKey("000011.log", 3, 257)) {
		t.Errorf("fold key %s does not sort between segments 256 and 257", k)
	}
	if n, e, ok := parseObjectKey(objectKey("000012.sst", 9)); !ok || n != "000012.sst" || e != 9 {
		t.Errorf("object key round trip: %s %d %v", n, e, ok)
	}
	if n, e, ok := parseTrashKey(trashKey("MANIFEST-000005", 2)); !ok || n != "MANIFEST-000005" || e != 2 {
		t.Errorf("trash key round trip: %s %d %v", n, e, ok)
	}
	if e, ok := parseEpochKey(epochKey(12)); !ok || e != 12 {
		t.Errorf("epoch key round trip: %d %v", e, ok)
	}
	for _, k := range []string{epochKey(1), trashKey("000011.log", 1), releasedKey(1), "CURRENT", "000011.log/1/2", "notes.txt/" + fmt.Sprintf("%020d", 1),
		segmentKey("000011.log", 1, 5) + foldMark + pad(5), segmentKey("000011.log", 1, 5) + foldMark + pad(9), "000012.sst/" + pad(1)} {
		if _, _, _, _, ok := parseSegmentKey(k); ok {
			t.Errorf("%q parsed as a segment", k)
		}
		if _, _, ok := parseObjectKey(k); ok {
			t.Errorf("%q parsed as an object", k)
		}
	}
}

func TestFenceErrors(t *testing.T) {
	if got := (&ErrFenced{Epoch: 1, By: 2}).Error(); got != "fenced: epoch 1 superseded by 2" {
		t.Errorf("fence message %q", got)
	}
	want := "epoch 1 is not above epoch 2 already taken in storage; refusing to open (a newer owner exists: pass --epoch greater than 2 to take over)"
	if got := (&ErrStaleEpoch{Requested: 1, Highest: 2}).Error(); got != want {
		t.Errorf("stale message %q", got)
	}
}

func TestPolicyRetries(t *testing.T) {
	p := policy{Attempt: 20 * time.Millisecond, Total: time.Second}
	// An attempt that times out is retried even if the error it returns
	// does not say it is retryable.
	calls := 0
	err := p.do(context.Background(), func(ctx context.Context) error {
		calls++
		if calls < 3 {
			<-ctx.Done()
			return errors.New("list: context deadline exceeded (as some clients report it)")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("timed-out attempts: %v after %d calls", err, calls)
	}
	// A failed condition is final at once.
	calls = 0
	err = p.do(context.Background(), func(ctx context.Context) error {
		calls++
		return fmt.Errorf("put: %w", objstore.ErrPreconditionFailed)
	})
	if !errors.Is(err, objstore.ErrPreconditionFailed) || calls != 1 {
		t.Fatalf("precondition: %v after %d calls", err, calls)
	}
	// A retryable error past the budget comes back marked retryable, so
	// RocksDB's error handler resumes later.
	calls = 0
	err = (policy{Attempt: 10 * time.Millisecond, Total: 200 * time.Millisecond}).do(context.Background(), func(ctx context.Context) error {
		calls++
		return &ioError{err: errors.New("connection refused"), retry: true}
	})
	var r interface{ Retryable() bool }
	if !errors.As(err, &r) || !r.Retryable() || calls < 2 {
		t.Fatalf("budget exhausted: %v (retryable %v) after %d calls", err, r != nil && r.Retryable(), calls)
	}
}

func TestAdmitLogVersion(t *testing.T) {
	rec := &openedRecord{Epoch: 5, Logs: []versionRef{{"000010.log", 3}, {"MANIFEST-000004", 4}}}
	for _, c := range []struct {
		name  string
		epoch uint64
		last  *openedRecord
		want  bool
	}{
		{"000010.log", 3, nil, true},                      // no takeover recorded: old layout, keep all
		{"000010.log", 3, rec, true},                      // kept by the last opener
		{"MANIFEST-000004", 4, rec, true},                 // kept by the last opener
		{"000011.log", 4, rec, false},                     // created by epoch 4 after epoch 5 listed the store
		{"000010.log", 4, rec, false},                     // same name, version the opener did not keep
		{"000012.log", 5, rec, true},                      // the opener's own log
		{"000013.log", 6, rec, true},                      // a later epoch (it never opened without a record)
		{"000010.log", 3, &openedRecord{Epoch: 4}, false}, // record of an opener that kept nothing
	} {
		if got := admitLogVersion(c.name, c.epoch, c.last); got != c.want {
			t.Errorf("admitLogVersion(%s, %d, %+v) = %v, want %v", c.name, c.epoch, c.last, got, c.want)
		}
	}
}

func TestLeaseWait(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		prev []epochClaim
		want time.Duration
	}{
		{nil, 0}, // no earlier owner, or it released the database
		{[]epochClaim{{Lease: 5 * s, LeaseMargin: s}}, 6 * s},
		{[]epochClaim{{Lease: 30 * s, LeaseMargin: 6 * s}}, 36 * s},             // rollout from a longer lease
		{[]epochClaim{{}}, 6 * s},                                               // claim without a lease: ours
		{[]epochClaim{{Lease: 30 * s, LeaseMargin: 6 * s}, {Lease: s}}, 36 * s}, // an older owner may still serve
	} {
		if got := leaseWait(5*s, s, c.prev); got != c.want {
			t.Errorf("leaseWait(5s, 1s, %+v) = %v, want %v", c.prev, got, c.want)
		}
	}
}

func TestCurrentEpoch(t *testing.T) {
	for obj, want := range map[string]uint64{
		"MANIFEST-000005\nshale epoch=3 write=ab12\n":  3,
		"MANIFEST-000005\nshale epoch=12 write=ab12\n": 12,
		"MANIFEST-000005\n":                            0,
		"MANIFEST-000005\nshale epoch=x write=1\n":     0,
	} {
		if got := currentEpoch([]byte(obj)); got != want {
			t.Errorf("currentEpoch(%q) = %d, want %d", obj, got, want)
		}
	}
}

func TestSealGap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		segs     []segment
		from, to uint64 // 0: no gap
	}{
		{"open log", segs(10, 20), 0, 0},
		{"sealed right after the log", segs(10, 20, 0), 0, 0},
		// A sealer won slot 5 with its stride and stopped before filling
		// slot 4: the writer may still store and acknowledge it.
		{"stride seal, fill not done", segs(10, 20, 30, -1, 0), 4, 4},
		{"two empty slots", segs(10, -1, -1, 0), 2, 3},
		// The fill won a slot a fold had freed (void) and stopped there.
		{"void seal in the fill", []segment{{seq: 1, size: 10}, fold(1, 6, 60), {seq: 6, size: 0}, {seq: 9, size: 0}}, 7, 8},
		{"void seal, real seal after the fold", []segment{{seq: 1, size: 10}, fold(1, 6, 60), {seq: 6, size: 0}, {seq: 7, size: 0}}, 0, 0},
		{"data in the gap's first slot", segs(10, 20, -1, 30, -1, 0), 0, 0}, // a hole: the open refuses
		{"deleted log", segs(-1, 20, -1, 0), 0, 0},
		{"only a seal", segs(0), 0, 0},
	} {
		from, to, ok := buildLogVersion(1, tc.segs).sealGap()
		if ok != (tc.from != 0) || from != tc.from || to != tc.to {
			t.Errorf("%s: sealGap = %d, %d, %v; want %d, %d", tc.name, from, to, ok, tc.from, tc.to)
		}
	}
}

func TestHeadDeleted(t *testing.T) {
	for _, c := range []struct {
		segs        []segment
		head, contg bool
	}{
		{[]segment{{seq: 1, size: 5}, {seq: 2, size: 5}, {seq: 3, size: 0}}, false, true},
		{[]segment{{seq: 4, size: 5}, {seq: 9, size: 0}}, true, false},  // emptied, a late segment put back
		{[]segment{{seq: 1, size: 5}, {seq: 3, size: 5}}, false, false}, // a hole: data lost
		{[]segment{{seq: 2, size: 0}}, false, true},                     // seal only
		{[]segment{fold(1, 3, 60), {seq: 4, size: 0}}, true, true},      // folded, then emptied
		{[]segment{fold(1, 3, 60), {seq: 2, size: 5}}, true, true},      // emptied, a late retry put back
		{[]segment{{seq: 1, size: 5}, fold(1, 3, 60)}, false, true},     // folded
	} {
		v := buildLogVersion(1, c.segs)
		if v.headDeleted() != c.head || v.contiguous() != c.contg {
			t.Errorf("%v: headDeleted %v contiguous %v, want %v %v", c.segs, v.headDeleted(), v.contiguous(), c.head, c.contg)
		}
	}
}

func TestDefinitelyNotStored(t *testing.T) {
	fe := &ErrFenced{Epoch: 1, By: 2}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fe, true},
		{fmt.Errorf("sync: %w", fe), true},
		{&ErrOutcomeUnknown{Fence: fe}, false},
		{retryLater(errors.New("timeout")), false},
		{errors.New("segment holds bytes this owner did not write"), false},
	} {
		if got := definitelyNotStored(c.err); got != c.want {
			t.Errorf("definitelyNotStored(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestFileOfKey(t *testing.T) {
	for key, want := range map[string]string{
		objectKey("000012.sst", 3):            "000012.sst",
		objectKey("OPTIONS-000007", 3):        "OPTIONS-000007",
		segmentKey("000011.log", 3, 9):        "000011.log",
		foldKey("MANIFEST-000005", 3, 1, 256): "MANIFEST-000005",
		"CURRENT":                             "CURRENT",
		epochKey(3):                           "",
		trashKey("000012.sst", 3):             "",
		"000012.sst/" + pad(3):                "",
		"notes.txt":                           "",
	} {
		if got := FileOfKey(key); got != want {
			t.Errorf("FileOfKey(%q) = %q, want %q", key, got, want)
		}
	}
}
