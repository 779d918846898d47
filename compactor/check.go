package compactor

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Judging a remote compaction's result before RocksDB installs it. RocksDB
// 9.11 installs what Wait returns as it is (as 7.8.3 did with
// WaitForCompleteV2): the outputs it names (none is fine by RocksDB), with
// the boundaries, sequence numbers, epoch numbers and unique ids the result
// claims, and then deletes the inputs. Whoever
// sent the result, the primary installs it only when it accounts for the
// inputs; otherwise RocksDB compacts locally (docs/compaction.md, "What
// the primary checks").

// jobFacts is what the primary knows of a job from RocksDB, before any
// worker touched it.
type jobFacts struct {
	outputLevel int
	// A subcompaction's key range: [begin, end) of user keys.
	hasBegin, hasEnd bool
	begin, end       []byte
	inputs           []rocksshim.CompactionInput
}

// outputFacts is one output: what the result claims, and the properties
// of the table the store holds under its name.
type outputFacts struct {
	name                        string
	smallest, largest           []byte // internal keys, from the result
	smallestSeqno, largestSeqno uint64
	epoch                       uint64    // the epoch number RocksDB installs
	resultID                    [2]uint64 // internal form; {0, 0}: none
	props                       shalefs.TableProps
	tableID                     [2]uint64 // external form, from props
	tableIDErr                  error
}

// parseJobFacts reads a job's output level and key range from RocksDB's
// serialized CompactionServiceInput.
func parseJobFacts(input []byte, inputs []rocksshim.CompactionInput) (jobFacts, error) {
	f := jobFacts{inputs: inputs}
	level, ok, err := rocksshim.CompactionField(input, "output_level")
	if err != nil {
		return f, err
	}
	if f.outputLevel, err = strconv.Atoi(level); !ok || err != nil {
		return f, fmt.Errorf("compaction input: output_level %q", level)
	}
	for _, b := range []struct {
		has  *bool
		key  *[]byte
		name string
	}{{&f.hasBegin, &f.begin, "begin"}, {&f.hasEnd, &f.end, "end"}} {
		has, _, err := rocksshim.CompactionField(input, "has_"+b.name)
		if err != nil {
			return f, err
		}
		if *b.has = has == "true"; !*b.has {
			continue
		}
		v, _, err := rocksshim.CompactionField(input, b.name)
		if err != nil {
			return f, err
		}
		if *b.key, err = hex.DecodeString(v); err != nil {
			return f, fmt.Errorf("compaction input: %s: %w", b.name, err)
		}
	}
	return f, nil
}

// checkOutputPath: RocksDB renames <output_path>/<name> for each output,
// and the FileSystem finds the job and attempt in that path. Anything but
// this attempt's directory would name other files (another job's outputs,
// or with a path inside the database, its live tables).
func checkOutputPath(path, job string, attempt uint32) error {
	want := "/" + strings.TrimSuffix(layout.JobDir(job, attempt), "/")
	if !strings.HasSuffix(path, want) {
		return fmt.Errorf("the result's output path %q is not this attempt's directory (…%s)", path, want)
	}
	return nil
}

// checkOutputNames: each output is a table name, named once.
func checkOutputNames(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if strings.Contains(n, "/") || layout.KindOf(n) != layout.KindTable {
			return fmt.Errorf("the result names output %q, not a table name", n)
		}
		if seen[n] {
			return fmt.Errorf("the result names output %s twice", n)
		}
		seen[n] = true
	}
	return nil
}

