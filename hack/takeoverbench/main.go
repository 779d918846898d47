// Command takeoverbench measures how long a takeover takes before the new
// owner serves, on databases whose history makes a takeover expensive:
//
//	baseline  an almost empty database (one owner, a few synced writes);
//	sst       a MANIFEST naming -sst SST files;
//	wal       a live WAL of -segments synced segments (one owner made that
//	          many synced writes and crashed; no memtable flush);
//	history   -rounds past takeovers (each owner opened, wrote a few synced
//	          keys, maybe flushed, lived long enough for deferred deletes
//	          with a short delete grace, then stopped or crashed).
//
// Each database is built on a file:// store by owners running as child
// processes (the last one always crashes: the measured takeover is a
// failover), copied object by object to an S3 store (hack/bench-takeover.sh
// runs a MinIO server on loopback), and taken over there by one more owner
// with an empty cache directory: shalefs.Open, engine.Open, then one synced
// write, as a primary does before it serves. Time to serve is from calling
// shalefs.Open until that write is acknowledged, minus the time the takeover
// waited out the crashed owner's read lease (reported on its own). Every
// call the new owner makes to the store in that window is counted, and so
// is every HTTP request the S3 client sends. After the write, sampled keys
// of every owner are read back and the sequence number checked, so a
// takeover that lost data fails instead of looking fast. A takeover that
// fails is reported with the time and requests up to the failure.
//
// Times are reported as ratios to the baseline's, measured in the same run
// on -baseline-runs fresh copies at the start and as many at the end (the
// median of all): a shared machine's load changes during a long run.
//
// The bench knows object keys only as opaque strings to count and copy: it
// runs unchanged whatever layout the FileSystem uses in the store.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

type config struct {
	work        string
	s3          string
	scenarios   []string
	ssts        int
	segments    int
	rounds      int
	perSST      int
	lease       time.Duration
	buildLease  time.Duration
	grace       time.Duration
	copyWorkers int
	timeout     time.Duration
	jsonPath    string
	baseRuns    int
	// Timeouts of the measured owner (0: Shale's defaults).
	readTimeout, writeTimeout, retryFor time.Duration
}

func main() {
	var c config
	var child childArgs
	var scenarios string
	fl := flag.CommandLine
	fl.StringVar(&c.work, "work", "", "working directory (file:// stores, cache directories); required")
	fl.StringVar(&c.s3, "s3", "", "s3://BUCKET[/PREFIX] to take the databases over in (endpoint and credentials from AWS_* variables); required")
	fl.StringVar(&scenarios, "scenarios", "baseline,sst,wal,history", "scenarios to run, comma-separated (baseline is the reference of the ratios)")
	fl.IntVar(&c.ssts, "sst", 10000, "sst: SST files the MANIFEST names")
	fl.IntVar(&c.segments, "segments", 100000, "wal: synced segments in the live WAL")
	fl.IntVar(&c.rounds, "rounds", 200, "history: past takeovers")
	fl.IntVar(&c.perSST, "keys-per-sst", 10, "sst: keys per flushed SST file")
	fl.DurationVar(&c.lease, "lease", 5*time.Second, "read lease of the measured owner (Shale's default)")
	fl.DurationVar(&c.buildLease, "build-lease", 500*time.Millisecond, "read lease of the owners that build the scenarios")
	fl.DurationVar(&c.grace, "grace", 200*time.Millisecond, "delete grace of the owners that build the scenarios")
	fl.IntVar(&c.copyWorkers, "copy-workers", 16, "parallel puts when copying a database to the S3 store")
	fl.DurationVar(&c.timeout, "timeout", 20*time.Minute, "limit of one measured takeover")
	fl.StringVar(&c.jsonPath, "json", "", "also write one JSON object per scenario to this file")
	fl.IntVar(&c.baseRuns, "baseline-runs", 3, "takeovers of fresh copies of the baseline database, at the start and again at the end; the median of all is the reference")
	fl.DurationVar(&c.readTimeout, "read-timeout", 0, "--read-timeout of the measured owner (0: Shale's default)")
	fl.DurationVar(&c.writeTimeout, "write-timeout", 0, "--write-timeout of the measured owner: also bounds one attempt of each fetch while RocksDB opens (0: Shale's default)")
	fl.DurationVar(&c.retryFor, "retry-for", 0, "--retry-for of the measured owner (0: Shale's default)")
	child.register(fl)
	flag.Parse()
	if child.Mode != "" {
		childMain(child)
	}
	if c.work == "" || c.s3 == "" {
		fmt.Fprintln(os.Stderr, "takeoverbench: -work and -s3 are required (make bench-takeover runs it)")
		os.Exit(2)
	}
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if _, ok := describe(c, s); !ok {
				fmt.Fprintf(os.Stderr, "takeoverbench: unknown scenario %q (baseline, sst, wal, history)\n", s)
				os.Exit(2)
			}
			c.scenarios = append(c.scenarios, s)
		}
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "takeoverbench:", err)
		os.Exit(1)
	}
}

