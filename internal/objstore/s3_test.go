package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// The conformance suite against the pinned MinIO server: one server, one
// bucket per test, and a prefix so the store is rooted below the bucket.
// Parts are S3's smallest, so objects of a few MiB go up in parts.
func TestS3Conformance(t *testing.T) {
	runS3Conformance(t, miniotest.Start(t), "s3://%s/db/root")
}

// runS3Conformance runs the store suite on srv, one bucket per test, the
// store at urlFormat (with the bucket's name), parts of 5 MiB.
func runS3Conformance(t *testing.T, srv *miniotest.Server, urlFormat string) {
	const partSize = 5 << 20
	n := 0
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) objstore.Store {
			n++
			bucket := fmt.Sprintf("suite-%d", n)
			srv.CreateBucket(t, bucket)
			return openS3(t, srv, fmt.Sprintf(urlFormat, bucket), func(c *objstore.S3Config) { c.PartSize = partSize })
		},
		PartSize: partSize,
	})
}

func openS3(t *testing.T, srv *miniotest.Server, rawURL string, edit func(*objstore.S3Config)) *objstore.S3Store {
	t.Helper()
	cfg := srv.S3Config()
	if edit != nil {
		edit(&cfg)
	}
	s, err := objstore.OpenS3(rawURL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func listKeys(t *testing.T, s objstore.Store, prefix string) string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), prefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	return strings.Join(keys, " ")
}

// A store is rooted at its prefix: it sees only its own keys, relative to
// the prefix, and a prefix is a whole path segment ("db" is not "db2").
func TestS3Prefixes(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "shared")
	ctx := context.Background()
	root := openS3(t, srv, "s3://shared", nil)
	db := openS3(t, srv, "s3://shared/tenants/db", nil)
	db2 := openS3(t, srv, "s3://shared/tenants/db2/", nil)
	for _, s := range []*objstore.S3Store{db, db2} {
		if _, err := s.Put(ctx, "CURRENT", strings.NewReader(s.URL()), -1, objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Put(ctx, "wal/1", strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, db, ""); got != "CURRENT wal/1" {
		t.Fatalf("db lists %q", got)
	}
	if got := listKeys(t, db2, ""); got != "CURRENT" {
		t.Fatalf("db2 lists %q", got)
	}
	if got := listKeys(t, root, "tenants/"); got != "tenants/db/CURRENT tenants/db/wal/1 tenants/db2/CURRENT" {
		t.Fatalf("bucket root lists %q", got)
	}
	r, info, err := db2.Get(ctx, "CURRENT", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if b, _ := io.ReadAll(r); string(b) != "s3://shared/tenants/db2" || info.Key != "CURRENT" {
		t.Fatalf("db2 CURRENT = %q, %+v", b, info)
	}
	if err := db.Delete(ctx, "CURRENT"); err != nil {
		t.Fatal(err)
	}
	if _, err := db2.Stat(ctx, "CURRENT"); err != nil {
		t.Fatalf("deleting db/CURRENT touched db2: %v", err)
	}
}

// Misconfiguration gets a clear, final error naming what to fix.
func TestS3Misconfigured(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "exists")
	ctx := context.Background()

	nb := openS3(t, srv, "s3://no-such-bucket/db", nil)
	want := "bucket no-such-bucket does not exist at " + srv.Endpoint + "; create it first"
	_, putErr := nb.Put(ctx, "k", strings.NewReader("v"), 1, objstore.PutOptions{IfNoneMatch: true})
	_, statErr := nb.Stat(ctx, "k")
	listErr := nb.List(ctx, "", func(objstore.ObjectInfo) error { return nil })
	delManyErr := nb.DeleteMany(ctx, []string{"k", "l"})
	for name, err := range map[string]error{"put": putErr, "stat": statErr, "list": listErr, "delete many": delManyErr, "check": nb.CheckBucket(ctx)} {
		if !errors.Is(err, objstore.ErrBucketNotFound) || errors.Is(err, objstore.ErrNotFound) ||
			!strings.Contains(fmt.Sprint(err), want) || objstore.IsRetryable(err) {
			t.Errorf("%s on a missing bucket: %v", name, err)
		}
	}
	if err := openS3(t, srv, "s3://exists/db", nil).CheckBucket(ctx); err != nil {
		t.Errorf("CheckBucket on an existing bucket: %v", err)
	}

	for name, edit := range map[string]func(*objstore.S3Config){
		"wrong secret":     func(c *objstore.S3Config) { c.SecretAccessKey = "wrong" },
		"unknown key":      func(c *objstore.S3Config) { c.AccessKeyID = "nobody" },
		"https to http":    func(c *objstore.S3Config) { c.Endpoint = strings.Replace(c.Endpoint, "http:", "https:", 1) },
		"wrong key, check": func(c *objstore.S3Config) { c.AccessKeyID = "nobody" },
	} {
		s := openS3(t, srv, "s3://exists/db", edit)
		var err error
		if strings.HasSuffix(name, "check") {
			err = s.CheckBucket(ctx)
		} else {
			_, err = s.Put(ctx, "k", strings.NewReader("v"), 1, objstore.PutOptions{})
		}
		if err == nil || objstore.IsRetryable(err) {
			t.Errorf("%s: %v (retryable %v), want a final error", name, err, objstore.IsRetryable(err))
			continue
		}
		if !strings.HasPrefix(name, "https") && !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("%s: %v does not say which variables to check", name, err)
		}
	}

	// Nothing listens: a network error, retryable, naming the endpoint.
	s := openS3(t, srv, "s3://exists/db", func(c *objstore.S3Config) {
		c.Endpoint = "http://" + closedAddr(t)
		c.MaxAttempts = 1
	})
	_, err := s.Stat(ctx, "k")
	if err == nil || !objstore.IsRetryable(err) || errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("stat with nothing listening: %v (retryable %v)", err, objstore.IsRetryable(err))
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// While the server is down every operation fails quickly with a retryable
// error; after a restart the data is there and the store works again.
func TestS3Outage(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	s := openS3(t, srv, "s3://dbs/x", nil)
	ctx := context.Background()
	first, err := s.Put(ctx, "CURRENT", strings.NewReader("MANIFEST-1"), -1, objstore.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	start := time.Now()
	_, putErr := s.Put(ctx, "CURRENT", strings.NewReader("MANIFEST-2"), 10, objstore.PutOptions{IfMatch: first.ETag})
	_, createErr := s.Put(ctx, "wal/1", strings.NewReader("x"), 1, objstore.PutOptions{IfNoneMatch: true})
	_, plainErr := s.Put(ctx, "sst/1", strings.NewReader("x"), 1, objstore.PutOptions{})
	_, statErr := s.Stat(ctx, "CURRENT")
	_, _, getErr := s.Get(ctx, "CURRENT", 0, -1)
	listErr := s.List(ctx, "", func(objstore.ObjectInfo) error { return nil })
	delErr := s.Delete(ctx, "CURRENT")
	delManyErr := s.DeleteMany(ctx, []string{"CURRENT", "wal/1"})
	_, copyErr := s.Copy(ctx, "CURRENT", "copy", objstore.PutOptions{})
	for name, err := range map[string]error{"if-match put": putErr, "create-only put": createErr, "put": plainErr,
		"stat": statErr, "get": getErr, "list": listErr, "delete": delErr, "delete many": delManyErr, "copy": copyErr} {
		if err == nil || !objstore.IsRetryable(err) || errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Errorf("%s during an outage: %v (retryable %v)", name, err, objstore.IsRetryable(err))
		}
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("failing 9 operations took %v", d)
	}
	t.Logf("9 operations failed in %v; e.g. %v", time.Since(start).Round(time.Millisecond), statErr)

	// A canceled context is final even during an outage.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Stat(cctx, "CURRENT"); err == nil || objstore.IsRetryable(err) {
		t.Errorf("canceled stat during an outage: %v", err)
	}

	srv.Restart(t)
	if _, err := s.Put(ctx, "CURRENT", strings.NewReader("MANIFEST-2"), 10, objstore.PutOptions{IfMatch: first.ETag}); err != nil {
		t.Fatalf("If-Match put after the restart: %v", err)
	}
	if got := listKeys(t, s, ""); got != "CURRENT" {
		t.Fatalf("after the outage the store lists %q", got)
	}
}

