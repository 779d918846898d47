package bench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shale-rocks/shale/internal/cli"
)

// Report is the whole run; `shale bench -o json` prints it as it is.
type Report struct {
	Addr             string    `json:"addr"`
	DB               string    `json:"db"`
	ServerVersion    string    `json:"serverVersion"`
	RocksDBVersion   string    `json:"rocksdbVersion"`
	Threads          uint64    `json:"threads"`
	Conns            uint64    `json:"conns"`
	Num              uint64    `json:"num"`             // 0 with --duration
	Duration         float64   `json:"durationSeconds"` // 0 with --num
	Keys             uint64    `json:"keys"`
	KeySize          int       `json:"keySize"`
	ValueSize        int       `json:"valueSize"`
	CompressionRatio float64   `json:"compressionRatio"`
	Batch            uint64    `json:"batch"`
	ScanLength       uint64    `json:"scanLength"`
	Seed             uint64    `json:"seed"`
	Benchmarks       []*Result `json:"benchmarks"`
}

// Result is one benchmark's measurements. Ops count keys (a Write of
// 100 puts is 100 ops, a MultiGet of 32 keys 32) or scans; latency is per
// request.
type Result struct {
	Name      string  `json:"name"`
	Ops       uint64  `json:"ops"`
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"opsPerSec"`
	Bytes     uint64  `json:"bytes"`
	MBPerSec  float64 `json:"mbPerSec"` // 10^6 bytes
	// Point reads: keys found and missing.
	Found   *uint64 `json:"found,omitempty"`
	Missing *uint64 `json:"missing,omitempty"`
	// Scans: pairs returned.
	Pairs   *uint64 `json:"pairs,omitempty"`
	Latency Latency `json:"latencyMicros"`
	// The bench process's user+system CPU time over the benchmark, and per
	// op (ops of the readers and the writer).
	ClientCPUSeconds     float64 `json:"clientCpuSeconds"`
	ClientCPUMicrosPerOp float64 `json:"clientCpuMicrosPerOp"`
	// The server's, from process_cpu_seconds_total on --server-metrics
	// (null without it). Its resolution is 10 ms.
	ServerCPUSeconds     *float64 `json:"serverCpuSeconds"`
	ServerCPUMicrosPerOp *float64 `json:"serverCpuMicrosPerOp"`
	// readwhilewriting: the writer thread.
	Writer      *Writer `json:"writer,omitempty"`
	Interrupted bool    `json:"interrupted,omitempty"`
}

// Writer is the writer thread of readwhilewriting.
type Writer struct {
	Ops       uint64  `json:"ops"`
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"`
	OpsPerSec float64 `json:"opsPerSec"`
}

// Latency is in microseconds, of successful requests.
type Latency struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

func micros(d time.Duration) float64 {
	return float64(d.Nanoseconds()/100) / 10 // 0.1 µs is plenty
}

func newBenchResult(name string, w *benchWorkload, c benchCounts, h *Histogram, elapsed time.Duration) *Result {
	r := &Result{
		Name: name, Ops: c.ops, Requests: c.requests, Errors: c.errors,
		Seconds: elapsed.Seconds(), OpsPerSec: perSecond(c.ops, elapsed),
		Bytes: c.bytes, MBPerSec: perSecond(c.bytes, elapsed) / 1e6,
		Latency: Latency{
			Min: micros(h.Min()), Mean: micros(h.Mean()), P50: micros(h.Quantile(0.5)),
			P99: micros(h.Quantile(0.99)), P999: micros(h.Quantile(0.999)), Max: micros(h.Max()),
		},
	}
	switch w.kind {
	case kindRead, kindMultiRead:
		r.Found, r.Missing = &c.found, &c.missing
	case kindScan:
		r.Pairs = &c.pairs
	}
	return r
}

// Text output: a header, a row per benchmark as it ends, then notes.

const benchRowFormat = "%-17s %9s %8s %9s %7s %8s %8s %8s %8s %8s %8s\n"

func (rep *Report) printHeader(w io.Writer) {
	fmt.Fprintf(w, "shale bench: %s, %s (shale %s, RocksDB %s)\n", rep.Addr, rep.DB, rep.ServerVersion, rep.RocksDBVersion)
	what := fmt.Sprintf("%d ops per benchmark", rep.Num)
	if rep.Duration > 0 {
		what = fmt.Sprintf("%s per benchmark", cli.FormatDuration(time.Duration(rep.Duration*float64(time.Second))))
	}
	conns := "1 connection"
	if rep.Conns != 1 {
		conns = fmt.Sprintf("%d connections", rep.Conns)
	}
	fmt.Fprintf(w, "%d threads on %s; %s over %d keys of %d B; values %d B, compressible to %g; batch %d\n\n",
		rep.Threads, conns, what, rep.Keys, rep.KeySize, rep.ValueSize, rep.CompressionRatio, rep.Batch)
	fmt.Fprintf(w, benchRowFormat, "benchmark", "ops", "seconds", "ops/s", "MB/s", "p50", "p99", "p99.9", "max", "cpu/op", "srv cpu")
}

