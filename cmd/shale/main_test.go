package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/primary"
	"github.com/shale-rocks/shale/secondary"
)

// The test binary doubles as the shale binary: with SHALE_TEST_MAIN=1 it
// runs the CLI, so tests can start real primary processes and kill -9 them
// without building anything.
func TestMain(m *testing.M) {
	if os.Getenv("SHALE_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// waitDeadline bounds waits for a condition (a server answering, writes
// acknowledged, a process exiting): generous, so a loaded 2-core machine
// passes, and never a fixed sleep.
const waitDeadline = 60 * time.Second

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is a shale process started from the test binary.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
}

func startShale(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SHALE_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &stderr}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return p
}

// startPrimary starts `shale primary` on the database at URL db (a bare
// path means file://) with a local cache in cache, and waits until it
// serves.
func startPrimary(t *testing.T, db, cache string, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	if strings.HasPrefix(db, "/") {
		db = "file://" + db
	}
	args := append([]string{"primary", "--db", db, "--cache-dir", cache, "--listen", addr, "--metrics-listen", "", "--lease", "500ms"}, extra...)
	p := startShale(t, args...)
	p.addr = addr
	conn := dial(t, addr)
	deadline := time.Now().Add(waitDeadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("primary did not start: %v\n%s", err, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// shale runs the CLI in-process and returns its exit status and output.
func shale(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// shaleProcess runs the CLI as a process (the test binary with
// SHALE_TEST_MAIN=1) and returns its exit status and output, so the exit
// status is the one a shell sees.
func shaleProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SHALE_TEST_MAIN=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("shale %q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

func TestCLIRoundTrip(t *testing.T) {
	p := startPrimary(t, filepath.Join(t.TempDir(), "db"), filepath.Join(t.TempDir(), "cache"))
	a := "--addr=" + p.addr
	steps := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"kv", "put", "hello", "world", a}, 0, "", ""},
		{[]string{"kv", "get", a, "hello"}, 0, "world\n", ""},
		{[]string{"kv", "put", "--sync=false", a, "fast", "lane"}, 0, "", ""},
		{[]string{"kv", "get", "--addr", p.addr, "fast"}, 0, "lane\n", ""},
		{[]string{"kv", "--addr", p.addr, "get", "fast"}, 0, "lane\n", ""},
		{[]string{"kv", "put", a, "--", "-dash", "v"}, 0, "", ""},
		{[]string{"kv", "scan", a}, 0, "-dash\tv\nfast\tlane\nhello\tworld\n", ""},
		{[]string{"kv", "scan", a, "--prefix", "h"}, 0, "hello\tworld\n", ""},
		{[]string{"kv", "scan", a, "--limit", "1", "--reverse", "--keys-only"}, 0, "hello\n", ""},
		{[]string{"kv", "get", a, "-o", "json", "hello"}, 0, "{\n  \"key\": \"hello\",\n  \"value\": \"world\"\n}\n", ""},
		{[]string{"kv", "scan", a, "--output=json", "--prefix", "h"}, 0, "[\n  {\"key\":\"hello\",\"value\":\"world\"}\n]\n", ""},
		{[]string{"kv", "scan", a, "-o", "json", "--keys-only"}, 0, "[\n  {\"key\":\"-dash\"},\n  {\"key\":\"fast\"},\n  {\"key\":\"hello\"}\n]\n", ""},
		{[]string{"kv", "scan", a, "-o", "json", "--prefix", "nothing"}, 0, "[]\n", ""},
		{[]string{"kv", "delete", a, "hello"}, 0, "", ""},
		{[]string{"kv", "get", a, "hello"}, 1, "", "shale: key \"hello\" not found\n"},
		{[]string{"kv", "get", a, "hello", "-o", "json"}, 1, "", "shale: key \"hello\" not found\n"},
		{[]string{"kv", "flush", a}, 0, "", ""},
		{[]string{"kv", "compact", a}, 0, "", ""},
		{[]string{"kv", "status", a}, 0, "role:                primary", ""},
		{[]string{"kv", "status", a, "-o", "json"}, 0, `"role": "ROLE_PRIMARY"`, ""},
		{[]string{"kv", "status", a, "--json"}, 0, `"role": "ROLE_PRIMARY"`, "Flag --json has been deprecated, use -o json"},
		{[]string{"kv", "put", a, "", "v"}, 1, "", "shale: InvalidArgument: key is empty; keys must be 1 to 65536 bytes\n"},
		{[]string{"kv", "scan", a, "--start", "z", "--end", "a"}, 1, "", "start must be <= end"},
		// usage errors exit 2
		{[]string{"kv", "put", a, "--bogus", "k", "v"}, 2, "", "unknown flag: --bogus"},
		{[]string{"kv", "put", a, "onlykey"}, 2, "", "want KEY VALUE, got 1 argument(s)"},
		{[]string{"kv", "status", a, "-o", "yaml"}, 2, "", `invalid argument "yaml" for "-o, --output" flag: want "text" or "json"`},
		// a server that is not there
		{[]string{"kv", "get", "--addr", freeAddr(t), "--timeout", "5s", "x"}, 1, "", "cannot reach a Shale server"},
	}
	for _, s := range steps {
		code, out, errOut := shale(s.args...)
		if code != s.code || !strings.Contains(out, s.stdout) || !strings.Contains(errOut, s.stderr) ||
			(s.stdout == "" && out != "") || (s.stderr == "" && errOut != "") {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout containing %q, stderr containing %q",
				s.args, code, out, errOut, s.code, s.stdout, s.stderr)
		}
		if code == 1 && (strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "shale: ")) {
			t.Errorf("shale %q: error is not one line starting with \"shale: \": %q", s.args, errOut)
		}
	}
}