// A read cut off by the server dying mid-transfer is a retryable error.
func TestS3ReadCutOff(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	s := openS3(t, srv, "s3://dbs", nil)
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 32<<20)
	if _, err := s.Put(ctx, "big", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Get(ctx, "big", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, err = io.Copy(io.Discard, r)
	if err == nil || !objstore.IsRetryable(err) {
		t.Fatalf("read cut off: %v (retryable %v)", err, objstore.IsRetryable(err))
	}
}

// Objects larger than the part size go up in parts; conditions hold on
// the completion of a multipart upload as on a single put.
func TestS3Multipart(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	s := openS3(t, srv, "s3://dbs/root", func(c *objstore.S3Config) { c.PartSize = 5 << 20 })
	ctx := context.Background()
	data := make([]byte, 11<<20+123) // three parts
	for i := range data {
		data[i] = byte(i * 7)
	}
	info, err := s.Put(ctx, "sst/1.sst", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{IfNoneMatch: true, StorageClass: "REDUCED_REDUNDANCY"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.ETag, "-3") || info.Size != int64(len(data)) {
		t.Fatalf("multipart put info = %+v (want a 3-part ETag)", info)
	}
	if st, err := s.Stat(ctx, "sst/1.sst"); err != nil || st.ETag != info.ETag || st.StorageClass != "REDUCED_REDUNDANCY" {
		t.Fatalf("stat = %+v, %v", st, err)
	}
	_, err = s.Put(ctx, "sst/1.sst", bytes.NewReader(data[:6<<20]), 6<<20, objstore.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create-only multipart put: %v", err)
	}
	_, err = s.Put(ctx, "sst/1.sst", bytes.NewReader(data[:6<<20]), -1, objstore.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("second create-only put of unknown size: %v", err)
	}
	_, err = s.Put(ctx, "sst/1.sst", bytes.NewReader(data[:6<<20]), 6<<20, objstore.PutOptions{IfMatch: "0123456789abcdef0123456789abcdef-2"})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("stale If-Match multipart put: %v", err)
	}
	// Failed uploads changed nothing.
	r, got, err := s.Get(ctx, "sst/1.sst", 5<<20-10, 20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(b, data[5<<20-10:5<<20+10]) || got.ETag != info.ETag || got.Size != int64(len(data)) {
		t.Fatalf("read across a part boundary: %d bytes, %+v", len(b), got)
	}
	next, err := s.Put(ctx, "sst/1.sst", bytes.NewReader(data[:6<<20]), 6<<20, objstore.PutOptions{IfMatch: info.ETag})
	if err != nil || next.Size != 6<<20 {
		t.Fatalf("If-Match multipart put with the current ETag: %+v, %v", next, err)
	}
	// Server-side copy of a multipart object.
	c, err := s.Copy(ctx, "sst/1.sst", "sst/2.sst", objstore.PutOptions{})
	if err != nil || c.Size != 6<<20 {
		t.Fatalf("copy: %+v, %v", c, err)
	}
	// A conditional put of unknown size that fits one part is one plain
	// conditional PUT (an MD5 ETag, no parts).
	small, err := s.Put(ctx, "sst/3.sst", bytes.NewReader(data[:1<<20]), -1, objstore.PutOptions{IfNoneMatch: true})
	if err != nil || strings.Contains(small.ETag, "-") || small.Size != 1<<20 {
		t.Fatalf("small create-only put of unknown size: %+v, %v", small, err)
	}
	// The failed conditional uploads were aborted: no parts are kept.
	for u := range srv.Client().ListIncompleteUploads(ctx, "dbs", "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		t.Errorf("incomplete upload left behind: %s (%s)", u.Key, u.UploadID)
	}
}

// MinIO (the pinned server) hides keys below a key that is also an object
// from List, though Stat finds them; the Store contract forbids such keys
// (see the package comment). If this test fails, MinIO changed: revisit
// that rule.
func TestMinIOKeyDirClash(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	s := openS3(t, srv, "s3://dbs", nil)
	ctx := context.Background()
	for _, k := range []string{"a/b", "a"} {
		if _, err := s.Put(ctx, k, strings.NewReader(k), -1, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Stat(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, s, ""); got != "a" {
		t.Fatalf("list = %q; MinIO no longer hides a/b behind a", got)
	}
}

// requestCounter counts the requests a store sends, by method, with
// "?delete" marking multi-object deletes (POST /bucket?delete).
type requestCounter struct {
	rt http.RoundTripper
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Method
	if r.URL.Query().Has("delete") {
		op += " ?delete"
	}
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// DeleteMany sends one DeleteObjects request per 1000 keys, never a DELETE
// per key; a request failing as a whole ends the call.
func TestS3DeleteManyBatches(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "dbs")
	rc := &requestCounter{rt: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int{}}
	withCounter := func(c *objstore.S3Config) { c.Transport = rc }
	s := openS3(t, srv, "s3://dbs/db", withCounter)
	ctx := context.Background()
	start := time.Now()

	var ks []string
	for i := 0; i < 2500; i++ {
		ks = append(ks, fmt.Sprintf("000042.log/%08d", i))
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if _, err := s.Put(ctx, k, strings.NewReader(k), int64(len(k)), objstore.PutOptions{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for _, k := range ks[:1800] { // the last 700 are missing
		work <- k
	}
	close(work)
	wg.Wait()
	if _, err := s.Put(ctx, "CURRENT", strings.NewReader("x"), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc.take()
	if err := s.DeleteMany(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if got := rc.take(); got["POST ?delete"] != 3 || len(got) != 1 {
		t.Fatalf("DeleteMany of 2500 keys sent %v, want 3 multi-object deletes", got)
	}
	if got := listKeys(t, s, ""); got != "CURRENT" {
		t.Fatalf("after DeleteMany the store lists %.200q", got)
	}
	rc.take()
	if err := s.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany of no keys: %v", err)
	}
	if got := rc.take(); len(got) != 0 {
		t.Fatalf("DeleteMany of no keys sent %v", got)
	}
	t.Logf("puts and DeleteMany took %v", time.Since(start).Round(time.Millisecond))

	nb := openS3(t, srv, "s3://no-such-bucket/db", withCounter)
	start = time.Now()
	err := nb.DeleteMany(ctx, ks)
	if !errors.Is(err, objstore.ErrBucketNotFound) || objstore.IsRetryable(err) ||
		!strings.Contains(err.Error(), "2500 of 2500 keys not deleted") || !strings.Contains(err.Error(), "1500 not attempted") {
		t.Fatalf("DeleteMany on a missing bucket: %v (retryable %v)", err, objstore.IsRetryable(err))
	}
	if got := rc.take(); got["POST ?delete"] != 1 || len(got) != 1 {
		t.Fatalf("DeleteMany on a missing bucket sent %v, want one request", got)
	}
	t.Logf("missing bucket, in %v: %.300s", time.Since(start).Round(time.Millisecond), err)
}