func describe(c config, s string) (string, bool) {
	switch s {
	case "baseline":
		return "baseline: 10 synced keys", true
	case "sst":
		return fmt.Sprintf("sst: %d SSTs in MANIFEST", c.ssts), true
	case "wal":
		return fmt.Sprintf("wal: %d WAL segments", c.segments), true
	case "history":
		return fmt.Sprintf("history: %d takeovers", c.rounds), true
	}
	return "", false
}

// result is one scenario's measurement.
type result struct {
	Scenario    string  `json:"scenario"`
	Desc        string  `json:"description"`
	Owners      int     `json:"owners"` // owners before the measured one
	Objects     int     `json:"objects"`
	Bytes       int64   `json:"bytes"`
	BuildSec    float64 `json:"buildSeconds"`
	CopySec     float64 `json:"copySeconds"`
	ServeMs     float64 `json:"serveMs"` // total minus lease wait
	Ratio       float64 `json:"ratioToBaseline,omitempty"`
	LeaseWaitMs float64 `json:"leaseWaitMs"`
	FSOpenMs    float64 `json:"fsOpenMs"` // shalefs.Open minus lease wait
	EngineMs    float64 `json:"engineOpenMs"`
	FirstPutMs  float64 `json:"firstSyncedWriteMs"`
	TotalMs     float64 `json:"totalMs"`
	// Store calls by operation (put, get, stat, list, listdir, delete,
	// deletemany, copy) and HTTP requests by kind, during the takeover.
	Calls    map[string]int64 `json:"storeCalls"`
	HTTP     map[string]int64 `json:"httpRequests"`
	PutBytes int64            `json:"putBytes"`
	GetBytes int64            `json:"getBytes"`
	// The FileSystem's own account of its requests: "op file_type activity".
	Observed map[string]int64 `json:"observed"`
	// Warnings and errors logged by the builders and by the measured owner.
	BuildLogged    map[string]int64 `json:"buildLogged,omitempty"`
	TakeoverLogged map[string]int64 `json:"takeoverLogged,omitempty"`
	// Time to serve of every takeover run (baseline: -baseline-runs).
	RunsServeMs []float64 `json:"runsServeMs"`
	Epoch       uint64    `json:"epoch"`
	SSTFiles    uint64    `json:"sstFiles"`
	Checked     int       `json:"keysChecked"`
	Error       string    `json:"error,omitempty"`
}

func (r *result) httpTotal() int64 {
	var n int64
	for _, v := range r.HTTP {
		n += v
	}
	return n
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "# "+format+"\n", args...) }