// Bad usage exits 2 with the problem and a short hint on stderr, and
// nothing on stdout; no server is needed to find out.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // on stderr
	}{
		{nil, []string{"shale: missing command", "Available Commands:", "kv "}},
		{[]string{"launch"}, []string{`shale: unknown command "launch" for "shale"`, "Run 'shale --help'"}},
		{[]string{"prim"}, []string{`did you mean "primary"?`}},
		{[]string{"kv"}, []string{"shale: kv: missing command", "Usage:\n  shale kv [command]", "put "}},
		{[]string{"kv", "frobnicate"}, []string{`unknown command "frobnicate" for "shale kv"`}},
		{[]string{"kv", "gett", "x"}, []string{`did you mean "get"?`}},
		{[]string{"admin"}, []string{"shale: admin: missing command", "fence-status"}},
		{[]string{"help", "nosuch"}, []string{`unknown help topic "nosuch"`}},
		{[]string{"kv", "put", "k", "v", "--bogus"}, []string{"shale: unknown flag: --bogus", "Usage: shale kv put KEY VALUE [flags]", "Run 'shale kv put --help'"}},
		{[]string{"kv", "put", "onlykey"}, []string{"shale: kv put: want KEY VALUE, got 1 argument(s)", "Usage: shale kv put KEY VALUE [flags]"}},
		{[]string{"kv", "get"}, []string{"kv get: want KEY, got 0 argument(s)"}},
		{[]string{"kv", "flush", "extra"}, []string{"kv flush: want no arguments, got 1 argument(s)"}},
		{[]string{"kv", "scan", "--limit", "-1"}, []string{`invalid argument "-1" for "--limit" flag: want a whole number >= 0`}},
		{[]string{"kv", "get", "--timeout", "soon", "k"}, []string{`invalid argument "soon" for "--timeout" flag: want a duration such as`}},
		{[]string{"primary", "--nope"}, []string{"unknown flag: --nope"}},
		{[]string{"primary"}, []string{"primary: --db is required"}},
		{[]string{"primary", "--db", "file:///tmp/x", "stray"}, []string{"primary: want no arguments, got 1 argument(s)"}},
		{[]string{"dev"}, []string{"dev: --data is required"}},
		{[]string{"admin", "fence-status"}, []string{"admin fence-status: --db is required"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--cache-size", "8XB"}, []string{`invalid argument "8XB" for "--cache-size" flag`, "want bytes, or a number with KiB, MiB or GiB"}},
		{[]string{"dev", "--data", "/tmp/x", "--max-key-size", "12MB"}, []string{`for "--max-key-size" flag`, "want bytes, or a number with KiB, MiB or GiB"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--lease", "-1s"}, []string{`invalid argument "-1s" for "--lease" flag: must be positive`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--delete-grace", "0"}, []string{`for "--delete-grace" flag: must be positive`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--epoch", "latest"}, []string{`invalid argument "latest" for "--epoch" flag: want a whole number >= 0`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--unordered-write", "--pipelined-write"}, []string{"primary: --unordered-write and --pipelined-write cannot be combined (RocksDB refuses it"}},
		{[]string{"dev", "--data", "/tmp/x", "--data-block-index", "hash"}, []string{`invalid argument "hash" for "--data-block-index" flag: want "binary" or "binary-and-hash"`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--data-block-hash-ratio", "0.5"}, []string{"--data-block-hash-ratio needs --data-block-index=binary-and-hash"}},
		{[]string{"dev", "--data", "/tmp/x", "--data-block-index", "binary-and-hash", "--data-block-hash-ratio", "2"}, []string{"dev: --data-block-hash-ratio 2 is out of range"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--group-commit-window", "1s"}, []string{"--group-commit-window 1s is out of range: want 0 (off) to 100ms"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--group-commit-window", "-1ms"}, []string{`invalid argument "-1ms" for "--group-commit-window"`, "must be 0 (off) or positive"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--optimize-multiget-for-io"}, []string{"--optimize-multiget-for-io needs --async-io"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--scan-readahead", "65MiB"}, []string{"primary: --scan-readahead 68157440 is over the 64 MiB limit"}},
		{[]string{"dev", "--data", "/tmp/x", "--rocksdb-histograms=some"}, []string{`invalid argument "some" for "--rocksdb-histograms" flag`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--clone-from", "file:///tmp/p"}, []string{"primary: a clone needs --clone-from, --clone-checkpoint and --clone-id together"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--clone-from", "file:///tmp/p", "--clone-checkpoint", "c1", "--clone-id", "a", "--existing"}, []string{"primary: --existing and --clone-from exclude each other"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--clone-copy"}, []string{"primary: a clone needs --clone-from, --clone-checkpoint and --clone-id together (--clone-copy, --clone-endpoint and --clone-credentials-dir only with them)"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--clone-from", "file:///tmp/p", "--clone-checkpoint", "c1", "--clone-id", "a", "--standby"}, []string{"primary: --standby and --clone-from exclude each other"}},
	} {
		code, out, errOut := shale(tc.args...)
		ok := code == 2 && out == ""
		for _, w := range tc.want {
			ok = ok && strings.Contains(errOut, w)
		}
		if !ok {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit 2, no stdout, stderr containing %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// The same through a real process: the status a shell sees.
	for _, args := range [][]string{{"kv", "put", "--bogus", "k", "v"}, {"kv", "put", "onlykey"}, {"frobnicate"}} {
		if code, out, errOut := shaleProcess(t, args...); code != 2 || out != "" || !strings.HasPrefix(errOut, "shale: ") {
			t.Errorf("process shale %q: exit %d, stdout %q, stderr %q; want exit 2 and an error on stderr", args, code, out, errOut)
		}
	}
}

// Help, version and completion print to stdout and exit 0.
func TestHelpVersionCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // on stdout
	}{
		{[]string{"--help"}, []string{"Usage:\n  shale [command]", "primary ", "dev ", "kv ", "admin ", "version ", "completion ", "help "}},
		{[]string{"-h"}, []string{"Available Commands:"}},
		{[]string{"help"}, []string{"Available Commands:"}},
		{[]string{"help", "kv"}, []string{"shale kv [command]", "put ", "get ", "delete ", "scan ", "flush ", "compact ", "status ", "--addr HOST:PORT", "--timeout duration"}},
		{[]string{"kv", "--help"}, []string{"shale kv [command]", "scan "}},
		{[]string{"help", "kv", "scan"}, []string{"shale kv scan", "--prefix", "-o, --output format", "--addr HOST:PORT"}},
		{[]string{"kv", "status", "--help"}, []string{"-o, --output format"}},
		{[]string{"primary", "--help"}, []string{"--db URL", "--cache-size size", "(default 8GiB)", "--lease duration", "(default 5s)", "--delete-grace duration", "(default 1h)",
			"--write-timeout duration", "(default 1m)", "--retry-for duration", "(default 5m)", "--read-timeout duration", "(default 10s)",
			`(default "127.0.0.1:7070")`, `(default "127.0.0.1:9090")`, "(default 64KiB)", "(default 32MiB)", "(default 64MiB)", "(default 256MiB)",
			"--epoch uint", "--wal-storage-class", "--sst-storage-class", "--cache-dir", "--wal-pipeline-depth int"}},
		{[]string{"dev", "--help"}, []string{"--data directory", "--cache-size size", "--lease duration"}},
		{[]string{"admin", "fence-status", "--help"}, []string{"--db URL", "-o, --output format"}},
		{[]string{"version"}, []string{"shale dev (RocksDB 9.11.2)\n"}},
		{[]string{"--version"}, []string{"shale dev (RocksDB 9.11.2)\n"}},
		{[]string{"completion", "bash"}, []string{"# bash completion V2 for shale", "__start_shale", "complete -o default -F __start_shale shale"}},
		{[]string{"completion", "zsh"}, []string{"#compdef shale", "compdef _shale shale"}},
		{[]string{"completion", "fish"}, []string{"# fish completion for shale", "complete -c shale"}},
		// what the completion scripts ask the binary (cobra reports the
		// directive on stderr)
		{[]string{"__complete", "kv", "sc"}, []string{"scan\t"}},
		{[]string{"__complete", "kv", "status", "-o", ""}, []string{"text\njson\n"}},
	} {
		code, out, errOut := shale(tc.args...)
		ok := code == 0 && (errOut == "" || tc.args[0] == "__complete")
		for _, w := range tc.want {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit 0, no stderr, stdout containing %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if _, err := exec.LookPath("bash"); err == nil {
		// The bash script is valid bash and registers the completion.
		_, script, _ := shale("completion", "bash")
		cmd := exec.Command("bash", "-c", `source /dev/stdin && complete -p shale`)
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "__start_shale") {
			t.Errorf("sourcing the bash completion: %v\n%s", err, out)
		}
	}
}

// -o json of kv status is the StatusResponse in protobuf's JSON mapping,
// and the deprecated --json prints the same document (the warning goes to
// stderr, so pipes into jq keep working).
func TestStatusJSON(t *testing.T) {
	p := startPrimary(t, filepath.Join(t.TempDir(), "db"), filepath.Join(t.TempDir(), "cache"), "--epoch", "3")
	for i := 0; i < 5; i++ {
		if code, _, e := shale("kv", "put", "--addr", p.addr, fmt.Sprint(i), "v"); code != 0 {
			t.Fatalf("put: %s", e)
		}
	}
	var docs [2]string
	for i, flag := range []string{"-o=json", "--json"} {
		code, out, errOut := shaleProcess(t, "kv", "status", "--addr", p.addr, flag)
		if code != 0 {
			t.Fatalf("kv status %s: exit %d: %s", flag, code, errOut)
		}
		var st struct {
			Role           string
			Epoch          string // protojson: 64-bit integers are strings
			LatestSequence string
			Db             string
			RocksdbVersion string
			Stats          map[string]any
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("kv status %s: not JSON: %v\n%s", flag, err, out)
		}
		if st.Role != "ROLE_PRIMARY" || st.Epoch != "3" || st.LatestSequence != "5" || st.RocksdbVersion != "9.11.2" ||
			!strings.HasSuffix(st.Db, "/db") || st.Stats == nil {
			t.Errorf("kv status %s: %+v\n%s", flag, st, out)
		}
		deprecated := strings.Contains(errOut, "Flag --json has been deprecated, use -o json")
		if deprecated != (flag == "--json") || strings.Count(errOut, "\n") > 1 {
			t.Errorf("kv status %s: stderr %q", flag, errOut)
		}
		docs[i] = out
	}
	if docs[0] != docs[1] {
		t.Errorf("-o json and --json differ:\n%s\n%s", docs[0], docs[1])
	}
}

// Keys and values that are not UTF-8 survive -o json as base64.
func TestJSONBinary(t *testing.T) {
	p := startPrimary(t, filepath.Join(t.TempDir(), "db"), filepath.Join(t.TempDir(), "cache"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	bin := []byte{0xff, 0x00, 0xfe}
	if _, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("b"), Value: bin, Sync: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: bin, Value: []byte("<&>"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := shale("kv", "get", "--addr", p.addr, "b", "-o", "json")
	var got struct {
		Key         string
		Value       *string
		ValueBase64 []byte
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Key != "b" || got.Value != nil || !bytes.Equal(got.ValueBase64, bin) {
		t.Errorf("get -o json: exit %d %v %q %s", code, err, out, errOut)
	}
	code, out, errOut = shale("kv", "scan", "--addr", p.addr, "-o", "json")
	var pairs []struct {
		Key, Value             *string
		KeyBase64, ValueBase64 []byte
	}
	if err := json.Unmarshal([]byte(out), &pairs); code != 0 || err != nil || len(pairs) != 2 {
		t.Fatalf("scan -o json: exit %d %v %q %s", code, err, out, errOut)
	}
	if k, v := pairs[0].Key, pairs[0].Value; k == nil || *k != "b" || v != nil || !bytes.Equal(pairs[0].ValueBase64, bin) {
		t.Errorf("scan -o json, first pair: %s", out)
	}
	if k, v := pairs[1].Key, pairs[1].Value; k != nil || !bytes.Equal(pairs[1].KeyBase64, bin) || v == nil || *v != "<&>" {
		t.Errorf("scan -o json, second pair: %s", out)
	}
}

// Every write acknowledged with sync=true survives kill -9 of the primary,
// including writes acknowledged an instant before the kill, when a new
// primary with the next epoch opens the database from the store alone (an
// empty cache directory, as on another machine).
func TestKill9KeepsSyncedWrites(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) { testKill9KeepsSyncedWrites(t, loc, 4) })
}

// The same with four WAL segment uploads in flight and 16 writers
// (RFC 0013): uploads land out of order and the kill leaves some in
// flight; every acknowledged write is on the next owner, which seals the
// hole they leave.
func TestKill9KeepsPipelinedWrites(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		testKill9KeepsSyncedWrites(t, loc, 16, "--wal-pipeline-depth", "4")
	})
}

func testKill9KeepsSyncedWrites(t *testing.T, loc storetest.Location, writerCount int, flags ...string) {
	dir := loc.NewURL(t)
	p := startPrimary(t, dir, filepath.Join(t.TempDir(), "cache1"), append([]string{"--epoch", "1"}, flags...)...)
	kv := kvv1.NewKVClient(dial(t, p.addr))

	// Writers put synced keys until the primary dies. The kill comes
	// once enough writes are acknowledged, not after a fixed time: on a
	// loaded machine the first writes can take seconds.
	const wantAcked = 200
	var mu sync.Mutex
	acked := map[string]string{}
	var killed atomic.Bool
	enough := make(chan struct{})
	var enoughOnce sync.Once
	writers := make(chan struct{})
	ctx, stopWriters := context.WithCancel(context.Background())
	defer stopWriters()
	var wg sync.WaitGroup
	for w := 0; w < writerCount; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				k, v := fmt.Sprintf("w%d/%06d", w, i), fmt.Sprintf("value-%d-%d", w, i)
				var err error
				if i%3 == 2 { // some batches too
					_, err = kv.Write(ctx, &kvv1.WriteRequest{Sync: true, Mutations: []*kvv1.Mutation{
						{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}},
						{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k + "/b"), Value: []byte(v)}}},
					}})
				} else {
					_, err = kv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true})
				}
				if err != nil {
					if killed.Load() {
						t.Logf("writer %d stopped after %d writes, at the kill: %v", w, i, err)
					} else {
						t.Errorf("writer %d stopped after %d writes, before the kill: %v", w, i, err)
					}
					return
				}
				mu.Lock()
				acked[k] = v
				if i%3 == 2 {
					acked[k+"/b"] = v
				}
				if len(acked) >= wantAcked {
					enoughOnce.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}(w)
	}
	go func() { wg.Wait(); close(writers) }()
	var failure string
	select {
	case <-enough:
	case <-writers:
		failure = fmt.Sprintf("every writer stopped before %d writes were acknowledged", wantAcked)
	case <-time.After(waitDeadline):
		failure = fmt.Sprintf("fewer than %d writes acknowledged within %s", wantAcked, waitDeadline)
	}
	killed.Store(true)
	p.kill9(t)    // while the writers are mid-flight
	stopWriters() // a write in flight at the kill fails, unacknowledged
	<-writers
	if failure != "" {
		t.Fatalf("%s (%d acknowledged); primary's log:\n%s", failure, len(acked), p.stderr)
	}
	if t.Failed() { // a writer stopped before the kill
		t.Fatalf("primary's log:\n%s", p.stderr)
	}

	p2 := startPrimary(t, dir, filepath.Join(t.TempDir(), "cache2"), "--epoch", "2")
	kv2 := kvv1.NewKVClient(dial(t, p2.addr))
	missing := 0
	for k, v := range acked {
		r, err := kv2.Get(context.Background(), &kvv1.GetRequest{Key: []byte(k)})
		if err != nil || string(r.Value) != v {
			missing++
			if missing < 5 {
				t.Errorf("acknowledged %s=%s, after restart: %v %v", k, v, r, err)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes lost after kill -9", missing, len(acked))
	}
	t.Logf("%d acknowledged writes all present after kill -9", len(acked))
}

// The shell round trip from the issue: put, get, kill -9, restart, get.
func TestCLIKill9Restart(t *testing.T) {
	dir, cache := filepath.Join(t.TempDir(), "db"), filepath.Join(t.TempDir(), "cache")
	p := startPrimary(t, dir, cache)
	if code, _, e := shale("kv", "put", "--addr", p.addr, "durable", "yes"); code != 0 {
		t.Fatalf("put: %d %s", code, e)
	}
	p.kill9(t)
	p = startPrimary(t, dir, cache)
	if code, out, e := shale("kv", "get", "--addr", p.addr, "durable"); code != 0 || out != "yes\n" {
		t.Fatalf("get after kill -9: exit %d %q %s", code, out, e)
	}
}

func TestUnusableDB(t *testing.T) {
	root := t.TempDir()
	live, liveCache := filepath.Join(root, "live"), filepath.Join(root, "live-cache")
	startPrimary(t, live, liveCache)
	file := filepath.Join(root, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	foreign := filepath.Join(root, "foreign")
	os.Mkdir(foreign, 0o755)
	os.WriteFile(filepath.Join(foreign, "thesis.tex"), []byte("x"), 0o644)

	for _, tc := range []struct{ db, cache, want string }{
		{"file://" + live, liveCache, "already open in another process"},
		{"file://" + file, "", "exists and is not a directory"},
		{"file://" + filepath.Join(file, "db"), "", "not a directory"},
		{"file://" + foreign, "", "holds objects but no Shale database (found \"thesis.tex\")"},
		{"file://relative/db", "", "absolute path"},
		{"relative/db", "", "no scheme"},
		{"gs://bucket/db", "", "unsupported scheme"},
	} {
		if tc.cache == "" {
			tc.cache = filepath.Join(root, "new-cache")
		}
		before := tree(root)
		code, _, errOut := shale("primary", "--db", tc.db, "--cache-dir", tc.cache, "--listen", "127.0.0.1:0", "--metrics-listen", "")
		if code != 1 || !strings.Contains(errOut, tc.want) || !strings.HasPrefix(errOut, "shale: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("primary --db %s: exit %d, stderr %q; want exit 1 and one line containing %q", tc.db, code, errOut, tc.want)
		}
		if after := tree(root); after != before {
			t.Errorf("primary --db %s changed the filesystem:\n%s\n%s", tc.db, before, after)
		}
	}

	// --existing (the operator's, once a database was ready) on a location
	// that does not hold the database: refused before anything is written.
	moved := filepath.Join(root, "moved")
	os.Mkdir(moved, 0o755)
	before := tree(root)
	code, _, errOut := shale("primary", "--db", "file://"+moved, "--existing", "--cache-dir", filepath.Join(root, "new-cache"), "--listen", "127.0.0.1:0", "--metrics-listen", "")
	if code != 1 || !strings.Contains(errOut, "no database at the location: file://"+moved+" holds no database") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("primary --existing on an empty location: exit %d, stderr %q; want exit 1 and one line saying no database is there", code, errOut)
	}
	if after := tree(root); after != before {
		t.Errorf("primary --existing on an empty location changed the filesystem:\n%s\n%s", before, after)
	}
}

func tree(root string) string {
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !strings.Contains(p, "/LOG") {
			fmt.Fprintf(&b, "%s:%d\n", strings.TrimPrefix(p, root), fi.Size())
		}
		return nil
	})
	return b.String()
}

