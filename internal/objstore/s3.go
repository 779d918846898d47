package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// ErrBucketNotFound: the store's bucket does not exist. Not ErrNotFound: a
// missing bucket is a configuration error, never an empty database.
var ErrBucketNotFound = errors.New("bucket does not exist")

// S3Store keeps objects under a prefix of an S3 bucket, through minio-go,
// so any S3-compatible service works. Conditional puts send If-None-Match: *
// and If-Match: "etag", which S3 (since 2024) and MinIO enforce with 412;
// above the part size they go up as a multipart upload whose completion
// carries the conditions (see putInParts).
//
// Differences from the file store that the Store contract allows:
//   - ETags are content hashes: rewriting identical bytes gives the same
//     ETag again (see the package comment);
//   - Put's ModTime is the client's clock when the put completed (S3 does
//     not return the server's); Stat, Get and List report the server's;
//   - Copy is server-side when unconditional; a conditional copy streams
//     the source through the client into a conditional put, because S3 has
//     no destination preconditions on CopyObject.
type S3Store struct {
	client   *minio.Client // idempotent requests: retried on transient failures
	once     *minio.Client // conditional puts: one attempt (see IsRetryable)
	bucket   string
	prefix   string // "" or ending in "/"
	url      string
	endpoint string
	partSize uint64
	// secure: the endpoint is https, where minio-go sends payloads
	// unsigned (UNSIGNED-PAYLOAD); over http it signs them chunk by chunk.
	secure bool
	// checksums: uploads carry a CRC32C (S3Config.Checksum).
	checksums bool
	// legacy: uploads as before checksums (issue 29): nothing with a
	// PutObject, an MD5 with every part. Benchmarks' baseline only
	// (export_test.go).
	legacy bool

	// creds is shared by both clients; chain is its provider.
	creds *credentials.Credentials
	chain *credChain
	// httpClient fetches credentials that need a request (STS, instance
	// metadata) when the store re-reads them after a refusal.
	httpClient *http.Client
}

var _ Store = (*S3Store)(nil)

// OpenS3 returns the store an s3://BUCKET/PREFIX URL names on the service
// cfg describes. It makes no request; CheckBucket verifies the bucket.
func OpenS3(rawURL string, cfg S3Config) (*S3Store, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "s3" {
		return nil, fmt.Errorf("store URL %q: not an s3:// URL", rawURL)
	}
	ep, err := cfg.check()
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = DefaultRegion
	}
	secure := ep.Scheme == "https"
	transport := cfg.Transport
	if transport == nil {
		if transport, err = minio.DefaultTransport(secure); err != nil {
			return nil, err
		}
	}
	lookup := minio.BucketLookupPath
	if s3utils.IsAmazonEndpoint(*ep) {
		lookup = minio.BucketLookupAuto
	}
	attempts := cfg.MaxAttempts
	if attempts == 0 {
		attempts = 3
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	chain := newCredChain(ep.Scheme+"://"+ep.Host, cfg.providers(ep, region), logger)
	creds := credentials.New(chain)
	newClient := func(attempts int) (*minio.Client, error) {
		return minio.New(ep.Host, &minio.Options{
			Creds:        creds,
			Secure:       secure,
			Transport:    transport,
			Region:       region,
			BucketLookup: lookup,
			MaxRetries:   attempts,
			// minio-go's CRC32C trailers (STREAMING-UNSIGNED-PAYLOAD-
			// TRAILER over TLS): its own multipart uploads (unconditional
			// puts above the part size) send their parts' checksums so.
			TrailingHeaders: cfg.checksums(),
		})
	}
	s := &S3Store{
		bucket:    u.Host,
		url:       u.String(),
		endpoint:  ep.Scheme + "://" + ep.Host,
		partSize:  cfg.PartSize,
		secure:    secure,
		checksums: cfg.checksums(),

		creds:      creds,
		chain:      chain,
		httpClient: &http.Client{Transport: transport},
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		s.prefix = p + "/"
	}
	if s.client, err = newClient(attempts); err != nil {
		return nil, fmt.Errorf("s3 store %s at %s: %w", s.url, s.endpoint, err)
	}
	if s.once, err = newClient(1); err != nil {
		return nil, fmt.Errorf("s3 store %s at %s: %w", s.url, s.endpoint, err)
	}
	return s, nil
}

// URL implements Store.
func (s *S3Store) URL() string { return s.url }

