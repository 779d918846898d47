// Package objstore is Shale's view of an object store: the one place every
// byte of a database ends up. Backends (file:// and s3://) share these
// semantics (the conformance suite in storetest holds them to it), so the
// FileSystem and the fencing protocol built on top behave the same on a
// laptop directory and on S3:
//
//   - objects are immutable blobs addressed by a key ("a/b/c");
//   - Put can be conditional: create-only (If-None-Match: *) or
//     replace-only-if-unchanged (If-Match: etag); a failed condition is
//     ErrPreconditionFailed and changes nothing;
//   - Get reads a byte range; List returns keys in byte order;
//   - every Put may name a storage class (S3's x-amz-storage-class);
//   - IsRetryable tells a transient failure (network, overload, 5xx) from
//     a final one.
//
// ETags differ between backends: the file store gives every put a new
// random ETag, S3 derives it from the content (MD5 for single-part
// objects), so on S3 rewriting identical bytes restores an old ETag.
// Protocols using If-Match must write content that never repeats (CURRENT
// names an ever-increasing MANIFEST number, so it does not).
//
// A key must never also be a "directory" of other keys ("a" and "a/b"): the
// file store rejects the second with ErrInvalidKey, and MinIO accepts it
// but then leaves the deeper keys out of List (Stat and Get still find
// them), which would hide WAL segments from recovery.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Store is an object store rooted at one location (a bucket and prefix, or a
// directory). Keys are relative to that root.
type Store interface {
	// Put stores the object read from r (size bytes, or -1 if unknown) under
	// key, honouring the conditions in opts.
	Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error)
	// Get returns length bytes of key starting at offset; length < 0 reads
	// to the end. Reading past the end returns what exists.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error)
	// Stat returns the metadata of key, or ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List calls fn for every object whose key starts with prefix, in
	// ascending byte order of keys, until fn returns an error.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// ListDir calls fn for the immediate children of dir ("" or a prefix
	// ending in "/"), in ascending byte order: objects directly under it,
	// and "directories" (S3 common prefixes) as keys ending in "/" with
	// size 0. It costs one entry per child, however deep the tree below.
	ListDir(ctx context.Context, dir string, fn func(ObjectInfo) error) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteMany removes keys (missing keys are not an error), in as few
	// requests as the backend allows (S3: DeleteObjects, up to 1000 keys per
	// request). An invalid key fails the call before anything is deleted.
	// Otherwise every key is attempted until ctx ends or a whole request
	// fails; the error then names the first few keys left behind, matches
	// (errors.Is) the causes of their failures, and is retryable only if
	// every failure was. Repeating a DeleteMany is always safe.
	DeleteMany(ctx context.Context, keys []string) error
	// Copy copies src to dst within the store (server-side where possible).
	Copy(ctx context.Context, src, dst string, opts PutOptions) (ObjectInfo, error)
	// URL is the location this store was opened from.
	URL() string
}

// PutOptions are the conditions and placement of a Put or Copy.
type PutOptions struct {
	// IfNoneMatch makes the put create-only: it fails with
	// ErrPreconditionFailed when the key already exists.
	IfNoneMatch bool
	// IfMatch, when set, makes the put succeed only while the object's
	// current ETag equals it (ErrPreconditionFailed otherwise, including
	// when the object does not exist).
	IfMatch string
	// StorageClass is recorded with the object ("" means the store default).
	StorageClass string
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	ModTime      time.Time
	StorageClass string
}

var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrPreconditionFailed: an If-None-Match / If-Match condition did not
	// hold; nothing was written. Fencing relies on this error.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrInvalidKey: the key cannot be stored (empty, "..", or clashing
	// with the backend's layout).
	ErrInvalidKey = errors.New("invalid object key")
)

// Supported store URLs, for error messages.
const supportedURLs = "file:///ABS/PATH or s3://BUCKET/PREFIX"

