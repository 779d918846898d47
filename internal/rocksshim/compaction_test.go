package rocksshim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// inProcessService runs each job at once with OpenAndCompact on the same
// (local) directory: the shim's two halves without the network.
type inProcessService struct {
	t       *testing.T
	dir     string
	mu      sync.Mutex
	results map[uint64][]byte
	outputs map[string]SSTProps // the outputs' properties, before RocksDB installs them
	jobs    []CompactionJob
	useLoc  bool
}

func (s *inProcessService) Start(job CompactionJob) CompactionStatus {
	s.mu.Lock()
	s.jobs = append(s.jobs, job)
	s.mu.Unlock()
	if s.useLoc {
		return CompactionUseLocal
	}
	env := grocksdb.NewDefaultOptions()
	defer env.Destroy()
	out := filepath.Join(s.dir+"-out", fmt.Sprint(job.ID))
	os.MkdirAll(filepath.Dir(out), 0o755)
	cancel := NewCancel()
	defer cancel.Close()
	res, err := OpenAndCompact(env, s.dir, out, job.Input, job.TableOptions, cancel)
	if err != nil {
		s.t.Errorf("OpenAndCompact: %v", err)
		return CompactionUseLocal
	}
	names, err := CompactionOutputFiles(res)
	if err != nil {
		s.t.Error(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results[job.ID] = res
	for _, n := range names {
		p, err := SSTProperties(filepath.Join(out, n))
		if err != nil {
			s.t.Error(err)
		}
		if s.outputs == nil {
			s.outputs = map[string]SSTProps{}
		}
		s.outputs[n] = p
	}
	return CompactionSuccess
}

func (s *inProcessService) Wait(job CompactionJob) (CompactionStatus, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[job.ID]
	if !ok {
		return CompactionUseLocal, nil
	}
	return CompactionSuccess, r
}

func openWithService(t *testing.T, dir string, svc CompactionService) (*grocksdb.DB, func()) {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetTargetFileSizeBase(4 << 10) // several outputs per compaction
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	bbto.SetBlockSize(8 << 10)
	SetBloomFilter(bbto, 10)
	opts.SetBlockBasedTableFactory(bbto)
	a, err := AttachCompactionService(opts, svc)
	if err != nil {
		t.Fatal(err)
	}
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		t.Fatal(err)
	}
	return db, func() { db.Close(); a.Close(); opts.Destroy(); bbto.Destroy() }
}

func fill(t *testing.T, db *grocksdb.DB, rounds int) map[string]string {
	t.Helper()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	model := map[string]string{}
	for r := 0; r < rounds; r++ {
		for i := 0; i < 500; i++ {
			k, v := fmt.Sprintf("k%05d", (i*7+r*13)%900), fmt.Sprintf("v%d-%d", r, i)
			if err := db.Put(wo, []byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			model[k] = v
		}
		if err := db.Flush(fo); err != nil {
			t.Fatal(err)
		}
	}
	return model
}

func checkModel(t *testing.T, db *grocksdb.DB, model map[string]string) {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	it := db.NewIterator(ro)
	defer it.Close()
	n := 0
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k, v := string(it.Key().Data()), string(it.Value().Data())
		if model[k] != v {
			t.Fatalf("%s = %q, want %q", k, v, model[k])
		}
		n++
	}
	if n != len(model) {
		t.Fatalf("%d keys, want %d", n, len(model))
	}
}

func TestRemoteCompactionInProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	svc := &inProcessService{t: t, dir: dir, results: map[uint64][]byte{}}
	db, closeDB := openWithService(t, dir, svc)
	defer closeDB()
	model := fill(t, db, 4)
	db.CompactRange(grocksdb.Range{})
	checkModel(t, db, model)
	if len(svc.jobs) == 0 {
		t.Fatal("no compaction went through the service")
	}
	job := svc.jobs[0]
	files, err := CompactionInputFiles(job.Input)
	if err != nil || len(files) < 2 || !strings.HasSuffix(files[0], ".sst") {
		t.Fatalf("input files %v, %v", files, err)
	}
	if !strings.Contains(job.TableOptions, "block_size=8192") || !strings.Contains(job.TableOptions, "filter_policy=bloomfilter:10:false;") {
		t.Fatalf("table options lack the block size or filter: %s", job.TableOptions)
	}
	res := svc.results[job.ID]
	path, ok, err := CompactionOutputPath(res)
	if err != nil || !ok || path != filepath.Join(dir+"-out", fmt.Sprint(job.ID)) {
		t.Fatalf("output_path %q %v %v", path, ok, err)
	}
	outs, err := CompactionOutputFiles(res)
	if err != nil || len(outs) < 2 {
		t.Fatalf("output files %v %v (result %q)", outs, err, res)
	}
	if n := CompactionResultUint(res, "bytes_written"); n == 0 {
		t.Fatalf("bytes_written = 0 in %q", res)
	}
	// The inputs as RocksDB described them to the service.
	if len(job.Inputs) != len(files) {
		t.Fatalf("Start got %d inputs described, the job has %d", len(job.Inputs), len(files))
	}
	for i, in := range job.Inputs {
		if in.Name != files[i] || in.Level != 0 || in.Props == nil || in.SmallestSeqno == 0 || in.LargestSeqno < in.SmallestSeqno ||
			string(in.Smallest) > string(in.Largest) || !strings.HasPrefix(string(in.Smallest), "k0") {
			t.Fatalf("input %d: %+v (files %v)", i, in, files)
		}
		// Each flush wrote 500 puts of distinct keys: the filter counts them.
		if p := in.Props; p.Entries != 500 || p.Deletions != 0 || p.FilterEntries != 500 || !p.FilterWholeKeys {
			t.Fatalf("input %s: properties %+v", in.Name, *p)
		}
	}
	// The result as RocksDB reads it, and the outputs it names.
	r, err := ParseCompactionResult(res)
	if err != nil {
		t.Fatal(err)
	}
	// The level the job asked for: 1 with 7.8.3's defaults, the last level
	// with 9.11's (level_compaction_dynamic_level_bytes, on by default since
	// 8.4, compacts level 0 into the last level of an empty tree).
	level, _, err := CompactionField(job.Input, "output_level")
	if err != nil {
		t.Fatal(err)
	}
	if !r.Status.OK() || r.OutputPath != path || fmt.Sprint(r.OutputLevel) != level || r.OutputLevel == 0 || len(r.Files) != len(outs) || r.NumOutputRecords != 900 {
		t.Fatalf("parsed result %+v (the job's output level %s)", r, level)
	}
	for i, f := range r.Files {
		p := svc.outputs[f.Name]
		if f.Name != outs[i] || len(f.SmallestKey) != 6+8 || len(f.LargestKey) != 6+8 || string(f.SmallestKey[:6]) > string(f.LargestKey[:6]) {
			t.Fatalf("output %d: %+v", i, f)
		}
		// A compaction without snapshots keeps one entry per key.
		if p.FilterEntries != p.Entries || p.Entries == 0 || p.FilterPolicy == "" {
			t.Fatalf("output %s has %d entries and %d filter entries (%s): its filter does not count its keys", f.Name, p.Entries, p.FilterEntries, p.FilterPolicy)
		}
		// The result's unique id is the one RocksDB derives from the
		// table's properties, once both are in the same form.
		want, err := TableUniqueID(p.DBID, p.SessionID, p.OrigFileNumber)
		if err != nil {
			t.Fatal(err)
		}
		if got := ExternalUniqueID(f.UniqueID); got != want || f.UniqueID == ([2]uint64{}) {
			t.Fatalf("output %s: result id %x is %x externally; the table's is %x", f.Name, f.UniqueID, got, want)
		}
	}
	// Every table now is a remote output: each has a filter of its keys.
	if props := db.GetProperty("rocksdb.aggregated-table-properties"); !strings.Contains(props, "# entries for filter=900;") {
		t.Fatalf("the remote outputs' filters do not hold the 900 keys: %s", props)
	}
	// Installed by rename: nothing is left in the output directory.
	for _, o := range outs {
		if _, err := os.Stat(filepath.Join(path, o)); !os.IsNotExist(err) {
			t.Fatalf("output %s still in %s: %v", o, path, err)
		}
	}
}

