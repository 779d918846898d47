// Package bench is the engine of `shale bench`: it loads a running server
// over the KV API, one benchmark after another in the manner of db_bench,
// and measures throughput, latency per request and CPU per operation.
// cmd/shale wires its flags to Config; the benchmark programs in hack/
// call Run in-process. It also holds the tree's one percentile rule, the
// nearest rank (percentile.go), over samples (Percentile) and over a
// fixed-size histogram (Histogram).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/cli"
)

// Config is what a run does. Error messages name the fields by the flags
// of `shale bench` that set them.
type Config struct {
	Addr       string        // the server's address, for the report
	Timeout    time.Duration // of one request
	Benchmarks []string      // run in order; see Names
	Threads    uint64        // concurrent requests
	Conns      uint64        // gRPC connections, shared round-robin by the threads
	Num        uint64        // operations per benchmark, unless Duration is set
	Duration   time.Duration // run each benchmark this long (0: Num operations)
	// Keys is the key space, keys 0 .. Keys-1 (0: Num, or DefaultNum with
	// Duration).
	Keys             uint64
	KeySize          int
	ValueSize        int
	CompressionRatio float64 // values compress to this fraction of their size
	Batch            uint64  // puts per Write (fills), keys per MultiGet (multireadrandom)
	ScanLength       uint64  // pairs per Scan
	Seed             uint64  // of the random keys and values
	IgnoreErrors     bool    // failed requests are counted, not an error of the run
	// ServerMetrics is the server's metrics address (host:port or a
	// /metrics URL), to report its CPU per op ("": not reported).
	ServerMetrics string
	// ProgressEvery is how often a progress line goes to stderr when it is
	// not a terminal.
	ProgressEvery time.Duration
}

const (
	DefaultNum = 100000
	MaxValue   = 256 << 20
	MaxBatch   = 100000
	MaxThreads = 1024 // each has a fixed-size latency histogram
	MaxKey     = 1 << 20
	// keys of the requests in flight: threads x batch x key size
	MaxKeyMemory = 1 << 30
)

// DefaultConfig is `shale bench` without flags.
func DefaultConfig() Config {
	return Config{
		Addr: "127.0.0.1:7070", Timeout: 30 * time.Second, Benchmarks: []string{"fillrandom", "readrandom"},
		Threads: 16, Conns: 1, Num: DefaultNum, KeySize: 16, ValueSize: 100, CompressionRatio: 0.5,
		Batch: 1, ScanLength: 100, ProgressEvery: 10 * time.Second,
	}
}

// Validate checks ranges and combinations: every problem is named with its
// flag and a fix.
func (c Config) Validate() error {
	if len(c.Benchmarks) == 0 {
		return fmt.Errorf("bench: --benchmarks is empty; want one or more of %s", strings.Join(Names(), ", "))
	}
	for _, n := range c.Benchmarks {
		if workloads[n] == nil {
			return fmt.Errorf("bench: unknown benchmark %q; want %s", n, strings.Join(Names(), ", "))
		}
	}
	num := c.Num
	if c.Duration > 0 && num == 0 {
		num = 1 // unused: the duration bounds the run
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"threads", c.Threads}, {"conns", c.Conns}, {"num", num}, {"batch", c.Batch}, {"scan-length", c.ScanLength}} {
		if f.v == 0 {
			return fmt.Errorf("bench: --%s must be at least 1", f.name)
		}
	}
	if c.Threads > MaxThreads {
		return fmt.Errorf("bench: --threads %d is too many: at most %d", c.Threads, MaxThreads)
	}
	if c.Batch > MaxBatch {
		return fmt.Errorf("bench: --batch %d is too large: at most %d", c.Batch, MaxBatch)
	}
	if c.Duration < 0 || c.Timeout <= 0 || c.ProgressEvery <= 0 {
		return errors.New("bench: --duration, --timeout and --progress-interval must be positive")
	}
	if !(c.CompressionRatio > 0 && c.CompressionRatio <= 1) {
		return errors.New("bench: --compression-ratio wants a fraction greater than 0 and at most 1")
	}
	c = c.normalized()
	if c.KeySize <= 0 {
		return errors.New("bench: --key-size must be at least 1 byte")
	}
	if need := len(strconv.FormatUint(c.Keys-1, 10)); c.KeySize < need {
		return fmt.Errorf("bench: --key-size %d is too small for %d keys (keys are zero-padded decimal numbers; they need %d bytes): raise --key-size or lower --keys/--num",
			c.KeySize, c.Keys, need)
	}
	if c.KeySize > MaxKey {
		return fmt.Errorf("bench: --key-size %s is too large: at most %s", cli.FormatSize(uint64(c.KeySize)), cli.FormatSize(MaxKey))
	}
	// Each thread keeps a batch of keys; values are slices of one shared pool.
	if mem := c.Threads * c.Batch * uint64(c.KeySize); mem > MaxKeyMemory {
		return fmt.Errorf("bench: --threads %d x --batch %d x --key-size %s is %s of keys in flight, over %s: lower one of them",
			c.Threads, c.Batch, cli.FormatSize(uint64(c.KeySize)), cli.FormatSize(mem>>20<<20), cli.FormatSize(MaxKeyMemory))
	}
	if c.ValueSize < 0 || c.ValueSize > MaxValue {
		return fmt.Errorf("bench: --value-size %s is too large: at most %s", cli.FormatSize(uint64(c.ValueSize)), cli.FormatSize(MaxValue))
	}
	return nil
}

