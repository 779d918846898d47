package main

// The owners that build a scenario's history run as child processes of the
// bench (takeoverbench -child ...), one process per owner, so that an owner
// that "crashes" really stops: it exits without closing RocksDB or the
// FileSystem and without recording a release, like kill -9.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// childArgs says what one owner does.
type childArgs struct {
	Mode   string        // "writes" or "fill-ssts"
	Store  string        // store URL
	Cache  string        // cache directory
	N      int           // synced writes ("writes") or SST files ("fill-ssts")
	Prefix string        // key prefix
	PerSST int           // keys per flushed SST ("fill-ssts")
	Flush  bool          // flush the memtable after the writes
	Live   time.Duration // stay up this long after the writes (deferred deletes run)
	Crash  bool          // exit without closing or releasing
	Lease  time.Duration
	Grace  time.Duration
}

func (a childArgs) flags() []string {
	return []string{
		"-child=" + a.Mode, "-child-store=" + a.Store, "-child-cache=" + a.Cache,
		fmt.Sprintf("-child-n=%d", a.N), "-child-prefix=" + a.Prefix, fmt.Sprintf("-child-per-sst=%d", a.PerSST),
		fmt.Sprintf("-child-flush=%t", a.Flush), "-child-live=" + a.Live.String(), fmt.Sprintf("-child-crash=%t", a.Crash),
		"-child-lease=" + a.Lease.String(), "-child-grace=" + a.Grace.String(),
	}
}

func (a *childArgs) register(fl *flag.FlagSet) {
	fl.StringVar(&a.Mode, "child", "", "internal: run one owner of a scenario's history (writes|fill-ssts)")
	fl.StringVar(&a.Store, "child-store", "", "internal")
	fl.StringVar(&a.Cache, "child-cache", "", "internal")
	fl.IntVar(&a.N, "child-n", 0, "internal")
	fl.StringVar(&a.Prefix, "child-prefix", "k", "internal")
	fl.IntVar(&a.PerSST, "child-per-sst", 10, "internal")
	fl.BoolVar(&a.Flush, "child-flush", false, "internal")
	fl.DurationVar(&a.Live, "child-live", 0, "internal")
	fl.BoolVar(&a.Crash, "child-crash", false, "internal")
	fl.DurationVar(&a.Lease, "child-lease", 100*time.Millisecond, "internal")
	fl.DurationVar(&a.Grace, "child-grace", 200*time.Millisecond, "internal")
}

// childResult is what an owner reports on its last stdout line.
type childResult struct {
	Epoch    uint64   `json:"epoch"`
	LastSeq  uint64   `json:"lastSeq"`  // sequence of its last acknowledged write
	SSTFiles uint64   `json:"sstFiles"` // live SST files when it stopped
	Flushes  int      `json:"flushes,omitempty"`
	Deletes  int64    `json:"deletes"` // objects it deleted (deferred deletes)
	Samples  []string `json:"samples"` // keys it wrote (values follow from keys)
	// Warnings and errors it logged, by message.
	Logged map[string]int64 `json:"logged,omitempty"`
}

// key is the i-th key under prefix; keys sort in write order.
func key(prefix string, i int) string { return fmt.Sprintf("%s-%09d", prefix, i) }

// value is the 100-byte value of k: a reader can check it knowing k alone.
func value(k string) []byte {
	sum := sha256.Sum256([]byte(k))
	h := hex.EncodeToString(sum[:])
	return []byte((k + "=" + h + h)[:100])
}

// samples picks the first, middle and last of n keys under prefix.
func samples(prefix string, n int) []string {
	if n <= 0 {
		return nil
	}
	idx := []int{0}
	if n > 2 {
		idx = append(idx, n/2)
	}
	if n > 1 {
		idx = append(idx, n-1)
	}
	var out []string
	for _, i := range idx {
		out = append(out, key(prefix, i))
	}
	return out
}

// logCounter is a slog handler that counts warnings and errors by message
// (a takeover of a long history logs one line per old log) and prints
// only errors.
type logCounter struct {
	n   *counter
	out slog.Handler
}

func newLogCounter() *logCounter {
	return &logCounter{n: &counter{}, out: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})}
}

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logCounter) Handle(ctx context.Context, r slog.Record) error {
	h.n.add(r.Level.String()+" "+r.Message, 1)
	if r.Level >= slog.LevelError {
		return h.out.Handle(ctx, r)
	}
	return nil
}

func (h *logCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logCounter{n: h.n, out: h.out.WithAttrs(attrs)}
}

func (h *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{n: h.n, out: h.out.WithGroup(name)}
}

// openOwner takes the database over as the next epoch, as a primary does.
func openOwner(storeURL, cache string, lease, grace time.Duration, log *logCounter, observe func(shalefs.Request)) (*shalefs.Owner, *engine.DB, error) {
	store, err := objstore.Open(storeURL)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fs, err := shalefs.Open(ctx, shalefs.Config{Store: store, CacheDir: cache, Lease: lease, DeleteGrace: grace, Owner: fmt.Sprintf("takeoverbench builder pid %d", os.Getpid()), Logger: slog.New(log), Observe: observe})
	if err != nil {
		return nil, nil, err
	}
	o := engine.DefaultOptions()
	o.BlockCacheBytes = 32 << 20
	// One compression for every level: an L0 file then moves down to the
	// last level as it is (a trivial move) instead of being rewritten, so
	// every flush stays one SST file.
	o.BottommostCompression = grocksdb.LZ4Compression
	o.FileSystem = fs
	db, err := engine.Open(cache, o)
	if err != nil {
		fs.Stop()
		return nil, nil, err
	}
	fs.Serving()
	return fs, db, nil
}

