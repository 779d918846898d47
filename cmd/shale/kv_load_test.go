package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvload"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

// scanAll reads every pair of the database.
func scanAll(t *testing.T, addr string) map[string]string {
	t.Helper()
	stream, err := kvv1.NewKVClient(dial(t, addr)).Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Pairs {
			got[string(p.Key)] = string(p.Value)
		}
	}
}

// writeInput writes n TSV pairs named prefix/NNNNNN, in a shuffled order
// and with every tenth key given twice (the later value wins), and returns
// the pairs the database should hold.
func writeInput(t *testing.T, path, prefix string, n int) map[string]string {
	t.Helper()
	want := map[string]string{}
	var b strings.Builder
	for i := 0; i < n; i++ {
		j := (i * 7919) % n // a permutation: n is not a multiple of 7919
		k := fmt.Sprintf("%s/%06d", prefix, j)
		v := fmt.Sprintf("value %d %s", j, strings.Repeat("x", j%300))
		if j%10 == 0 {
			fmt.Fprintf(&b, "%s\tstale\n", k)
		}
		fmt.Fprintf(&b, "%s\t%s\n", k, v)
		want[k] = v
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return want
}

// A streamed load and an SST load on real MinIO: every pair reads back
// after the primary is killed with SIGKILL and a new owner takes over.
func TestKVLoadSurvivesKill9(t *testing.T) {
	srv := miniotest.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	srv.CreateBucket(t, "load")
	db := "s3://load/db"
	dir := t.TempDir()
	p := startPrimary(t, db, filepath.Join(dir, "cache1"), "--epoch", "1")

	want := writeInput(t, filepath.Join(dir, "stream.tsv"), "stream", 20011)
	code, out, errOut := shale("kv", "load", "--addr", p.addr, "--batch-size", "64KiB", "-o", "json", filepath.Join(dir, "stream.tsv"))
	if code != 0 {
		t.Fatalf("kv load: exit %d: %s", code, errOut)
	}
	var sum kvload.Summary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("kv load -o json: %v\n%s", err, out)
	}
	if sum.Pairs != 20011+2002 || !sum.Durable || !sum.Complete || sum.Mode != "stream" || sum.Format != "tsv" {
		t.Fatalf("stream load summary: %+v", sum)
	}

	sstWant := writeInput(t, filepath.Join(dir, "sst.tsv"), "sst", 30011)
	code, out, errOut = shale("kv", "load", "--addr", p.addr, "--sst", "--sst-size", "1MiB", "--tmp-dir", filepath.Join(dir, "tmp"), "-o", "json", filepath.Join(dir, "sst.tsv"))
	if code != 0 {
		t.Fatalf("kv load --sst: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	// Duplicates within a chunk collapse before the SST is written.
	if sum.SSTFiles < 5 || sum.Pairs < 30011 || sum.Pairs > 30011+3002 || !sum.Durable || sum.Mode != "sst" {
		t.Fatalf("sst load summary: %+v", sum)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "tmp", "*")); len(left) > 0 {
		t.Errorf("kv load --sst left %v behind", left)
	}
	for k, v := range sstWant {
		want[k] = v
	}

	p.kill9(t)
	p2 := startPrimary(t, db, filepath.Join(dir, "cache2"), "--epoch", "2")
	got := scanAll(t, p2.addr)
	missing := 0
	for k, v := range want {
		if got[k] != v {
			if missing++; missing < 5 {
				t.Errorf("%s = %.30q after kill -9, want %.30q", k, got[k], v)
			}
		}
	}
	if missing > 0 || len(got) != len(want) {
		t.Fatalf("after kill -9: %d of %d loaded pairs wrong or missing, %d pairs in all", missing, len(want), len(got))
	}
}

// Bad lines and refused pairs name the input line; the lines before them
// are loaded; bad flags are usage errors.
func TestKVLoadErrors(t *testing.T) {
	dir := t.TempDir()
	p := startPrimary(t, filepath.Join(dir, "db"), filepath.Join(dir, "cache"), "--max-key-size", "16")
	in := func(name, content string) string {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(content), 0o644)
		return path
	}

	code, _, errOut := shale("kv", "load", "--addr", p.addr, in("bad.tsv", "a\t1\nb\t2\nc 3\nd\t4\n"))
	if code != 1 || !strings.Contains(errOut, "line 3: no tab between key and value") || !strings.Contains(errOut, "2 pairs were loaded before it (durably)") {
		t.Errorf("malformed line: exit %d, %s", code, errOut)
	}
	code, _, errOut = shale("kv", "load", "--addr", p.addr, "--sst", "--tmp-dir", dir, in("bad.jsonl", `{"key":"j1","value":"1"}`+"\n"+`{"key":"j2"}`+"\n"))
	if code != 1 || !strings.Contains(errOut, `line 2: no "value"`) || !strings.Contains(errOut, "1 pairs were loaded before it") {
		t.Errorf("malformed JSON line with --sst: exit %d, %s", code, errOut)
	}
	long := strings.Repeat("k", 17)
	code, _, errOut = shale("kv", "load", "--addr", p.addr, "--batch-size", "1", in("long.tsv", "e\t5\nf\t6\n"+long+"\t7\ng\t8\n"))
	if code != 1 || !strings.Contains(errOut, "line 3: pair 3 of the load: key") || !strings.Contains(errOut, "over the 16-byte limit") ||
		!strings.Contains(errOut, "; 2 pairs were loaded before it") {
		t.Errorf("key over the server's limit: exit %d, %s", code, errOut)
	}
	got := scanAll(t, p.addr)
	for k, v := range map[string]string{"a": "1", "b": "2", "j1": "1", "e": "5", "f": "6"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (loaded before the bad line)", k, got[k], v)
		}
	}
	for _, k := range []string{"c", "d", "j2", long, "g"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s was loaded, from a line at or after the bad one", k)
		}
	}

	// JSON lines with base64, from stdin.
	code, _, errOut = shaleStdin(`{"keyBase64":"/wA=","valueBase64":"AQI="}`+"\n"+`{"key":"plain","value":"v"}`, "kv", "load", "--addr", p.addr, "--sync=false")
	if code != 0 {
		t.Fatalf("JSON from stdin: exit %d, %s", code, errOut)
	}
	got = scanAll(t, p.addr)
	if got["\xff\x00"] != "\x01\x02" || got["plain"] != "v" {
		t.Errorf("JSON load: %q %q", got["\xff\x00"], got["plain"])
	}

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--format", "csv"}, "--format: unknown format"},
		{[]string{"a", "b"}, "want at most one argument"},
		{[]string{"--batch-size", "0"}, "at least 1 byte"},
	} {
		code, _, errOut := shale(append([]string{"kv", "load", "--addr", p.addr}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.err) {
			t.Errorf("kv load %q: exit %d, %s", c.args, code, errOut)
		}
	}
	if code, _, errOut := shale("kv", "load", "--addr", p.addr, filepath.Join(dir, "missing.tsv")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d, %s", code, errOut)
	}
}

