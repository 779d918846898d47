// Package miniotest runs the pinned MinIO server (bin/minio, built by
// `make deps`) for tests: one process per Start, on a free loopback port with
// a temporary data directory and generated credentials. It builds nothing
// and downloads nothing; a missing binary fails the test, because a test
// suite that silently skips its object-store tests proves nothing.
//
//	srv := miniotest.Start(t)
//	srv.CreateBucket(t, "db")
//	store, err := objstore.OpenS3("s3://db/prefix", srv.S3Config())
//
// Stop and Restart keep the data directory and the port, so a test can take
// the store away mid-flight (an outage) and bring the same data back.
//
// StartTLS serves HTTPS instead, with a certificate from a CA made for the
// server; S3Config and Client trust that CA.
package miniotest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/pki"
)

// EnvBinary overrides where the server binary is looked for.
const EnvBinary = "SHALE_MINIO"

// Region is the region the server and its clients use.
const Region = "us-east-1"

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// Server is a running (or stopped) MinIO server owned by one test.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:PORT.
	Endpoint  string
	AccessKey string
	SecretKey string
	// DataDir holds the server's data; it outlives Stop.
	DataDir string
	// CACert is the PEM certificate of the CA that signed the server's
	// certificate (StartTLS); nil for a plain HTTP server.
	CACert []byte

	certsDir  string // --certs-dir (StartTLS): public.crt, private.key
	transport *http.Transport

	bin     string
	addr    string
	console string
	logPath string
	client  *minio.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start runs a fresh server for t and stops it when t ends. It fails t if
// the server binary is missing or the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartTLS is Start for a server that serves HTTPS (Endpoint
// https://127.0.0.1:PORT), with a certificate for 127.0.0.1 and
// localhost signed by a CA made for it (CACert).
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, secure bool) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{
		AccessKey: "shale-" + randomHex(6),
		SecretKey: randomHex(20),
		DataDir:   filepath.Join(dir, "data"),
		bin:       bin,
		logPath:   filepath.Join(dir, "minio.log"),
	}
	if err := os.Mkdir(s.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if s.transport, err = minio.DefaultTransport(secure); err != nil {
		t.Fatal(err)
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
		s.certsDir = filepath.Join(dir, "certs")
		if s.CACert, err = writeCerts(s.certsDir); err != nil {
			t.Fatalf("miniotest: certificates: %v", err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CACert)
		s.transport.TLSClientConfig.RootCAs = pool
	}
	t.Cleanup(s.Stop)

	// Another process can take a port between our probe and MinIO's bind;
	// pick fresh ports and try again when that happens.
	for attempt := 1; ; attempt++ {
		s.addr, s.console = freeAddr(t), freeAddr(t)
		s.Endpoint = scheme + s.addr
		if s.client, err = s.newClient(); err != nil {
			t.Fatal(err)
		}
		err = s.start()
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("miniotest: %v", err)
		}
		t.Logf("miniotest: %v; retrying on other ports", err)
	}
	return s
}

// newClient is a client for the server signed with its current keys.
func (s *Server) newClient() (*minio.Client, error) {
	return minio.New(s.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure:       s.CACert != nil,
		Transport:    s.transport,
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1, // tests stop the server on purpose; fail fast then
	})
}

// Binary returns the path of the pinned MinIO server: $SHALE_MINIO if set,
// else bin/minio in the module root above the working directory.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("miniotest: $%s=%s: %v", EnvBinary, p, err)
		}
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "minio")
			if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return "", fmt.Errorf("bin/minio not found: run make deps (looked for %s; or set $%s)", p, EnvBinary)
			}
			return p, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("bin/minio not found: run make deps (no go.mod above %s; or set $%s)", wd, EnvBinary)
		}
	}
}

// writeCerts makes a CA and a server certificate for 127.0.0.1 and
// localhost in dir, as MinIO's --certs-dir wants them (public.crt,
// private.key), and returns the CA's certificate.
func writeCerts(dir string) ([]byte, error) {
	now := time.Now()
	caPEM, caKey, err := pki.NewCA("miniotest CA", now, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadCA(caPEM, caKey)
	if err != nil {
		return nil, err
	}
	cert, key, err := ca.Issue(pki.Leaf{
		CommonName: "127.0.0.1",
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:   []string{"localhost"},
		Server:     true,
		Validity:   24 * time.Hour,
	}, now)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "public.crt"), cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "private.key"), key, 0o600); err != nil {
		return nil, err
	}
	return caPEM, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start launches the server on s.addr and waits until it serves S3 requests.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child keeps its own descriptor
	fmt.Fprintf(logf, "--- miniotest: starting %s on %s at %s\n", s.bin, s.addr, time.Now().Format(time.RFC3339Nano))

	args := []string{"server", s.DataDir, "--address", s.addr, "--console-address", s.console, "--quiet"}
	if s.certsDir != "" {
		args = append(args, "--certs-dir", s.certsDir)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off",         // no web console
		"MINIO_UPDATE=off",          // no update checks
		"MINIO_CALLHOME_ENABLE=off", // no diagnostics upload
		"MINIO_CI_CD=1",             // small buffers, no root-drive checks
		"MINIO_SITE_REGION="+Region, // the region clients sign for
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group, and killed with us if the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	if err := s.waitReady(done); err != nil {
		s.Stop()
		return fmt.Errorf("%v\n%s", err, s.logTail())
	}
	return nil
}

