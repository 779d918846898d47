package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// benchConfig is what `shale bench` was asked to do.
type benchConfig struct {
	addr             string
	timeout          time.Duration // of one request
	benchmarks       benchList
	threads          uint64
	conns            uint64
	num              uint64 // operations per benchmark, unless duration is set
	duration         time.Duration
	keys             uint64 // key space: keys 0 .. keys-1
	keySize          int
	valueSize        int
	compressionRatio ratioValue
	batch            uint64
	scanLength       uint64
	seed             uint64
	ignoreErrors     bool
	serverMetrics    string
	progressEvery    time.Duration
	sec              *clientFlags
}

const (
	benchDefaultNum = 100000
	benchMaxValue   = 256 << 20
	benchMaxBatch   = 100000
	benchMaxThreads = 1024 // each has a fixed-size latency histogram
	benchMaxKey     = 1 << 20
	// keys of the requests in flight: threads x batch x key size
	benchMaxKeyMemory = 1 << 30
)

func newBenchCmd() *cobra.Command {
	cfg := &benchConfig{benchmarks: benchList{"fillrandom", "readrandom"}, compressionRatio: 0.5}
	c := &cobra.Command{
		Use:   "bench [--benchmarks LIST] [flags]",
		Short: "Load a running server and report throughput, latency and CPU per operation",
		Long: `Bench generates load over the KV API of a running server (shale primary or
shale dev), one benchmark after another, in the manner of db_bench:

  fillrandom        Put values under random keys (sync=false)
  fillseq           Put values under keys in ascending order (sync=false)
  fillsync          Put values under random keys with sync=true (durable)
  readrandom        Get random keys; reports found and missing
  readwhilewriting  readrandom while one more thread Puts random keys
  multireadrandom   MultiGet --batch random keys per request
  scan              Scan --scan-length pairs from a random key

Keys are the decimal numbers 0 .. --keys-1, zero-padded to --key-size, so a
fillseq of N keys followed by readrandom over the same N keys finds them all;
fillrandom draws keys with replacement, so it leaves about 37% of them
unwritten. With --batch N, fills send Write batches of N puts and
multireadrandom asks for N keys per MultiGet; ops count keys, latency is per
request.

Each benchmark runs --num operations in total over --threads threads, or for
--duration. The report gives ops/s, MB/s (keys and values, 10^6 bytes),
latency per request (p50, p99, p99.9, max; log buckets of under 2% width),
client CPU per op (the process's user+system time over the benchmark), and
server CPU per op when --server-metrics points at the server's
--metrics-listen address. A live progress line goes to stderr when it is a
terminal, otherwise one line every --progress-interval.

A failed request is counted and the first few are printed; the run exits 1 if
any failed, unless --ignore-errors.`,
		Example: `  shale bench                                          # fillrandom,readrandom against 127.0.0.1:7070
  shale bench --benchmarks fillseq,readrandom,scan --num 1000000 --threads 32
  shale bench --benchmarks fillsync --duration 30s --keys 1000000 --value-size 400
  shale bench --benchmarks fillrandom --batch 100 --compression-ratio 1
  shale bench --server-metrics 127.0.0.1:9090 -o json | jq '.benchmarks[] | {name, opsPerSec}'`,
		Args: exactArgs(),
	}
	fs := c.Flags()
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:7070", "address of the server, `HOST:PORT`")
	fs.Var(newDuration(&cfg.timeout, 30*time.Second), "timeout", "deadline of one request")
	fs.Var(&cfg.benchmarks, "benchmarks", "comma-separated `list` of benchmarks to run in order: "+strings.Join(benchNames(), ", "))
	cfg.threads, cfg.conns, cfg.num, cfg.batch, cfg.scanLength = 16, 1, benchDefaultNum, 1, 100
	fs.Var(uintValue{&cfg.threads}, "threads", "concurrent requests (client threads)")
	fs.Var(uintValue{&cfg.conns}, "conns", "gRPC connections, shared round-robin by the threads")
	fs.Var(uintValue{&cfg.num}, "num", "operations per benchmark, over all threads (conflicts with --duration)")
	fs.Var(newDuration(&cfg.duration, 0), "duration", "run each benchmark this long instead of --num operations")
	fs.Lookup("duration").DefValue = "" // no "(default 0s)" in the help: unset
	fs.Var(uintValue{&cfg.keys}, "keys", "size of the key space (default: --num, or 100000 with --duration)")
	fs.Var(newSize(&cfg.keySize, 16), "key-size", "bytes per key")
	fs.Var(newSize(&cfg.valueSize, 100), "value-size", "bytes per value")
	fs.Var(&cfg.compressionRatio, "compression-ratio", "values compress to this fraction of their size (1: incompressible)")
	fs.Var(uintValue{&cfg.batch}, "batch", "puts per Write request (fills), keys per MultiGet (multireadrandom)")
	fs.Var(uintValue{&cfg.scanLength}, "scan-length", "pairs per Scan request (scan)")
	fs.Var(uintValue{&cfg.seed}, "seed", "seed of the random keys and values (same seed, same keys)")
	fs.BoolVar(&cfg.ignoreErrors, "ignore-errors", false, "exit 0 even if requests failed (they are still counted)")
	fs.StringVar(&cfg.serverMetrics, "server-metrics", "", "the server's metrics `address` (its --metrics-listen, or a /metrics URL), to report server CPU per op")
	fs.Var(newDuration(&cfg.progressEvery, 10*time.Second), "progress-interval", "how often to print a progress line when stderr is not a terminal")
	cfg.sec = addClientFlags(c, fs, "addr")
	output := addOutputFlags(c)
	c.RegisterFlagCompletionFunc("benchmarks", completeBenchList)
	noFileCompletion(c, "addr", "timeout", "threads", "conns", "num", "duration", "keys", "key-size", "value-size",
		"compression-ratio", "batch", "scan-length", "seed", "server-metrics", "progress-interval")

	c.RunE = func(c *cobra.Command, _ []string) error {
		if err := cfg.validate(c); err != nil {
			return err
		}
		return runBench(c, cfg, output())
	}
	return c
}