// The zombie scenario from a shell: two primary processes on one database.
func TestZombieProcessExits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	a := startPrimary(t, dir, filepath.Join(t.TempDir(), "a"), "--epoch", "1")
	for i := 0; i < 20; i++ {
		if code, _, e := shale("kv", "put", "--addr", a.addr, fmt.Sprintf("k%02d", i), "from-a"); code != 0 {
			t.Fatalf("put: %s", e)
		}
	}
	b := startPrimary(t, dir, filepath.Join(t.TempDir(), "b"), "--epoch", "2")

	code, _, errOut := shale("kv", "put", "--addr", a.addr, "late", "from-a")
	if code != 1 || !strings.Contains(errOut, "FailedPrecondition: fenced: epoch 1 superseded by 2") {
		t.Fatalf("zombie put: exit %d %q", code, errOut)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || a.cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("fenced primary exited with %v", err)
		}
		if !strings.Contains(a.stderr.String(), "shale: fenced: epoch 1 superseded by 2") {
			t.Fatalf("fenced primary's last words: %s", a.stderr)
		}
	case <-time.After(waitDeadline):
		t.Fatalf("fenced primary still running after %s", waitDeadline)
	}
	for i := 0; i < 20; i++ {
		if code, out, _ := shale("kv", "get", "--addr", b.addr, fmt.Sprintf("k%02d", i)); code != 0 || out != "from-a\n" {
			t.Fatalf("B lacks k%02d: %d %q", i, code, out)
		}
	}
	if code, _, _ := shale("kv", "get", "--addr", b.addr, "late"); code != 1 {
		t.Fatal("the write A reported as fenced is visible on B")
	}
	code, out, _ := shale("admin", "fence-status", "--db", "file://"+dir)
	if code != 0 || !strings.Contains(out, "epoch:     2\n") || !strings.Contains(out, "state:     held") {
		t.Fatalf("fence-status: %d %s", code, out)
	}
}

