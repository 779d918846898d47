package shalefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/rocksshim"
)

func TestJobNames(t *testing.T) {
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
		j, a, n, ok := parseJobOutput(tc.key)
		if ok != tc.ok || ok && (j != job || a != tc.attempt || n != tc.name) {
			t.Errorf("parseJobOutput(%q) = %q %d %q %v", tc.key, j, a, n, ok)
		}
	}
}

// TestSweepJob: which job directories an owner deletes (docs/fencing.md,
// remote compaction).
func TestSweepJob(t *testing.T) {
	for _, tc := range []struct {
		name     string
		job      string
		own      uint64
		inflight bool
		want     bool
	}{
		{"older owner's job", pad(4) + "-a", 5, false, true},
		{"older owner's job its client still waits for", pad(4) + "-a", 5, true, true},
		{"own job, finished or abandoned", pad(5) + "-a", 5, false, true},
		{"own job in flight", pad(5) + "-a", 5, true, false},
		{"newer owner's job: this owner is deposed", pad(6) + "-a", 5, false, false},
		{"not a job name", "junk", 5, false, false},
	} {
		if got := sweepJob(tc.job, tc.own, tc.inflight); got != tc.want {
			t.Errorf("%s: sweepJob = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func putObject(t *testing.T, s objstore.Store, key, data string) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, strings.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getObject(t *testing.T, s objstore.Store, key string) (string, bool) {
	t.Helper()
	r, _, err := s.Get(context.Background(), key, 0, -1)
	if err != nil {
		return "", false
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b), true
}

func TestInstallJobOutput(t *testing.T) {
	store, err := objstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := openFS(t, store, 3, filepath.Join(t.TempDir(), "cache"))
	job := f.NewJobID()
	if e, ok := JobEpoch(job); !ok || e != 3 {
		t.Fatalf("job %q of epoch %d", job, e)
	}
	putObject(t, store, JobOutputKey(job, 2, "000012.sst"), "table bytes")
	putObject(t, store, JobOutputKey(job, 1, "000012.sst"), "a lost attempt's bytes")
	workerPath := "/var/cache/worker/x/" + JobDir(job, 2)

	// Nothing was accepted yet: refused.
	err = f.Rename(workerPath+"000012.sst", "000040.sst")
	if err == nil || !strings.Contains(err.Error(), "not an output of a compaction attempt this owner accepted") {
		t.Fatalf("unaccepted install: %v", err)
	}
	f.ExpectJobOutputs(job, 2, map[string]int64{"000012.sst": int64(len("table bytes"))})
	// Another attempt of the same job, and paths outside any job: refused.
	for _, src := range []string{
		"/w/" + JobDir(job, 1) + "000012.sst",
		"/elsewhere/000012.sst",
		"/w/_shale/compactions/" + pad(2) + "-x/1/000012.sst",
	} {
		if err := f.Rename(src, "000040.sst"); err == nil {
			t.Fatalf("installed %s", src)
		}
	}
	if err := f.Rename(workerPath+"000012.sst", "000040.sst"); err != nil {
		t.Fatal(err)
	}
	if got, ok := getObject(t, store, "000040.sst."+pad(3)); !ok || got != "table bytes" {
		t.Fatalf("installed table %q %v", got, ok)
	}
	if size, ok := f.Stat("000040.sst"); !ok || size != int64(len("table bytes")) {
		t.Fatalf("Stat after install: %d %v", size, ok)
	}
	if _, ok := getObject(t, store, JobOutputKey(job, 2, "000012.sst")); ok {
		t.Fatal("the job's copy was not deleted after the install")
	}
	if f.expecting(job) {
		t.Fatal("a fully installed job is still expected")
	}
	// Installed once: a second rename of the same output is refused.
	if err := f.Rename(workerPath+"000012.sst", "000041.sst"); err == nil {
		t.Fatal("installed the same output twice")
	}
}

func TestSweepCompactions(t *testing.T) {
	store, err := objstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := openFS(t, store, 3, filepath.Join(t.TempDir(), "cache"))
	older := pad(2) + "-old"
	running := pad(3) + "-running"
	installing := pad(3) + "-installing"
	leftover := pad(3) + "-leftover"
	newer := pad(4) + "-newer"
	for _, j := range []string{older, running, installing, leftover, newer} {
		putObject(t, store, JobOutputKey(j, 1, "000010.sst"), "x")
	}
	f.ExpectJobOutputs(installing, 1, map[string]int64{"000010.sst": 1})
	n, err := f.SweepCompactions(context.Background(), func(job string) bool { return job == running })
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want the older owner's job and the leftover", n, err)
	}
	var left bytes.Buffer
	store.List(context.Background(), compactionsPrefix, func(o objstore.ObjectInfo) error {
		left.WriteString(o.Key + "\n")
		return nil
	})
	for _, j := range []string{running, installing, newer} {
		if !strings.Contains(left.String(), j) {
			t.Errorf("%s was swept", j)
		}
	}
	for _, j := range []string{older, leftover} {
		if strings.Contains(left.String(), j) {
			t.Errorf("%s was left", j)
		}
	}
}

// TestRemoveJob: a primary removes the directory of its own job that
// RocksDB will not install, every attempt of it, and nothing else: not
// another owner's job, not one being installed, not another job of its own.
func TestRemoveJob(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		f := openFS(t, store, 3, filepath.Join(t.TempDir(), "cache"))
		refused := f.NewJobID()
		other := f.NewJobID()
		installing := f.NewJobID()
		older, newer := pad(2)+"-old", pad(4)+"-new"
		for _, j := range []string{refused, other, installing, older, newer} {
			putObject(t, store, JobOutputKey(j, 1, "000010.sst"), "x")
		}
		putObject(t, store, JobOutputKey(refused, 2, "000011.sst"), "y")
		f.ExpectJobOutputs(installing, 1, map[string]int64{"000010.sst": 1})

		if n, err := f.RemoveJob(context.Background(), refused); err != nil || n != 2 {
			t.Fatalf("RemoveJob of a refused job: %d, %v; want both attempts' outputs", n, err)
		}
		for _, j := range []string{older, newer, installing} {
			if _, err := f.RemoveJob(context.Background(), j); err == nil {
				t.Errorf("RemoveJob(%s) removed it", j)
			}
		}
		if n, err := f.RemoveJob(context.Background(), refused); err != nil || n != 0 {
			t.Fatalf("RemoveJob again: %d, %v", n, err)
		}
		var left []string
		store.List(context.Background(), compactionsPrefix, func(o objstore.ObjectInfo) error {
			left = append(left, o.Key)
			return nil
		})
		want := []string{}
		for _, j := range []string{other, installing, older, newer} {
			want = append(want, JobOutputKey(j, 1, "000010.sst"))
		}
		sort.Strings(want)
		sort.Strings(left)
		if strings.Join(left, " ") != strings.Join(want, " ") {
			t.Fatalf("left %q, want %q", left, want)
		}
	})
}