func TestUseLocalCompacts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	svc := &inProcessService{t: t, dir: dir, results: map[uint64][]byte{}, useLoc: true}
	db, closeDB := openWithService(t, dir, svc)
	defer closeDB()
	model := fill(t, db, 4)
	db.CompactRange(grocksdb.Range{})
	checkModel(t, db, model)
	if len(svc.jobs) == 0 {
		t.Fatal("the service was not asked")
	}
	if n := db.GetProperty("rocksdb.num-files-at-level0"); n != "0" {
		t.Fatalf("level 0 still has %s files after a local compaction", n)
	}
	if bg := db.GetProperty("rocksdb.background-errors"); bg != "0" {
		t.Fatalf("background errors: %s", bg)
	}
}

func TestCancelledOpenAndCompact(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	svc := &inProcessService{t: t, dir: dir, results: map[uint64][]byte{}, useLoc: true}
	db, closeDB := openWithService(t, dir, svc)
	fill(t, db, 3)
	db.CompactRange(grocksdb.Range{}) // records a job's input
	closeDB()
	env := grocksdb.NewDefaultOptions()
	defer env.Destroy()
	cancel := NewCancel()
	defer cancel.Close()
	cancel.Set()
	_, err := OpenAndCompact(env, dir, dir+"-cancelled", svc.jobs[0].Input, svc.jobs[0].TableOptions, cancel)
	if err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("cancelled job: %v, want Incomplete", err)
	}
}

