package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// tlsSetup is a CA made with `shale admin ca create` and certificates
// issued with `shale admin cert issue`, as a standalone user makes them.
type tlsSetup struct {
	root string
	db   string // the database the primary's certificate names
}

func newTLSSetup(t *testing.T, db string) *tlsSetup {
	t.Helper()
	s := &tlsSetup{root: t.TempDir(), db: db}
	s.admin(t, "ca", "create", "--out", s.dir("ca"))
	s.issue(t, "primary", "--kind", "primary", "--name", "orders", "--db", db)
	s.issue(t, "secondary", "--kind", "secondary", "--name", "orders")
	for _, c := range []string{"reader", "writer", "admin"} {
		s.issue(t, c, "--kind", "client", "--name", "orders", "--client", c)
	}
	s.issue(t, "users-writer", "--kind", "client", "--name", "users", "--client", "writer")
	code, out, errOut := shale("admin", "token", "--out", s.file("token"), "-o", "json")
	if code != 0 {
		t.Fatalf("admin token: %s", errOut)
	}
	var tok struct{ TokenSHA256 string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.TokenSHA256 == "" {
		t.Fatalf("admin token -o json: %v %q", err, out)
	}
	s.writeAccess(t, fmt.Sprintf(`{"clients": [
  {"name": "reader", "role": "read"},
  {"name": "writer", "role": "write"},
  {"name": "admin", "role": "admin"},
  {"name": "batch", "role": "write", "tokenSHA256s": [%q]}
]}`, tok.TokenSHA256))
	return s
}

func (s *tlsSetup) dir(name string) string  { return filepath.Join(s.root, name) }
func (s *tlsSetup) file(name string) string { return filepath.Join(s.root, name) }

func (s *tlsSetup) admin(t *testing.T, args ...string) {
	t.Helper()
	if code, _, errOut := shale(append([]string{"admin"}, args...)...); code != 0 {
		t.Fatalf("shale admin %q: exit %d: %s", args, code, errOut)
	}
}

// issue (re)issues the certificate name with the CA.
func (s *tlsSetup) issue(t *testing.T, name string, args ...string) {
	t.Helper()
	s.admin(t, append([]string{"cert", "issue", "--ca", s.dir("ca"), "--namespace", "ns", "--out", s.dir(name)}, args...)...)
}

// writeAccess replaces the access file as kubelet updates a Secret: a new
// file renamed over the old one.
func (s *tlsSetup) writeAccess(t *testing.T, doc string) {
	t.Helper()
	if err := writeFileAtomic(s.file("access.json"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverFlags are a server's TLS flags with the certificate in dir name.
func (s *tlsSetup) serverFlags(name string) []string {
	return []string{"--tls-cert", filepath.Join(s.dir(name), "tls.crt"), "--tls-key", filepath.Join(s.dir(name), "tls.key"),
		"--tls-ca", filepath.Join(s.dir(name), "ca.crt"), "--access-file", s.file("access.json")}
}

// clientFlags are a client's flags with the certificate in dir name.
func (s *tlsSetup) clientFlags(name string) []string {
	return []string{"--tls-ca", filepath.Join(s.dir("ca"), "ca.crt"), "--tls-cert", filepath.Join(s.dir(name), "tls.crt"), "--tls-key", filepath.Join(s.dir(name), "tls.key")}
}

func (s *tlsSetup) client(name string) auth.ClientConfig {
	return auth.ClientConfig{TLS: auth.TLSFiles{CA: filepath.Join(s.dir("ca"), "ca.crt"), Cert: filepath.Join(s.dir(name), "tls.crt"), Key: filepath.Join(s.dir(name), "tls.key")}}
}

func (s *tlsSetup) dial(t *testing.T, addr string, c auth.ClientConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := c.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startTLS starts a shale server with TLS on addr and waits until its
// health check, over TLS without a client certificate, says SERVING.
func (s *tlsSetup) startTLS(t *testing.T, addr string, args ...string) *proc {
	t.Helper()
	p := startShale(t, args...)
	p.addr = addr
	health := healthpb.NewHealthClient(s.dial(t, addr, auth.ClientConfig{TLS: auth.TLSFiles{CA: filepath.Join(s.dir("ca"), "ca.crt")}}))
	deadline := time.Now().Add(waitDeadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			return p
		}
		if p.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("shale %s did not start serving TLS on %s: %v\n%s", args[0], addr, err, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *tlsSetup) startPrimary(t *testing.T, extra ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"primary", "--db", s.db, "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--listen", addr, "--metrics-listen", "", "--lease", "500ms"},
		s.serverFlags("primary")...)
	return s.startTLS(t, addr, append(args, extra...)...)
}

// The CLI against a primary with TLS and an access file: what each
// identity may do and the one-line errors that say why not.
func TestCLIWithTLS(t *testing.T) {
	s := newTLSSetup(t, "file://"+filepath.Join(t.TempDir(), "db"))
	p := s.startPrimary(t)
	a := "--addr=" + p.addr
	ca := "--tls-ca=" + filepath.Join(s.dir("ca"), "ca.crt")
	token := "--token-file=" + s.file("token")
	w, r, adm := s.clientFlags("writer"), s.clientFlags("reader"), s.clientFlags("admin")
	cmd := func(args []string, flags ...[]string) []string {
		for _, f := range flags {
			args = append(args, f...)
		}
		return args
	}
	steps := []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{cmd([]string{"kv", "put", a, "hello", "world"}, w), 0, "", ""},
		{cmd([]string{"kv", "get", a, "hello"}, r), 0, "world\n", ""},
		{cmd([]string{"kv", "status", a}, r), 0, "role:                primary", ""},
		// no TLS at all: the server closes the plaintext connection
		{[]string{"kv", "get", a, "hello"}, 1, "", "closed a plaintext connection"},
		// TLS, no identity
		{[]string{"kv", "get", a, ca, "hello"}, 1, "", "shale: the server requires authentication: no client certificate and no bearer token"},
		{cmd([]string{"kv", "put", a, "k", "v"}, r), 1, "", "shale: PermissionDenied: shale://ns/client/orders/reader has role read; Put needs role write\n"},
		{cmd([]string{"kv", "flush", a}, w), 1, "", "Flush needs role admin"},
		{cmd([]string{"kv", "compact", a}, w), 1, "", "Compact needs role admin"},
		{cmd([]string{"kv", "flush", a}, adm), 0, "", ""},
		{cmd([]string{"kv", "get", a, "hello"}, s.clientFlags("users-writer")), 1, "", "PermissionDenied: shale://ns/client/users/writer has role none; Get needs role read"},
		// bearer tokens, over TLS only
		{[]string{"kv", "put", a, ca, token, "tok", "en"}, 0, "", ""},
		{[]string{"kv", "get", a, ca, token, "tok"}, 0, "en\n", ""},
		{[]string{"kv", "get", a, token, "tok"}, 1, "", "--token-file needs TLS: give --tls-ca"},
		// the server's name must match
		{cmd([]string{"kv", "get", a, "--tls-server-name", "db.example", "hello"}, r), 1, "", "TLS handshake with " + p.addr + " failed"},
		{cmd([]string{"kv", "get", "--addr", "localhost:" + strings.Split(p.addr, ":")[1], "hello"}, r), 0, "world\n", ""},
		// the exec readiness probe: no identity needed, the CA is
		{[]string{"health", a, ca}, 0, "SERVING\n", ""},
		{[]string{"health", a, ca, "--service", "shale.kv.v1.KV"}, 0, "SERVING\n", ""},
		{[]string{"health", a}, 1, "", "closed a plaintext connection"},
		{[]string{"health", a, ca, "--service", "nope"}, 1, "", `serves no service "nope"`},
	}
	for _, st := range steps {
		code, out, errOut := shale(st.args...)
		if code != st.code || !strings.Contains(out, st.stdout) || !strings.Contains(errOut, st.stderr) ||
			(st.stdout == "" && out != "") || (st.stderr == "" && errOut != "") {
			t.Errorf("shale %q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout containing %q, stderr containing %q",
				st.args, code, out, errOut, st.code, st.stdout, st.stderr)
		}
		if code == 1 && (strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "shale: ")) {
			t.Errorf("shale %q: error is not one line starting with \"shale: \": %q", st.args, errOut)
		}
	}

	// kv load and bench take the same flags.
	in := filepath.Join(t.TempDir(), "pairs.tsv")
	os.WriteFile(in, []byte("l1\tv1\nl2\tv2\n"), 0o644)
	if code, out, errOut := shale(cmd([]string{"kv", "load", a, in}, w)...); code != 0 || !strings.Contains(out, "loaded 2 pairs") {
		t.Errorf("kv load with a writer's certificate: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := shale(cmd([]string{"kv", "load", a, in}, r)...); code != 1 || !strings.Contains(errOut, "Load needs role write") {
		t.Errorf("kv load with a reader's certificate: exit %d %q", code, errOut)
	}
	if code, out, errOut := shale(cmd([]string{"bench", a, "--benchmarks", "fillrandom,readrandom", "--num", "200", "--threads", "2", "-o", "json"}, w)...); code != 0 ||
		!strings.Contains(out, `"name": "readrandom"`) {
		t.Errorf("bench with a writer's certificate: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := shale("bench", a, ca, "--num", "10"); code != 1 || !strings.Contains(errOut, "the server requires authentication") {
		t.Errorf("bench without an identity: exit %d %q", code, errOut)
	}
}

// A client config file names the address and the TLS files once
// (relative to its directory); flags win over it; $SHALE_CONFIG is the
// default file.
func TestCLIClientConfigFile(t *testing.T) {
	s := newTLSSetup(t, "file://"+filepath.Join(t.TempDir(), "db"))
	p := s.startPrimary(t)
	conf := filepath.Join(s.root, "writer.yaml")
	os.WriteFile(conf, []byte("addr: "+p.addr+"\ntlsCA: ca/ca.crt\ntlsCert: writer/tls.crt\ntlsKey: writer/tls.key\n"), 0o600)
	if code, _, errOut := shale("kv", "put", "--config", conf, "from", "config"); code != 0 {
		t.Fatalf("put with --config: exit %d %s", code, errOut)
	}
	t.Setenv("SHALE_CONFIG", conf)
	if code, out, errOut := shale("kv", "get", "from"); code != 0 || out != "config\n" {
		t.Fatalf("get with $SHALE_CONFIG: exit %d %q %s", code, out, errOut)
	}
	// Flags win: the reader's certificate instead of the file's writer.
	if code, _, errOut := shale(append([]string{"kv", "put", "x", "y"}, s.clientFlags("reader")...)...); code != 1 || !strings.Contains(errOut, "shale://ns/client/orders/reader has role read") {
		t.Fatalf("flags over the config file: exit %d %s", code, errOut)
	}
	if code, _, errOut := shale("kv", "get", "--addr", freeAddr(t), "--timeout", "5s", "from"); code != 1 || !strings.Contains(errOut, "cannot reach") {
		t.Fatalf("--addr over the config file: exit %d %s", code, errOut)
	}
	if code, out, _ := shale("health"); code != 0 || out != "SERVING\n" {
		t.Fatalf("health with $SHALE_CONFIG: exit %d %q", code, out)
	}
	// --config "" turns the default file off.
	if code, _, errOut := shale("kv", "get", "--config", "", "--addr", p.addr, "from"); code != 1 || !strings.Contains(errOut, "closed a plaintext connection") {
		t.Fatalf("--config \"\": exit %d %s", code, errOut)
	}
	os.WriteFile(conf, []byte("addr: "+p.addr+"\ncaFile: ca/ca.crt\n"), 0o600)
	if code, _, errOut := shale("kv", "get", "from"); code != 1 || !strings.Contains(errOut, `unknown field "caFile"`) || !strings.Contains(errOut, "writer.yaml") {
		t.Fatalf("a misspelt key: exit %d %s", code, errOut)
	}
	t.Setenv("SHALE_CONFIG", filepath.Join(s.root, "missing.yaml"))
	if code, _, errOut := shale("kv", "get", "from"); code != 1 || !strings.Contains(errOut, "$SHALE_CONFIG: open ") {
		t.Fatalf("a missing $SHALE_CONFIG: exit %d %s", code, errOut)
	}
}

func TestParseClientConfig(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want clientConfigFile
		err  string
	}{
		{"addr: db:7070\ntlsCA: ca.crt\ntlsCert: /abs/tls.crt\ntlsKey: k/tls.key\ntokenFile: tok\nserverName: orders-rw\n",
			clientConfigFile{Addr: "db:7070", TLSCA: "/etc/shale/ca.crt", TLSCert: "/abs/tls.crt", TLSKey: "/etc/shale/k/tls.key", TokenFile: "/etc/shale/tok", ServerName: "orders-rw"}, ""},
		{"", clientConfigFile{}, ""},
		{"addr: db:7070\n", clientConfigFile{Addr: "db:7070"}, ""},
		{"address: db:7070\n", clientConfigFile{}, `unknown field "address"`},
		{"addr: [1, 2]\n", clientConfigFile{}, "client config /etc/shale/c.yaml"},
		{"addr: db:7070\naddr: other:7070\n", clientConfigFile{}, "client config"},
	} {
		got, err := parseClientConfig("/etc/shale/c.yaml", []byte(tc.doc))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.doc, err)
		case tc.err == "" && *got != tc.want:
			t.Errorf("%q: %+v, want %+v", tc.doc, *got, tc.want)
		}
	}
}

// Without TLS, a server listens only where no one else reaches it, unless
// --insecure says otherwise; dev is always plaintext, on loopback.
func TestPlaintextOnlyOnLoopback(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"primary", "--db", db, "--listen", ":7070"}, "primary: --listen :7070 is reachable from other machines but has no TLS: give --tls-cert, --tls-key and --tls-ca"},
		{[]string{"primary", "--db", db, "--listen", "0.0.0.0:7070"}, "or pass --insecure to serve plaintext with no authentication"},
		{[]string{"secondary", "--db", db, "--listen", "10.0.0.1:7071"}, "secondary: --listen 10.0.0.1:7071 is reachable from other machines but has no TLS"},
		{[]string{"primary", "--db", db, "--insecure", "--tls-ca", "/x"}, "--insecure serves plaintext: drop it"},
		{[]string{"primary", "--db", db, "--access-file", "/x"}, "--access-file needs TLS"},
		{[]string{"dev", "--data", t.TempDir(), "--listen", ":7070"}, "dev: --listen :7070 is reachable from other machines, but dev serves plaintext with no authentication: listen on 127.0.0.1"},
		{[]string{"dev", "--data", t.TempDir(), "--secondary-listen", "0.0.0.0:7071"}, "dev: --secondary-listen 0.0.0.0:7071 is reachable"},
	} {
		if code, out, errOut := shale(tc.args...); code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("shale %q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	// --insecure: plaintext on every interface, as asked.
	port := strings.Split(freeAddr(t), ":")[1]
	p := startServing(t, "127.0.0.1:"+port, "primary", "--db", db, "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--listen", "0.0.0.0:"+port,
		"--metrics-listen", "", "--insecure")
	if code, _, errOut := shale("kv", "put", "--addr", p.addr, "k", "v"); code != 0 {
		t.Fatalf("put on an --insecure primary: %s", errOut)
	}
}

// A secondary with TLS follows its primary's notifications over mutual
// TLS (its certificate is a secondary's of the same database, which the
// primary grants read), and serves reads to the access file's clients.
func TestSecondaryFollowsPrimaryOverMTLS(t *testing.T) {
	s := newTLSSetup(t, "file://"+filepath.Join(t.TempDir(), "db"))
	p := s.startPrimary(t)
	saddr := freeAddr(t)
	s.startTLS(t, saddr, append([]string{"secondary", "--db", s.db, "--cache-dir", filepath.Join(t.TempDir(), "secondary"), "--listen", saddr,
		"--metrics-listen", "", "--primary", p.addr, "--catchup-interval", "1h"}, s.serverFlags("secondary")...)...)
	pkv := kvv1.NewKVClient(s.dial(t, p.addr, s.client("writer")))
	skv := kvv1.NewKVClient(s.dial(t, saddr, s.client("reader")))
	ctx := context.Background()
	if _, err := pkv.Put(ctx, &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	pst, err := pkv.Status(ctx, &kvv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The primary's announced sequence reaches the secondary only through
	// its Watch stream (polling learns none): proof the stream is up.
	deadline := time.Now().Add(waitDeadline)
	for {
		st, err := skv.Status(ctx, &kvv1.StatusRequest{})
		if err == nil && st.PrimarySequence >= pst.LatestSequence && st.LatestSequence >= pst.LatestSequence {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary did not follow the primary's notifications: %v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r, err := skv.Get(ctx, &kvv1.GetRequest{Key: []byte("k")}); err != nil || string(r.Value) != "v" {
		t.Fatalf("read on the secondary: %v %v", r, err)
	}
	code, _, errOut := shale(append([]string{"kv", "put", "--addr", saddr, "x", "y"}, s.clientFlags("writer")...)...)
	if code != 1 || !strings.Contains(errOut, "FailedPrecondition") {
		t.Fatalf("a write on the secondary: exit %d %s", code, errOut)
	}
}

// The server's certificate is replaced while a writer writes: new
// connections get the new certificate, and the writer's open connection
// goes on with the old one without a failed write (no restart, nothing
// dropped).
func TestCertRotationUnderWriteLoad(t *testing.T) {
	s := newTLSSetup(t, "file://"+filepath.Join(t.TempDir(), "db"))
	p := s.startPrimary(t)
	oldSerial := serverSerial(t, s, p.addr)

	conn := s.dial(t, p.addr, s.client("writer"))
	kv := kvv1.NewKVClient(conn)
	var writes, failed atomic.Int64
	var lastPeer atomic.Pointer[peer.Peer]
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var pr peer.Peer
			_, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(fmt.Sprintf("k%06d", i)), Value: []byte("v"), Sync: true}, grpc.Peer(&pr))
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				continue
			}
			lastPeer.Store(&pr)
			writes.Add(1)
		}
	}()
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(waitDeadline)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: not within %s\n%s", what, waitDeadline, p.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitUntil("writes before the rotation", func() bool { return writes.Load() >= 50 })

	s.issue(t, "primary", "--kind", "primary", "--name", "orders", "--db", s.db) // in place, as a renewal
	var newSerial *big.Int
	waitUntil("a new connection gets the new certificate", func() bool {
		newSerial = serverSerial(t, s, p.addr)
		return newSerial.Cmp(oldSerial) != 0
	})
	after := writes.Load()
	waitUntil("writes after the rotation", func() bool { return writes.Load() >= after+50 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d writes failed across the rotation; first: %v", n, writes.Load()+n, firstErr.Load())
	}
	// The writer's connection is the one it opened before the rotation.
	if got := peerSerial(t, lastPeer.Load()); got.Cmp(oldSerial) != 0 {
		t.Fatalf("the writer's connection has certificate %x, want the one from before the rotation %x", got, oldSerial)
	}
	want, err := os.ReadFile(filepath.Join(s.dir("primary"), "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := pki.ParseCertificate(want); c.SerialNumber.Cmp(newSerial) != 0 {
		t.Fatalf("new connections get certificate %x, the file holds %x", newSerial, c.SerialNumber)
	}
	t.Logf("%d writes, none failed; certificate %x replaced by %x", writes.Load(), oldSerial, newSerial)
}

// serverSerial is the serial of the certificate a new TLS connection to
// addr gets.
func serverSerial(t *testing.T, s *tlsSetup, addr string) *big.Int {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(s.dir("ca"), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func peerSerial(t *testing.T, p *peer.Peer) *big.Int {
	t.Helper()
	if p == nil {
		t.Fatal("no write succeeded")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("the writer's connection is not TLS: %T", p.AuthInfo)
	}
	return ti.State.PeerCertificates[0].SerialNumber
}

// A client removed from the access file is refused once the file
// changes, while the server runs.
func TestAccessFileRevocation(t *testing.T) {
	s := newTLSSetup(t, "file://"+filepath.Join(t.TempDir(), "db"))
	p := s.startPrimary(t)
	put := func() (int, string) {
		code, _, errOut := shale(append([]string{"kv", "put", "--addr", p.addr, "k", "v"}, s.clientFlags("writer")...)...)
		return code, errOut
	}
	if code, errOut := put(); code != 0 {
		t.Fatalf("before: %s", errOut)
	}
	s.writeAccess(t, `{"clients": [{"name": "reader", "role": "read"}]}`)
	deadline := time.Now().Add(waitDeadline)
	for {
		code, errOut := put()
		if code == 1 && strings.Contains(errOut, "shale://ns/client/orders/writer has role none; Put needs role write") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed writer is still admitted: exit %d %s", code, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shale admin refuses what would make a useless certificate, and never
// overwrites a CA.
func TestAdminPKIRefusals(t *testing.T) {
	root := t.TempDir()
	ca := filepath.Join(root, "ca")
	if code, _, errOut := shale("admin", "ca", "create", "--out", ca); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := shale("admin", "ca", "create", "--out", ca); code != 1 || !strings.Contains(errOut, "ca.key already exists") {
		t.Errorf("a second CA over the first: exit %d %s", code, errOut)
	}
	out := filepath.Join(root, "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "client", "--name", "orders"}, "--kind client needs --client"},
		{[]string{"--kind", "client", "--client", "app"}, "--kind client needs --name"},
		{[]string{"--kind", "primary", "--name", "orders"}, "--kind primary needs --db"},
		{[]string{"--kind", "primary", "--name", "orders", "--db", "relative/db"}, "--db: "},
		{[]string{"--kind", "secondary", "--name", "orders", "--db", "file:///db"}, "--db is for --kind primary only"},
		{[]string{"--kind", "worker", "--name", "pool", "--client", "x"}, "--client is for --kind client only"},
		{[]string{"--kind", "operator", "--name", "x"}, "an operator identity names no database or pool"},
		{[]string{"--kind", "root", "--name", "x"}, `--kind "root": want client, primary`},
		{[]string{"--kind", "client", "--name", "a/b", "--client", "c"}, "must be single path segments"},
		{[]string{"--kind", "client", "--name", "orders", "--client", "c", "--namespace", ""}, "--namespace must not be empty"},
	} {
		args := append([]string{"admin", "cert", "issue", "--ca", ca, "--out", out}, tc.args...)
		if code, _, errOut := shale(args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("shale %q: exit %d %s; want exit 2 and %q", args, code, errOut, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("refused issues wrote %s: %v", out, err)
	}
	if code, _, errOut := shale("admin", "cert", "issue", "--ca", filepath.Join(root, "nope"), "--kind", "operator", "--out", out); code != 1 || !strings.Contains(errOut, "shale admin ca create") {
		t.Errorf("a missing CA: exit %d %s", code, errOut)
	}
	// A client certificate is for clients only; a server's names localhost.
	if code, _, errOut := shale("admin", "cert", "issue", "--ca", ca, "--out", out, "--kind", "secondary", "--name", "orders", "--dns", "db.example"); code != 0 {
		t.Fatal(errOut)
	}
	b, _ := os.ReadFile(filepath.Join(out, "tls.crt"))
	c, err := pki.ParseCertificate(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.DNSNames) != "[db.example localhost]" || len(c.IPAddresses) != 1 || c.URIs[0].String() != "shale://default/secondary/orders" || len(c.ExtKeyUsage) != 2 {
		t.Errorf("secondary certificate: DNS %v IP %v URIs %v usages %v", c.DNSNames, c.IPAddresses, c.URIs, c.ExtKeyUsage)
	}
	if fi, err := os.Stat(filepath.Join(out, "tls.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tls.key: %v %v", fi.Mode(), err)
	}
}

// shale dev is plaintext and says so.
func TestDevSaysPlaintext(t *testing.T) {
	addr, saddr, caddr := freeAddr(t), freeAddr(t), freeAddr(t)
	p := startShale(t, "dev", "--data", t.TempDir(), "--listen", addr, "--secondary-listen", saddr, "--compactor-listen", caddr, "--metrics-listen", "")
	for _, a := range []string{addr, saddr} {
		conn := dial(t, a)
		deadline := time.Now().Add(waitDeadline)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("dev does not serve on %s: %v", a, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait() // then its output (stdout and stderr, in p.stderr) is complete
	if out := p.stderr.String(); !strings.Contains(out, "security  plaintext, no authentication: loopback only") {
		t.Fatalf("dev's banner does not say it is plaintext:\n%s", out)
	}
}