// A bad size flag is bad usage naming the units (internal/cli's
// TestParseSize has the parser's cases).
func TestSizeFlag(t *testing.T) {
	if code, _, e := shale("primary", "--db", "file:///tmp/x", "--max-key-size", "12MB"); code != 2 || !strings.Contains(e, "want bytes, or a number with KiB, MiB or GiB") {
		t.Errorf("bad size flag: %d %s", code, e)
	}
}

// --rocksdb-histograms reaches the engine's options of a primary (and dev)
// and a secondary; off by default.
func TestRocksDBHistogramsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--rocksdb-histograms"}, true},
		{[]string{"--rocksdb-histograms=false"}, false},
	} {
		var pc primary.Config
		c := &cobra.Command{Use: "primary"}
		primaryFlags(c, &pc)
		var sc secondary.Config
		s := &cobra.Command{Use: "secondary"}
		secondaryFlags(s, &sc)
		for _, cmd := range []*cobra.Command{c, s} {
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatalf("%s %q: %v", cmd.Use, tc.args, err)
			}
		}
		if got := pc.Engine.Tuning.RocksDBHistograms; got != tc.want {
			t.Errorf("primary %q: RocksDBHistograms = %v, want %v", tc.args, got, tc.want)
		}
		if got := sc.Engine.Tuning.RocksDBHistograms; got != tc.want {
			t.Errorf("secondary %q: RocksDBHistograms = %v, want %v", tc.args, got, tc.want)
		}
	}
}
