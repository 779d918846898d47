package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
)

// refusalCounter counts the answers that refused a request (HTTP 403).
type refusalCounter struct {
	rt http.RoundTripper
	mu sync.Mutex
	n  int
}

func (c *refusalCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *refusalCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// A key rotated while a store is open, with the credentials in files (a
// mounted Secret): the same store keeps working with the new key, without
// being reopened, whether the files were looked at before the next
// request or only after the store refused the old key.
func TestS3KeyRotationFromFiles(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "rot")
	dir := filepath.Join(t.TempDir(), "creds")
	srv.WriteCredentials(t, dir)
	rc := &refusalCounter{rt: http.DefaultTransport.(*http.Transport).Clone()}
	open := func(t *testing.T, dir string, interval time.Duration) *objstore.S3Store {
		t.Helper()
		cfg := srv.S3Config()
		cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
		cfg.CredentialsDir = dir
		cfg.CredentialsCheckInterval = interval
		cfg.PartSize = 5 << 20
		cfg.Transport = rc
		s, err := objstore.OpenS3("s3://rot/db", cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rotate := func(t *testing.T) {
		t.Helper()
		access, secret := miniotest.NewKeys()
		srv.RestartWithKeys(t, access, secret) // the old key is refused from now on
		srv.WriteCredentials(t, dir)           // what the kubelet does with the updated Secret
	}
	ctx := context.Background()
	put := func(s *objstore.S3Store, key, value string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
		return s.Put(ctx, key, strings.NewReader(value), int64(len(value)), opts)
	}
	read := func(s *objstore.S3Store, key string) (string, error) {
		r, _, err := s.Get(ctx, key, 0, -1)
		if err != nil {
			return "", err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		return string(b), err
	}

	t.Run("refused, read again, repeated", func(t *testing.T) {
		// The files are looked at only after a refusal (an hour apart
		// otherwise): each operation below is the first after a
		// rotation, is refused once with the old key, and succeeds with
		// the new one.
		s := open(t, dir, time.Hour)
		seed, err := put(s, "seed", "v1", objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("x"), 6<<20) // above the part size: a multipart upload
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"create-only put", func() error {
				// Refused first: it wrote nothing, so its repetition
				// creates the object instead of meeting itself (412).
				if _, err := put(s, "created", "c", objstore.PutOptions{IfNoneMatch: true}); err != nil {
					return err
				}
				if got, err := read(s, "created"); err != nil || got != "c" {
					return errors.Join(err, errors.New("created holds "+got))
				}
				return nil
			}},
			{"conditional replace", func() error {
				info, err := put(s, "seed", "v2", objstore.PutOptions{IfMatch: seed.ETag})
				seed = info
				return err
			}},
			{"create-only multipart put", func() error {
				_, err := s.Put(ctx, "big", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{IfNoneMatch: true})
				return err
			}},
			{"get", func() error {
				got, err := read(s, "seed")
				if err == nil && got != "v2" {
					err = errors.New("seed holds " + got)
				}
				return err
			}},
			{"stat", func() error { _, err := s.Stat(ctx, "seed"); return err }},
			{"list", func() error {
				n := 0
				err := s.List(ctx, "", func(objstore.ObjectInfo) error { n++; return nil })
				if err == nil && n != 3 {
					err = errors.New("listed the wrong number of objects")
				}
				return err
			}},
			{"list dir", func() error { return s.ListDir(ctx, "", func(objstore.ObjectInfo) error { return nil }) }},
			{"copy", func() error { _, err := s.Copy(ctx, "seed", "copy", objstore.PutOptions{}); return err }},
			{"delete", func() error { return s.Delete(ctx, "copy") }},
			{"delete many", func() error { return s.DeleteMany(ctx, []string{"created", "big"}) }},
			{"check bucket", func() error { return s.CheckBucket(ctx) }},
		} {
			rotate(t)
			rc.take()
			if err := op.do(); err != nil {
				t.Errorf("%s after a rotation: %v", op.name, err)
			}
			if n := rc.take(); n != 1 {
				t.Errorf("%s after a rotation: %d refusals, want 1 (the old key's)", op.name, n)
			}
		}
	})

	t.Run("files looked at before the next request", func(t *testing.T) {
		s := open(t, dir, time.Nanosecond) // looked at before every request
		if err := s.CheckBucket(ctx); err != nil {
			t.Fatal(err)
		}
		rotate(t)
		rc.take()
		if _, err := put(s, "after", "a", objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatalf("put after a rotation: %v", err)
		}
		if n := rc.take(); n != 0 {
			t.Errorf("%d refusals: the new files were not read before the request", n)
		}
	})

	t.Run("wrong keys stay refused", func(t *testing.T) {
		wrong := filepath.Join(t.TempDir(), "wrong")
		if err := os.Mkdir(wrong, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{objstore.CredentialsFileAccessKeyID: srv.AccessKey, objstore.CredentialsFileSecretAccessKey: "not-the-secret"} {
			if err := os.WriteFile(filepath.Join(wrong, name), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		s := open(t, wrong, time.Hour)
		rc.take()
		_, err := put(s, "k", "v", objstore.PutOptions{IfNoneMatch: true})
		if err == nil || objstore.IsRetryable(err) || !strings.Contains(err.Error(), "SignatureDoesNotMatch") || !strings.Contains(err.Error(), "check the credentials from the files in "+wrong) {
			t.Fatalf("put with a wrong secret: %v (retryable %v), want a final refusal naming the files", err, objstore.IsRetryable(err))
		}
		if n := rc.take(); n != 1 {
			t.Errorf("put with a wrong secret: %d refusals, want 1 (the same keys read again are not tried again)", n)
		}
	})

	t.Run("no keys in the directory", func(t *testing.T) {
		s := open(t, t.TempDir(), time.Hour)
		_, err := s.Stat(ctx, "k")
		if err == nil || objstore.IsRetryable(err) || !strings.Contains(err.Error(), "no S3 credentials") || !strings.Contains(err.Error(), objstore.CredentialsFileAccessKeyID) {
			t.Fatalf("stat with an empty credentials directory: %v", err)
		}
	})
}