// writeSST writes a table of n puts, dels deletions and one range deletion
// to path, with Shale's table format.
func writeSST(t *testing.T, path string, n, dels int) {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	bbto := grocksdb.NewDefaultBlockBasedTableOptions()
	defer bbto.Destroy()
	rocksshim.SetBloomFilter(bbto, 10)
	bbto.SetFormatVersion(5)
	opts.SetBlockBasedTableFactory(bbto)
	opts.SetCompression(grocksdb.LZ4Compression)
	env := grocksdb.NewDefaultEnvOptions()
	defer env.Destroy()
	w := grocksdb.NewSSTFileWriter(env, opts)
	defer w.Destroy()
	if err := w.Open(path); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n+dels; i++ {
		k := []byte(fmt.Sprintf("key%06d", i))
		var err error
		if i < n {
			err = w.Put(k, bytes.Repeat([]byte("v"), 100))
		} else {
			err = w.Delete(k)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.DeleteRange([]byte("x"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestJobOutputProps: a primary reads a compaction output's properties
// from the store (one ranged GET of its tail) as RocksDB reads them, and
// refuses an object that is not a whole table.
func TestJobOutputProps(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		f := openFS(t, store, 3, filepath.Join(t.TempDir(), "cache"))
		job := f.NewJobID()
		path := filepath.Join(t.TempDir(), "000012.sst")
		writeSST(t, path, 3000, 200)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		putObject(t, store, JobOutputKey(job, 1, "000012.sst"), string(data))
		got, err := f.JobOutputProps(context.Background(), job, 1, "000012.sst", int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		want, err := rocksshim.SSTProperties(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Entries != 3201 || got.Deletions != 201 || got.RangeDeletions != 1 || got.Entries != want.Entries || got.Deletions != want.Deletions ||
			got.DBID != want.DBID || got.SessionID != want.SessionID || got.SessionID == "" || got.OrigFileNumber != want.OrigFileNumber {
			t.Fatalf("from the store %+v, RocksDB reads %+v", got, want)
		}
		for name, bad := range map[string]string{
			"000013.sst": "not a table at all, but long enough to have a footer: " + strings.Repeat("x", 100),
			"000014.sst": string(data[len(data)/2:]), // the tail of a table: its handles point past the start
			"000015.sst": "short",
		} {
			putObject(t, store, JobOutputKey(job, 1, name), bad)
			if p, err := f.JobOutputProps(context.Background(), job, 1, name, int64(len(bad))); err == nil {
				t.Errorf("%s: read %+v from %d bytes that are not a table", name, p, len(bad))
			}
		}
	})
}