// runChild runs one owner; crash tells the caller to exit without closing.
func runChild(a childArgs) (res childResult, err error) {
	log := newLogCounter()
	defer func() { res.Logged = log.n.snapshot() }()
	// When this owner last deleted an object: its deferred deletes are
	// done once none happened for a while.
	var lastDelete, deletes atomic.Int64
	observe := func(q shalefs.Request) {
		if q.Op == "delete" {
			lastDelete.Store(time.Now().UnixNano())
			deletes.Add(1)
		}
	}
	fs, db, err := openOwner(a.Store, a.Cache, a.Lease, a.Grace, log, observe)
	if err != nil {
		return res, err
	}
	res.Epoch = fs.Epoch()
	switch a.Mode {
	case "writes":
		err = childWrites(a, db, &res)
	case "fill-ssts":
		err = childFillSSTs(a, db, &res)
	default:
		err = fmt.Errorf("unknown -child mode %q", a.Mode)
	}
	if err != nil {
		return res, err
	}
	if a.Live > 0 {
		// Stay up while deferred deletes run, so the store holds what a
		// long-lived database would. Every owner has some (the MANIFEST
		// it replaced at open, WALs after a flush), and the first may come
		// late: the old MANIFEST of a large database is listed before its
		// segments are deleted. So: wait for a first delete, then until
		// none happened for a while.
		time.Sleep(a.Live)
		quiet := max(2*a.Grace, 200*time.Millisecond)
		first := time.Now().Add(30 * time.Second)
		for limit := time.Now().Add(10 * time.Minute); time.Now().Before(limit); time.Sleep(50 * time.Millisecond) {
			last := lastDelete.Load()
			if last == 0 && time.Now().After(first) {
				fmt.Fprintln(os.Stderr, "#   an owner deleted nothing in 30s; stopping it anyway")
				break
			}
			if last != 0 && time.Since(time.Unix(0, last)) > quiet {
				break
			}
		}
	}
	res.Deletes = deletes.Load()
	st, err := db.Stats()
	if err != nil {
		return res, err
	}
	res.SSTFiles = st.SSTFiles
	res.LastSeq = db.LatestSequence()
	if a.Crash {
		return res, nil
	}
	db.Close()
	fs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return res, fs.Release(ctx)
}

// childWrites makes N synced writes, one at a time: each is one sync of
// the WAL, so one segment.
func childWrites(a childArgs, db *engine.DB, res *childResult) error {
	start := time.Now()
	for i := 0; i < a.N; i++ {
		k := key(a.Prefix, i)
		if err := db.Put([]byte(k), value(k), true); err != nil {
			return fmt.Errorf("synced write %d: %w", i, err)
		}
		if (i+1)%20000 == 0 {
			fmt.Fprintf(os.Stderr, "#   %d synced writes (%.0f/s)\n", i+1, float64(i+1)/time.Since(start).Seconds())
		}
	}
	if a.Flush {
		if err := db.Flush(); err != nil {
			return err
		}
	}
	res.Samples = samples(a.Prefix, a.N)
	return nil
}

// childFillSSTs flushes small memtables of ascending keys until N SST files
// are live. The files' key ranges are disjoint, so compactions move them
// down whole and the count only grows.
func childFillSSTs(a childArgs, db *engine.DB, res *childResult) error {
	start := time.Now()
	perSST := max(a.PerSST, 1)
	written := 0
	for {
		st, err := settled(db)
		if err != nil {
			return err
		}
		if int(st.SSTFiles) >= a.N {
			break
		}
		if res.Flushes > 3*a.N+10 {
			return fmt.Errorf("%d flushes left only %d SST files (files per level %v): compactions merge them", res.Flushes, st.SSTFiles, st.FilesPerLevel)
		}
		batch := min(a.N-int(st.SSTFiles), 500)
		for b := 0; b < batch; b++ {
			for j := 0; j < perSST; j++ {
				k := key(a.Prefix, written)
				written++
				if err := db.Put([]byte(k), value(k), false); err != nil {
					return err
				}
			}
			if err := db.Flush(); err != nil {
				return err
			}
			res.Flushes++
		}
		fmt.Fprintf(os.Stderr, "#   %d flushes (%.0f/s), %d SST files before this batch\n", res.Flushes, float64(res.Flushes)/time.Since(start).Seconds(), st.SSTFiles)
	}
	res.Samples = samples(a.Prefix, written)
	return nil
}

// settled waits until no flush or compaction runs or is due, and returns
// the database's properties then.
func settled(db *engine.DB) (engine.Stats, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := db.Stats()
		if err != nil {
			return st, err
		}
		l0 := uint64(0)
		if len(st.FilesPerLevel) > 0 {
			l0 = st.FilesPerLevel[0]
		}
		if st.RunningCompactions == 0 && st.RunningFlushes == 0 && st.PendingCompactionBytes == 0 && l0 < 4 {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, errors.New("compactions did not settle within 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childMain runs the -child mode and exits.
func childMain(a childArgs) {
	res, err := runChild(a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeoverbench -child:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	os.Stdout.Write(append(b, '\n'))
	os.Exit(0) // a crashing owner exits here with RocksDB and the FileSystem still open
}