// shaleStdin runs the CLI in-process with stdin.
func shaleStdin(stdin string, args ...string) (code int, stdout, stderr string) {
	var o, e strings.Builder
	code = runWithStdin(args, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

// A streamed load whose primary is deposed mid-load (issue 22, item 4):
// the pairs applied before the fence may or may not be in the database, and
// the user is told so, with how much was applied, never "fenced" (which
// would say nothing was).
func TestKVLoadDeposedMidLoad(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	startOwner := func(epoch uint64) *primary.Server {
		s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage: shalefs.Config{Epoch: epoch, Lease: 100 * time.Millisecond, CacheDir: filepath.Join(t.TempDir(), "cache")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(time.Second) })
		return s
	}
	a := startOwner(1) // in-process: it keeps answering after the fence
	kv := kvv1.NewKVClient(dial(t, a.Addr()))
	get := func(key string) error {
		_, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(key)})
		return err
	}

	in, feed := io.Pipe()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		var o, e strings.Builder
		code := runWithStdin([]string{"kv", "load", "--addr", a.Addr(), "--batch-size", "1", "-"}, in, &o, &e)
		done <- result{code, o.String(), e.String()}
	}()
	fmt.Fprint(feed, "a\t1\nb\t2\nc\t3\n") // three messages of one pair
	for deadline := time.Now().Add(waitDeadline); get("c") != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the first pairs of the load were not applied: %v", get("c"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	startOwner(2) // epoch 2 takes over
	for deadline := time.Now().Add(waitDeadline); status.Code(get("a")) != codes.FailedPrecondition; {
		if time.Now().After(deadline) {
			t.Fatal("the deposed primary did not learn of epoch 2")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Fprint(feed, "d\t4\n")
	feed.Close()
	r := <-done
	if r.code != 1 || !strings.Contains(r.stderr, "outcome unknown; 3 messages applied (3 pairs)") {
		t.Fatalf("kv load deposed mid-load: exit %d, stderr %q; want outcome unknown; 3 messages applied (3 pairs)", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "FailedPrecondition") {
		t.Errorf("kv load deposed after pairs were applied says fenced: %s", r.stderr)
	}
}