// checkResult decides whether outputs can replace the job's inputs:
//
//   - every input's table properties are known (else nothing can be judged);
//   - each output's claimed boundaries are internal keys in order, inside
//     the inputs' key range (and the subcompaction's), and the outputs do
//     not overlap: boundaries outside would overlap the level's other
//     tables, which RocksDB's consistency check turns into a background
//     error, and boundaries narrower than the table hide its keys;
//   - each output's sequence numbers are no newer than the inputs' (a newer
//     level-0 table would shadow writes made after it);
//   - each output's epoch number is the inputs' smallest, which is what a
//     compaction gives its outputs (Compaction::MinInputFileEpochNumber):
//     reads order level-0 tables by epoch, so a larger one would shadow
//     newer writes, and a level-0 table of another's epoch that overlaps it
//     is a background error;
//   - each output's unique id, if the result gives one, is the table's
//     (RocksDB checks it when it opens the table: a mismatch is a
//     background error);
//   - the outputs hold at least liveKeysAtLeast entries: the user keys the
//     inputs must still hold after any legitimate compaction.
func checkResult(job jobFacts, outs []outputFacts) error {
	if len(job.inputs) == 0 {
		return errors.New("the job has no inputs to judge its result by")
	}
	for _, in := range job.inputs {
		if in.Props == nil {
			return fmt.Errorf("input %s has no table properties to judge the result by", in.Name)
		}
	}
	lo, hi := job.inputs[0].Smallest, job.inputs[0].Largest
	var maxSeqno uint64
	minSeqno := job.inputs[0].SmallestSeqno
	minEpoch := job.inputs[0].EpochNumber
	for _, in := range job.inputs {
		if bytes.Compare(in.Smallest, lo) < 0 {
			lo = in.Smallest
		}
		if bytes.Compare(in.Largest, hi) > 0 {
			hi = in.Largest
		}
		maxSeqno = max(maxSeqno, in.LargestSeqno)
		minSeqno = min(minSeqno, in.SmallestSeqno)
		minEpoch = min(minEpoch, in.EpochNumber)
	}
	sorted := make([]outputFacts, len(outs))
	copy(sorted, outs)
	for _, o := range sorted {
		if len(o.smallest) < 8 || len(o.largest) < 8 {
			return fmt.Errorf("output %s: the result's boundaries are not internal keys", o.name)
		}
		if compareInternal(o.smallest, o.largest) > 0 {
			return fmt.Errorf("output %s: smallest key %q is after largest %q", o.name, userKey(o.smallest), userKey(o.largest))
		}
		su, lu := userKey(o.smallest), userKey(o.largest)
		if bytes.Compare(su, lo) < 0 || bytes.Compare(lu, hi) > 0 {
			return fmt.Errorf("output %s: keys %q..%q are outside the inputs' %q..%q", o.name, su, lu, lo, hi)
		}
		if job.hasBegin && bytes.Compare(su, job.begin) < 0 || job.hasEnd && bytes.Compare(lu, job.end) > 0 {
			return fmt.Errorf("output %s: keys %q..%q are outside the subcompaction's range", o.name, su, lu)
		}
		if o.smallestSeqno > o.largestSeqno || o.largestSeqno > maxSeqno || (o.smallestSeqno != 0 && o.smallestSeqno < minSeqno) {
			return fmt.Errorf("output %s: sequence numbers %d..%d are not within the inputs' %d..%d", o.name, o.smallestSeqno, o.largestSeqno, minSeqno, maxSeqno)
		}
		if o.epoch != minEpoch {
			return fmt.Errorf("output %s: epoch number %d is not the inputs' smallest, %d", o.name, o.epoch, minEpoch)
		}
		if o.resultID != ([2]uint64{}) {
			if o.tableIDErr != nil {
				return fmt.Errorf("output %s: the result gives a unique id and the table's cannot be computed: %w", o.name, o.tableIDErr)
			}
			if rocksshim.ExternalUniqueID(o.resultID) != o.tableID {
				return fmt.Errorf("output %s: the result's unique id is not the table's", o.name)
			}
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return compareInternal(sorted[i].smallest, sorted[j].smallest) < 0 })
	for i := 1; i < len(sorted); i++ {
		if compareInternal(sorted[i-1].largest, sorted[i].smallest) >= 0 {
			return fmt.Errorf("outputs %s and %s overlap", sorted[i-1].name, sorted[i].name)
		}
	}
	need, why := liveKeysAtLeast(job)
	var have uint64
	for _, o := range outs {
		have += o.props.Entries - o.props.RangeDeletions
	}
	if have < need {
		return fmt.Errorf("the outputs hold %d entries in %d tables; the inputs hold at least %d live keys (%s)", have, len(outs), need, why)
	}
	return nil
}