// Bucket and Prefix locate the store: keys are stored as Prefix()+key.
func (s *S3Store) Bucket() string { return s.bucket }

// Prefix is "" or ends in "/".
func (s *S3Store) Prefix() string { return s.prefix }

// Endpoint is the service URL the store talks to.
func (s *S3Store) Endpoint() string { return s.endpoint }

// CheckBucket verifies that the bucket exists and the credentials may use
// it; run it at startup for an early, clear error.
func (s *S3Store) CheckBucket(ctx context.Context) error {
	var ok bool
	err := s.withCreds(ctx, true, func() (err error) {
		ok, err = s.client.BucketExists(ctx, s.bucket)
		return err
	})
	if err != nil {
		return s.fail(ctx, "check bucket", "", err)
	}
	if !ok {
		return s.bucketMissing("check bucket", "")
	}
	return nil
}

func (s *S3Store) object(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

// Put implements Store.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	name, err := s.object(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	if size < 0 {
		size = -1
	}
	conditional := opts.IfNoneMatch || opts.IfMatch != ""
	if conditional && (size < 0 || size > s.partThreshold()) {
		// minio-go's multipart uploads (v7.4.1) send the conditions only
		// when they start, not on CompleteMultipartUpload, where S3
		// checks them: an upload in flight would overwrite an object
		// created meanwhile.
		return s.putInParts(ctx, key, name, r, size, opts)
	}
	po := s.putObjectOptions(opts, r, size)
	c := s.client
	if conditional {
		setConditions(&po, opts)
		c = s.once
	}
	// Repeated after a refusal of its credentials (only if the body can be
	// sent again), conditional or not: S3 authenticates a request before
	// it evaluates If-None-Match or If-Match, so the refused attempt never
	// reached the object and its repetition cannot meet its own write
	// (authRetry). Other failures of a conditional put are never repeated
	// (IsRetryable).
	rewind := rewinder(r)
	var up minio.UploadInfo
	sent := false
	err = s.withCreds(ctx, rewind != nil, func() (err error) {
		if sent {
			if err := rewind(); err != nil {
				return err
			}
		}
		sent = true
		up, err = c.PutObject(ctx, s.bucket, name, r, size, po)
		return err
	})
	if err != nil {
		return ObjectInfo{}, s.putFail(ctx, key, opts, err)
	}
	return s.putInfo(key, up, opts), nil
}

// rewinder returns a function that puts r back where it is now, or nil
// if r cannot seek.
func rewinder(r io.Reader) func() error {
	sk, ok := r.(io.Seeker)
	if !ok {
		return nil
	}
	pos, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil
	}
	return func() error {
		_, err := sk.Seek(pos, io.SeekStart)
		return err
	}
}

// withCreds runs op (one request, or requests that may all be repeated)
// and, if repeatable, once more when the store refused its credentials
// and reading them again gave other keys (authRetry). So a rotated Secret
// costs no failed request between the kubelet updating the files and the
// next check of them.
func (s *S3Store) withCreds(ctx context.Context, repeatable bool, op func() error) error {
	for attempt := 0; ; attempt++ {
		gen := s.chain.generation()
		err := op()
		if err == nil || !repeatable || !s.renewCreds(ctx, attempt, err, gen) {
			return err
		}
	}
}

// renewCreds reads the credentials again after a request made when the
// chain's generation was gen failed with err, and reports whether to
// repeat the request (authRetry).
func (s *S3Store) renewCreds(ctx context.Context, attempt int, err error, gen uint64) bool {
	code := errorCode(err)
	if attempt > 0 || !refusedCredential(code) {
		return false
	}
	if s.chain.generation() == gen {
		// Nobody read them since this request was made: read them now.
		s.creds.Expire()
		if _, err := s.creds.GetWithContext(&credentials.CredContext{Client: s.httpClient, Endpoint: s.endpoint, Context: ctx}); err != nil {
			return false
		}
	}
	return authRetry(attempt, code, gen, s.chain.generation())
}

// maxHeaderChecksum bounds the puts whose CRC32C is computed before they
// are sent, by reading their body twice.
const maxHeaderChecksum = 1 << 20