// TestParseCompactionResult: a result parses only if RocksDB would read it
// (Wait's success followed by an unreadable result is a
// background error), with its status, outputs and their metadata.
func TestParseCompactionResult(t *testing.T) {
	const file = "{{file_name=3030303031372E737374;smallest_seqno=1;largest_seqno=9;smallest_internal_key=6B310101000000000000;" +
		"largest_internal_key=6B390109000000000000;oldest_ancester_time=0;file_creation_time=0;paranoid_hash=0;marked_for_compaction=false;unique_id=7:8;}}"
	ok := "status={code=0;subcode=0;severity=0;message=;};output_files={" + file + "};output_level=6;output_path=2F6A6F62;num_output_records=1;total_bytes=0;bytes_read=0;bytes_written=0;stats={num_input_records=2;};"
	r, err := ParseCompactionResult(append([]byte{1, 0, 0, 0}, ok...))
	if err != nil {
		t.Fatal(err)
	}
	f := r.Files[0]
	if !r.Status.OK() || r.OutputPath != "/job" || r.OutputLevel != 6 || len(r.Files) != 1 || f.Name != "000017.sst" ||
		string(f.SmallestKey) != "k1\x01\x01\x00\x00\x00\x00\x00\x00" || f.SmallestSeqno != 1 || f.LargestSeqno != 9 || f.UniqueID != [2]uint64{7, 8} {
		t.Fatalf("parsed %+v", r)
	}
	corrupt := strings.Replace(ok, "code=0;", "code=2;", 1)
	corrupt = strings.Replace(corrupt, "message=;", "message=666F72676564;", 1)
	if r, err := ParseCompactionResult(append([]byte{1, 0, 0, 0}, corrupt...)); err != nil || r.Status.OK() || r.Status.String() != "Corruption: forged" {
		t.Fatalf("a Corruption status: %+v, %v", r, err)
	}
	if r, err := ParseCompactionResult(append([]byte{1, 0, 0, 0}, ok+"some_later_field=1;"...)); err != nil || len(r.Files) != 1 {
		t.Fatalf("an unknown field (RocksDB ignores them): %v", err)
	}
	for _, bad := range []struct{ name, old, new string }{
		{"stats value not a number", "num_input_records=2", "num_input_records=two"},
		{"unique id of one word", "unique_id=7:8", "unique_id=7"},
		{"status code out of range", "code=0;", "code=300;"},
		{"output level not a number", "output_level=6", "output_level=six"},
	} {
		if _, err := ParseCompactionResult(append([]byte{1, 0, 0, 0}, strings.Replace(ok, bad.old, bad.new, 1)...)); err == nil {
			t.Errorf("%s: parsed", bad.name)
		}
	}
	if _, err := ParseCompactionResult(append([]byte{2, 0, 0, 0}, ok...)); err == nil {
		t.Error("format version 2 parsed")
	}
}
