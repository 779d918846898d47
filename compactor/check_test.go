package compactor

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// ikey is an internal key: the user key, then sequence number and type.
func ikey(user string, seq uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte(user), seq<<8|1)
}

// table is an input: level, key range, sequence numbers, and entries,
// point deletions, range deletions and distinct keys (-1: no filter).
func table(name string, level int, lo, hi string, seqLo, seqHi uint64, entries, dels, rdels uint64, distinct int) rocksshim.CompactionInput {
	c := rocksshim.TableCounts{Entries: entries + rdels, Deletions: dels + rdels, RangeDeletions: rdels}
	if distinct >= 0 {
		c.FilterEntries, c.FilterWholeKeys = uint64(distinct), true
	}
	return rocksshim.CompactionInput{Name: name, Level: level, Smallest: []byte(lo), Largest: []byte(hi), SmallestSeqno: seqLo, LargestSeqno: seqHi, Props: &c}
}

// output is an output with entries, its boundaries and sequence numbers.
func output(name, lo, hi string, seqLo, seqHi, entries uint64) outputFacts {
	return outputFacts{name: name, smallest: ikey(lo, seqHi), largest: ikey(hi, seqLo), smallestSeqno: seqLo, largestSeqno: seqHi, props: shalefs.TableProps{Entries: entries}}
}

