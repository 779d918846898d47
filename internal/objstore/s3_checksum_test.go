package objstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
)

const checksumPartSize = 5 << 20

// The conformance suite over TLS, with checksums (the default): conditional
// puts, single and in parts, still fail with ErrPreconditionFailed when a
// CRC32C trailer rides along (the fencing depends on it).
func TestS3ConformanceTLS(t *testing.T) {
	runS3Conformance(t, miniotest.StartTLS(t), "s3://%s/db")
}

func crc32c(b []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// compositeCRC32C is S3's checksum of an object put in parts of partSize:
// the CRC32C of the parts' CRC32Cs, "-" the number of parts.
func compositeCRC32C(data []byte, partSize int) string {
	var sums []byte
	n := 0
	for off := 0; off < len(data); off += partSize {
		sums = append(sums, crc32c(data[off:min(off+partSize, len(data))])...)
		n++
	}
	return fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(crc32c(sums)), n)
}

// body is data to put: a bytes.Reader (the CRC32C goes up as a header),
// or for a key ending in -stream a plain reader (a trailer).
func body(key string, data []byte) io.Reader {
	if strings.HasSuffix(key, "-stream") {
		return struct{ io.Reader }{bytes.NewReader(data)}
	}
	return bytes.NewReader(data)
}

// Over TLS, where the payload is not signed, every upload carries a CRC32C
// that the store checks and keeps: a single PUT (its CRC32C), and objects
// put in parts, conditional (Shale's own multipart upload) or not
// (minio-go's), a composite CRC32C of their parts. With SHALE_S3_CHECKSUM=none
// nothing is sent and the store reports none.
func TestS3ChecksumsTLS(t *testing.T) {
	srv := miniotest.StartTLS(t)
	srv.CreateBucket(t, "sums")
	ctx := context.Background()
	rnd := rand.New(rand.NewSource(29))
	small := make([]byte, 100<<10)
	big := make([]byte, 11<<20) // three parts of 5 MiB
	rnd.Read(small)
	rnd.Read(big)
	for _, tc := range []struct {
		checksum string
		want     bool
	}{
		{"", true}, // the default
		{objstore.ChecksumCRC32C, true},
		{objstore.ChecksumNone, false},
	} {
		t.Run("checksum="+tc.checksum, func(t *testing.T) {
			prefix := "c-" + tc.checksum
			s := openS3(t, srv, "s3://sums/"+prefix, func(c *objstore.S3Config) {
				c.PartSize = checksumPartSize
				c.Checksum = tc.checksum
			})
			for _, p := range []struct {
				key  string
				data []byte
				opts objstore.PutOptions
				want string
			}{
				{"single", small, objstore.PutOptions{}, base64.StdEncoding.EncodeToString(crc32c(small))},
				{"single-stream", small, objstore.PutOptions{}, base64.StdEncoding.EncodeToString(crc32c(small))},
				{"single-conditional", small, objstore.PutOptions{IfNoneMatch: true}, base64.StdEncoding.EncodeToString(crc32c(small))},
				{"parts", big, objstore.PutOptions{}, compositeCRC32C(big, checksumPartSize)},
				{"parts-conditional", big, objstore.PutOptions{IfNoneMatch: true}, compositeCRC32C(big, checksumPartSize)},
			} {
				info, err := s.Put(ctx, p.key, body(p.key, p.data), int64(len(p.data)), p.opts)
				if err != nil {
					t.Fatalf("put %s: %v", p.key, err)
				}
				// A single PUT's ETag stays the MD5 of its bytes, which
				// clones compare (docs/checkpoints.md).
				if sum := md5.Sum(p.data); len(p.data) < checksumPartSize && info.ETag != hex.EncodeToString(sum[:]) {
					t.Errorf("%s: ETag %s, want the MD5 %x", p.key, info.ETag, sum)
				}
				oi, err := srv.Client().StatObject(ctx, "sums", prefix+"/"+p.key, minio.StatObjectOptions{Checksum: true})
				if err != nil {
					t.Fatal(err)
				}
				want := p.want
				if !tc.want {
					want = ""
				}
				if oi.ChecksumCRC32C != want {
					t.Errorf("%s: the store reports CRC32C %q (%s), want %q", p.key, oi.ChecksumCRC32C, oi.ChecksumMode, want)
				}
			}
		})
	}
}

// corrupter flips one byte of the body of every PUT while on: a bit
// flipped between the client and the store.
type corrupter struct {
	rt http.RoundTripper
	on atomic.Bool
}

func (c *corrupter) RoundTrip(r *http.Request) (*http.Response, error) {
	if !c.on.Load() || r.Method != http.MethodPut || r.Body == nil {
		return c.rt.RoundTrip(r)
	}
	// A shallow copy shares the trailer minio-go fills in at the end of
	// the body.
	bad := *r
	bad.Body = &flipper{rc: r.Body, at: 1000}
	return c.rt.RoundTrip(&bad)
}