func run(c config) error {
	if _, err := objstore.ParseURL(c.s3); err != nil || !strings.HasPrefix(c.s3, "s3://") {
		return fmt.Errorf("-s3 %q: want s3://BUCKET[/PREFIX]", c.s3)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var jsonOut *os.File
	if c.jsonPath != "" {
		if jsonOut, err = os.Create(c.jsonPath); err != nil {
			return err
		}
		defer jsonOut.Close()
	}
	logf("databases are built on file:// under %s, copied to %s with %d parallel puts, and taken over there (empty cache dir, lease %s)", c.work, c.s3, c.copyWorkers, c.lease)
	var results []*result
	var base *result
	var baseDB *prepared
	var baseRuns []result
	for _, s := range c.scenarios {
		desc, _ := describe(c, s)
		r := &result{Scenario: s, Desc: desc}
		logf("== %s", desc)
		runs := 1
		if s == "baseline" {
			runs = max(c.baseRuns, 1)
		}
		p, err := prepare(c, exe, r)
		if err == nil {
			var done []result
			done, err = measure(c, p, r, 1, runs)
			*r = median(done)
			if s == "baseline" {
				base, baseDB, baseRuns = r, p, done
			}
		}
		if err != nil {
			r.Error = err.Error()
			logf("%s FAILED: %v", s, err)
		}
		results = append(results, r)
	}
	if base != nil && base.Error == "" && len(results) > 1 {
		// The load of a shared machine changes over a long run: take the
		// baseline again at the end; the reference is the median of all.
		logf("== %s, again", base.Desc)
		done, err := measure(c, baseDB, base, len(baseRuns)+1, len(baseRuns))
		*base = median(append(baseRuns, done...))
		if err != nil {
			base.Error = err.Error()
			logf("baseline FAILED: %v", err)
		}
	}
	if base != nil && len(base.RunsServeMs) > 1 {
		logf("baseline: time to serve of every run %v ms; the median is the reference", base.RunsServeMs)
	}
	for _, r := range results {
		if base != nil && base.Error == "" && r.Error == "" && base.ServeMs > 0 {
			r.Ratio = r.ServeMs / base.ServeMs
		}
		if jsonOut != nil {
			b, _ := json.Marshal(r)
			jsonOut.Write(append(b, '\n'))
		}
	}
	printTable(results)
	for _, r := range results {
		if r.Error != "" {
			return fmt.Errorf("%d of %d scenarios failed", countFailed(results), len(results))
		}
	}
	return nil
}

func countFailed(rs []*result) int {
	n := 0
	for _, r := range rs {
		if r.Error != "" {
			n++
		}
	}
	return n
}

// prepared is a scenario's database, built on a file:// store.
type prepared struct {
	from objstore.Store
	dir  string
	b    *built
}

// prepare builds a scenario's database.
func prepare(c config, exe string, r *result) (*prepared, error) {
	dir := filepath.Join(c.work, r.Scenario)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	src := "file://" + filepath.Join(dir, "store")
	start := time.Now()
	b, err := build(c, exe, r.Scenario, src, dir)
	r.BuildLogged = b.logged.snapshot()
	for _, k := range sortedKeys(r.BuildLogged) {
		logf("  builders logged %d x %s", r.BuildLogged[k], k)
	}
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	r.Owners = b.owners
	r.BuildSec = time.Since(start).Seconds()
	logf("built in %.1fs: %d owners (they deleted %d objects after the grace), the last crashed at sequence %d with %d SST files", r.BuildSec, b.owners, b.deletes, b.last.LastSeq, b.last.SSTFiles)
	from, err := objstore.Open(src)
	if err != nil {
		return nil, err
	}
	return &prepared{from: from, dir: dir, b: b}, nil
}

// measure takes over runs fresh copies of p (numbered from first when
// there are several) and returns every run; r is a template for them.
func measure(c config, p *prepared, r *result, first, runs int) ([]result, error) {
	var out []result
	for i := first; i < first+runs; i++ {
		ri := result{Scenario: r.Scenario, Desc: r.Desc, Owners: r.Owners, BuildSec: r.BuildSec, BuildLogged: r.BuildLogged}
		name := r.Scenario
		if runs > 1 || first > 1 {
			name = fmt.Sprintf("%s-%d", r.Scenario, i)
		}
		err := copyAndTakeOver(c, p.from, name, filepath.Join(p.dir, "cache-"+name), p.b, &ri)
		out = append(out, ri)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// median returns the run with the median time to serve (the upper one of
// an even count), with every run's time to serve in RunsServeMs.
func median(runs []result) result {
	sorted := append([]result(nil), runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ServeMs < sorted[j].ServeMs })
	m := sorted[len(sorted)/2]
	m.RunsServeMs = nil
	for _, r := range runs {
		m.RunsServeMs = append(m.RunsServeMs, r.ServeMs)
	}
	return m
}

// copyAndTakeOver copies the built database to the S3 store under name and
// takes it over there.
func copyAndTakeOver(c config, from objstore.Store, name, cache string, b *built, r *result) error {
	s3url := strings.TrimSuffix(c.s3, "/") + "/" + name
	to, err := openS3(s3url, nil)
	if err != nil {
		return err
	}
	start := time.Now()
	if r.Objects, r.Bytes, err = copyAll(context.Background(), from, to, c.copyWorkers); err != nil {
		return fmt.Errorf("copy to %s: %w", s3url, err)
	}
	r.CopySec = time.Since(start).Seconds()
	n, size, err := census(context.Background(), to)
	if err != nil {
		return err
	}
	if n != r.Objects || size != r.Bytes {
		return fmt.Errorf("copied %d objects (%d bytes) but %s holds %d (%d bytes)", r.Objects, r.Bytes, s3url, n, size)
	}
	logf("copied %d objects, %.1f MiB, to %s in %.1fs", r.Objects, float64(r.Bytes)/(1<<20), s3url, r.CopySec)
	return takeover(c, s3url, cache, b, r)
}

// built is what the owners that built a database left.
type built struct {
	owners  int
	last    childResult // the last owner's report
	samples []string    // keys to check
	deletes int64       // objects the owners deleted
	logged  counter
}

// build runs the owners of a scenario against the file:// store src.
func build(c config, exe, scenario, src, dir string) (*built, error) {
	b := &built{}
	cache := filepath.Join(dir, "cache-build")
	var all []string
	owner := func(a childArgs) error {
		a.Store, a.Cache, a.Lease, a.Grace = src, cache, c.buildLease, c.grace
		res, err := runOwner(exe, a)
		if err != nil {
			return err
		}
		b.owners++
		for k, v := range res.Logged {
			b.logged.add(k, v)
		}
		if res.Epoch != uint64(b.owners) {
			return fmt.Errorf("owner %d took epoch %d", b.owners, res.Epoch)
		}
		b.last = res
		b.deletes += res.Deletes
		all = append(all, res.Samples...)
		return nil
	}
	live := 3 * c.grace // long enough for a marked file to be deleted
	var err error
	switch scenario {
	case "baseline":
		err = owner(childArgs{Mode: "writes", N: 10, Prefix: "base", Crash: true})
	case "sst":
		// One owner flushes the files and stops; the next opens (RocksDB
		// writes a fresh MANIFEST naming every file), writes, and crashes.
		if err = owner(childArgs{Mode: "fill-ssts", N: c.ssts, PerSST: c.perSST, Prefix: "sst", Live: live}); err == nil {
			err = owner(childArgs{Mode: "writes", N: 10, Prefix: "tail", Live: live, Crash: true})
		}
	case "wal":
		err = owner(childArgs{Mode: "writes", N: c.segments, Prefix: "wal", Crash: true})
		if err == nil && b.last.SSTFiles != 0 {
			err = fmt.Errorf("the memtable was flushed (%d SST files): the WAL does not hold every write; lower -segments", b.last.SSTFiles)
		}
	case "history":
		start := time.Now()
		for i := 1; i <= c.rounds && err == nil; i++ {
			// Every other owner flushes; one in four crashes, and the last.
			err = owner(childArgs{Mode: "writes", N: 5, Prefix: fmt.Sprintf("hist-%05d", i), Flush: i%2 == 0, Live: live, Crash: i%4 == 3 || i == c.rounds})
			if i%20 == 0 {
				logf("  %d takeovers (%.1f/s)", i, float64(i)/time.Since(start).Seconds())
			}
		}
	}
	b.samples = spread(all, 30)
	return b, err
}

// spread picks about n of keys, evenly.
func spread(keys []string, n int) []string {
	if len(keys) <= n {
		return keys
	}
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, keys[i*(len(keys)-1)/(n-1)])
	}
	return out
}

