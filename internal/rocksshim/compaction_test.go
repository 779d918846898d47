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
	s.mu.Lock()
	s.results[job.ID] = res
	s.mu.Unlock()
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