// waitReady polls until the server reports its object layer initialized
// (the health endpoints answer 200 before that, with
// x-minio-server-status: offline) and a signed ListBuckets succeeds.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	hc := &http.Client{Timeout: time.Second, Transport: s.transport}
	last := errors.New("no answer")
	for delay := 20 * time.Millisecond; ; {
		select {
		case <-exited:
			return fmt.Errorf("minio exited during startup")
		default:
		}
		if resp, err := hc.Get(s.Endpoint + "/minio/health/ready"); err != nil {
			last = err
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if st := resp.Header.Get("X-Minio-Server-Status"); resp.StatusCode != http.StatusOK || st == "offline" {
				last = fmt.Errorf("health: HTTP %d, server status %q", resp.StatusCode, st)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := s.client.ListBuckets(ctx)
				cancel()
				if err == nil {
					return nil
				}
				last = err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("minio on %s not ready after %v (last: %v)", s.addr, startTimeout, last)
		}
		time.Sleep(delay)
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL) and waits for it to exit.
// The data directory stays; stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.signal(syscall.SIGTERM)
}

// Kill stops the server abruptly (SIGKILL), like a crash or a lost node.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return
	case <-time.After(stopTimeout):
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Running reports whether the server process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Restart stops the server if it runs and starts it again on the same port
// and data directory, with the same credentials.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.restart(t)
}

// NewKeys returns a fresh access key and secret, for RestartWithKeys.
func NewKeys() (accessKey, secretKey string) {
	return "shale-" + randomHex(6), randomHex(20)
}

// RestartWithKeys stops the server and starts it again on the same port
// and data directory with other root credentials: a rotated key. Requests
// signed with the old keys are refused afterwards (InvalidAccessKeyId);
// the data stays. AccessKey, SecretKey, Env, S3Config and Client give the
// new keys from then on.
func (s *Server) RestartWithKeys(t testing.TB, accessKey, secretKey string) {
	t.Helper()
	s.Stop()
	s.AccessKey, s.SecretKey = accessKey, secretKey
	var err error
	if s.client, err = s.newClient(); err != nil {
		t.Fatal(err)
	}
	s.restart(t)
}

// WriteCredentials writes the server's current keys into dir the way the
// kubelet lays out a Secret volume: the files accessKeyID and
// secretAccessKey are symlinks through ..data to a directory of the
// current version, and an update swaps ..data atomically to a new one. So
// a reader sees the old keys or the new ones, never a mix.
func (s *Server) WriteCredentials(t testing.TB, dir string) {
	t.Helper()
	WriteCredentials(t, dir, s.AccessKey, s.SecretKey)
}

// WriteCredentials writes keys into dir as Server.WriteCredentials does,
// e.g. before the server restarts with them.
func WriteCredentials(t testing.TB, dir, accessKey, secretKey string) {
	t.Helper()
	if err := writeSecretVolume(dir, map[string]string{
		objstore.CredentialsFileAccessKeyID:     accessKey,
		objstore.CredentialsFileSecretAccessKey: secretKey,
	}); err != nil {
		t.Fatalf("miniotest: write credentials to %s: %v", dir, err)
	}
}

func writeSecretVolume(dir string, files map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	version, err := os.MkdirTemp(dir, "..v")
	if err != nil {
		return err
	}
	for name, value := range files {
		if err := os.WriteFile(filepath.Join(version, name), []byte(value), 0o400); err != nil {
			return err
		}
	}
	data := filepath.Join(dir, "..data")
	old, _ := os.Readlink(data)
	tmp := filepath.Join(dir, "..data_tmp")
	os.Remove(tmp)
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, data); err != nil { // the atomic swap
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// restart starts the stopped server again on its port.
func (s *Server) restart(t testing.TB) {
	t.Helper()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		// The old listener may linger briefly; the port is ours to reuse.
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("miniotest: restart: %v", err)
}

// CreateBucket creates a bucket, failing t on error.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("miniotest: create bucket %s: %v", name, err)
	}
}

// Client returns a minio-go client for the server (path-style, signed with
// the server's credentials), for tests that need requests the Store does
// not make.
func (s *Server) Client() *minio.Client { return s.client }

// Env returns the standard client variables that point a child process at
// this server.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + Region,
	}
}

// S3Config returns the configuration objstore.OpenS3 needs for this server.
func (s *Server) S3Config() objstore.S3Config {
	c := objstore.S3Config{
		Endpoint:        s.Endpoint,
		AccessKeyID:     s.AccessKey,
		SecretAccessKey: s.SecretKey,
		Region:          Region,
	}
	if s.CACert != nil {
		c.Transport = s.transport // trusts CACert
	}
	return c
}

// Log returns what the server has printed so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return "minio log (" + s.logPath + "):\n" + string(b)
}
