package main

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/bench"
)

// The engine of `shale bench` is internal/bench; this file wires its flags.

func newBenchCmd() *cobra.Command {
	cfg := bench.DefaultConfig()
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
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "address of the server, `HOST:PORT`")
	fs.Var(newDuration(&cfg.Timeout, cfg.Timeout), "timeout", "deadline of one request")
	fs.Var((*benchList)(&cfg.Benchmarks), "benchmarks", "comma-separated `list` of benchmarks to run in order: "+strings.Join(bench.Names(), ", "))
	fs.Var(uintValue{&cfg.Threads}, "threads", "concurrent requests (client threads)")
	fs.Var(uintValue{&cfg.Conns}, "conns", "gRPC connections, shared round-robin by the threads")
	fs.Var(uintValue{&cfg.Num}, "num", "operations per benchmark, over all threads (conflicts with --duration)")
	fs.Var(newDuration(&cfg.Duration, 0), "duration", "run each benchmark this long instead of --num operations")
	fs.Lookup("duration").DefValue = "" // no "(default 0s)" in the help: unset
	fs.Var(uintValue{&cfg.Keys}, "keys", "size of the key space (default: --num, or 100000 with --duration)")
	fs.Var(newSize(&cfg.KeySize, cfg.KeySize), "key-size", "bytes per key")
	fs.Var(newSize(&cfg.ValueSize, cfg.ValueSize), "value-size", "bytes per value")
	fs.Var((*ratioValue)(&cfg.CompressionRatio), "compression-ratio", "values compress to this fraction of their size (1: incompressible)")
	fs.Var(uintValue{&cfg.Batch}, "batch", "puts per Write request (fills), keys per MultiGet (multireadrandom)")
	fs.Var(uintValue{&cfg.ScanLength}, "scan-length", "pairs per Scan request (scan)")
	fs.Var(uintValue{&cfg.Seed}, "seed", "seed of the random keys and values (same seed, same keys)")
	fs.BoolVar(&cfg.IgnoreErrors, "ignore-errors", false, "exit 0 even if requests failed (they are still counted)")
	fs.StringVar(&cfg.ServerMetrics, "server-metrics", "", "the server's metrics `address` (its --metrics-listen, or a /metrics URL), to report server CPU per op")
	fs.Var(newDuration(&cfg.ProgressEvery, cfg.ProgressEvery), "progress-interval", "how often to print a progress line when stderr is not a terminal")
	sec := addClientFlags(c, fs, "addr")
	output := addOutputFlags(c)
	c.RegisterFlagCompletionFunc("benchmarks", completeBenchList)
	noFileCompletion(c, "addr", "timeout", "threads", "conns", "num", "duration", "keys", "key-size", "value-size",
		"compression-ratio", "batch", "scan-length", "seed", "server-metrics", "progress-interval")

	c.RunE = func(c *cobra.Command, _ []string) error {
		// What only the flags tell: which were given. The engine checks
		// the rest; all of it is bad usage (exit 2).
		if fs.Changed("num") && fs.Changed("duration") {
			return usageErrorf("bench: --num and --duration conflict: give one (--num N runs N operations per benchmark, --duration D runs each benchmark for D; --keys sets the key space)")
		}
		if fs.Changed("keys") && cfg.Keys == 0 {
			return usageErrorf("bench: --keys must be at least 1")
		}
		if err := cfg.Validate(); err != nil {
			return usageErrorf("%s", err)
		}
		return runBench(c, cfg, sec, output())
	}
	return c
}

// runBench checks that the server answers, runs the benchmarks and prints
// the report (as text while it runs, or as JSON at the end). It fails if a
// request failed (unless --ignore-errors) or the run was interrupted, after
// printing what was measured.
func runBench(c *cobra.Command, cfg bench.Config, sec *clientFlags, format outputFormat) error {
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	var st *kvv1.StatusResponse
	kc := &kvClient{addr: cfg.Addr, timeout: cfg.Timeout, sec: sec}
	if err := kc.call(func(ctx context.Context, kv kvv1.KVClient) error {
		var err error
		st, err = kv.Status(ctx, &kvv1.StatusRequest{})
		return err
	}); err != nil {
		return err
	}
	cfg.Addr = kc.addr // perhaps from a client config file
	ctx, stop := signalContext()
	defer stop()
	text := stdout
	if format == outputJSON {
		text = nil
	}
	report, err := bench.Run(ctx, cfg, bench.Target{Status: st, Dial: kc.dial}, text, stderr)
	if report != nil && format == outputJSON {
		if perr := printJSON(stdout, report); perr != nil {
			return perr
		}
	}
	return err
}

// benchList is the value of --benchmarks: known names, checked when parsed.
type benchList []string

func (b *benchList) String() string { return strings.Join(*b, ",") }

func (b *benchList) Set(v string) error {
	names, err := bench.ParseList(v)
	if err != nil {
		return err
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
	for _, n := range bench.Names() {
		if strings.HasPrefix(n, cur) {
			out = append(out, done+n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
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
