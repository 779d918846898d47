package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func open(t *testing.T, dir string) *DB {
	t.Helper()
	d, err := Open(dir, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestOpenCreatesMissingParents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "db")
	d := open(t, dir)
	if err := d.Put([]byte("k"), []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusals(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	notDB := filepath.Join(root, "home")
	os.MkdirAll(notDB, 0o755)
	os.WriteFile(filepath.Join(notDB, "notes.txt"), []byte("mine"), 0o644)
	locked := filepath.Join(root, "locked")
	open(t, locked)

	for _, tc := range []struct {
		name, dir, want string
		is              error
	}{
		{"regular file", file, "is not a directory", nil},
		{"under a regular file", filepath.Join(file, "db"), "not a directory", nil},
		{"foreign files", notDB, "holds no RocksDB database", ErrNotADatabase},
		{"already open", locked, "already open", ErrLocked},
		{"relative", "rel/db", "must be absolute", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, root)
			_, err := Open(tc.dir, DefaultOptions())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%s) = %v, want error containing %q", tc.dir, err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			if after := snapshot(t, root); after != before {
				t.Fatalf("failed open changed the filesystem:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A failed open removes the directories it created.
func TestFailedOpenCleansUp(t *testing.T) {
	root := t.TempDir()
	ro := filepath.Join(root, "ro")
	os.Mkdir(ro, 0o555)
	if os.Geteuid() == 0 {
		// root ignores permissions: make creation fail another way.
		os.WriteFile(filepath.Join(root, "blocker"), nil, 0o644)
		ro = filepath.Join(root, "blocker")
	}
	before := snapshot(t, root)
	if _, err := Open(filepath.Join(ro, "x", "db"), DefaultOptions()); err == nil {
		t.Fatal("open under an unusable parent succeeded")
	}
	if after := snapshot(t, root); after != before {
		t.Fatalf("left behind: %s -> %s", before, after)
	}
}

func snapshot(t *testing.T, root string) string {
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !strings.HasSuffix(p, "LOG") {
			fmt.Fprintf(&b, "%s:%d ", strings.TrimPrefix(p, root), fi.Size())
		}
		return nil
	})
	return b.String()
}

func TestScanBounds(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "db"))
	var ms []Mutation
	for _, k := range []string{"a", "b", "ba", "bb", "c", "\xff", "\xff\xff"} {
		ms = append(ms, Mutation{Key: []byte(k), Value: []byte("v" + k)})
	}
	if err := d.Write(ms, false); err != nil {
		t.Fatal(err)
	}
	scan := func(o ScanOptions) string {
		var keys []string
		if err := d.Scan(o, func(k, v []byte) error {
			if !o.KeysOnly && string(v) != "v"+string(k) {
				t.Fatalf("value of %q = %q", k, v)
			}
			keys = append(keys, string(k))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(keys, ",")
	}
	for _, tc := range []struct {
		o    ScanOptions
		want string
	}{
		{ScanOptions{}, "a,b,ba,bb,c,\xff,\xff\xff"},
		{ScanOptions{Start: []byte("b"), End: []byte("c")}, "b,ba,bb"},
		{ScanOptions{Start: []byte("b"), End: []byte("c"), Reverse: true}, "bb,ba,b"},
		{ScanOptions{Prefix: []byte("b")}, "b,ba,bb"},
		{ScanOptions{Prefix: []byte("b"), Reverse: true, Limit: 2}, "bb,ba"},
		{ScanOptions{Prefix: []byte("\xff")}, "\xff,\xff\xff"},
		{ScanOptions{Start: []byte("bb"), Limit: 2, KeysOnly: true}, "bb,c"},
		{ScanOptions{Start: []byte("b"), End: []byte("b")}, ""},
	} {
		if got := scan(tc.o); got != tc.want {
			t.Errorf("scan %+v = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"a": "b", "a\xff": "b", "\xff\xff": "", "ab": "ac"} {
		if got := string(PrefixEnd([]byte(in))); got != want {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatsAfterFlush(t *testing.T) {
	d := open(t, filepath.Join(t.TempDir(), "db"))
	for i := 0; i < 1000; i++ {
		d.Put([]byte(fmt.Sprintf("key%05d", i)), []byte("value"), false)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.SSTFiles != 1 || s.FilesPerLevel[0] != 1 || s.LiveSSTBytes == 0 || s.EstimatedKeys != 1000 {
		t.Fatalf("stats after one flush: %+v", s)
	}
	if got := d.LatestSequence(); got != 1000 {
		t.Fatalf("latest sequence = %d, want 1000", got)
	}
	d.Close()
	if _, _, err := d.Get([]byte("key00001")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestTuningValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		t    Tuning
		err  string // "" when valid
	}{
		{"defaults", Tuning{}, ""},
		{"everything compatible", Tuning{DataBlockHashIndex: true, DataBlockHashRatio: 0.5, UnorderedWrite: true, AsyncIO: true, OptimizeMultiGetForIO: true}, ""},
		{"pipelined alone", Tuning{PipelinedWrite: true}, ""},
		{"hash ratio 1", Tuning{DataBlockHashIndex: true, DataBlockHashRatio: 1}, ""},
		{"unordered with pipelined", Tuning{UnorderedWrite: true, PipelinedWrite: true}, "--unordered-write and --pipelined-write cannot be combined"},
		{"ratio above 1", Tuning{DataBlockHashIndex: true, DataBlockHashRatio: 1.5}, "--data-block-hash-ratio 1.5 is out of range"},
		{"negative ratio", Tuning{DataBlockHashIndex: true, DataBlockHashRatio: -0.1}, "out of range"},
		{"ratio without hash index", Tuning{DataBlockHashRatio: 0.5}, "needs --data-block-index=binary-and-hash"},
		{"multiget io without async", Tuning{OptimizeMultiGetForIO: true}, "needs --async-io"},
		{"scan readahead 64 MiB", Tuning{ScanReadahead: 64 << 20}, ""},
		{"scan readahead above 64 MiB", Tuning{ScanReadahead: 64<<20 + 1}, "--scan-readahead 67108865 is over the 64 MiB limit; want e.g. 256KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.t.Validate()
			if c.err == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("got %v, want an error containing %q", err, c.err)
			}
		})
	}
}

// A database opened with every knob on reads and writes as usual, and an
// invalid combination is refused before anything is created.
func TestTunedDatabase(t *testing.T) {
	o := DefaultOptions()
	o.Tuning = Tuning{DataBlockHashIndex: true, DataBlockHashRatio: 0.5, UnorderedWrite: true, AsyncIO: true, OptimizeMultiGetForIO: true}
	d, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for i := 0; i < 1000; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprint(i)), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 517, 999} {
		v, ok, err := d.Get([]byte(fmt.Sprintf("k%04d", i)))
		if err != nil || !ok || string(v) != fmt.Sprint(i) {
			t.Fatalf("get k%04d from a hash-indexed table: %q %v %v", i, v, ok, err)
		}
	}
	vals, found, err := d.MultiGet([][]byte{[]byte("k0001"), []byte("nope")})
	if err != nil || !found[0] || found[1] || string(vals[0]) != "1" {
		t.Fatalf("multiget: %q %v %v", vals, found, err)
	}

	dir := filepath.Join(t.TempDir(), "db")
	o.Tuning = Tuning{UnorderedWrite: true, PipelinedWrite: true}
	if _, err := Open(dir, o); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Fatalf("open with unordered and pipelined writes: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused open left %s behind: %v", dir, err)
	}
}

// Every memtable has a whole-key Bloom filter (so a Get of a key the
// memtable does not hold skips its skip list), and reads through it find
// what is there and nothing else.
func TestMemtableBloomFilter(t *testing.T) {
	dir := t.TempDir()
	d := open(t, dir)
	for i := 0; i < 1000; i += 2 {
		if err := d.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprint(i)), false); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1000; i++ {
		v, ok, err := d.Get([]byte(fmt.Sprintf("k%04d", i)))
		if err != nil || ok != (i%2 == 0) || (ok && string(v) != fmt.Sprint(i)) {
			t.Fatalf("get k%04d from the memtable: %q %v %v", i, v, ok, err)
		}
	}
	opts, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if err != nil || len(opts) == 0 {
		t.Fatalf("no OPTIONS file in %s: %v", dir, err)
	}
	b, err := os.ReadFile(opts[len(opts)-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"memtable_whole_key_filtering=true", "memtable_prefix_bloom_size_ratio=0.020000"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", opts[len(opts)-1], want)
		}
	}
}

// Concurrent non-durable puts, deletes and batches (merged into shared
// RocksDB writes) all land, each batch whole, and a mix with durable and
// oversized writes keeps working.
func TestConcurrentWritesMerged(t *testing.T) {
	d := open(t, t.TempDir())
	const writers, rounds = 16, 200
	big := strings.Repeat("b", coalesceMaxBytes+1)
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			var err error
			for i := 0; i < rounds && err == nil; i++ {
				k := fmt.Sprintf("w%02d-%03d", w, i)
				switch i % 5 {
				case 0, 1:
					err = d.Put([]byte(k), []byte(k), false)
				case 2:
					err = d.Write([]Mutation{{Key: []byte(k), Value: []byte(k)}, {Key: []byte(k + "-pair"), Value: []byte(k)}}, false)
				case 3:
					if err = d.Put([]byte(k), []byte("doomed"), false); err == nil {
						err = d.Delete([]byte(k), false)
					}
				case 4:
					if w == 0 {
						err = d.Put([]byte(k), []byte(big), false) // too large to merge
					} else {
						err = d.Put([]byte(k), []byte(k), w%2 == 0)
					}
				}
			}
			errs <- err
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < rounds; i++ {
			k := fmt.Sprintf("w%02d-%03d", w, i)
			v, ok, err := d.Get([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			want := k
			switch {
			case i%5 == 3:
				want = ""
			case i%5 == 4 && w == 0:
				want = big
			}
			if (want == "") == ok || string(v) != want {
				t.Fatalf("%s = %.20q (found %v), want %.20q", k, v, ok, want)
			}
			if i%5 == 2 {
				if v, ok, _ := d.Get([]byte(k + "-pair")); !ok || string(v) != k {
					t.Fatalf("%s-pair of the same batch missing", k)
				}
			}
		}
	}
}

// A MultiGet that OptimizeMultiGetForIO splits into parts still reads one
// consistent view: with a writer rewriting every key in one atomic batch,
// all keys of one MultiGet come from the same batch; keys missing or asked
// twice read as in one MultiGet.
func TestParallelMultiGetOneView(t *testing.T) {
	o := DefaultOptions()
	o.Tuning.AsyncIO, o.Tuning.OptimizeMultiGetForIO = true, true
	d, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	write := func(gen int) {
		ms := make([]Mutation, n)
		for i := range ms {
			ms[i] = Mutation{Key: fmt.Appendf(nil, "k%03d", i), Value: fmt.Appendf(nil, "gen%06d", gen)}
		}
		if err := d.Write(ms, false); err != nil {
			t.Error(err)
		}
	}
	defer d.Close()
	write(0)
	if err := d.Flush(); err != nil { // some keys in a table, later ones in the memtable
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for gen := 1; ; gen++ {
			select {
			case <-stop:
				return
			default:
			}
			write(gen)
		}
	}()
	defer func() { close(stop); <-done }() // before Close
	keys := [][]byte{[]byte("missing")}
	for i := n - 1; i >= 0; i-- { // unsorted: the parts are cut from the sorted keys
		keys = append(keys, fmt.Appendf(nil, "k%03d", i))
	}
	keys = append(keys, []byte("k007"))
	for round := 0; round < 300; round++ {
		vals, found, err := d.MultiGet(keys)
		if err != nil {
			t.Fatal(err)
		}
		if found[0] || vals[0] != nil {
			t.Fatalf("missing key found: %q", vals[0])
		}
		for i := 1; i < len(keys); i++ {
			if !found[i] || string(vals[i]) != string(vals[1]) {
				t.Fatalf("round %d: %s = %q (found %v), %s = %q: one MultiGet saw two batches", round, keys[i], vals[i], found[i], keys[1], vals[1])
			}
		}
	}
}

// StopWrites (a step-down, RFC 0012) waits for the writes under way and
// refuses later ones before RocksDB sees them; reads and the flush go on.
func TestStopWrites(t *testing.T) {
	d := open(t, t.TempDir())
	if err := d.Put([]byte("before"), []byte("v"), false); err != nil {
		t.Fatal(err)
	}
	// A write holding the gate: StopWrites must wait for it.
	if err := d.enterWrite(); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { d.StopWrites(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("StopWrites returned while a write was under way")
	default:
	}
	d.leaveWrite()
	<-stopped
	for _, err := range []error{
		d.Put([]byte("after"), []byte("v"), true),
		d.Delete([]byte("before"), true),
	} {
		if !errors.Is(err, ErrWritesStopped) {
			t.Fatalf("a write after StopWrites: %v, want ErrWritesStopped", err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := d.Get([]byte("before")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("read after StopWrites: %q %v %v", v, ok, err)
	}
	if _, ok, _ := d.Get([]byte("after")); ok {
		t.Fatal("a refused write is visible")
	}
}