type flipper struct {
	rc  io.ReadCloser
	off int64
	at  int64 // far enough in to be data, not an aws-chunked chunk header
}

func (f *flipper) Read(p []byte) (int, error) {
	n, err := f.rc.Read(p)
	if i := f.at - f.off; i >= 0 && i < int64(n) {
		p[i] ^= 0x10
	}
	f.off += int64(n)
	return n, err
}

func (f *flipper) Close() error { return f.rc.Close() }

// A put whose bytes change on the way is refused, never stored: over TLS
// thanks to the CRC32C (or, with checksums off, an MD5), over plain HTTP
// thanks to the payload's signature.
func TestS3CorruptedPutRefused(t *testing.T) {
	rnd := rand.New(rand.NewSource(30))
	small := make([]byte, 100<<10)
	big := make([]byte, 11<<20)
	rnd.Read(small)
	rnd.Read(big)
	for _, tls := range []bool{true, false} {
		srv := miniotest.Start
		scheme := "http"
		if tls {
			srv, scheme = miniotest.StartTLS, "https"
		}
		t.Run(scheme, func(t *testing.T) {
			srv := srv(t)
			srv.CreateBucket(t, "corrupt")
			ctx := context.Background()
			for _, checksum := range []string{objstore.ChecksumCRC32C, objstore.ChecksumNone} {
				c := &corrupter{}
				s := openS3(t, srv, "s3://corrupt/"+checksum, func(cfg *objstore.S3Config) {
					cfg.PartSize = checksumPartSize
					cfg.Checksum = checksum
					cfg.MaxAttempts = 1
					c.rt = cfg.Transport
					if c.rt == nil {
						c.rt = http.DefaultTransport
					}
					cfg.Transport = c
				})
				for _, p := range []struct {
					key  string
					data []byte
					opts objstore.PutOptions
				}{
					{"single", small, objstore.PutOptions{}},
					{"single-stream", small, objstore.PutOptions{}},
					{"single-conditional", small, objstore.PutOptions{IfNoneMatch: true}},
					{"parts", big, objstore.PutOptions{}},
					{"parts-conditional", big, objstore.PutOptions{IfNoneMatch: true}},
				} {
					c.on.Store(true)
					_, err := s.Put(ctx, p.key, body(p.key, p.data), int64(len(p.data)), p.opts)
					c.on.Store(false)
					if err == nil {
						t.Errorf("checksum=%s: corrupted put of %s succeeded", checksum, p.key)
					} else {
						t.Logf("checksum=%s %s: %v", checksum, p.key, err)
					}
					if _, err := s.Stat(ctx, p.key); !errors.Is(err, objstore.ErrNotFound) {
						t.Errorf("checksum=%s: after a corrupted put of %s, stat: %v (want not found)", checksum, p.key, err)
					}
				}
			}
		})
	}
}

// A store that refuses checksums (some S3-compatible services answer 501
// NotImplemented to a checksum trailer or header; here a proxy in front of
// MinIO does) fails the put with an error that names SHALE_S3_CHECKSUM=none,
// and with it the puts go through.
func TestS3ChecksumRefusedNamesTheSetting(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "old")
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	minioProxy := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Trailer") != "" || r.Header.Get("X-Amz-Checksum-Crc32c") != "" ||
			strings.Contains(r.Header.Get("X-Amz-Content-Sha256"), "TRAILER") {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotImplemented)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>`)
			return
		}
		minioProxy.ServeHTTP(w, r) // keeps the Host header the request was signed for
	}))
	t.Cleanup(proxy.Close)
	ctx := context.Background()
	data := make([]byte, 6<<20) // in two parts
	for _, checksum := range []string{"", objstore.ChecksumNone} {
		s := openS3(t, srv, "s3://old/"+checksum, func(c *objstore.S3Config) {
			c.Endpoint = proxy.URL
			c.PartSize = checksumPartSize
			c.Checksum = checksum
			c.MaxAttempts = 1
		})
		for _, p := range []struct {
			key  string
			data []byte
			opts objstore.PutOptions
		}{
			{"single", data[:1000], objstore.PutOptions{}},
			{"parts-conditional", data, objstore.PutOptions{IfNoneMatch: true}},
		} {
			_, err := s.Put(ctx, p.key, bytes.NewReader(p.data), int64(len(p.data)), p.opts)
			switch {
			case checksum == objstore.ChecksumNone && err != nil:
				t.Errorf("checksum=none: put %s: %v", p.key, err)
			case checksum != objstore.ChecksumNone && (err == nil || !strings.Contains(err.Error(), "SHALE_S3_CHECKSUM=none")):
				t.Errorf("put %s to a store refusing checksums: %v (want an error naming SHALE_S3_CHECKSUM=none)", p.key, err)
			case err != nil:
				t.Logf("put %s: %v", p.key, err)
			}
		}
	}
}