// runOwner runs one owner as a child process.
func runOwner(exe string, a childArgs) (childResult, error) {
	var out bytes.Buffer
	cmd := exec.Command(exe, a.flags()...)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return childResult{}, fmt.Errorf("owner (%s): %w", a.Mode, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res childResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("owner (%s) reported %q: %w", a.Mode, out.String(), err)
	}
	return res, nil
}

// openS3 opens an S3 store; with tr, its HTTP requests go through tr.
func openS3(url string, tr *countingTransport) (objstore.Store, error) {
	cfg := objstore.S3ConfigFromEnv()
	if tr != nil {
		base, err := minio.DefaultTransport(strings.HasPrefix(cfg.Endpoint, "https://"))
		if err != nil {
			return nil, err
		}
		tr.base = base
		cfg.Transport = tr
	}
	return objstore.OpenS3(url, cfg)
}

// census counts the objects in a store and their bytes.
func census(ctx context.Context, s objstore.Store) (n int, size int64, err error) {
	err = s.List(ctx, "", func(o objstore.ObjectInfo) error {
		n++
		size += o.Size
		return nil
	})
	return n, size, err
}

// copyAll copies every object of from to the same key in to.
func copyAll(ctx context.Context, from, to objstore.Store, workers int) (int, int64, error) {
	var objs []objstore.ObjectInfo
	if err := from.List(ctx, "", func(o objstore.ObjectInfo) error {
		objs = append(objs, o)
		return nil
	}); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		total    atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	copyOne := func(o objstore.ObjectInfo) error {
		r, _, err := from.Get(ctx, o.Key, 0, -1)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = to.Put(ctx, o.Key, r, o.Size, objstore.PutOptions{})
		return err
	}
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(objs) || ctx.Err() != nil {
					return
				}
				if err := copyOne(objs[i]); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("%s: %w", objs[i].Key, err); cancel() })
					return
				}
				total.Add(objs[i].Size)
			}
		}()
	}
	wg.Wait()
	return len(objs), total.Load(), firstErr
}

