package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
)

// Backups interrupted mid-copy (RFC 0011, "Races considered"), with real
// processes and two real MinIO servers: the database on one, the backup
// store on a second behind a gate, a proxy that lets the first few object
// copies through and holds the rest, so "mid-copy" is a state the test
// waits for, not a moment it guesses.

// gate proxies a MinIO server: the first allow PUTs under objects/ pass,
// later ones wait for open. A request the server cannot take (it is
// stopped) has its connection closed, as a store that is down does.
type gate struct {
	URL         string
	allow       int64
	puts        atomic.Int64
	held        chan struct{}
	heldOnce    sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

func newGate(t *testing.T, backend string, allow int64) *gate {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{allow: allow, held: make(chan struct{}), release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the Host header the client signed
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, herr := hj.Hijack(); herr == nil {
				c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/objects/") && g.puts.Add(1) > g.allow {
			g.heldOnce.Do(func() { close(g.held) })
			select {
			case <-g.release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { g.open(); srv.Close() })
	g.URL = srv.URL
	return g
}

func (g *gate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

// waitHeld waits until a copy is held at the gate.
func (g *gate) waitHeld(t *testing.T, p *proc) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(waitDeadline):
		t.Fatalf("no copy reached the gate\n%s", p.stderr)
	}
}

// backupStores starts the database's MinIO (bucket src; the AWS_*
// variables point at it) and the backup store's (bucket bak, its own
// credentials in a directory, as --to-credentials-dir reads them).
func backupStores(t *testing.T) (bak *miniotest.Server, creds string) {
	t.Helper()
	src := miniotest.Start(t)
	for _, kv := range src.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	src.CreateBucket(t, "src")
	bak = miniotest.Start(t)
	bak.CreateBucket(t, "bak")
	creds = t.TempDir()
	bak.WriteCredentials(t, creds)
	return bak, creds
}

// copiedObjects counts the objects under the backup location's objects/
// (read on the server itself, not through the gate).
func copiedObjects(t *testing.T, bak *miniotest.Server) int {
	t.Helper()
	n := 0
	for o := range bak.Client().ListObjects(context.Background(), "bak", minio.ListObjectsOptions{Prefix: "shale/orders/objects/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	return n
}

// waitExit waits for a shale process to end and returns its exit code.
func waitExit(t *testing.T, p *proc) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(waitDeadline):
		t.Fatalf("shale %v did not end\n%s", p.cmd.Args[1:], p.stderr)
		return -1
	}
}

// acked records the writes a primary acknowledged.
type ackedWrites struct {
	mu   sync.Mutex
	keys map[string]string
}

func (a *ackedWrites) put(kv kvv1.KVClient, key, value string) error {
	_, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(key), Value: []byte(value), Sync: true})
	if err == nil {
		a.mu.Lock()
		a.keys[key] = value
		a.mu.Unlock()
	}
	return err
}

// rounds writes n keys per round, each round followed by a checkpoint
// (a flush: one table each), the last one named ck.
func (a *ackedWrites) rounds(t *testing.T, kv kvv1.KVClient, prefix string, rounds, n int, ck string) {
	t.Helper()
	for r := range rounds {
		for i := range n {
			if err := a.put(kv, fmt.Sprintf("%s-%d-%03d", prefix, r, i), fmt.Sprintf("v-%s-%d-%d", prefix, r, i)); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("%s-%d", ck, r)
		if r == rounds-1 {
			name = ck
		}
		if _, err := kv.Checkpoint(context.Background(), &kvv1.CheckpointRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
}

// restoreHasAll restores backup id into a new database, opens it with a
// primary and checks every acknowledged write is there.
func restoreHasAll(t *testing.T, loc []string, id, into string, a *ackedWrites) {
	t.Helper()
	if code, out, errOut := shale(append(append([]string{"backup", "restore"}, loc...), id, "--into", into)...); code != 0 {
		t.Fatalf("restore %s: %d %q %q", id, code, out, errOut)
	}
	r := startPrimary(t, into, filepath.Join(t.TempDir(), "cache"))
	kv := kvv1.NewKVClient(dial(t, r.addr))
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range a.keys {
		got, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(k)})
		if err != nil || string(got.Value) != v {
			t.Fatalf("backup %s restored: acknowledged %s = %q: got %v %v", id, k, v, got, err)
		}
	}
	t.Logf("backup %s restored with all %d acknowledged writes", id, len(a.keys))
}

// createReport reads a --report file.
func createReport(t *testing.T, path string) (objects, copied int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Objects, CopiedObjects int64 }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return r.Objects, r.CopiedObjects
}