// TestCheckResult: the rule that decides whether a remote compaction's
// outputs may replace its inputs. It must accept every result a genuine
// compaction can produce and refuse the ones that lose keys or that
// RocksDB would turn into a background error.
func TestCheckResult(t *testing.T) {
	l0a := table("000011.sst", 0, "key000001", "key019999", 11, 20, 10000, 0, 0, 10000)
	l0b := table("000009.sst", 0, "key000000", "key020000", 1, 10, 10001, 0, 0, 10001)
	both := []rocksshim.CompactionInput{l0a, l0b}
	level1 := []rocksshim.CompactionInput{
		table("000016.sst", 0, "key000000", "key020000", 30, 31, 2, 0, 0, 2),
		table("000012.sst", 1, "key000000", "key008865", 1, 20, 8866, 0, 0, 8866),
		table("000013.sst", 1, "key008866", "key017676", 1, 20, 8811, 0, 0, 8811),
		table("000014.sst", 1, "key017677", "key020000", 1, 20, 2324, 0, 0, 2324),
	}
	id := [2]uint64{0x1234, 0x5678}
	withID := func(o outputFacts, result, table [2]uint64) outputFacts {
		o.resultID, o.tableID = result, table
		return o
	}
	// Level-0 inputs of epochs 7 and 5 (RocksDB 9.11 numbers tables by
	// epoch and installs the result's).
	epoch := func(in rocksshim.CompactionInput, e uint64) rocksshim.CompactionInput {
		in.EpochNumber = e
		return in
	}
	epochs := []rocksshim.CompactionInput{epoch(l0a, 7), epoch(l0b, 5)}
	withEpoch := func(o outputFacts, e uint64) outputFacts {
		o.epoch = e
		return o
	}
	for _, tc := range []struct {
		name string
		job  jobFacts
		outs []outputFacts
		want string // "" = accepted
	}{
		{"genuine: two level-0 tables into one", jobFacts{inputs: both}, []outputFacts{output("000020.sst", "key000000", "key020000", 0, 20, 20001)}, ""},
		{"genuine: split in three", jobFacts{inputs: level1}, []outputFacts{
			output("000020.sst", "key000000", "key008865", 0, 31, 8866), output("000021.sst", "key008866", "key017676", 0, 31, 8811),
			output("000022.sst", "key017677", "key020000", 0, 31, 2324)}, ""},
		{"zero outputs for 20,001 live keys (issue 22)", jobFacts{inputs: both}, nil, "hold 0 entries in 0 tables; the inputs hold at least 10001 live keys"},
		{"an output missing a key range", jobFacts{inputs: level1}, []outputFacts{
			output("000020.sst", "key000000", "key008865", 0, 31, 8866), output("000021.sst", "key008866", "key017676", 0, 31, 8811)},
			"hold 17677 entries in 2 tables; the inputs hold at least 19999 live keys (19999 distinct keys in level 1"},
		{"overwrites merge versions: two tables of the same keys", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 11, 20, 1000, 0, 0, 1000), table("000009.sst", 0, "a", "z", 1, 10, 1000, 0, 0, 1000)}},
			[]outputFacts{output("000020.sst", "a", "z", 0, 20, 1000)}, ""},
		{"multiple versions of a key in one table (snapshots) count once", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 1, 20, 1000, 0, 0, 10)}}, []outputFacts{output("000020.sst", "a", "z", 0, 20, 10)}, ""},
		{"every key deleted: no outputs", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 11, 20, 100, 100, 0, 100), table("000009.sst", 0, "a", "z", 1, 10, 100, 0, 0, 100)}}, nil, ""},
		{"deletions account for part of the drop", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 11, 20, 30, 30, 0, 30), table("000009.sst", 0, "a", "z", 1, 10, 100, 0, 0, 100)}},
			[]outputFacts{output("000020.sst", "a", "z", 0, 20, 70)}, ""},
		{"deletions account for no more than one key each", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 11, 20, 30, 30, 0, 30), table("000009.sst", 0, "a", "z", 1, 10, 100, 0, 0, 100)}},
			[]outputFacts{output("000020.sst", "a", "z", 0, 20, 69)}, "at least 70 live keys"},
		{"a range deletion may drop everything", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000011.sst", 0, "a", "z", 11, 20, 0, 0, 1, 0), table("000009.sst", 0, "a", "z", 1, 10, 100, 0, 0, 100)}}, nil, ""},
		{"a table without a filter counts as one key", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000009.sst", 1, "a", "z", 1, 10, 100, 0, 0, -1)}}, []outputFacts{output("000020.sst", "a", "b", 0, 10, 1)}, ""},
		{"a table without a filter still holds a key", jobFacts{inputs: []rocksshim.CompactionInput{
			table("000009.sst", 1, "a", "z", 1, 10, 100, 0, 0, -1)}}, nil, "at least 1 live keys"},
		{"subcompaction: only inputs wholly inside its range count", jobFacts{hasBegin: true, begin: []byte("m"), inputs: []rocksshim.CompactionInput{
			table("000009.sst", 1, "a", "n", 1, 10, 1000, 0, 0, 1000), table("000010.sst", 1, "o", "z", 1, 10, 500, 0, 0, 500)}},
			[]outputFacts{output("000020.sst", "m", "z", 0, 10, 500)}, ""},
		{"subcompaction: its own inputs must be there", jobFacts{hasBegin: true, begin: []byte("m"), inputs: []rocksshim.CompactionInput{
			table("000009.sst", 1, "a", "n", 1, 10, 1000, 0, 0, 1000), table("000010.sst", 1, "o", "z", 1, 10, 500, 0, 0, 500)}},
			[]outputFacts{output("000020.sst", "m", "z", 0, 10, 499)}, "at least 500"},
		{"subcompaction: outputs inside its range", jobFacts{hasEnd: true, end: []byte("m"), inputs: []rocksshim.CompactionInput{
			table("000009.sst", 1, "a", "z", 1, 10, 10, 0, 0, 10)}}, []outputFacts{output("000020.sst", "a", "n", 0, 10, 10)}, "outside the subcompaction's range"},
		{"output beyond the inputs' keys", jobFacts{inputs: both}, []outputFacts{output("000020.sst", "key000000", "zzz", 0, 20, 20001)}, "outside the inputs'"},
		{"output before the inputs' keys", jobFacts{inputs: both}, []outputFacts{output("000020.sst", "a", "key020000", 0, 20, 20001)}, "outside the inputs'"},
		{"overlapping outputs", jobFacts{inputs: both}, []outputFacts{
			output("000020.sst", "key000000", "key010000", 0, 20, 10001), output("000021.sst", "key010000", "key020000", 0, 20, 10001)}, "overlap"},
		{"boundaries reversed", jobFacts{inputs: both}, []outputFacts{output("000020.sst", "key020000", "key000000", 0, 20, 20001)}, "is after largest"},
		{"not internal keys", jobFacts{inputs: both}, []outputFacts{{name: "000020.sst", smallest: []byte("k"), largest: []byte("k"), props: shalefs.TableProps{Entries: 20001}}}, "not internal keys"},
		{"sequence numbers newer than the inputs'", jobFacts{inputs: both}, []outputFacts{output("000020.sst", "key000000", "key020000", 0, 21, 20001)}, "sequence numbers 0..21 are not within the inputs' 1..20"},
		{"sequence numbers older than the inputs', not zeroed", jobFacts{inputs: []rocksshim.CompactionInput{table("000011.sst", 0, "a", "z", 11, 20, 10, 0, 0, 10)}},
			[]outputFacts{output("000020.sst", "a", "z", 5, 20, 10)}, "not within"},
		{"the result's unique id is the table's", jobFacts{inputs: both}, []outputFacts{withID(output("000020.sst", "key000000", "key020000", 0, 20, 20001), id, rocksshim.ExternalUniqueID(id))}, ""},
		{"no unique id: RocksDB does not verify", jobFacts{inputs: both}, []outputFacts{withID(output("000020.sst", "key000000", "key020000", 0, 20, 20001), [2]uint64{}, [2]uint64{9, 9})}, ""},
		{"another table's unique id", jobFacts{inputs: both}, []outputFacts{withID(output("000020.sst", "key000000", "key020000", 0, 20, 20001), id, [2]uint64{9, 9})}, "unique id is not the table's"},
		{"epoch: the inputs' smallest", jobFacts{inputs: epochs}, []outputFacts{withEpoch(output("000020.sst", "key000000", "key020000", 0, 20, 20001), 5)}, ""},
		{"epoch newer than the inputs' smallest: would shadow newer level-0 tables", jobFacts{inputs: epochs},
			[]outputFacts{withEpoch(output("000020.sst", "key000000", "key020000", 0, 20, 20001), 7)}, "epoch number 7 is not the inputs' smallest, 5"},
		{"epoch missing while the inputs have one", jobFacts{inputs: epochs},
			[]outputFacts{withEpoch(output("000020.sst", "key000000", "key020000", 0, 20, 20001), 0)}, "epoch number 0 is not"},
		{"an input without properties", jobFacts{inputs: []rocksshim.CompactionInput{{Name: "000011.sst", Smallest: []byte("a"), Largest: []byte("z")}}},
			[]outputFacts{output("000020.sst", "a", "z", 0, 0, 1)}, "no table properties"},
		{"no inputs", jobFacts{}, nil, "no inputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkResult(tc.job, tc.outs)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckOutputPath(t *testing.T) {
	const job = "00000000000000000001-ab"
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/var/cache/shale/job-x/out/_shale/compactions/00000000000000000001-ab/2", true},
		{"/var/cache/shale/job-x/out/_shale/compactions/00000000000000000001-ab/1", false}, // another attempt
		{"/var/cache/shale/job-x/out/_shale/compactions/00000000000000000001-cd/2", false}, // another job
		{"_shale/compactions/00000000000000000001-ab/2", false},                            // the FileSystem needs a full path
		{"/var/cache/shale/db", false},                                                     // the database itself: its live tables
		{"/x/_shale/compactions/00000000000000000001-ab/2/", false},
	} {
		if err := checkOutputPath(tc.path, job, 2); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
}

func TestCheckOutputNames(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"000012.sst", "000013.sst"}, ""},
		{nil, ""},
		{[]string{"000012.sst", "000012.sst"}, "twice"},
		{[]string{"../000012.sst"}, "not a table name"},
		{[]string{"MANIFEST-000001"}, "not a table name"},
		{[]string{""}, "not a table name"},
	} {
		err := checkOutputNames(tc.names)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: %v, want %q", tc.names, err, tc.want)
		}
	}
}

func TestParseJobFacts(t *testing.T) {
	in := append([]byte{1, 0, 0, 0}, "output_level=3;has_begin=true;begin=6B31;has_end=false;end=;input_files=3030303031322E737374;"...)
	f, err := parseJobFacts(in, nil)
	if err != nil || f.outputLevel != 3 || !f.hasBegin || string(f.begin) != "k1" || f.hasEnd {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := parseJobFacts(append([]byte{1, 0, 0, 0}, "output_level=x;"...), nil); err == nil {
		t.Fatal("a bad output level parsed")
	}
}