// normalized is c with what follows from it filled in: the connections
// capped at the threads (more would sit idle), no operation count with a
// duration, and the key space's default.
func (c Config) normalized() Config {
	c.Conns = min(c.Conns, c.Threads)
	if c.Duration > 0 {
		c.Num = 0
	}
	if c.Keys == 0 {
		c.Keys = c.Num
		if c.Duration > 0 {
			c.Keys = DefaultNum
		}
	}
	return c
}

// Names lists the benchmarks in the order the help gives them.
func Names() []string {
	return []string{"fillrandom", "fillseq", "fillsync", "readrandom", "readwhilewriting", "multireadrandom", "scan"}
}

// ParseList parses a comma-separated list of benchmark names (--benchmarks),
// suggesting the closest name for one it does not know.
func ParseList(v string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if workloads[n] == nil {
			msg := fmt.Sprintf("unknown benchmark %q", n)
			if s := closestName(n, Names()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, fmt.Errorf("%s; want a comma-separated list of %s", msg, strings.Join(Names(), ", "))
		}
		names = append(names, n)
	}
	return names, nil
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

// Target is the server a run loads.
type Target struct {
	// Status is the server's answer to a Status call, for the report's
	// header (the caller makes it, to describe an unreachable server its
	// own way).
	Status *kvv1.StatusResponse
	// Dial opens one more connection to the server; Run dials
	// Config.Conns of them and closes them at the end.
	Dial func() (*grpc.ClientConn, error)
}

// Run runs cfg's benchmarks in order against t and returns the report.
// With stdout it also prints the report as text as it goes: the header, a
// row as each benchmark ends, then the notes. Progress lines, failed
// requests and warnings go to stderr. It fails, after measuring, if a
// request failed (unless cfg.IgnoreErrors) or ctx ended the run early;
// then the report holds what was measured. It fails with no report if cfg
// is invalid, the server's metrics cannot be read or a dial fails.
func Run(ctx context.Context, cfg Config, t Target, stdout, stderr io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.normalized()
	if stderr == nil {
		stderr = io.Discard
	}
	var metrics *serverMetrics
	if cfg.ServerMetrics != "" {
		metrics = newServerMetrics(cfg.ServerMetrics)
		if _, err := metrics.cpuSeconds(); err != nil {
			return nil, fmt.Errorf("--server-metrics %s: %w (want the server's --metrics-listen address)", cfg.ServerMetrics, err)
		}
	}
	conns := make([]kvv1.KVClient, cfg.Conns)
	for i := range conns {
		conn, err := t.Dial()
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		conns[i] = kvv1.NewKVClient(conn)
	}

	st := t.Status
	report := &Report{
		Addr: cfg.Addr, DB: st.GetDb(), ServerVersion: st.GetVersion(), RocksDBVersion: st.GetRocksdbVersion(),
		Threads: cfg.Threads, Conns: cfg.Conns, Num: cfg.Num, Duration: cfg.Duration.Seconds(), Keys: cfg.Keys,
		KeySize: cfg.KeySize, ValueSize: cfg.ValueSize, CompressionRatio: cfg.CompressionRatio,
		Batch: cfg.Batch, ScanLength: cfg.ScanLength, Seed: cfg.Seed,
		Benchmarks: []*Result{},
	}
	if stdout != nil {
		report.printHeader(stdout)
	}
	tty := cli.IsTerminal(stderr)
	// The progress line, failed requests and warnings come from several
	// goroutines.
	stderr = &cli.LockedWriter{W: stderr}
	errs := &benchErrors{w: stderr, tty: tty}
	values := newValuePool(cfg.ValueSize, cfg.CompressionRatio, cfg.Seed)
	for _, name := range cfg.Benchmarks {
		r := runBenchmark(ctx, &cfg, name, conns, values, metrics, errs, stderr, tty)
		report.Benchmarks = append(report.Benchmarks, r)
		if stdout != nil {
			report.printResult(stdout, r)
		}
		if r.Interrupted {
			break
		}
	}
	if stdout != nil {
		report.printNotes(stdout)
	}
	if ctx.Err() != nil {
		return report, errors.New("bench: interrupted")
	}
	if n := errs.count.Load(); n > 0 && !cfg.IgnoreErrors {
		var total uint64
		for _, r := range report.Benchmarks {
			total += r.Requests
			if r.Writer != nil {
				total += r.Writer.Requests
			}
		}
		return report, fmt.Errorf("bench: %d of %d requests failed, the first: %s (--ignore-errors to exit 0 anyway)", n, total, errs.firstError())
	}
	return report, nil
}