// validate checks what single flag values cannot: ranges and combinations.
// Every problem is bad usage (exit 2), named with its flag and a fix.
func (cfg *benchConfig) validate(c *cobra.Command) error {
	fs := c.Flags()
	if fs.Changed("num") && fs.Changed("duration") {
		return usageErrorf("bench: --num and --duration conflict: give one (--num N runs N operations per benchmark, --duration D runs each benchmark for D; --keys sets the key space)")
	}
	if len(cfg.benchmarks) == 0 {
		return usageErrorf("bench: --benchmarks is empty; want one or more of %s", strings.Join(benchNames(), ", "))
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"threads", cfg.threads}, {"conns", cfg.conns}, {"num", cfg.num}, {"batch", cfg.batch}, {"scan-length", cfg.scanLength}} {
		if f.v == 0 {
			return usageErrorf("bench: --%s must be at least 1", f.name)
		}
	}
	if fs.Changed("keys") && cfg.keys == 0 {
		return usageErrorf("bench: --keys must be at least 1")
	}
	if cfg.threads > benchMaxThreads {
		return usageErrorf("bench: --threads %d is too many: at most %d", cfg.threads, benchMaxThreads)
	}
	if cfg.batch > benchMaxBatch {
		return usageErrorf("bench: --batch %d is too large: at most %d", cfg.batch, benchMaxBatch)
	}
	if cfg.conns > cfg.threads {
		cfg.conns = cfg.threads // more would sit idle
	}
	if cfg.duration > 0 {
		cfg.num = 0
	}
	if cfg.keys == 0 {
		cfg.keys = cfg.num
		if cfg.duration > 0 {
			cfg.keys = benchDefaultNum
		}
	}
	if cfg.keySize == 0 {
		return usageErrorf("bench: --key-size must be at least 1 byte")
	}
	if need := len(strconv.FormatUint(cfg.keys-1, 10)); cfg.keySize < need {
		return usageErrorf("bench: --key-size %d is too small for %d keys (keys are zero-padded decimal numbers; they need %d bytes): raise --key-size or lower --keys/--num",
			cfg.keySize, cfg.keys, need)
	}
	if cfg.keySize > benchMaxKey {
		return usageErrorf("bench: --key-size %s is too large: at most %s", formatSize(uint64(cfg.keySize)), formatSize(benchMaxKey))
	}
	// Each thread keeps a batch of keys; values are slices of one shared pool.
	if mem := cfg.threads * cfg.batch * uint64(cfg.keySize); mem > benchMaxKeyMemory {
		return usageErrorf("bench: --threads %d x --batch %d x --key-size %s is %s of keys in flight, over %s: lower one of them",
			cfg.threads, cfg.batch, formatSize(uint64(cfg.keySize)), formatSize(mem>>20<<20), formatSize(benchMaxKeyMemory))
	}
	if cfg.valueSize > benchMaxValue {
		return usageErrorf("bench: --value-size %s is too large: at most %s", formatSize(uint64(cfg.valueSize)), formatSize(benchMaxValue))
	}
	return nil
}

// benchList is the value of --benchmarks: known names, checked when parsed.
type benchList []string

