package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Bad usage of bench exits 2 naming the flag and the fix, before dialing
// anything.
func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // on stderr
	}{
		{[]string{"--benchmarks", "fillrandm"}, []string{`invalid argument "fillrandm" for "--benchmarks" flag: unknown benchmark "fillrandm" (did you mean "fillrandom"?)`,
			"want a comma-separated list of fillrandom, fillseq, fillsync, readrandom, readwhilewriting, multireadrandom, scan"}},
		{[]string{"--benchmarks", "fillseq,readrandom,frobnicate"}, []string{`unknown benchmark "frobnicate"; want a comma-separated list`}},
		{[]string{"--benchmarks", ","}, []string{"bench: --benchmarks is empty; want one or more of fillrandom,"}},
		{[]string{"--num", "10", "--duration", "5s"}, []string{"bench: --num and --duration conflict: give one", "--keys sets the key space"}},
		{[]string{"--duration", "0"}, []string{`invalid argument "0" for "--duration" flag: must be positive`}},
		{[]string{"--key-size", "0"}, []string{"bench: --key-size must be at least 1 byte"}},
		{[]string{"--key-size", "3", "--num", "5000"}, []string{"bench: --key-size 3 is too small for 5000 keys", "raise --key-size or lower --keys/--num"}},
		{[]string{"--key-size", "4", "--duration", "1s", "--keys", "1000000"}, []string{"--key-size 4 is too small for 1000000 keys"}},
		{[]string{"--value-size", "12MB"}, []string{`invalid argument "12MB" for "--value-size" flag`, "want bytes, or a number with KiB, MiB or GiB"}},
		{[]string{"--value-size", "1GiB"}, []string{"bench: --value-size 1GiB is too large: at most 256MiB"}},
		{[]string{"--key-size", "-1"}, []string{`for "--key-size" flag`}},
		{[]string{"--compression-ratio", "0"}, []string{`invalid argument "0" for "--compression-ratio" flag: want a fraction greater than 0 and at most 1`}},
		{[]string{"--compression-ratio", "half"}, []string{`for "--compression-ratio" flag`}},
		{[]string{"--threads", "0"}, []string{"bench: --threads must be at least 1"}},
		{[]string{"--threads", "-4"}, []string{`invalid argument "-4" for "--threads" flag: want a whole number >= 0`}},
		{[]string{"--num", "0"}, []string{"bench: --num must be at least 1"}},
		{[]string{"--keys", "0", "--duration", "1s"}, []string{"bench: --keys must be at least 1"}},
		{[]string{"--threads", "5000"}, []string{"bench: --threads 5000 is too many: at most 1024"}},
		{[]string{"--key-size", "2MiB"}, []string{"bench: --key-size 2MiB is too large: at most 1MiB"}},
		{[]string{"--key-size", "1MiB", "--batch", "100", "--threads", "16"}, []string{"bench: --threads 16 x --batch 100 x --key-size 1MiB is 1600MiB of keys in flight, over 1GiB: lower one of them"}},
		{[]string{"--batch", "0"}, []string{"bench: --batch must be at least 1"}},
		{[]string{"--batch", "1000000"}, []string{"bench: --batch 1000000 is too large"}},
		{[]string{"--scan-length", "0"}, []string{"bench: --scan-length must be at least 1"}},
		{[]string{"-o", "yaml"}, []string{`invalid argument "yaml" for "-o, --output" flag`}},
		{[]string{"stray"}, []string{"bench: want no arguments, got 1 argument(s)"}},
		{[]string{"--bogus"}, []string{"unknown flag: --bogus", "Usage: shale bench [--benchmarks LIST] [flags]", "Run 'shale bench --help'"}},
	} {
		args := append([]string{"bench", "--addr", "127.0.0.1:1"}, tc.args...)
		code, out, errOut := shale(args...)
		ok := code == 2 && out == "" && strings.HasPrefix(errOut, "shale: ")
		for _, w := range tc.want {
			ok = ok && strings.Contains(errOut, w)
		}
		if !ok {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit 2, no stdout, stderr containing %q", args, code, out, errOut, tc.want)
		}
	}
	if code, out, errOut := shaleProcess(t, "bench", "--num", "5", "--duration", "1s"); code != 2 || out != "" || !strings.Contains(errOut, "--num and --duration conflict") {
		t.Errorf("process shale bench --num --duration: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestBenchHelp(t *testing.T) {
	code, out, errOut := shale("bench", "--help")
	for _, w := range []string{"fillrandom", "readwhilewriting", "multireadrandom", "--benchmarks list", "(default fillrandom,readrandom)",
		"--threads uint", "(default 16)", "--num uint", "--duration duration", "--key-size size", "--value-size size",
		"--compression-ratio ratio", "(default 0.5)", "--batch uint", "--ignore-errors", "--server-metrics address", "-o, --output format"} {
		if !strings.Contains(out, w) {
			t.Errorf("bench --help lacks %q", w)
		}
	}
	if code != 0 || errOut != "" || strings.Contains(out, "default 0s") {
		t.Errorf("bench --help: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if code, out, _ := shale("__complete", "bench", "--benchmarks", "fillseq,read"); code != 0 ||
		!strings.Contains(out, "fillseq,readrandom\n") || !strings.Contains(out, "fillseq,readwhilewriting\n") || strings.Contains(out, "scan") {
		t.Errorf("completion of --benchmarks: %q", out)
	}
}

// benchJSON is the part of -o json the tests read.
type benchJSON struct {
	Addr       string
	DB         string
	Threads    int
	Conns      int
	Num        int
	Keys       int
	Batch      int
	Benchmarks []struct {
		Name                 string
		Ops                  uint64
		Requests             uint64
		Errors               uint64
		Seconds              float64
		OpsPerSec            float64
		Bytes                uint64
		MBPerSec             float64
		Found, Missing       *uint64
		Pairs                *uint64
		LatencyMicros        map[string]float64
		ClientCPUSeconds     float64
		ClientCPUMicrosPerOp float64
		ServerCPUSeconds     *float64
		ServerCPUMicrosPerOp *float64
		Writer               *struct{ Ops, Requests, Errors uint64 }
	}
}

func parseBenchJSON(t *testing.T, out string) benchJSON {
	t.Helper()
	var r benchJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	return r
}

// A real run against a primary on a file:// store: what fillseq writes,
// the reads find, and the report adds up, in text and in -o json.
func TestBenchEndToEnd(t *testing.T) {
	metrics := freeAddr(t)
	p := startPrimary(t, filepath.Join(t.TempDir(), "db"), filepath.Join(t.TempDir(), "cache"),
		"--max-value-size", "4KiB", "--metrics-listen", metrics)
	a := "--addr=" + p.addr

	t.Run("json", func(t *testing.T) {
		code, out, errOut := shale("bench", a, "--server-metrics", metrics, "-o", "json", "--num", "500", "--threads", "4", "--conns", "2", "--batch", "8",
			"--scan-length", "10", "--benchmarks", "fillseq,readrandom,multireadrandom,scan,readwhilewriting")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d\nstderr %s\nstdout %s", code, errOut, out)
		}
		r := parseBenchJSON(t, out)
		if r.Addr != p.addr || !strings.HasSuffix(r.DB, "/db") || r.Threads != 4 || r.Conns != 2 || r.Num != 500 || r.Keys != 500 || r.Batch != 8 {
			t.Errorf("run: %+v", r)
		}
		var names []string
		for _, b := range r.Benchmarks {
			names = append(names, b.Name)
			lat := b.LatencyMicros
			if b.Errors != 0 || b.Seconds <= 0 || b.OpsPerSec <= 0 || b.MBPerSec <= 0 ||
				!(lat["min"] > 0 && lat["min"] <= lat["p50"] && lat["p50"] <= lat["p99"] && lat["p99"] <= lat["p99.9"] && lat["p99.9"] <= lat["max"]) ||
				b.ClientCPUSeconds <= 0 || b.ServerCPUSeconds == nil || b.ServerCPUMicrosPerOp == nil || *b.ServerCPUSeconds < 0 {
				t.Errorf("%s: %+v", b.Name, b)
			}
		}
		if !slices.Equal(names, []string{"fillseq", "readrandom", "multireadrandom", "scan", "readwhilewriting"}) {
			t.Fatalf("benchmarks %q", names)
		}
		fill, read, multi, scan, rww := r.Benchmarks[0], r.Benchmarks[1], r.Benchmarks[2], r.Benchmarks[3], r.Benchmarks[4]
		if fill.Ops != 500 || fill.Requests != 63 || fill.Bytes != 500*(16+100) || fill.Found != nil {
			t.Errorf("fillseq of 500 in batches of 8: %+v", fill)
		}
		if read.Ops != 500 || read.Requests != 500 || *read.Found != 500 || *read.Missing != 0 {
			t.Errorf("readrandom after fillseq: %d ops, %d requests, found %d, missing %d; want all 500 found", read.Ops, read.Requests, *read.Found, *read.Missing)
		}
		if multi.Ops != 500 || multi.Requests != 63 || *multi.Found != 500 || *multi.Missing != 0 {
			t.Errorf("multireadrandom: %d ops, %d requests, found %d", multi.Ops, multi.Requests, *multi.Found)
		}
		if scan.Ops != 500 || scan.Requests != 500 || *scan.Pairs < 500 || *scan.Pairs > 500*10 {
			t.Errorf("scan: %d scans, %d pairs", scan.Ops, *scan.Pairs)
		}
		if rww.Ops != 500 || *rww.Found != 500 || rww.Writer == nil || rww.Writer.Errors != 0 || rww.Writer.Ops != rww.Writer.Requests {
			t.Errorf("readwhilewriting: %d ops, found %d, writer %+v", rww.Ops, *rww.Found, rww.Writer)
		}
	})

	t.Run("text", func(t *testing.T) {
		// The keys are among the 500 the json run wrote: all found.
		code, out, errOut := shale("bench", a, "--num", "200", "--threads", "4", "--benchmarks", "fillrandom,readrandom,fillsync")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d\nstderr %s\nstdout %s", code, errOut, out)
		}
		lines := strings.Split(out, "\n")
		if !strings.HasPrefix(lines[0], "shale bench: "+p.addr+", file://") ||
			lines[1] != "4 threads on 1 connection; 200 ops per benchmark over 200 keys of 16 B; values 100 B, compressible to 0.5; batch 1" ||
			!strings.HasPrefix(lines[3], "benchmark ") {
			t.Errorf("header:\n%s", out)
		}
		for i, name := range []string{"fillrandom", "readrandom", "fillsync"} {
			f := strings.Fields(lines[4+i])
			if len(f) != 11 || f[0] != name || f[1] != "200" || f[10] != "-" {
				t.Errorf("row %d: %q\n%s", i, lines[4+i], out)
			}
		}
		if !strings.Contains(out, "\nreadrandom: 200 found, 0 missing\n") || !strings.Contains(out, "srv cpu needs --server-metrics") {
			t.Errorf("notes:\n%s", out)
		}
	})

	t.Run("duration", func(t *testing.T) {
		// Every key of the first 500 exists; the progress line, not on a
		// terminal, comes every --progress-interval.
		code, out, errOut := shale("bench", a, "-o", "json", "--duration", "400ms", "--keys", "500", "--threads", "2",
			"--benchmarks", "readrandom", "--progress-interval", "50ms")
		if code != 0 {
			t.Fatalf("exit %d\nstderr %s\nstdout %s", code, errOut, out)
		}
		b := parseBenchJSON(t, out).Benchmarks[0]
		if b.Ops == 0 || *b.Found != b.Ops || b.Seconds < 0.4 {
			t.Errorf("readrandom for 400ms: %+v", b)
		}
		if !strings.HasPrefix(errOut, "readrandom: ") || !strings.Contains(errOut, " ops/s now  0 errors\n") {
			t.Errorf("progress lines: %q", errOut)
		}
	})

	t.Run("errors", func(t *testing.T) {
		// Values over the server's --max-value-size: every request fails.
		args := []string{"bench", a, "--num", "50", "--threads", "2", "--value-size", "8KiB", "--benchmarks", "fillrandom"}
		code, out, errOut := shale(args...)
		errLines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 1 || len(errLines) != 7 || strings.Count(errOut, "shale: bench: fillrandom: request failed: InvalidArgument: value for key ") != 5 ||
			errLines[5] != "shale: bench: more requests failed; they are counted, not printed" ||
			!strings.HasPrefix(errLines[6], "shale: bench: 50 of 50 requests failed, the first: fillrandom: InvalidArgument: ") ||
			!strings.HasSuffix(errLines[6], "(--ignore-errors to exit 0 anyway)") {
			t.Errorf("exit %d\nstderr %s", code, errOut)
		}
		if !strings.Contains(out, "\nfillrandom: 50 requests failed\n") {
			t.Errorf("stdout:\n%s", out)
		}
		code, out, _ = shale(append(args, "--ignore-errors", "-o", "json")...)
		if b := parseBenchJSON(t, out).Benchmarks[0]; code != 0 || b.Errors != 50 || b.Requests != 50 || b.Ops != 0 {
			t.Errorf("--ignore-errors: exit %d, %+v", code, b)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"bench", "--addr", freeAddr(t), "--timeout", "5s"}, "cannot reach a Shale server at "},
			{[]string{"bench", a, "--server-metrics", freeAddr(t)}, "--server-metrics 127.0.0.1:"},
			{[]string{"bench", a, "--server-metrics", "http://" + metrics + "/nothing"}, "404 Not Found"},
		} {
			code, out, errOut := shale(tc.args...)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, "shale: ") || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("shale %q: exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", tc.args, code, out, errOut, tc.want)
			}
		}
	})
}
