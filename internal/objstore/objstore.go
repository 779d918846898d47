// Package objstore is Shale's view of an object store: the one place every
// byte of a database ends up. Backends (file:// now, s3:// next) share these
// semantics, so the FileSystem and the fencing protocol built on top behave
// the same on a laptop directory and on S3:
//
//   - objects are immutable blobs addressed by a key ("a/b/c");
//   - Put can be conditional: create-only (If-None-Match: *) or
//     replace-only-if-unchanged (If-Match: etag); a failed condition is
//     ErrPreconditionFailed and changes nothing;
//   - Get reads a byte range; List returns keys in byte order;
//   - every Put may name a storage class (S3's x-amz-storage-class).
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
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
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

// Open opens the store a URL names:
//
//	file:///ABS/PATH   a local directory (created on first write)
func Open(rawURL string) (Store, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "file":
		return OpenFile(u.Path)
	}
	return nil, fmt.Errorf("store URL %q: unsupported scheme %q (supported: file:///ABS/PATH)", rawURL, u.Scheme)
}

// ParseURL checks a store URL and returns it in canonical form. A bare
// absolute path is accepted as a file:// URL.
func ParseURL(rawURL string) (*url.URL, error) {
	if rawURL == "" {
		return nil, errors.New("store URL is empty (want file:///ABS/PATH)")
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
	case "":
		return nil, fmt.Errorf("store URL %q: no scheme; use file:///ABS/PATH", rawURL)
	}
	return u, nil
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