// `shale backup create` killed with SIGKILL mid-copy: nothing is listed
// (the manifest is written last), the pin stays in the database; a rerun
// with the same id resumes, copying only what the killed run had not;
// a later backup restores every acknowledged write.
func TestBackupKill9MidCopy(t *testing.T) {
	bak, creds := backupStores(t)
	g := newGate(t, bak.Endpoint, 3)
	dir := t.TempDir()
	const db = "s3://src/orders"
	p := startPrimary(t, db, filepath.Join(dir, "cache"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	a := &ackedWrites{keys: map[string]string{}}
	a.rounds(t, kv, "a", 3, 50, "c1") // 3 tables, the MANIFEST copy, the record, IDENTITY

	viaGate := []string{"--to", "s3://bak/shale", "--to-endpoint", g.URL, "--to-credentials-dir", creds, "--database", "orders"}
	direct := []string{"--to", "s3://bak/shale", "--to-endpoint", bak.Endpoint, "--to-credentials-dir", creds, "--database", "orders"}
	b := startShale(t, append([]string{"backup", "create", "--db", db, "--checkpoint", "c1", "--id", "b1"}, viaGate...)...)
	g.waitHeld(t, b)
	// Mid-copy: the copies the gate let through are stored, the rest wait.
	for deadline := time.Now().Add(waitDeadline); copiedObjects(t, bak) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first copies never landed\n%s", b.stderr)
		}
	}
	b.kill9(t)
	g.open()

	if code, out, errOut := shale(append([]string{"backup", "list"}, direct...)...); code != 0 || !strings.Contains(out, "no backups") {
		t.Fatalf("list after the kill: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := shale(append([]string{"backup", "list", "--pending"}, direct...)...); code != 0 || !strings.Contains(out, "b1") || !strings.Contains(out, "interrupted") {
		t.Fatalf("list --pending after the kill: %d %q %q", code, out, errOut)
	}
	src, err := objstore.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Stat(context.Background(), "_shale/pins/backup-b1"); err != nil {
		t.Fatalf("the killed backup's pin: %v", err)
	}

	present := copiedObjects(t, bak)
	report := filepath.Join(dir, "report")
	code, out, errOut := shale(append([]string{"backup", "create", "--db", db, "--checkpoint", "c1", "--id", "b1", "--report", report}, direct...)...)
	if code != 0 || !strings.Contains(out, "backup b1 published") {
		t.Fatalf("rerun: %d %q %q", code, out, errOut)
	}
	objects, copied := createReport(t, report)
	t.Logf("killed after %d of %d objects; the rerun copied %d: %s", present, objects, copied, strings.TrimSpace(out))
	if present == 0 || int64(present) >= objects || copied != objects-int64(present) {
		t.Fatalf("the rerun copied %d of %d objects, %d were there: want only the missing ones", copied, objects, present)
	}
	if _, err := src.Stat(context.Background(), "_shale/pins/backup-b1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the pin after the rerun: %v", err)
	}

	// A later backup holds every acknowledged write.
	for i := range 50 {
		if err := a.put(kv, fmt.Sprintf("b-%03d", i), "v-b"); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := shale(append([]string{"backup", "create", "--db", db, "--addr", p.addr, "--id", "b2"}, direct...)...); code != 0 {
		t.Fatalf("create b2: %d %q %q", code, out, errOut)
	}
	restoreHasAll(t, direct, "b2", "s3://src/restored", a)
}

// The backup store stopped mid-copy: create fails with an error that says
// nothing is published and how to resume; nothing is listed; once the
// store is back, a rerun with the same id completes.
func TestBackupStoreDownMidCopy(t *testing.T) {
	bak, creds := backupStores(t)
	g := newGate(t, bak.Endpoint, 3)
	dir := t.TempDir()
	const db = "s3://src/orders"
	p := startPrimary(t, db, filepath.Join(dir, "cache"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	a := &ackedWrites{keys: map[string]string{}}
	a.rounds(t, kv, "a", 3, 50, "c1")

	viaGate := []string{"--to", "s3://bak/shale", "--to-endpoint", g.URL, "--to-credentials-dir", creds, "--database", "orders"}
	b := startShale(t, append([]string{"backup", "create", "--db", db, "--checkpoint", "c1", "--id", "b1"}, viaGate...)...)
	g.waitHeld(t, b)
	bak.Stop()
	g.open()
	code := waitExit(t, b)
	msg := b.stderr.String()
	t.Logf("create with the backup store down: exit %d: %s", code, lastLine(msg))
	if code != 1 || !strings.Contains(msg, "nothing is published; rerun with --id b1 to resume") {
		t.Fatalf("create with the store down: exit %d\n%s", code, msg)
	}

	bak.Restart(t)
	if code, out, errOut := shale(append([]string{"backup", "list"}, viaGate...)...); code != 0 || !strings.Contains(out, "no backups") {
		t.Fatalf("list after the outage: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := shale(append([]string{"backup", "create", "--db", db, "--checkpoint", "c1", "--id", "b1"}, viaGate...)...); code != 0 || !strings.Contains(out, "backup b1 published") {
		t.Fatalf("rerun after the outage: %d %q %q", code, out, errOut)
	}
	restoreHasAll(t, viaGate, "b1", "s3://src/restored", a)
}

// The primary killed with SIGKILL while `shale backup create --addr`
// copies its checkpoint: the copy reads the store, not the primary, so
// the backup is published (the checkpoint it asked for is left until it
// expires: a warning says so); after the next primary takes over, a
// later backup through it holds every write either acknowledged.
func TestBackupPrimaryKill9MidCopy(t *testing.T) {
	bak, creds := backupStores(t)
	g := newGate(t, bak.Endpoint, 3)
	dir := t.TempDir()
	const db = "s3://src/orders"
	p := startPrimary(t, db, filepath.Join(dir, "cache1"))
	kv := kvv1.NewKVClient(dial(t, p.addr))
	a := &ackedWrites{keys: map[string]string{}}
	a.rounds(t, kv, "a", 2, 50, "c0")

	// Writers run through the backup and the kill.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if a.put(kv, fmt.Sprintf("w%d-%05d", w, i), "v") != nil {
					return // the primary is gone
				}
			}
		}()
	}
	viaGate := []string{"--to", "s3://bak/shale", "--to-endpoint", g.URL, "--to-credentials-dir", creds, "--database", "orders"}
	b := startShale(t, append([]string{"backup", "create", "--db", db, "--addr", p.addr, "--id", "b1"}, viaGate...)...)
	g.waitHeld(t, b)
	p.kill9(t)
	close(stop)
	wg.Wait()
	g.open()
	code := waitExit(t, b)
	out := b.stderr.String()
	if code != 0 || !strings.Contains(out, "backup b1 published") || !strings.Contains(out, "the checkpoint it created is left until it expires") {
		t.Fatalf("create with its primary killed: exit %d\n%s", code, out)
	}
	t.Logf("backup through a primary killed mid-copy: %s", strings.Join(grepLines(out, "published"), " | "))
	if code, out, errOut := shale(append([]string{"backup", "verify", "b1", "--scratch", t.TempDir()}, viaGate...)...); code != 0 {
		t.Fatalf("verify b1: %d %q %q", code, out, errOut)
	}

	q := startPrimary(t, db, filepath.Join(dir, "cache2"))
	if code, out, errOut := shale(append([]string{"backup", "create", "--db", db, "--addr", q.addr, "--id", "b2"}, viaGate...)...); code != 0 {
		t.Fatalf("create b2 through the next primary: %d %q %q", code, out, errOut)
	}
	restoreHasAll(t, viaGate, "b2", "s3://src/restored", a)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