// Open opens the store a URL names:
//
//	file:///ABS/PATH     a local directory (created on first write)
//	s3://BUCKET/PREFIX   objects under PREFIX in an S3 bucket; the endpoint
//	                     and credentials come from the environment
//	                     (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
//	                     AWS_SECRET_ACCESS_KEY, AWS_REGION; see S3ConfigFromEnv)
func Open(rawURL string) (Store, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "file":
		return OpenFile(u.Path)
	case "s3":
		return OpenS3(u.String(), S3ConfigFromEnv())
	}
	return nil, fmt.Errorf("store URL %q: unsupported scheme %q (supported: %s)", rawURL, u.Scheme, supportedURLs)
}

// ParseURL checks a store URL and returns it in canonical form. A bare
// absolute path is accepted as a file:// URL. An s3 URL names a bucket and
// an optional key prefix (s3://BUCKET or s3://BUCKET/PREFIX); its canonical
// form has no trailing slash.
func ParseURL(rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("store URL is empty (want %s)", supportedURLs)
	}
	if strings.HasPrefix(rawURL, "/") {
		return &url.URL{Scheme: "file", Path: filepath.Clean(rawURL)}, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %v", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("store URL %q: a file URL needs an absolute path: file:///ABS/PATH (three slashes)", rawURL)
		}
		if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("store URL %q: a file URL needs an absolute path: file:///ABS/PATH", rawURL)
		}
		u.Host = ""
		u.Path = filepath.Clean(u.Path)
		return u, nil
	case "s3":
		return parseS3URL(rawURL, u)
	case "":
		return nil, fmt.Errorf("store URL %q: no scheme; use %s", rawURL, supportedURLs)
	}
	return u, nil
}

// parseS3URL validates s3://BUCKET[/PREFIX].
func parseS3URL(rawURL string, u *url.URL) (*url.URL, error) {
	bad := func(format string, args ...any) (*url.URL, error) {
		return nil, fmt.Errorf("store URL %q: "+format+" (want s3://BUCKET/PREFIX)", append([]any{rawURL}, args...)...)
	}
	switch {
	case u.Opaque != "":
		return bad("an s3 URL starts with s3:// (two slashes)")
	case u.User != nil:
		return bad("credentials do not belong in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	case u.Port() != "":
		return bad("the endpoint does not belong in the URL; set AWS_ENDPOINT_URL")
	case u.RawQuery != "" || u.ForceQuery:
		return bad("s3 URLs take no query")
	case u.Fragment != "":
		return bad("s3 URLs take no fragment")
	}
	if err := checkBucketName(u.Host); err != nil {
		return bad("%v", err)
	}
	prefix := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if prefix != "" {
		if err := ValidateKey(prefix); err != nil {
			return bad("prefix %q: keys are relative paths without empty, '.' or '..' segments", prefix)
		}
	}
	out := &url.URL{Scheme: "s3", Host: u.Host}
	if prefix != "" {
		out.Path = "/" + prefix
	}
	return out, nil
}

// checkBucketName applies S3's bucket naming rules: 3 to 63 characters of
// lower-case letters, digits, '.' and '-', starting and ending with a letter
// or digit.
func checkBucketName(b string) error {
	if b == "" {
		return errors.New("no bucket")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must have 3 to 63 characters", b)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '.' && c != '-' {
			return fmt.Errorf("bucket name %q may hold only lower-case letters, digits, '.' and '-'", b)
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q may not contain \"..\"", b)
	}
	return nil
}

// LocalDir returns the directory behind a file:// store, or false for a
// remote store.
func LocalDir(s Store) (string, bool) {
	if f, ok := s.(*FileStore); ok {
		return f.Dir(), true
	}
	return "", false
}

// ValidateKey rejects keys no backend may hold.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "//") {
		return fmt.Errorf("%w %q: keys are relative paths without empty segments", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: '.' and '..' segments are not allowed", ErrInvalidKey, key)
		}
	}
	return nil
}
