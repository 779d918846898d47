package miniotest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestStartRestartStop(t *testing.T) {
	srv := Start(t)
	if !srv.Running() || !strings.HasPrefix(srv.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("server %s running=%v", srv.Endpoint, srv.Running())
	}
	srv.CreateBucket(t, "bkt")
	ctx := context.Background()
	c := srv.Client()
	if _, err := c.PutObject(ctx, "bkt", "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	if srv.Running() {
		t.Fatal("running after Stop")
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.StatObject(sctx, "bkt", "k", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat succeeded with the server stopped")
	}
	srv.Stop() // stopping twice is harmless

	endpoint := srv.Endpoint
	srv.Restart(t)
	if srv.Endpoint != endpoint {
		t.Fatalf("restart moved the server from %s to %s", endpoint, srv.Endpoint)
	}
	r, err := c.GetObject(ctx, "bkt", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, err := io.ReadAll(r); err != nil || string(b) != "v" {
		t.Fatalf("after restart: %q, %v", b, err)
	}

	srv.Kill()
	srv.Restart(t)
	if _, err := c.StatObject(ctx, "bkt", "k", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("after kill and restart: %v", err)
	}

	env := strings.Join(srv.Env(), "\n")
	for _, want := range []string{"AWS_ENDPOINT_URL=" + srv.Endpoint, "AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey, "AWS_REGION=us-east-1"} {
		if !strings.Contains(env, want) {
			t.Errorf("Env lacks %s", want)
		}
	}
	if cfg := srv.S3Config(); cfg.Endpoint != srv.Endpoint || cfg.AccessKeyID != srv.AccessKey || cfg.SecretAccessKey != srv.SecretKey {
		t.Errorf("S3Config = %+v", cfg)
	}
}

func TestBinaryMissing(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644)
	sub := filepath.Join(dir, "a", "b")
	os.MkdirAll(sub, 0o755)
	t.Chdir(sub)
	t.Setenv(EnvBinary, "")
	_, err := Binary()
	if err == nil || !strings.Contains(err.Error(), "bin/minio not found: run make deps") || !strings.Contains(err.Error(), filepath.Join(dir, "bin", "minio")) {
		t.Fatalf("Binary() = %v", err)
	}

	// Start fails the test; it does not skip it.
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if rec.skipped || !rec.failed || !strings.Contains(rec.msg, "bin/minio not found: run make deps") {
		t.Fatalf("Start without a binary: failed=%v skipped=%v %q", rec.failed, rec.skipped, rec.msg)
	}

	t.Setenv(EnvBinary, filepath.Join(dir, "nope"))
	if _, err := Binary(); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Fatalf("Binary() with a bad $%s = %v", EnvBinary, err)
	}
}

// recorder captures how a helper ends a test.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }
func (r *recorder) Skip(args ...any) {
	r.skipped = true
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) { r.Skip() }
func (r *recorder) SkipNow()                         { r.Skip() }
func (r *recorder) FailNow()                         { r.Fatal("FailNow") }

func BenchmarkStartStop(b *testing.B) {
	for range b.N {
		srv := Start(b)
		srv.Stop()
	}
}