// takeover measures one more owner taking the database at url over. A
// failed takeover still reports how long it ran and what it requested.
func takeover(c config, url, cache string, b *built, r *result) (err error) {
	tr := &countingTransport{}
	s3, err := openS3(url, tr)
	if err != nil {
		return err
	}
	store := &countingStore{Store: s3}
	var observed counter
	log := newLogCounter()
	observe := func(q shalefs.Request) { observed.add(q.Op+" "+q.FileType+" "+q.Activity, 1) }
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	store.reset()
	tr.reqs.snapshot()

	var fs *shalefs.Owner
	var fsDone, dbDone time.Time
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t0 := time.Now()
	// measured records the window [t0, now): times by phase and requests.
	measured := func() {
		end := time.Now()
		r.Calls, r.HTTP, r.Observed, r.TakeoverLogged = store.calls.snapshot(), tr.reqs.snapshot(), observed.snapshot(), log.n.snapshot()
		r.PutBytes, r.GetBytes = store.putBytes.Load(), store.getBytes.Load()
		var wait time.Duration
		if fs != nil {
			wait = fs.LeaseWaited()
			r.Epoch = fs.Epoch()
		}
		r.LeaseWaitMs = ms(wait)
		r.TotalMs = ms(end.Sub(t0))
		r.ServeMs = ms(end.Sub(t0) - wait)
		switch {
		case fsDone.IsZero():
			r.FSOpenMs = ms(end.Sub(t0) - wait)
		case dbDone.IsZero():
			r.FSOpenMs, r.EngineMs = ms(fsDone.Sub(t0)-wait), ms(end.Sub(fsDone))
		default:
			r.FSOpenMs, r.EngineMs, r.FirstPutMs = ms(fsDone.Sub(t0)-wait), ms(dbDone.Sub(fsDone)), ms(end.Sub(dbDone))
		}
		verb := "took over in"
		if err != nil {
			verb = "FAILED after"
		}
		logf("%s %.0f ms (+ %.0f ms lease wait): FileSystem %.0f ms, RocksDB open %.0f ms, first synced write %.0f ms", verb, r.ServeMs, r.LeaseWaitMs, r.FSOpenMs, r.EngineMs, r.FirstPutMs)
		for _, k := range sortedKeys(r.Observed) {
			logf("  requests %-40s %d", k, r.Observed[k])
		}
		for _, k := range sortedKeys(r.TakeoverLogged) {
			logf("  logged %d x %s", r.TakeoverLogged[k], k)
		}
	}

	fs, err = shalefs.Open(ctx, shalefs.Config{Store: store, CacheDir: cache, Lease: c.lease,
		ReadTimeout: c.readTimeout, WriteTimeout: c.writeTimeout, RetryFor: c.retryFor,
		Owner: "takeoverbench measured owner", Logger: slog.New(log), Observe: observe})
	if err != nil {
		fs = nil
		err = fmt.Errorf("takeover: %w", err)
		measured()
		return err
	}
	fsDone = time.Now()
	o := engine.DefaultOptions()
	o.FileSystem = fs
	db, err := engine.Open(cache, o)
	if err != nil {
		err = fmt.Errorf("open RocksDB: %w", err)
		measured()
		fs.Stop()
		return err
	}
	fs.Serving()
	dbDone = time.Now()
	probe := "takeover-probe"
	if err = db.Put([]byte(probe), value(probe), true); err != nil {
		err = fmt.Errorf("first synced write: %w", err)
	}
	measured()
	if err != nil {
		db.Close()
		fs.Stop()
		return err
	}

	verr := verify(db, fs, b.owners, b.last, b.samples, r)
	db.Close()
	fs.Stop()
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if err := fs.Release(rctx); err != nil && verr == nil {
		verr = fmt.Errorf("release: %w", err)
	}
	return verr
}

