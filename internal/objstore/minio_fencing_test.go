package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/shale-rocks/shale/internal/miniotest"
)

// Fencing is only as good as the server's conditional writes: MinIO has
// shipped builds that ignored or mis-answered them (see
// shared/notes/object-store.md). These tests check the pinned server
// itself, once through minio-go and once with hand-signed HTTP requests,
// so neither the Store nor the client library can hide a server that
// silently accepts a second create-only put or a stale If-Match.

func TestPinnedMinIORejectsConditionalPutsViaMinioGo(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "fence")
	c := srv.Client()
	ctx := context.Background()
	put := func(key, val string, opts minio.PutObjectOptions) (minio.UploadInfo, error) {
		return c.PutObject(ctx, "fence", key, strings.NewReader(val), int64(len(val)), opts)
	}
	createOnly := minio.PutObjectOptions{}
	createOnly.SetMatchETagExcept("*")

	first, err := put("_shale/epoch/00000000000000000001", "owner-1", createOnly)
	if err != nil {
		t.Fatalf("first If-None-Match: * put: %v", err)
	}
	_, err = put("_shale/epoch/00000000000000000001", "owner-2", createOnly)
	if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusPreconditionFailed {
		t.Fatalf("second If-None-Match: * put of the same key: %v (HTTP %d), want 412", err, code)
	}

	ifMatch := func(etag string) minio.PutObjectOptions {
		var o minio.PutObjectOptions
		o.SetMatchETag(etag)
		return o
	}
	cur, err := put("CURRENT", "MANIFEST-000001", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next, err := put("CURRENT", "MANIFEST-000002", ifMatch(cur.ETag))
	if err != nil {
		t.Fatalf("If-Match with the current ETag: %v", err)
	}
	_, err = put("CURRENT", "MANIFEST-000003", ifMatch(cur.ETag))
	if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusPreconditionFailed {
		t.Fatalf("If-Match with a stale ETag: %v (HTTP %d), want 412", err, code)
	}

	for key, want := range map[string]string{"_shale/epoch/00000000000000000001": first.ETag, "CURRENT": next.ETag} {
		st, err := c.StatObject(ctx, "fence", key, minio.StatObjectOptions{})
		if err != nil || st.ETag != want {
			t.Fatalf("%s after rejected puts: %+v, %v; want ETag %s", key, st, err, want)
		}
	}
}

// rawS3 sends hand-built requests signed with minio-go's SigV4 signer only.
type rawS3 struct {
	t   *testing.T
	srv *miniotest.Server
}

func (r rawS3) do(method, path string, body []byte, header map[string]string) (*http.Response, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.srv.Endpoint+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(body))
	req = signer.SignV4(*req, r.srv.AccessKey, r.srv.SecretKey, "", miniotest.Region)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (r rawS3) expect(resp *http.Response, body []byte, status int, what string) {
	r.t.Helper()
	if resp.StatusCode != status {
		r.t.Fatalf("%s: HTTP %d, want %d\n%s", what, resp.StatusCode, status, body)
	}
}

func TestPinnedMinIORejectsConditionalPutsRawHTTP(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "fence")
	r := rawS3{t, srv}
	const seg = "/fence/db/000012.log/00000000000000000007"

	resp, body := r.do("PUT", seg, []byte("owner-1 data"), map[string]string{"If-None-Match": "*"})
	r.expect(resp, body, 200, "If-None-Match: * on a new key")
	firstETag := resp.Header.Get("ETag")
	resp, body = r.do("PUT", seg, []byte("owner-0 data"), map[string]string{"If-None-Match": "*"})
	r.expect(resp, body, 412, "second If-None-Match: * put of the same key")
	if !bytes.Contains(body, []byte("PreconditionFailed")) {
		t.Errorf("412 body lacks PreconditionFailed: %s", body)
	}
	resp, body = r.do("GET", seg, nil, nil)
	r.expect(resp, body, 200, "get")
	if string(body) != "owner-1 data" || resp.Header.Get("ETag") != firstETag {
		t.Fatalf("after the rejected put the segment holds %q (ETag %s)", body, resp.Header.Get("ETag"))
	}

	const cur = "/fence/db/CURRENT"
	resp, body = r.do("PUT", cur, []byte("MANIFEST-000001\n"), nil)
	r.expect(resp, body, 200, "plain put")
	stale := resp.Header.Get("ETag")
	resp, body = r.do("PUT", cur, []byte("MANIFEST-000002\n"), map[string]string{"If-Match": stale})
	r.expect(resp, body, 200, "If-Match with the current ETag")
	current := resp.Header.Get("ETag")
	resp, body = r.do("PUT", cur, []byte("MANIFEST-000003\n"), map[string]string{"If-Match": stale})
	r.expect(resp, body, 412, "If-Match with a stale ETag")
	resp, body = r.do("GET", cur, nil, nil)
	if string(body) != "MANIFEST-000002\n" || resp.Header.Get("ETag") != current {
		t.Fatalf("after the rejected If-Match CURRENT holds %q", body)
	}
	// If-Match on a missing key must not create it (AWS and MinIO: 404).
	resp, body = r.do("PUT", "/fence/db/missing", []byte("x"), map[string]string{"If-Match": current})
	if resp.StatusCode != 404 && resp.StatusCode != 412 {
		t.Fatalf("If-Match on a missing key: HTTP %d\n%s", resp.StatusCode, body)
	}
	resp, _ = r.do("HEAD", "/fence/db/missing", nil, nil)
	r.expect(resp, nil, 404, "head of the key a failed If-Match put named")
}

// If-None-Match: * on CompleteMultipartUpload (how large SSTs and
// unknown-size puts are written) is enforced too.
func TestPinnedMinIORejectsConditionalMultipartCompletion(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "fence")
	core := minio.Core{Client: srv.Client()}
	ctx := context.Background()
	createOnly := minio.PutObjectOptions{}
	createOnly.SetMatchETagExcept("*")

	upload := func(key, val string) error {
		id, err := core.NewMultipartUpload(ctx, "fence", key, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		part, err := core.PutObjectPart(ctx, "fence", key, id, 1, strings.NewReader(val), int64(len(val)), minio.PutObjectPartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = core.CompleteMultipartUpload(ctx, "fence", key, id, []minio.CompletePart{{PartNumber: 1, ETag: part.ETag}}, createOnly)
		if err != nil {
			core.AbortMultipartUpload(ctx, "fence", key, id)
		}
		return err
	}
	if err := upload("sst/000042.sst", "owner-1"); err != nil {
		t.Fatalf("create-only multipart upload of a new key: %v", err)
	}
	err := upload("sst/000042.sst", "owner-0")
	if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusPreconditionFailed {
		t.Fatalf("create-only multipart completion over an existing key: %v (HTTP %d), want 412", err, code)
	}
	obj, err := srv.Client().GetObject(ctx, "fence", "sst/000042.sst", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if b, _ := io.ReadAll(obj); string(b) != "owner-1" {
		t.Fatalf("after the rejected completion the object holds %q", b)
	}
}