// putObjectOptions are minio-go's options for putting size bytes of r
// through PutObject.
func (s *S3Store) putObjectOptions(opts PutOptions, r io.Reader, size int64) minio.PutObjectOptions {
	po := minio.PutObjectOptions{StorageClass: opts.StorageClass, PartSize: s.partSize}
	if s.legacy {
		return po
	}
	if s.checksums {
		if crc, ok := crcAhead(r, size); ok {
			// A small body that can be read twice: its CRC32C goes up
			// as a header (minio-go then adds none) and the body as it
			// is. A trailer needs an aws-chunked body with a 64 KiB
			// buffer per request: 1.38-1.55x the client's CPU of an 8 KiB
			// put over TLS (docs/performance.md).
			po.UserMetadata = map[string]string{minio.ChecksumCRC32C.Key(): crc}
			return po
		}
		// Named, not left to TrailingHeaders: minio-go (v7.4.1) then
		// declares the algorithm on a single PUT but sends no checksum.
		// Over plain HTTP the CRC32C rides in the signed payload's
		// trailer, so every object has one whatever the transport.
		po.Checksum = minio.ChecksumCRC32C
	} else if s.secure {
		// Nothing else proves the bytes of an unsigned payload (as for
		// parts: partChecksOf).
		po.SendContentMd5 = true
	}
	return po
}

// setConditions sends the conditions of opts: If-None-Match: * and
// If-Match: "etag".
func setConditions(po *minio.PutObjectOptions, opts PutOptions) {
	if opts.IfNoneMatch {
		po.SetMatchETagExcept("*")
	}
	if opts.IfMatch != "" {
		po.SetMatchETag(opts.IfMatch)
	}
}

func (s *S3Store) putFail(ctx context.Context, key string, opts PutOptions, err error) *s3Error {
	e := s.fail(ctx, "put", key, err)
	if resp := minio.ToErrorResponse(err); s.checksums && refusesChecksums(resp.Code, resp.Message) {
		e.hint = fmt.Sprintf("the store at %s may not accept checksums with uploads (x-amz-checksum-crc32c, %s): set %s=%s to send none",
			s.endpoint, "STREAMING-UNSIGNED-PAYLOAD-TRAILER", EnvChecksum, ChecksumNone)
	}
	if opts.IfMatch != "" && e.kind == ErrNotFound {
		// S3 answers If-Match on a missing key with 404 NoSuchKey; for
		// the Store it is a failed precondition, like a file.
		e.kind = ErrPreconditionFailed
	}
	return e
}

func (s *S3Store) putInfo(key string, up minio.UploadInfo, opts PutOptions) ObjectInfo {
	return ObjectInfo{
		Key:          key,
		Size:         up.Size,
		ETag:         trimETag(up.ETag),
		ModTime:      time.Now(),
		StorageClass: storageClass(opts.StorageClass),
	}
}

const (
	// defaultPartSize is minio-go's part size, used when none is set.
	defaultPartSize = 16 << 20
	// maxParts is the most parts one S3 multipart upload may have.
	maxParts = 10000
)

// partThreshold is the configured part size, or minio-go's default: a
// put larger than it goes up in parts.
func (s *S3Store) partThreshold() int64 {
	if s.partSize == 0 {
		return defaultPartSize
	}
	return int64(s.partSize)
}

