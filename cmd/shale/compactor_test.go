package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/pki"
)

func TestCompactorUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // on stderr
	}{
		{[]string{"compactor"}, []string{"shale: compactor: missing command", "scheduler ", "worker ", "stats "}},
		{[]string{"compactor", "worker"}, []string{"compactor worker: --scheduler is required"}},
		{[]string{"compactor", "worker", "--scheduler", "x:1"}, []string{"compactor worker: --cache-dir is required"}},
		{[]string{"compactor", "worker", "--scheduler", "x:1", "--cache-dir", "/tmp/x", "--concurrency", "0"}, []string{"--concurrency 0: want 1 to 64"}},
		{[]string{"compactor", "scheduler", "--lease-ttl", "0"}, []string{`for "--lease-ttl" flag: must be positive`}},
		{[]string{"compactor", "scheduler", "--max-attempts", "1000"}, []string{"--max-attempts 1000 is above 100"}},
		{[]string{"compactor", "stats", "extra"}, []string{"compactor stats: want no arguments"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--compaction", "remote"}, []string{"primary: --compaction remote needs --compaction-scheduler"}},
		{[]string{"primary", "--db", "file:///tmp/x", "--compaction", "elsewhere"}, []string{`invalid argument "elsewhere" for "--compaction" flag: want "local" or "remote"`}},
		{[]string{"primary", "--db", "file:///tmp/x", "--compaction-priority", "0"}, []string{`for "--compaction-priority" flag: want a whole number from 1 to 100`}},
		{[]string{"dev", "--data", "/tmp/x", "--compaction-priority", "101"}, []string{`for "--compaction-priority" flag: want a whole number from 1 to 100`}},
		{[]string{"dev", "--data", "/tmp/x", "--compactor-listen", "", "--compaction", "remote"}, []string{"dev: --compaction remote needs --compaction-scheduler"}},
		// Issue 23: plaintext only on loopback or with --insecure, and TLS
		// needs all its files.
		{[]string{"compactor", "scheduler", "--listen", "0.0.0.0:7080"}, []string{"compactor scheduler: --listen 0.0.0.0:7080 is reachable from other machines but has no TLS", "--insecure"}},
		{[]string{"compactor", "scheduler", "--listen", ":7080"}, []string{"has no TLS"}},
		{[]string{"compactor", "scheduler", "--tls-cert", "a.crt", "--tls-ca", "ca.crt"}, []string{"compactor scheduler: TLS needs all of --tls-cert, --tls-key and --tls-ca"}},
		{[]string{"compactor", "scheduler", "--insecure", "--tls-cert", "a", "--tls-key", "b", "--tls-ca", "c"}, []string{"--insecure serves plaintext: drop it, or drop --tls-cert/--tls-key/--tls-ca"}},
		{[]string{"compactor", "worker", "--scheduler", "x:1", "--cache-dir", "/tmp/x", "--tls-ca", "ca.crt"}, []string{"compactor worker: TLS needs all of --tls-cert, --tls-key and --tls-ca"}},
		{[]string{"compactor", "stats", "--token-file", "t"}, []string{"compactor stats: --token-file needs TLS"}},
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
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"compactor", "--help"}, []string{"scheduler ", "worker ", "stats "}},
		{[]string{"compactor", "worker", "--help"}, []string{"--scheduler address", "--cache-dir directory", "--concurrency uint", "(default 1)", "AWS_ACCESS_KEY_ID", "_shale/compactions/",
			"--tls-cert file", "--tls-key file", "--tls-ca file", "--tls-server-name name", "shale://NAMESPACE/worker/POOL"}},
		{[]string{"compactor", "scheduler", "--help"}, []string{"--tls-cert file", "--tls-key file", "--tls-ca file", "--insecure", "shale://NAMESPACE/scheduler/POOL"}},
		{[]string{"compactor", "stats", "--help"}, []string{"-o, --output format", `(default "127.0.0.1:7080")`, "--config file", "--tls-ca file", "--tls-cert file", "--tls-key file", "--token-file file", "--tls-server-name name"}},
		{[]string{"primary", "--help"}, []string{"--compaction mode", `(default local)`, "--compaction-scheduler address", "--compaction-priority int", "(default 10)", "--compaction-queue-timeout duration", "(default 20s)"}},
		{[]string{"dev", "--help"}, []string{"--compaction mode", "(default remote)", "--compactor-listen address"}},
	} {
		code, out, errOut := shale(tc.args...)
		ok := code == 0 && errOut == ""
		for _, w := range tc.want {
			ok = ok && strings.Contains(out, w)
		}
		if !ok {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit 0, stdout containing %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, _, errOut := shale("compactor", "stats", "--scheduler", freeAddr(t), "--timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "cannot reach a compactor scheduler at") && !strings.Contains(errOut, "no answer from") {
		t.Errorf("stats of a missing scheduler: exit %d, %q", code, errOut)
	}
}

// startCompactor runs `shale compactor scheduler` on a free address.
func startScheduler(t *testing.T, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	p := startShale(t, append([]string{"compactor", "scheduler", "--listen", addr, "--metrics-listen", ""}, extra...)...)
	p.addr = addr
	waitCond(t, "the scheduler to serve", func() bool { _, err := schedulerStats(t, addr); return err == nil }, p)
	return p
}

func startWorker(t *testing.T, sched, id string) *proc {
	t.Helper()
	return startShale(t, "compactor", "worker", "--scheduler", sched, "--cache-dir", filepath.Join(t.TempDir(), id), "--id", id, "--metrics-listen", "")
}

func schedulerStats(t *testing.T, addr string) (*compactorv1.StatsResponse, error) {
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return compactorv1.NewCompactorClient(conn).Stats(ctx, &compactorv1.StatsRequest{})
}

func waitCond(t *testing.T, what string, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(2 * waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				logs.WriteString(p.stderr.String())
			}
			t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadAndFlush writes rounds of keys through the KV API, flushing after
// each, into model.
func loadAndFlush(t *testing.T, kv kvv1.KVClient, model map[string]string, round0, rounds, perRound int) {
	t.Helper()
	ctx := context.Background()
	for r := round0; r < round0+rounds; r++ {
		var muts []*kvv1.Mutation
		for i := 0; i < perRound; i++ {
			k := fmt.Sprintf("key%07d", (i*7919+r*104729)%(3*perRound))
			v := fmt.Sprintf("%s-%d-%s", k, r, strings.Repeat("x", 300))
			model[k] = v
			muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}})
			if len(muts) == 500 {
				if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
					t.Fatal(err)
				}
				muts = nil
			}
		}
		if len(muts) > 0 {
			if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}