func (rep *Report) printResult(w io.Writer, r *Result) {
	srv := "-"
	if r.ServerCPUMicrosPerOp != nil {
		srv = fmtMicros(*r.ServerCPUMicrosPerOp)
	}
	name := r.Name
	if r.Interrupted {
		name += "*"
	}
	fmt.Fprintf(w, benchRowFormat, name, strconv.FormatUint(r.Ops, 10), fmt.Sprintf("%.2f", r.Seconds),
		fmt.Sprintf("%.0f", r.OpsPerSec), fmt.Sprintf("%.2f", r.MBPerSec),
		fmtMicros(r.Latency.P50), fmtMicros(r.Latency.P99), fmtMicros(r.Latency.P999), fmtMicros(r.Latency.Max),
		fmtMicros(r.ClientCPUMicrosPerOp), srv)
}

func (rep *Report) printNotes(w io.Writer) {
	var notes []string
	interrupted, noServer, batched := false, false, false
	for _, r := range rep.Benchmarks {
		if r.Found != nil {
			notes = append(notes, fmt.Sprintf("%s: %d found, %d missing", r.Name, *r.Found, *r.Missing))
		}
		if r.Pairs != nil {
			notes = append(notes, fmt.Sprintf("%s: %d pairs in %d scans of up to %d", r.Name, *r.Pairs, r.Ops, rep.ScanLength))
		}
		if r.Writer != nil {
			notes = append(notes, fmt.Sprintf("%s: the writer put %d keys, %.0f/s", r.Name, r.Writer.Ops, r.Writer.OpsPerSec))
		}
		if r.Errors > 0 || (r.Writer != nil && r.Writer.Errors > 0) {
			n := r.Errors
			if r.Writer != nil {
				n += r.Writer.Errors
			}
			notes = append(notes, fmt.Sprintf("%s: %d requests failed", r.Name, n))
		}
		interrupted = interrupted || r.Interrupted
		noServer = noServer || r.ServerCPUMicrosPerOp == nil
		batched = batched || (rep.Batch > 1 && workloads[r.Name].kind != kindRead && workloads[r.Name].kind != kindScan)
	}
	if batched {
		notes = append(notes, fmt.Sprintf("ops count keys; latency is per request of --batch %d", rep.Batch))
	}
	notes = append(notes, "cpu/op is this process's CPU time per op")
	if noServer {
		notes[len(notes)-1] += "; srv cpu needs --server-metrics HOST:PORT (the server's --metrics-listen)"
	} else {
		notes[len(notes)-1] += "; srv cpu the server's (process_cpu_seconds_total, 10 ms resolution)"
	}
	if interrupted {
		notes = append(notes, "* interrupted: partial figures")
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
}

// fmtMicros is a duration given in microseconds, in a unit that suits it.
func fmtMicros(us float64) string {
	switch {
	case us < 10:
		return fmt.Sprintf("%.1fµs", us)
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
}

// startProgress shows how a benchmark is going on stderr (cli.Progress):
// the operations done, the share of --num or --duration, and the rate
// since the last line. The returned function stops it and clears the line.
func startProgress(w io.Writer, tty bool, r *benchRun, start time.Time) func() {
	lastOps, lastT := uint64(0), start
	return cli.Progress(w, tty, r.cfg.ProgressEvery, func(now time.Time) string {
		ops := r.done.Load()
		line := progressLine(r, ops, now.Sub(start), perSecond(ops-lastOps, now.Sub(lastT)))
		lastOps, lastT = ops, now
		return line
	})
}

func progressLine(r *benchRun, ops uint64, elapsed time.Duration, rate float64) string {
	var pct float64
	if r.cfg.Duration > 0 {
		pct = 100 * elapsed.Seconds() / r.cfg.Duration.Seconds()
	} else {
		pct = 100 * float64(ops) / float64(r.cfg.Num)
	}
	return fmt.Sprintf("%s: %3.0f%%  %d ops in %s  %.0f ops/s now  %d errors",
		r.name, min(pct, 100), ops, elapsed.Round(100*time.Millisecond), rate, r.failed.Load())
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverMetrics reads the server's CPU time from its Prometheus endpoint.
type serverMetrics struct {
	url    string
	client *http.Client
}

func newServerMetrics(addr string) *serverMetrics {
	url := addr
	if !strings.Contains(addr, "://") {
		url = "http://" + addr + "/metrics"
	}
	return &serverMetrics{url: url, client: &http.Client{Timeout: 10 * time.Second}}
}

// cpuSeconds is the server's process_cpu_seconds_total.
func (m *serverMetrics) cpuSeconds() (float64, error) {
	resp, err := m.client.Get(m.url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", m.url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no process_cpu_seconds_total", m.url)
}