// liveKeysAtLeast is a lower bound on the user keys that a compaction of
// the job's inputs keeps (each needs at least one entry in the outputs),
// and how it was found. A compaction may drop a key only for a deletion
// among its inputs or, at the bottom, a tombstone with what it deletes;
// it merges versions of a key into one. So:
//
//   - the distinct user keys of a table are its filter's entries when the
//     filter holds whole keys (RocksDB adds each point entry's user key,
//     skipping a repeat of the previous one), else at least 1 if it has a
//     point entry;
//   - tables of one level above 0 do not overlap but for a boundary key,
//     so their distinct keys add up (less one per boundary); level 0
//     tables overlap, so the largest counts;
//   - each point deletion (tombstone or SingleDelete) among the inputs
//     removes at most one user key;
//   - a range deletion can remove any number: no bound;
//   - in a subcompaction only inputs wholly inside its range count (their
//     keys all belong to this job); deletions count from every input.
//
// Nothing is assumed about overwrites (they only merge versions) or
// snapshots (they only keep more). Shale sets no compaction filter or
// merge operator; a compaction filter could drop keys this does not see,
// and such a compaction would be refused and run locally.
func liveKeysAtLeast(job jobFacts) (uint64, string) {
	var deletions uint64
	for _, in := range job.inputs {
		if in.Props.RangeDeletions > 0 {
			return 0, "the inputs have range deletions"
		}
		deletions += in.Props.Deletions
	}
	levels := map[int][]uint64{}
	for _, in := range job.inputs {
		if job.hasBegin && bytes.Compare(in.Smallest, job.begin) < 0 || job.hasEnd && bytes.Compare(in.Largest, job.end) >= 0 {
			continue
		}
		levels[in.Level] = append(levels[in.Level], distinctKeys(*in.Props))
	}
	var best uint64
	bestLevel := -1
	for level, ks := range levels {
		var n uint64
		if level == 0 {
			for _, k := range ks {
				n = max(n, k)
			}
		} else {
			for _, k := range ks {
				n += k
			}
			n -= min(n, uint64(len(ks)-1))
		}
		if n > best || n == best && level < bestLevel {
			best, bestLevel = n, level
		}
	}
	if best <= deletions {
		return 0, fmt.Sprintf("%d point deletions can remove every key", deletions)
	}
	return best - deletions, fmt.Sprintf("%d distinct keys in level %d, less %d point deletions", best, bestLevel, deletions)
}

// distinctKeys is a lower bound on a table's distinct user keys.
func distinctKeys(p rocksshim.TableCounts) uint64 {
	points := p.Entries - min(p.Entries, p.RangeDeletions)
	if p.FilterWholeKeys && p.FilterEntries > 0 {
		return min(p.FilterEntries, points)
	}
	return min(points, 1)
}

// userKey strips an internal key's 8-byte trailer (sequence number and
// type).
func userKey(ikey []byte) []byte { return ikey[:len(ikey)-8] }

// compareInternal orders internal keys as RocksDB's InternalKeyComparator
// over the bytewise comparator: user key ascending, then trailer
// (sequence number and type) descending.
func compareInternal(a, b []byte) int {
	if c := bytes.Compare(userKey(a), userKey(b)); c != 0 {
		return c
	}
	ta, tb := binary.LittleEndian.Uint64(a[len(a)-8:]), binary.LittleEndian.Uint64(b[len(b)-8:])
	switch {
	case ta > tb:
		return -1
	case ta < tb:
		return 1
	}
	return 0
}
