//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/kubectlshale"
)

// stepPlugin: `kubectl shale status`, `report`, `kv` and `restart` against
// the cluster, as a user runs them: the screen names the serving primary
// and its epoch; the report holds the primary's real log (the kubelet's)
// and no Secret; kv writes and reads through a port-forward; restart
// moves the primary by a switchover and loses nothing.
func stepPlugin(t *testing.T, s *suite) {
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	run := func(args ...string) []byte {
		t.Helper()
		cmd := kubectlshale.NewCommand(func() (kubectlshale.Target, error) {
			return kubectlshale.Target{Config: s.rest, Namespace: s.cfg.namespace}, nil
		})
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(ctx(t, 2*time.Minute)); err != nil {
			t.Fatalf("kubectl shale %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.Bytes()
	}

	screen := string(run("status", s.db))
	t.Logf("kubectl shale status %s:\n%s", s.db, screen)
	for _, want := range []string{"Ready, epoch", db.Status.CurrentPrimary, "running", "Secondaries"} {
		if !strings.Contains(strings.ToLower(screen), strings.ToLower(want)) {
			t.Errorf("status lacks %q", want)
		}
	}

	gz, err := gzip.NewReader(bytes.NewReader(run("report", s.db, "-o", "-", "--operator-namespace", s.cfg.namespace)))
	if err != nil {
		t.Fatalf("the report is not gzip: %v", err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
	}
	primaryLog := files["logs/"+db.Status.CurrentPrimary+".log"]
	if !strings.Contains(primaryLog, "primary serving") {
		t.Errorf("the report's log of %s lacks \"primary serving\" (files: %d; error: %s)", db.Status.CurrentPrimary, len(files), files["logs/"+db.Status.CurrentPrimary+".log.error.txt"])
	}
	var operatorLogs int
	for n, body := range files {
		if strings.HasPrefix(n, "operator/") && strings.HasSuffix(n, ".log") {
			operatorLogs++
		}
		if strings.Contains(body, "kind: Secret") || strings.Contains(body, "secretAccessKey:") {
			t.Errorf("report file %s holds a Secret", n)
		}
	}
	if operatorLogs == 0 {
		t.Errorf("the report has no operator log (namespace %s)", s.cfg.namespace)
	}
	t.Logf("report: %d files, primary log %d bytes, %d operator logs", len(files), len(primaryLog), operatorLogs)

	// kv: a client port-forwarded to the primary Pod, with the database's
	// client Secret; the write is read back through the Service too.
	key := fmt.Sprintf("plugin-kv-%d", time.Now().UnixNano())
	run("kv", s.db, "--client", "e2e", "--", "put", key, "from-the-plugin")
	if got := strings.TrimSpace(string(run("kv", s.db, "--client", "e2e", "--", "get", key))); got != "from-the-plugin" {
		t.Errorf("kubectl shale kv get %s = %q, want from-the-plugin", key, got)
	}

	// restart: a rolling restart, the primary moved by a switchover (the
	// epoch goes up by one, no failover), every acknowledged write kept.
	addr := s.rwAddr(t)
	before := s.rocksDB(t, s.db)
	out := string(run("restart", s.db, "--wait", "110s"))
	after := s.waitReady(t, s.db, before.Status.Epoch+1, 3*time.Minute)
	if after.Status.CurrentPrimary == before.Status.CurrentPrimary {
		t.Errorf("kubectl shale restart kept primary %s", after.Status.CurrentPrimary)
	}
	if after.Status.Failovers != before.Status.Failovers {
		t.Errorf("kubectl shale restart: status.failovers went from %d to %d: a failover, not a switchover", before.Status.Failovers, after.Status.Failovers)
	}
	s.verifyLedger(t, addr)
	t.Logf("kubectl shale restart: %s; epoch %d -> %d, primary %s -> %s", strings.TrimSpace(out), before.Status.Epoch, after.Status.Epoch, before.Status.CurrentPrimary, after.Status.CurrentPrimary)
}