func scanEquals(t *testing.T, kv kvv1.KVClient, model map[string]string) {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			if model[string(p.Key)] != string(p.Value) {
				t.Fatalf("%s = %.30q, want %.30q", p.Key, p.Value, model[string(p.Key)])
			}
			n++
		}
	}
	if n != len(model) {
		t.Fatalf("scan found %d keys, want %d", n, len(model))
	}
}

// TestCompactorStatsAfterLoad: a scheduler, a worker and a remote primary
// as processes; after a load, `shale compactor stats` shows completed jobs
// as a table and as JSON.
func TestCompactorStatsAfterLoad(t *testing.T) {
	sched := startScheduler(t)
	w := startWorker(t, sched.addr, "w1")
	db := "file://" + filepath.Join(t.TempDir(), "db")
	p := startPrimary(t, db, filepath.Join(t.TempDir(), "cache"), "--compaction", "remote", "--compaction-scheduler", sched.addr, "--compaction-priority", "25")
	kv := kvv1.NewKVClient(dial(t, p.addr))
	model := map[string]string{}
	loadAndFlush(t, kv, model, 0, 5, 2000)
	waitCond(t, "a completed job", func() bool {
		st, err := schedulerStats(t, sched.addr)
		return err == nil && st.Total.Completed >= 1
	}, sched, w, p)
	scanEquals(t, kv, model)

	code, out, errOut := shale("compactor", "stats", "--scheduler", sched.addr)
	if code != 0 || errOut != "" {
		t.Fatalf("stats: exit %d, %s", code, errOut)
	}
	for _, want := range []string{"DB", "PRIORITY", "COMPLETED", "FALLBACKS", db, "25", "total", "WORKER", "w1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("stats table lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = shale("compactor", "stats", "--scheduler", sched.addr, "-o", "json")
	if code != 0 || errOut != "" {
		t.Fatalf("stats -o json: exit %d, %s", code, errOut)
	}
	var js struct {
		Total struct {
			Completed string `json:"completed"`
			Failed    string `json:"failed"`
		} `json:"total"`
		Dbs []struct {
			Db       string `json:"db"`
			Priority int    `json:"priority"`
		} `json:"dbs"`
		Workers []struct {
			Worker string `json:"worker"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("stats -o json: %v\n%s", err, out)
	}
	if js.Total.Completed == "0" || js.Total.Failed != "0" || len(js.Dbs) != 1 || js.Dbs[0].Db != db || js.Dbs[0].Priority != 25 || len(js.Workers) != 1 || js.Workers[0].Worker != "w1" {
		t.Fatalf("stats -o json: %+v\n%s", js, out)
	}
}

// TestWorkerKill9MidJob (issue 11, test 2): the worker running a job is
// killed with SIGKILL; the scheduler re-queues the job when its lease
// runs out, a second worker completes it, and the database holds exactly
// what was written.
func TestWorkerKill9MidJob(t *testing.T) { storetest.ForEachBackend(t, testWorkerKill9MidJob) }

func testWorkerKill9MidJob(t *testing.T, loc storetest.Location) {
	sched := startScheduler(t, "--lease-ttl", "2s")
	w1 := startWorker(t, sched.addr, "w1")
	db := loc.NewURL(t)
	p := startPrimary(t, db, filepath.Join(t.TempDir(), "cache"), "--compaction", "remote", "--compaction-scheduler", sched.addr, "--compaction-queue-timeout", "5m")
	kv := kvv1.NewKVClient(dial(t, p.addr))
	stats := compactorv1.NewCompactorClient(dial(t, sched.addr))

	// Kill w1 the moment the scheduler shows it running a job: watched from
	// before the load, so a short job is not missed.
	killed := make(chan struct{})
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go func() {
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := stats.Stats(ctx, &compactorv1.StatsRequest{})
			cancel()
			if err == nil && len(st.Workers) == 1 && st.Workers[0].Worker == "w1" && st.Workers[0].Running == 1 {
				w1.cmd.Process.Signal(syscall.SIGKILL)
				close(killed)
				return
			}
		}
	}()
	model := map[string]string{}
	loadAndFlush(t, kv, model, 0, 4, 4000) // the fourth flush triggers a compaction
	select {
	case <-killed:
	case <-time.After(5 * time.Second):
		// The automatic compaction came and went between two looks (or
		// has not come): a full manual compaction is a bigger job.
		go kv.Compact(context.Background(), &kvv1.CompactRequest{})
	}
	select {
	case <-killed:
	case <-time.After(2 * waitDeadline):
		t.Fatalf("w1 never seen running a job\n%s%s", w1.stderr, p.stderr)
	}
	w1.cmd.Wait()
	w2 := startWorker(t, sched.addr, "w2")
	waitCond(t, "the job re-queued and completed by w2", func() bool {
		st, err := schedulerStats(t, sched.addr)
		if err != nil || st.Total.Requeued < 1 {
			return false
		}
		for _, w := range st.Workers {
			if w.Worker == "w2" && w.Completed >= 1 {
				return true
			}
		}
		return false
	}, sched, w2, p)
	loadAndFlush(t, kv, model, 4, 2, 2000)
	scanEquals(t, kv, model)
	st, err := kv.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil || st.Stats.BackgroundErrors != 0 {
		t.Fatalf("status %v, %v", st, err)
	}
	final, _ := schedulerStats(t, sched.addr)
	if final.Total.Failed != 0 || final.Total.Fallbacks != 0 {
		t.Fatalf("after the kill: %v", final.Total)
	}
}

// testCerts makes a CA and the leaves of a compactor pool in dir.
type testCerts struct {
	ca  *pki.CA
	dir string
}

func newTestCerts(t *testing.T) *testCerts {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCerts{ca: ca, dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(c.dir, "ca.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// issue writes NAME.crt and NAME.key for identity, valid on loopback.
func (c *testCerts) issue(t *testing.T, name, identity string) (cert, key string) {
	t.Helper()
	u, err := url.Parse(identity)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := c.ca.Issue(pki.Leaf{CommonName: name, URIs: []*url.URL{u}, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(c.dir, name+".crt"), filepath.Join(c.dir, name+".key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func (c *testCerts) caFile() string { return filepath.Join(c.dir, "ca.crt") }

// TestCompactorTLS (issue 23): a scheduler and a worker with certificates
// as processes; `shale compactor stats` reads it with a certificate the
// scheduler accepts (from flags, from --config with paths relative to it,
// from $SHALE_CONFIG), and is refused without one, with a client's, or in
// plaintext, each saying what is wrong.
func TestCompactorTLS(t *testing.T) {
	certs := newTestCerts(t)
	schedCert, schedKey := certs.issue(t, "scheduler", "shale://ns/scheduler/pool")
	workerCert, workerKey := certs.issue(t, "worker", "shale://ns/worker/pool")
	opCert, opKey := certs.issue(t, "operator", "shale://shale-system/operator")
	clientCert, clientKey := certs.issue(t, "client", "shale://ns/client/db/app")
	addr := freeAddr(t)
	sched := startShale(t, "compactor", "scheduler", "--listen", addr, "--metrics-listen", "", "--tls-cert", schedCert, "--tls-key", schedKey, "--tls-ca", certs.caFile())
	startShale(t, "compactor", "worker", "--scheduler", addr, "--cache-dir", filepath.Join(t.TempDir(), "w"), "--id", "w1", "--metrics-listen", "",
		"--tls-cert", workerCert, "--tls-key", workerKey, "--tls-ca", certs.caFile())
	cfg := filepath.Join(certs.dir, "client.yaml")
	if err := os.WriteFile(cfg, []byte("addr: "+addr+"\ntlsCA: ca.crt\ntlsCert: operator.crt\ntlsKey: operator.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "stats listing the TLS worker", func() bool {
		code, out, _ := shale("compactor", "stats", "--config", cfg)
		return code == 0 && strings.Contains(out, "w1")
	}, sched)
	code, out, errOut := shale("compactor", "stats", "--scheduler", addr, "--tls-ca", certs.caFile(), "--tls-cert", opCert, "--tls-key", opKey, "-o", "json")
	if code != 0 || !strings.Contains(out, `"worker": "w1"`) {
		t.Fatalf("stats with flags: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("SHALE_CONFIG", cfg)
	if code, out, errOut := shale("compactor", "stats"); code != 0 || !strings.Contains(out, "w1") {
		t.Fatalf("stats with $SHALE_CONFIG: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a client's certificate over the config's", []string{"--tls-cert", clientCert, "--tls-key", clientKey}, "refused: shale://ns/client/db/app may not read compactor stats"},
		{"no certificate", []string{"--config", "", "--scheduler", addr, "--tls-ca", certs.caFile()}, "refused: no client certificate and no bearer token"},
		{"plaintext", []string{"--config", "", "--scheduler", addr, "--timeout", "5s"}, "if it serves TLS, give --tls-ca and a certificate"},
		{"a missing config", []string{"--config", filepath.Join(certs.dir, "none.yaml")}, "--config: open"},
	} {
		code, out, errOut := shale(append([]string{"compactor", "stats"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("stats with %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.name, code, out, errOut, tc.want)
		}
	}
	if err := os.WriteFile(cfg, []byte("adress: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := shale("compactor", "stats"); code != 1 || !strings.Contains(errOut, "client config "+cfg) || !strings.Contains(errOut, "adress") {
		t.Errorf("stats with a misspelt config key: exit %d, %q", code, errOut)
	}
}
