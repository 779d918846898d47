package layout

import (
	"math"
	"math/rand/v2"
	"testing"
)

// numbers are the epochs and slots the round trips use: the edges and a
// fixed random sample.
func numbers() []uint64 {
	ns := []uint64{0, 1, 2, 9, 10, 255, 256, 1 << 32, math.MaxUint64 - 1, math.MaxUint64}
	r := rand.New(rand.NewPCG(24, 1))
	for range 50 {
		ns = append(ns, r.Uint64()>>r.UintN(64))
	}
	return ns
}

// Names of each kind, as RocksDB makes them.
var (
	logNames    = []string{"000011.log", "000001.log", "MANIFEST-000005", "MANIFEST-123456"}
	tableNames  = []string{"000012.sst", "999999.sst", "000013.blob"}
	objectNames = []string{"IDENTITY", "OPTIONS-000007", "OPTIONS-123"}
)

// TestKeyExamples pins the keys as stores hold them: a change here is a
// change of the stored layout, which every existing database would lose.
func TestKeyExamples(t *testing.T) {
	for got, want := range map[string]string{
		EpochKey(3):                            "_shale/epoch/00000000000000000003",
		OpenedKey(3):                           "_shale/opened/00000000000000000003",
		ReleasedKey(3):                         "_shale/released/00000000000000000003",
		ObjectKey("000012.sst", 9):             "000012.sst.00000000000000000009",
		ObjectKey("OPTIONS-000007", 9):         "OPTIONS-000007.00000000000000000009",
		LogPrefix("000011.log"):                "000011.log/",
		LogVersionPrefix("000011.log", 3):      "000011.log/00000000000000000003/",
		SegmentKey("000011.log", 3, 42):        "000011.log/00000000000000000003/00000000000000000042",
		FoldKey("MANIFEST-000005", 3, 1, 256):  "MANIFEST-000005/00000000000000000003/00000000000000000256.fold-00000000000000000001",
		TrashKey("000012.sst", 2):              "_shale/trash/000012.sst/00000000000000000002",
		ReaderLeaseKey("host-12-ab34cd"):       "_shale/readers/host-12-ab34cd",
		JobID(7, "feed"):                       "00000000000000000007-feed",
		JobPrefix(JobID(7, "feed")):            "_shale/compactions/00000000000000000007-feed/",
		JobDir(JobID(7, "feed"), 2):            "_shale/compactions/00000000000000000007-feed/2/",
		JobOutputKey(JobID(7, "feed"), 2, "x"): "_shale/compactions/00000000000000000007-feed/2/x",
		OwnerKey:                               "_shale/owner",
		TiersKey:                               "_shale/tiers",
		TiersPairedKey:                         "_shale/tiers-paired",
		ColdMarkerKey:                          "_shale/tier",
		CurrentKey:                             "CURRENT",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
}

// TestKeyRoundTrips: every key kind parses back to what formatted it.
func TestKeyRoundTrips(t *testing.T) {
	for _, n := range numbers() {
		if got, ok := ParseNumber(FormatNumber(n)); !ok || got != n {
			t.Errorf("number %d: %d %v", n, got, ok)
		}
		for what, kind := range map[string]struct {
			format func(uint64) string
			parse  func(string) (uint64, bool)
		}{
			"epoch":    {EpochKey, ParseEpochKey},
			"opened":   {OpenedKey, ParseOpenedKey},
			"released": {ReleasedKey, ParseReleasedKey},
		} {
			if got, ok := kind.parse(kind.format(n)); !ok || got != n {
				t.Errorf("%s key of %d: %d %v", what, n, got, ok)
			}
		}
		for _, name := range append(append([]string{}, tableNames...), objectNames...) {
			if gn, ge, ok := ParseObjectKey(ObjectKey(name, n)); !ok || gn != name || ge != n {
				t.Errorf("object key %s@%d: %s %d %v", name, n, gn, ge, ok)
			}
		}
		for _, name := range logNames {
			if ge, ok := ParseLogVersionPrefix(name, LogVersionPrefix(name, n)); !ok || ge != n {
				t.Errorf("log version prefix %s@%d: %d %v", name, n, ge, ok)
			}
			for _, seq := range []uint64{1, 2, n} {
				if gn, ge, f, l, ok := ParseSegmentKey(SegmentKey(name, n, seq)); !ok || gn != name || ge != n || f != seq || l != seq {
					t.Errorf("segment key %s@%d/%d: %s %d %d %d %v", name, n, seq, gn, ge, f, l, ok)
				}
				if seq == math.MaxUint64 {
					continue
				}
				if gn, ge, f, l, ok := ParseSegmentKey(FoldKey(name, n, seq, seq+1+seq%7)); !ok || gn != name || ge != n || f != seq || l != seq+1+seq%7 {
					t.Errorf("fold key %s@%d/%d: %s %d %d %d %v", name, n, seq, gn, ge, f, l, ok)
				}
			}
		}
		for _, name := range append(append(append([]string{}, tableNames...), objectNames...), logNames...) {
			if gn, ge, ok := ParseTrashKey(TrashKey(name, n)); !ok || gn != name || ge != n {
				t.Errorf("trash key %s@%d: %s %d %v", name, n, gn, ge, ok)
			}
		}
		job := JobID(n, "0123abcd")
		if ge, nonce, ok := ParseJobID(job); !ok || ge != n || nonce != "0123abcd" {
			t.Errorf("job %s: %d %q %v", job, ge, nonce, ok)
		}
		if got := JobOfKey(JobOutputKey(job, 3, "000012.sst")); got != job {
			t.Errorf("job of an output key of %s: %q", job, got)
		}
		for _, attempt := range []uint32{1, 2, math.MaxUint32} {
			gj, ga, gn, ok := ParseJobOutputKey(JobOutputKey(job, attempt, "000012.sst"))
			if !ok || gj != job || ga != attempt || gn != "000012.sst" {
				t.Errorf("job output key %s/%d: %q %d %q %v", job, attempt, gj, ga, gn, ok)
			}
		}
	}
	for _, id := range []string{"host-12-ab34cd", "a", "shale-secondary-0-1-ff00aa"} {
		if got, ok := ParseReaderLeaseKey(ReaderLeaseKey(id)); !ok || got != id {
			t.Errorf("reader lease key %s: %q %v", id, got, ok)
		}
	}
}

// TestKeyOrder: keys sort as their numbers do, and a fold right after the
// last segment it covers.
func TestKeyOrder(t *testing.T) {
	ns := numbers()
	for i := range ns {
		for j := range ns {
			a, b := ns[i], ns[j]
			if (a < b) != (EpochKey(a) < EpochKey(b)) || (a < b) != (SegmentKey("000011.log", 1, a) < SegmentKey("000011.log", 1, b)) {
				t.Fatalf("%d < %d is not the order of their keys", a, b)
			}
		}
	}
	// A fold sorts after the last segment it covers, before the next one.
	if k := FoldKey("000011.log", 3, 1, 256); !(SegmentKey("000011.log", 3, 256) < k && k < SegmentKey("000011.log", 3, 257)) {
		t.Errorf("fold key %s does not sort between segments 256 and 257", k)
	}
}

// TestKeyRefusals: malformed keys of every kind are refused.
func TestKeyRefusals(t *testing.T) {
	pad := FormatNumber
	for _, s := range []string{"", "1", "12", pad(1)[1:], pad(1) + "0", "-" + pad(1)[1:], "+" + pad(1)[1:], "0000000000000000000x", "99999999999999999999"} {
		if _, ok := ParseNumber(s); ok {
			t.Errorf("ParseNumber(%q) accepted", s)
		}
	}
	// Epoch keys: what the operator reads the claims with, too.
	for _, k := range []string{"_shale/epoch/", "_shale/epoch/x", "_shale/epoch/1/2", "_shale/epoch/-1", "_shale/epoch/12",
		OpenedKey(1), ReleasedKey(1), "epoch/" + pad(1), "_shale/epoch/" + pad(1) + "/"} {
		if _, ok := ParseEpochKey(k); ok {
			t.Errorf("ParseEpochKey(%q) accepted", k)
		}
	}
	for _, k := range []string{EpochKey(1), ReleasedKey(1), "_shale/opened/1"} {
		if _, ok := ParseOpenedKey(k); ok {
			t.Errorf("ParseOpenedKey(%q) accepted", k)
		}
	}
	for _, k := range []string{EpochKey(1), OpenedKey(1), "_shale/released/"} {
		if _, ok := ParseReleasedKey(k); ok {
			t.Errorf("ParseReleasedKey(%q) accepted", k)
		}
	}
	// No key of another kind, or half of one, is a segment or a table.
	for _, k := range []string{EpochKey(1), TrashKey("000011.log", 1), ReleasedKey(1), "CURRENT", "000011.log/1/2", "notes.txt/" + pad(1),
		SegmentKey("000011.log", 1, 5) + foldMark + pad(5), SegmentKey("000011.log", 1, 5) + foldMark + pad(9), "000012.sst/" + pad(1),
		"LOG/" + pad(1) + "/" + pad(1), "000011.log/" + pad(1), "000011.log/" + pad(1) + "/" + pad(1) + "/x",
		"000011.log/" + pad(1) + "/" + pad(3) + foldMark + "1", "LOCK." + pad(1), "000012.sst." + pad(1)[1:], "000012.sst", "x.log." + pad(1),
		JobOutputKey(JobID(1, "a"), 1, "000012.sst"), ReaderLeaseKey("r")} {
		if _, _, _, _, ok := ParseSegmentKey(k); ok {
			t.Errorf("%q parsed as a segment", k)
		}
		if _, _, ok := ParseObjectKey(k); ok {
			t.Errorf("%q parsed as an object", k)
		}
	}
	for _, k := range []string{"000011.log/" + pad(1), "000011.log/1/", "000012.log/" + pad(1) + "/", "000011.log/" + pad(1) + "/x/", "000011.log/"} {
		if _, ok := ParseLogVersionPrefix("000011.log", k); ok {
			t.Errorf("ParseLogVersionPrefix(000011.log, %q) accepted", k)
		}
	}
	for _, k := range []string{"_shale/trash/000012.sst", "_shale/trash/000012.sst/1", "_shale/trash/000012.sst/" + pad(1) + "/x", "trash/000012.sst/" + pad(1), ObjectKey("000012.sst", 1)} {
		if _, _, ok := ParseTrashKey(k); ok {
			t.Errorf("ParseTrashKey(%q) accepted", k)
		}
	}
	for _, k := range []string{"_shale/readers/", "_shale/readers/a/b", "_shale/reader/a", "a"} {
		if _, ok := ParseReaderLeaseKey(k); ok {
			t.Errorf("ParseReaderLeaseKey(%q) accepted", k)
		}
	}
	if got := JobOfKey(TrashKey("000012.sst", 1)); got != "" {
		t.Errorf("JobOfKey of a trash key: %q", got)
	}
}

// TestKindAndKeys classifies RocksDB's file names (moved from shalefs).
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
	for key, want := range map[string]bool{
		"000012.sst/": true, "OPTIONS-000007/": true, "000011.log/": false, "000012.sst": false, "_shale/": false,
	} {
		if got := IsLegacyTableDir(key); got != want {
			t.Errorf("IsLegacyTableDir(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestFileOfKey(t *testing.T) {
	for key, want := range map[string]string{
		ObjectKey("000012.sst", 3):            "000012.sst",
		ObjectKey("OPTIONS-000007", 3):        "OPTIONS-000007",
		SegmentKey("000011.log", 3, 9):        "000011.log",
		FoldKey("MANIFEST-000005", 3, 1, 256): "MANIFEST-000005",
		"CURRENT":                             "CURRENT",
		EpochKey(3):                           "",
		TrashKey("000012.sst", 3):             "",
		"000012.sst/" + FormatNumber(3):       "",
		"notes.txt":                           "",
	} {
		if got := FileOfKey(key); got != want {
			t.Errorf("FileOfKey(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestJobNames (moved from shalefs): which job names and output keys a
// worker's writes and an owner's installs accept.
func TestJobNames(t *testing.T) {
	pad := FormatNumber
	for _, tc := range []struct {
		job   string
		epoch uint64
		ok    bool
	}{
		{pad(3) + "-0123abcd", 3, true},
		{pad(3), 0, false},            // no nonce
		{pad(3) + "-", 0, false},      // empty nonce
		{"3-abc", 0, false},           // epoch not 20 digits
		{pad(3) + "-a/b", 0, false},   // a path, not a name
		{pad(3) + "-a.sst", 0, false}, // dots are for tables
		{"", 0, false},
	} {
		e, ok := JobEpoch(tc.job)
		if e != tc.epoch || ok != tc.ok {
			t.Errorf("JobEpoch(%q) = %d, %v; want %d, %v", tc.job, e, ok, tc.epoch, tc.ok)
		}
	}
	job := pad(7) + "-feed"
	for _, tc := range []struct {
		key     string
		attempt uint32
		name    string
		ok      bool
	}{
		{JobOutputKey(job, 2, "000012.sst"), 2, "000012.sst", true},
		{"_shale/compactions/" + job + "/2/LOG", 0, "", false},        // not a table
		{"_shale/compactions/" + job + "/0/000012.sst", 0, "", false}, // attempts start at 1
		{"_shale/compactions/" + job + "/x/000012.sst", 0, "", false},
		{"_shale/compactions/" + job + "/000012.sst", 0, "", false}, // no attempt
		{"_shale/compactions/7-feed/2/000012.sst", 0, "", false},    // bad job
		{"_shale/trash/000012.sst/" + pad(1), 0, "", false},
		{"000012.sst." + pad(7), 0, "", false},
	} {
		j, a, n, ok := ParseJobOutputKey(tc.key)
		if ok != tc.ok || ok && (j != job || a != tc.attempt || n != tc.name) {
			t.Errorf("ParseJobOutputKey(%q) = %q %d %q %v", tc.key, j, a, n, ok)
		}
	}
}

// TestEpochKeyOfOperator: the operator reads the claims through
// ParseEpochKey (its own copy is gone); the cases its copy was tested with.
// "_shale/epoch/12" was accepted by that copy only: the storage layer never
// counted it as a claim, and now neither does the operator.
func TestEpochKeyOfOperator(t *testing.T) {
	if got, ok := ParseEpochKey("_shale/epoch/00000000000000000007"); !ok || got != 7 {
		t.Errorf("ParseEpochKey = %d, %v; want 7", got, ok)
	}
	for _, in := range []string{"_shale/epoch/", "_shale/epoch/x", "_shale/epoch/1/2", "_shale/opened/00000000000000000001", "_shale/epoch/-1", "_shale/epoch/12"} {
		if _, ok := ParseEpochKey(in); ok {
			t.Errorf("ParseEpochKey(%q) accepted", in)
		}
	}
}