// putInParts is a conditional put of an object larger than a part (or of
// unknown size) as a multipart upload whose CompleteMultipartUpload
// carries the conditions, so S3 checks them when the object would appear.
// Starting the upload and sending the parts are idempotent and retried;
// the completion is attempted once (see IsRetryable). Parts go up one at
// a time from one part-sized buffer. An upload that does not complete is
// aborted.
func (s *S3Store) putInParts(ctx context.Context, key, name string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	part := s.partThreshold()
	if size >= 0 {
		// Stay within maxParts: round the part size up to whole MiB.
		if least := (size + maxParts - 1) / maxParts; least > part {
			part = (least + 1<<20 - 1) &^ (1<<20 - 1)
		}
		r = io.LimitReader(r, size)
	}
	buf := make([]byte, part)
	n, err := io.ReadFull(r, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		if size < 0 || int64(n) == size {
			// Of unknown size, but it fits one part: a single put.
			po := s.putObjectOptions(opts, bytes.NewReader(buf[:n]), int64(n))
			setConditions(&po, opts)
			var up minio.UploadInfo
			err := s.withCreds(ctx, true, func() (err error) {
				up, err = s.once.PutObject(ctx, s.bucket, name, bytes.NewReader(buf[:n]), int64(n), po)
				return err
			})
			if err != nil {
				return ObjectInfo{}, s.putFail(ctx, key, opts, err)
			}
			return s.putInfo(key, up, opts), nil
		}
		return ObjectInfo{}, fmt.Errorf("put %s: read %d of %d bytes: %w", key, n, size, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}

	core := minio.Core{Client: s.client}
	checks := partChecksOf(s.secure, s.checksums)
	if s.legacy {
		checks = partChecks{md5: true}
	}
	start := minio.PutObjectOptions{StorageClass: opts.StorageClass}
	if checks.crc32c {
		// The object gets a composite CRC32C (of the parts' CRC32Cs), as
		// minio-go's own multipart uploads do.
		start.UserMetadata = map[string]string{amzChecksumAlgorithm: minio.ChecksumCRC32C.String()}
	}
	var id string
	err = s.withCreds(ctx, true, func() (err error) {
		id, err = core.NewMultipartUpload(ctx, s.bucket, name, start)
		return err
	})
	if err != nil {
		return ObjectInfo{}, s.putFail(ctx, key, opts, err)
	}
	completed := false
	defer func() {
		if !completed {
			// Free the parts, even when ctx has ended.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			core.AbortMultipartUpload(actx, s.bucket, name, id)
		}
	}()
	var parts []minio.CompletePart
	var sums []minio.ObjectPart // the parts' CRC32Cs, for the object's
	var total int64
	for num := 1; n > 0; num++ {
		if num > maxParts {
			return ObjectInfo{}, fmt.Errorf("put %s: more than %d parts of %d bytes; raise the part size", key, maxParts, part)
		}
		var po minio.PutObjectPartOptions
		var crc string
		if checks.crc32c {
			crc = crc32cBase64(buf[:n])
			po.CustomHeader = http.Header{minio.ChecksumCRC32C.Key(): {crc}}
		}
		if checks.md5 {
			sum := md5.Sum(buf[:n])
			po.Md5Base64 = base64.StdEncoding.EncodeToString(sum[:])
		}
		var p minio.ObjectPart
		err := s.withCreds(ctx, true, func() (err error) {
			p, err = core.PutObjectPart(ctx, s.bucket, name, id, num, bytes.NewReader(buf[:n]), int64(n), po)
			return err
		})
		if err != nil {
			return ObjectInfo{}, s.putFail(ctx, key, opts, err)
		}
		parts = append(parts, minio.CompletePart{PartNumber: num, ETag: p.ETag, ChecksumCRC32C: crc})
		sums = append(sums, minio.ObjectPart{PartNumber: num, ChecksumCRC32C: crc})
		total += int64(n)
		if n < len(buf) {
			break
		}
		n, err = io.ReadFull(r, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
		}
	}
	if size >= 0 && total != size {
		return ObjectInfo{}, fmt.Errorf("put %s: read %d of %d bytes: %w", key, total, size, io.ErrUnexpectedEOF)
	}
	var po minio.PutObjectOptions
	if checks.crc32c {
		// The object's checksum, which the store checks against the
		// parts it has.
		c, err := minio.ChecksumCRC32C.CompositeChecksum(sums)
		if err != nil {
			return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
		}
		po.UserMetadata = map[string]string{
			minio.ChecksumCRC32C.Key(): c.Encoded(),
			amzChecksumType:            minio.ChecksumCompositeMode.String(),
		}
	}
	setConditions(&po, opts)
	var up minio.UploadInfo
	err = s.withCreds(ctx, true, func() (err error) {
		up, err = minio.Core{Client: s.once}.CompleteMultipartUpload(ctx, s.bucket, name, id, parts, po)
		return err
	})
	if err != nil {
		return ObjectInfo{}, s.putFail(ctx, key, opts, err)
	}
	completed = true
	up.Size = total
	return s.putInfo(key, up, opts), nil
}

// refusesChecksums reports whether an S3 error answering an upload that
// carried a CRC32C (a header, or a trailer in an aws-chunked body) says
// the store does not support them: S3 answers NotImplemented for "a
// header you provided implies functionality that is not implemented";
// other S3-compatible stores refuse the checksum or the encoding as an
// invalid argument. A checksum that does not match (BadDigest,
// XAmzContentChecksumMismatch) is the check working, not a refusal.
func refusesChecksums(code, message string) bool {
	switch code {
	case "NotImplemented":
		return true
	case "InvalidArgument", "InvalidRequest", "BadRequest", "InvalidHeader", "UnsupportedHeader":
		m := strings.ToLower(message)
		for _, w := range []string{"checksum", "trailer", "x-amz-content-sha256", "streaming-", "aws-chunked", "x-amz-decoded-content-length"} {
			if strings.Contains(m, w) {
				return true
			}
		}
	}
	return false
}

// S3's checksum headers that minio-go does not export.
const (
	amzChecksumAlgorithm = "X-Amz-Checksum-Algorithm"
	amzChecksumType      = "X-Amz-Checksum-Type"
)

// partChecks says what proves a part's bytes to the store.
type partChecks struct {
	crc32c bool // an x-amz-checksum-crc32c header
	md5    bool // a Content-MD5 header
}

// partChecksOf chooses the checks of a multipart upload's parts. A part
// needs one proof of its bytes that the store verifies: the CRC32C when
// checksums are on (cheap, and kept with the object); over plain HTTP
// minio-go also signs the payload chunk by chunk (SHA-256, a streaming
// signature), which proves the bytes by itself. So an MD5 only when
// neither is sent: TLS (unsigned payload) with checksums off. The MD5 of
// every part was 5.6 % of a busy primary's CPU (docs/performance.md).
func partChecksOf(secure, checksums bool) partChecks {
	return partChecks{crc32c: checksums, md5: secure && !checksums}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcAhead returns the x-amz-checksum-crc32c of the size bytes r reads
// next, read without moving r, if r can be read so (an in-memory body, a
// file) and size is known, at least 1 and at most maxHeaderChecksum.
func crcAhead(r io.Reader, size int64) (string, bool) {
	ra, ok := r.(io.ReaderAt)
	sk, ok2 := r.(io.Seeker)
	if !ok || !ok2 || size <= 0 || size > maxHeaderChecksum {
		return "", false
	}
	pos, err := sk.Seek(0, io.SeekCurrent)
	if err != nil {
		return "", false
	}
	buf := make([]byte, min(size, 32<<10))
	h := crc32.New(castagnoli)
	if n, err := io.CopyBuffer(h, io.NewSectionReader(ra, pos, size), buf); err != nil || n != size {
		return "", false // short: let the put fail as it would
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)), true
}

// crc32cBase64 is the value of an x-amz-checksum-crc32c header for b.
func crc32cBase64(b []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(b, castagnoli))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// Get implements Store.
func (s *S3Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	name, err := s.object(key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	if offset < 0 {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: negative offset %d", key, offset)
	}
	if length == 0 {
		info, err := s.Stat(ctx, key)
		if err != nil {
			return nil, ObjectInfo{}, err
		}
		return io.NopCloser(bytes.NewReader(nil)), info, nil
	}
	var o minio.GetObjectOptions
	switch {
	case length > 0 && length <= math.MaxInt64-offset:
		o.SetRange(offset, offset+length-1) // bytes=offset-end, end inclusive
	case offset > 0:
		o.SetRange(offset, 0) // bytes=offset-
	}
	core := minio.Core{Client: s.client}
	for attempt := 0; ; attempt++ {
		var body io.ReadCloser
		var oi minio.ObjectInfo
		err := s.withCreds(ctx, true, func() (err error) {
			body, oi, _, err = core.GetObject(ctx, s.bucket, name, o)
			return err
		})
		if err == nil {
			info := s.info(key, oi)
			rd := &s3Reader{ctx: ctx, s: s, key: key, body: body, r: body}
			if total, ok := contentRangeSize(oi.Headers.Get("Content-Range")); ok {
				info.Size = total
			} else if o.Header().Get("Range") != "" {
				// The server ignored the range and sent the whole object:
				// cut the range out here rather than return wrong bytes.
				if _, err := io.CopyN(io.Discard, rd, offset); err != nil && err != io.EOF {
					body.Close()
					return nil, ObjectInfo{}, err
				}
				if length > 0 {
					rd.r = io.LimitReader(body, length)
				}
			}
			return rd, info, nil
		}
		if minio.ToErrorResponse(err).Code != "InvalidRange" || attempt > 0 {
			return nil, ObjectInfo{}, s.fail(ctx, "get", key, err)
		}
		// S3 answers a range starting at or past the end with 416; the
		// Store contract is an empty read, as for a file.
		info, serr := s.Stat(ctx, key)
		if serr != nil {
			return nil, ObjectInfo{}, serr
		}
		if offset >= info.Size {
			return io.NopCloser(bytes.NewReader(nil)), info, nil
		}
		// The object grew between the two requests: read it again.
	}
}

// contentRangeSize returns the total size in "bytes FIRST-LAST/TOTAL".
func contentRangeSize(cr string) (int64, bool) {
	i := strings.LastIndexByte(cr, '/')
	if !strings.HasPrefix(cr, "bytes ") || i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(cr[i+1:], 10, 64)
	return n, err == nil
}

// s3Reader marks errors from reading an object's body (a connection broken
// mid-transfer) with the store's classification.
type s3Reader struct {
	ctx  context.Context
	s    *S3Store
	key  string
	body io.ReadCloser
	r    io.Reader // body, or a part of it
}

func (r *s3Reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.fail(r.ctx, "read", r.key, err)
	}
	return n, err
}

func (r *s3Reader) Close() error { return r.body.Close() }

// Stat implements Store.
func (s *S3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	name, err := s.object(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	var oi minio.ObjectInfo
	err = s.withCreds(ctx, true, func() (err error) {
		oi, err = s.client.StatObject(ctx, s.bucket, name, minio.StatObjectOptions{})
		return err
	})
	if err != nil {
		return ObjectInfo{}, s.fail(ctx, "stat", key, err)
	}
	return s.info(key, oi), nil
}

func (s *S3Store) info(key string, oi minio.ObjectInfo) ObjectInfo {
	class := oi.StorageClass
	if class == "" && oi.Headers != nil {
		class = oi.Headers.Get("X-Amz-Storage-Class")
	}
	return ObjectInfo{
		Key:          key,
		Size:         oi.Size,
		ETag:         trimETag(oi.ETag),
		ModTime:      oi.LastModified,
		StorageClass: storageClass(class),
	}
}

func trimETag(etag string) string { return strings.Trim(etag, `"`) }

// List implements Store.
func (s *S3Store) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing when fn fails
	var fnErr error
	after := "" // the last key listed: a repeated listing goes on after it
	err := s.withCreds(ctx, true, func() error {
		for oi := range s.client.ListObjectsIter(lctx, s.bucket, minio.ListObjectsOptions{
			Prefix:     s.prefix + prefix,
			Recursive:  true,
			StartAfter: after,
		}) {
			if oi.Err != nil {
				return oi.Err
			}
			after = oi.Key
			key, ok := strings.CutPrefix(oi.Key, s.prefix)
			if !ok || key == "" || strings.HasSuffix(key, "/") {
				continue // a directory marker made by another tool, not an object
			}
			if fnErr = fn(s.info(key, oi)); fnErr != nil {
				return errStopped
			}
		}
		return nil
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return s.fail(ctx, "list", prefix, err)
	}
	return ctx.Err()
}

// errStopped ends a listing whose callback failed.
var errStopped = errors.New("listing stopped")

// ListDir implements Store.
func (s *S3Store) ListDir(ctx context.Context, dir string, fn func(ObjectInfo) error) error {
	if dir != "" && !strings.HasSuffix(dir, "/") {
		return fmt.Errorf("list %q: %w: a directory ends in /", dir, ErrInvalidKey)
	}
	var out []ObjectInfo
	err := s.withCreds(ctx, true, func() error {
		out = out[:0] // a repeated listing starts over
		for oi := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{
			Prefix:    s.prefix + dir,
			Recursive: false,
		}) {
			if oi.Err != nil {
				return oi.Err
			}
			key, ok := strings.CutPrefix(oi.Key, s.prefix)
			if !ok || key == "" || key == dir {
				continue
			}
			info := ObjectInfo{Key: key}
			if !strings.HasSuffix(key, "/") {
				info = s.info(key, oi)
			}
			out = append(out, info)
		}
		return nil
	})
	if err != nil {
		return s.fail(ctx, "list", dir, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// S3 returns objects and common prefixes as two runs; merge them.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	for _, info := range out {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Store.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	name, err := s.object(key)
	if err != nil {
		return err
	}
	if err := s.withCreds(ctx, true, func() error {
		return s.client.RemoveObject(ctx, s.bucket, name, minio.RemoveObjectOptions{})
	}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil // some S3 implementations answer 404 for a missing key
		}
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteMany implements Store: one DeleteObjects request per
// maxDeleteBatch keys (minio-go's RemoveObjects), each retried on
// transient failures like other idempotent requests. A request that fails
// as a whole (every key in it failed) ends the call: the next would fail
// the same way.
func (s *S3Store) DeleteMany(ctx context.Context, keys []string) error {
	keys, err := deleteKeys(keys)
	if err != nil {
		return err
	}
	e := &deleteError{where: s.url, total: len(keys)}
	for start := 0; start < len(keys); start += maxDeleteBatch {
		if err := ctx.Err(); err != nil {
			e.skipped, e.stopped = len(keys)-start, err
			break
		}
		batch := keys[start:min(start+maxDeleteBatch, len(keys))]
		if s.deleteBatch(ctx, batch, e) == len(batch) {
			e.skipped, e.stopped = len(keys)-start-len(batch), ctx.Err()
			break
		}
	}
	return e.result()
}

// deleteBatch deletes up to maxDeleteBatch keys in one DeleteObjects
// request, adds the failures to e and returns how many keys failed.
func (s *S3Store) deleteBatch(ctx context.Context, keys []string, e *deleteError) int {
	gen := s.chain.generation()
	results := s.removeObjects(ctx, keys)
	for _, r := range results {
		if refusedCredential(errorCode(r.Err)) {
			// Refused for its credentials: the whole request was (S3
			// checks them first). Deleting is idempotent; repeat it all
			// if the credentials read again are new.
			if s.renewCreds(ctx, 0, r.Err, gen) {
				results = s.removeObjects(ctx, keys)
			}
			break
		}
	}
	failed := map[string]bool{}
	add := func(key string, err error) {
		if failed[key] {
			return
		}
		failed[key] = true
		f := s.fail(ctx, "delete", key, err)
		if f.status == 0 && f.code != "" && ctx.Err() == nil {
			// One key's failure inside the 200 answer to the request: it
			// has an S3 error code but no HTTP status of its own.
			f.retryable = retryableResponse(0, f.code)
		}
		e.failed = append(e.failed, f)
	}
	for _, r := range results {
		if minio.ToErrorResponse(r.Err).Code == "NoSuchKey" {
			continue // a missing key is deleted
		}
		if r.ObjectName == "" {
			// An answer that names no key (unparseable): the outcome of
			// the whole request is unknown.
			for _, k := range keys {
				add(k, r.Err)
			}
			continue
		}
		add(strings.TrimPrefix(r.ObjectName, s.prefix), r.Err)
	}
	return len(failed)
}

// removeObjects makes one DeleteObjects request and returns the keys that
// failed.
func (s *S3Store) removeObjects(ctx context.Context, keys []string) []minio.RemoveObjectError {
	objects := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		objects <- minio.ObjectInfo{Key: s.prefix + k}
	}
	close(objects)
	var out []minio.RemoveObjectError
	// Read every result: RemoveObjects stops only when its channel drains.
	for r := range s.client.RemoveObjects(ctx, s.bucket, objects, minio.RemoveObjectsOptions{}) {
		out = append(out, r)
	}
	return out
}

// maxCopySize is the largest object a single CopyObject request copies.
const maxCopySize = 5 << 30

// Copy implements Store.
func (s *S3Store) Copy(ctx context.Context, src, dst string, opts PutOptions) (ObjectInfo, error) {
	srcName, err := s.object(src)
	if err != nil {
		return ObjectInfo{}, err
	}
	dstName, err := s.object(dst)
	if err != nil {
		return ObjectInfo{}, err
	}
	if opts.IfNoneMatch || opts.IfMatch != "" {
		return s.copyThrough(ctx, src, dst, opts)
	}
	for attempt := 0; ; attempt++ {
		from, err := s.Stat(ctx, src)
		if err != nil {
			return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
		}
		if from.Size > maxCopySize {
			return s.copyThrough(ctx, src, dst, opts)
		}
		// Copy exactly the version just statted, so the size reported is
		// the size copied.
		dstOpts := minio.CopyDestOptions{Bucket: s.bucket, Object: dstName}
		// S3 does not carry the storage class over; name it, defaulting
		// like a put does.
		dstOpts.ReplaceMetadata = true
		dstOpts.UserMetadata = map[string]string{"X-Amz-Storage-Class": storageClass(opts.StorageClass)}
		var up minio.UploadInfo
		err = s.withCreds(ctx, true, func() (err error) {
			up, err = s.client.CopyObject(ctx, dstOpts, minio.CopySrcOptions{
				Bucket: s.bucket, Object: srcName, MatchETag: from.ETag,
			})
			return err
		})
		if err != nil {
			if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed && attempt < 3 {
				continue // the source changed since the stat
			}
			return ObjectInfo{}, s.fail(ctx, "copy "+src+" to", dst, err)
		}
		mod := up.LastModified
		if mod.IsZero() {
			mod = time.Now()
		}
		return ObjectInfo{
			Key:          dst,
			Size:         from.Size,
			ETag:         trimETag(up.ETag),
			ModTime:      mod,
			StorageClass: storageClass(opts.StorageClass),
		}, nil
	}
}

// copyThrough copies by reading src and putting it to dst, which honours
// the put conditions in opts.
func (s *S3Store) copyThrough(ctx context.Context, src, dst string, opts PutOptions) (ObjectInfo, error) {
	r, info, err := s.Get(ctx, src, 0, -1)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	defer r.Close()
	return s.Put(ctx, dst, r, info.Size, opts)
}

// fail turns a minio-go error into a Store error: the sentinel it means,
// whether it is retryable, and what to do about the common misconfigurations.
func (s *S3Store) fail(ctx context.Context, op, key string, err error) *s3Error {
	resp := minio.ToErrorResponse(err)
	e := &s3Error{
		op:        op,
		where:     s.where(key),
		status:    resp.StatusCode,
		code:      resp.Code,
		err:       err,
		retryable: retryable(ctx.Err(), resp.StatusCode, resp.Code, err),
	}
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
		e.kind = ErrPreconditionFailed
	case resp.Code == "NoSuchBucket":
		return s.bucketMissing(op, key)
	case resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound && key != "" && resp.Code == "":
		e.kind = ErrNotFound
	case resp.Code == "XMinioParentIsObject" || resp.Code == "XMinioObjectExistsAsDirectory" ||
		resp.Code == "XMinioInvalidObjectName" || resp.Code == "KeyTooLongError":
		e.kind = ErrInvalidKey
	case resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch" ||
		resp.Code == "ExpiredToken" || resp.Code == "InvalidToken":
		e.hint = "check the credentials from " + s.credSource()
	case resp.Code == "AccessDenied":
		e.hint = fmt.Sprintf("the credentials from %s may not access bucket %s", s.credSource(), s.bucket)
	}
	return e
}

// credSource names where the credentials in use came from, for hints.
func (s *S3Store) credSource() string {
	if src := s.chain.source(); src != "" {
		return src
	}
	return "the environment (" + EnvAccessKeyID + ", " + EnvSecretAccessKey + ")"
}

func (s *S3Store) bucketMissing(op, key string) *s3Error {
	return &s3Error{
		op:    op,
		where: s.where(key),
		kind:  ErrBucketNotFound,
		err:   fmt.Errorf("bucket %s does not exist at %s; create it first", s.bucket, s.endpoint),
		code:  "NoSuchBucket",
	}
}

func (s *S3Store) where(key string) string {
	if key == "" {
		return s.url
	}
	return "s3://" + s.bucket + "/" + s.prefix + key
}

// s3Error is a failed S3 request: what was attempted, what it means for
// the Store contract (kind), the underlying error, and whether repeating
// it may help.
type s3Error struct {
	op, where string
	kind      error // ErrNotFound, ErrPreconditionFailed, ...; nil if none
	status    int
	code      string
	hint      string
	err       error
	retryable bool
}

func (e *s3Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "s3 %s %s: ", e.op, e.where)
	if e.kind != nil && e.kind != ErrBucketNotFound {
		fmt.Fprintf(&b, "%v: ", e.kind)
	}
	b.WriteString(e.err.Error())
	if e.status != 0 {
		fmt.Fprintf(&b, " (HTTP %d %s)", e.status, e.code)
	}
	if e.hint != "" {
		b.WriteString("; " + e.hint)
	}
	return b.String()
}

func (e *s3Error) Unwrap() []error {
	if e.kind != nil {
		return []error{e.kind, e.err}
	}
	return []error{e.err}
}

// Retryable reports what IsRetryable answers for this error.
func (e *s3Error) Retryable() bool { return e.retryable }