// verify checks that the new owner holds what its predecessors wrote.
func verify(db *engine.DB, fs *shalefs.Owner, owners int, last childResult, samples []string, r *result) error {
	if r.Epoch != uint64(owners)+1 {
		return fmt.Errorf("took epoch %d, want %d", r.Epoch, owners+1)
	}
	// The probe follows every write the crashed owner acknowledged.
	if seq := db.LatestSequence(); seq <= last.LastSeq {
		return fmt.Errorf("sequence %d after the first write, but the previous owner had acknowledged up to %d: writes were lost", seq, last.LastSeq)
	}
	for _, k := range append(append([]string(nil), samples...), "takeover-probe") {
		v, ok, err := db.Get([]byte(k))
		if err != nil {
			return fmt.Errorf("read %s: %w", k, err)
		}
		if !ok || !bytes.Equal(v, value(k)) {
			return fmt.Errorf("key %s written before the takeover is missing or wrong", k)
		}
		r.Checked++
	}
	// (Not compared with the count before: a compaction may start at open.)
	st, err := db.Stats()
	if err != nil {
		return err
	}
	r.SSTFiles = st.SSTFiles
	if err := fs.FenceError(); err != nil {
		return err
	}
	if len(samples) == 0 {
		return errors.New("no keys to check")
	}
	logf("checked %d keys and the sequence (%d SST files live)", r.Checked, r.SSTFiles)
	return nil
}

func printTable(rs []*result) {
	var failed []*result
	fmt.Printf("\nTakeover on MinIO (loopback) of databases built on file:// and copied; time to serve = shalefs.Open + RocksDB open + first synced write, minus the lease wait\n")
	fmt.Printf("%-28s %8s %9s %10s %7s %9s | %8s %8s %8s | %6s %7s %6s %6s %6s %7s\n",
		"scenario", "objects", "MiB", "serve ms", "ratio", "lease ms", "fs ms", "rocks ms", "put ms", "put", "get", "list", "delete", "other", "http")
	for _, r := range rs {
		ratio := "-"
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.Error != "" {
			if r.TotalMs == 0 {
				fmt.Printf("%-28s %8d %9.1f FAILED: %s\n", r.Desc, r.Objects, float64(r.Bytes)/(1<<20), r.Error)
				continue
			}
			ratio = "FAILED"
			failed = append(failed, r)
		}
		c := r.Calls
		fmt.Printf("%-28s %8d %9.1f %10.0f %7s %9.0f | %8.0f %8.0f %8.0f | %6d %7d %6d %6d %6d %7d\n",
			r.Desc, r.Objects, float64(r.Bytes)/(1<<20), r.ServeMs, ratio, r.LeaseWaitMs, r.FSOpenMs, r.EngineMs, r.FirstPutMs,
			c["put"], c["get"], c["list"]+c["listdir"], c["delete"]+c["deletemany"], c["stat"]+c["copy"], r.httpTotal())
	}
	fmt.Println("(put/get/list/delete/other: store calls during the takeover, list = List+ListDir, other = Stat+Copy; http: HTTP requests, a listing is one per 1000 keys)")
	for _, r := range failed {
		fmt.Printf("%s: FAILED after %.0f ms (times are up to the failure): %s\n", r.Scenario, r.ServeMs, r.Error)
	}
}
