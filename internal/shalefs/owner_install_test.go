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
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

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
	if e, ok := layout.JobEpoch(job); !ok || e != 3 {
		t.Fatalf("job %q of epoch %d", job, e)
	}
	putObject(t, store, layout.JobOutputKey(job, 2, "000012.sst"), "table bytes")
	putObject(t, store, layout.JobOutputKey(job, 1, "000012.sst"), "a lost attempt's bytes")
	workerPath := "/var/cache/worker/x/" + layout.JobDir(job, 2)

	// Nothing was accepted yet: refused.
	err = f.Rename(workerPath+"000012.sst", "000040.sst")
	if err == nil || !strings.Contains(err.Error(), "not an output of a compaction attempt this owner accepted") {
		t.Fatalf("unaccepted install: %v", err)
	}
	f.ExpectJobOutputs(job, 2, map[string]int64{"000012.sst": int64(len("table bytes"))})
	// Another attempt of the same job, and paths outside any job: refused.
	for _, src := range []string{
		"/w/" + layout.JobDir(job, 1) + "000012.sst",
		"/elsewhere/000012.sst",
		"/w/_shale/compactions/" + layout.FormatNumber(2) + "-x/1/000012.sst",
	} {
		if err := f.Rename(src, "000040.sst"); err == nil {
			t.Fatalf("installed %s", src)
		}
	}
	if err := f.Rename(workerPath+"000012.sst", "000040.sst"); err != nil {
		t.Fatal(err)
	}
	if got, ok := getObject(t, store, "000040.sst."+layout.FormatNumber(3)); !ok || got != "table bytes" {
		t.Fatalf("installed table %q %v", got, ok)
	}
	if size, ok := f.Stat("000040.sst"); !ok || size != int64(len("table bytes")) {
		t.Fatalf("Stat after install: %d %v", size, ok)
	}
	if _, ok := getObject(t, store, layout.JobOutputKey(job, 2, "000012.sst")); ok {
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
	older := layout.FormatNumber(2) + "-old"
	running := layout.FormatNumber(3) + "-running"
	installing := layout.FormatNumber(3) + "-installing"
	leftover := layout.FormatNumber(3) + "-leftover"
	newer := layout.FormatNumber(4) + "-newer"
	for _, j := range []string{older, running, installing, leftover, newer} {
		putObject(t, store, layout.JobOutputKey(j, 1, "000010.sst"), "x")
	}
	f.ExpectJobOutputs(installing, 1, map[string]int64{"000010.sst": 1})
	n, err := f.SweepCompactions(context.Background(), func(job string) bool { return job == running })
	if err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want the older owner's job and the leftover", n, err)
	}
	var left bytes.Buffer
	store.List(context.Background(), layout.CompactionsPrefix, func(o objstore.ObjectInfo) error {
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
		older, newer := layout.FormatNumber(2)+"-old", layout.FormatNumber(4)+"-new"
		for _, j := range []string{refused, other, installing, older, newer} {
			putObject(t, store, layout.JobOutputKey(j, 1, "000010.sst"), "x")
		}
		putObject(t, store, layout.JobOutputKey(refused, 2, "000011.sst"), "y")
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
		store.List(context.Background(), layout.CompactionsPrefix, func(o objstore.ObjectInfo) error {
			left = append(left, o.Key)
			return nil
		})
		want := []string{}
		for _, j := range []string{other, installing, older, newer} {
			want = append(want, layout.JobOutputKey(j, 1, "000010.sst"))
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
		putObject(t, store, layout.JobOutputKey(job, 1, "000012.sst"), string(data))
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
			putObject(t, store, layout.JobOutputKey(job, 1, name), bad)
			if p, err := f.JobOutputProps(context.Background(), job, 1, name, int64(len(bad))); err == nil {
				t.Errorf("%s: read %+v from %d bytes that are not a table", name, p, len(bad))
			}
		}
	})
}