func (b *benchList) String() string { return strings.Join(*b, ",") }

func (b *benchList) Set(v string) error {
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if benchWorkloads[n] == nil {
			msg := fmt.Sprintf("unknown benchmark %q", n)
			if s := closestName(n, benchNames()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return fmt.Errorf("%s; want a comma-separated list of %s", msg, strings.Join(benchNames(), ", "))
		}
		names = append(names, n)
	}
	*b = names
	return nil
}

func (*benchList) Type() string { return "list" }

func completeBenchList(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	done, cur := "", toComplete
	if i := strings.LastIndex(toComplete, ","); i >= 0 {
		done, cur = toComplete[:i+1], toComplete[i+1:]
	}
	var out []cobra.Completion
	for _, n := range benchNames() {
		if strings.HasPrefix(n, cur) {
			out = append(out, done+n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// closestName is the name within edit distance 2 of s, if any.
func closestName(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ratioValue is --compression-ratio: a fraction in (0, 1].
type ratioValue float64

func (r *ratioValue) String() string { return strconv.FormatFloat(float64(*r), 'g', -1, 64) }

func (r *ratioValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x > 0 && x <= 1) {
		return errors.New("want a fraction greater than 0 and at most 1, such as 0.5 (1: incompressible)")
	}
	*r = ratioValue(x)
	return nil
}

func (*ratioValue) Type() string { return "ratio" }

// runBench checks that the server answers, runs the benchmarks in order and
// prints the report. It fails if a request failed (unless --ignore-errors)
// or the run was interrupted, after printing what was measured.
func runBench(c *cobra.Command, cfg *benchConfig, format outputFormat) error {
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	var st *kvv1.StatusResponse
	kc := &kvClient{addr: cfg.addr, timeout: cfg.timeout, sec: cfg.sec}
	if err := kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
		var err error
		st, err = kv.Status(ctx, &kvv1.StatusRequest{})
		return err
	}); err != nil {
		return err
	}
	cfg.addr = kc.addr // perhaps from a client config file
	var metrics *serverMetrics
	if cfg.serverMetrics != "" {
		metrics = newServerMetrics(cfg.serverMetrics)
		if _, err := metrics.cpuSeconds(); err != nil {
			return fmt.Errorf("--server-metrics %s: %w (want the server's --metrics-listen address)", cfg.serverMetrics, err)
		}
	}

	conns := make([]kvv1.KVClient, cfg.conns)
	for i := range conns {
		conn, err := kc.dial()
		if err != nil {
			return err
		}
		defer conn.Close()
		conns[i] = kvv1.NewKVClient(conn)
	}

	ctx, stop := signalContext()
	defer stop()
	report := &benchReport{
		Addr: cfg.addr, DB: st.Db, ServerVersion: st.Version, RocksDBVersion: st.RocksdbVersion,
		Threads: cfg.threads, Conns: cfg.conns, Num: cfg.num, Duration: cfg.duration.Seconds(), Keys: cfg.keys,
		KeySize: cfg.keySize, ValueSize: cfg.valueSize, CompressionRatio: float64(cfg.compressionRatio),
		Batch: cfg.batch, ScanLength: cfg.scanLength, Seed: cfg.seed,
		Benchmarks: []*benchResult{},
	}
	if format == outputText {
		report.printHeader(stdout)
	}
	tty := isTerminal(stderr)
	// The progress line, failed requests and warnings come from several
	// goroutines.
	stderr = &lockedWriter{w: stderr}
	errs := &benchErrors{w: stderr, tty: tty}
	values := newValuePool(cfg.valueSize, float64(cfg.compressionRatio), cfg.seed)
	for _, name := range cfg.benchmarks {
		r := runBenchmark(ctx, cfg, name, conns, values, metrics, errs, stderr, tty)
		report.Benchmarks = append(report.Benchmarks, r)
		if format == outputText {
			report.printResult(stdout, r)
		}
		if r.Interrupted {
			break
		}
	}
	if format == outputJSON {
		if err := printJSON(stdout, report); err != nil {
			return err
		}
	} else {
		report.printNotes(stdout)
	}
	if ctx.Err() != nil {
		return errors.New("bench: interrupted")
	}
	if n := errs.count.Load(); n > 0 && !cfg.ignoreErrors {
		var total uint64
		for _, r := range report.Benchmarks {
			total += r.Requests
			if r.Writer != nil {
				total += r.Writer.Requests
			}
		}
		return fmt.Errorf("bench: %d of %d requests failed, the first: %s (--ignore-errors to exit 0 anyway)", n, total, errs.firstError())
	}
	return nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
