package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reserved names at the root of a file store; keys may not use them.
const (
	fileTmpDir   = ".shale-tmp"
	fileLockName = ".shale-lock"

	xattrETag  = "user.shale.etag"
	xattrClass = "user.shale.storage-class"

	defaultStorageClass = "STANDARD"
)

// FileStore keeps objects as files under a directory, with the same
// conditional-write semantics as S3: create-only puts use link(2), which
// fails atomically when the name exists; every mutation holds an flock on
// the store so an If-Match compare and its rename are one step even across
// processes. ETags are random per put (kept in an xattr) so a replaced
// object never matches an old ETag, even if its inode number is reused.
type FileStore struct {
	dir string
	url string
}

var _ Store = (*FileStore)(nil)

// OpenFile returns a store rooted at dir, an absolute path. Nothing is
// created until the first write; an existing non-directory is an error.
func OpenFile(dir string) (*FileStore, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("file store %q: path must be absolute", dir)
	}
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("file store %s: exists and is not a directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("file store %s: %w", dir, err)
	}
	return &FileStore{dir: dir, url: "file://" + dir}, nil
}

// Dir is the directory holding the objects.
func (s *FileStore) Dir() string { return s.dir }

// URL implements Store.
func (s *FileStore) URL() string { return s.url }

func (s *FileStore) path(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(key, "/")
	if first == fileTmpDir || first == fileLockName {
		return "", fmt.Errorf("%w %q: %q is reserved by the file store", ErrInvalidKey, key, first)
	}
	return filepath.Join(s.dir, filepath.FromSlash(key)), nil
}

// lock takes the store-wide mutation lock (shared by every process using
// this directory).
func (s *FileStore) lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("file store %s: %w", s.dir, err)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, fileLockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("file store %s: %w", s.dir, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("file store %s: lock: %w", s.dir, err)
	}
	return func() { f.Close() }, nil // closing releases the flock
}

func newETag() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// writeTemp stores r in a new synced file under the temp dir with its
// metadata set, and returns its path and etag.
func (s *FileStore) writeTemp(r io.Reader, class string) (string, string, error) {
	tmpDir := filepath.Join(s.dir, fileTmpDir)
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return "", "", err
	}
	f, err := os.CreateTemp(tmpDir, "put-*")
	if err != nil {
		return "", "", err
	}
	fail := func(err error) (string, string, error) {
		f.Close()
		os.Remove(f.Name())
		return "", "", err
	}
	if _, err := io.Copy(f, r); err != nil {
		return fail(err)
	}
	etag := newETag()
	if err := unix.Fsetxattr(int(f.Fd()), xattrETag, []byte(etag), 0); err != nil {
		return fail(fmt.Errorf("set xattr %s (the file store needs user extended attributes: ext4, xfs, btrfs or tmpfs): %w", xattrETag, err))
	}
	if class != "" {
		if err := unix.Fsetxattr(int(f.Fd()), xattrClass, []byte(class), 0); err != nil {
			return fail(fmt.Errorf("set xattr %s: %w", xattrClass, err))
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", "", err
	}
	return f.Name(), etag, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Put implements Store.
func (s *FileStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	tmp, etag, err := s.writeTemp(r, opts.StorageClass)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	defer os.Remove(tmp) // no-op once renamed
	// Describe the object from the private temp file (rename keeps its size
	// and mtime): once installed, another writer may replace it at once,
	// and the caller needs the ETag of its own write.
	fi, err := os.Stat(tmp)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	if err := s.install(key, p, tmp, opts); err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{
		Key:          key,
		Size:         fi.Size(),
		ETag:         etag,
		ModTime:      fi.ModTime(),
		StorageClass: storageClass(opts.StorageClass),
	}, nil
}

// install moves a finished temp file to its key under the store lock,
// checking the put's conditions first.
func (s *FileStore) install(key, p, tmp string, opts PutOptions) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()

	cur, err := os.Lstat(p)
	switch {
	case err == nil && cur.IsDir():
		return fmt.Errorf("%w %q: other keys are stored under %q/ and a file store cannot hold both", ErrInvalidKey, key, key)
	case err == nil && opts.IfNoneMatch:
		return fmt.Errorf("put %s: If-None-Match: %w", key, ErrPreconditionFailed)
	case err == nil && opts.IfMatch != "":
		if etag := fileETag(p, cur); etag != opts.IfMatch {
			return fmt.Errorf("put %s: If-Match %s (current %s): %w", key, opts.IfMatch, etag, ErrPreconditionFailed)
		}
	case errors.Is(err, fs.ErrNotExist) && opts.IfMatch != "":
		return fmt.Errorf("put %s: If-Match on a missing object: %w", key, ErrPreconditionFailed)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		if errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("%w %q: a parent of this key is itself an object", ErrInvalidKey, key)
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("%w %q: a parent of this key is itself an object", ErrInvalidKey, key)
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("put %s: sync dir: %w", key, err)
	}
	return nil
}

// fileETag is the put-time etag, or for a file not written through the
// store (e.g. by RocksDB directly) one derived from its identity.
func fileETag(p string, fi fs.FileInfo) string {
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(p, xattrETag, buf); err == nil {
		return string(buf[:n])
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	var ino uint64
	if st != nil {
		ino = st.Ino
	}
	return fmt.Sprintf("f-%x-%x-%x", ino, fi.ModTime().UnixNano(), fi.Size())
}

// storageClass is the class an object reports: "" means the default.
func storageClass(c string) string {
	if c == "" {
		return defaultStorageClass
	}
	return c
}

func fileClass(p string) string {
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(p, xattrClass, buf); err == nil && n > 0 {
		return string(buf[:n])
	}
	return defaultStorageClass
}

func (s *FileStore) info(key, p string, fi fs.FileInfo) ObjectInfo {
	return ObjectInfo{
		Key:          key,
		Size:         fi.Size(),
		ETag:         fileETag(p, fi),
		ModTime:      fi.ModTime(),
		StorageClass: fileClass(p),
	}
}

// Stat implements Store.
func (s *FileStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() {
		if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, ErrNotFound)
		}
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return s.info(key, p, fi), nil
}

type sectionReadCloser struct {
	io.Reader
	f *os.File
}

func (r sectionReadCloser) Close() error { return r.f.Close() }

// Get implements Store.
func (s *FileStore) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	if offset < 0 {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: negative offset %d", key, offset)
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, ErrNotFound)
		}
		return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil || fi.IsDir() {
		f.Close()
		if err == nil {
			err = ErrNotFound
		}
		return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, err)
	}
	n := fi.Size() - offset
	if n < 0 {
		n = 0
	}
	if length >= 0 && length < n {
		n = length
	}
	return sectionReadCloser{Reader: io.NewSectionReader(f, offset, n), f: f}, s.info(key, p, fi), nil
}

// List implements Store.
func (s *FileStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	// Walk only the deepest directory the prefix names.
	base := s.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = filepath.Join(s.dir, filepath.FromSlash(prefix[:i]))
	}
	var keys []string
	infos := map[string]ObjectInfo{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(s.dir, p)
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p != base && (key == fileTmpDir || !(strings.HasPrefix(key+"/", prefix) || strings.HasPrefix(prefix, key+"/"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if key == fileLockName || !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while listing
			}
			return err
		}
		keys = append(keys, key)
		infos[key] = s.info(key, p, fi)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Strings(keys) // byte order, as S3 lists ("a.b" < "a/b")
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(infos[k]); err != nil {
			return err
		}
	}
	return nil
}

// ListDir implements Store.
func (s *FileStore) ListDir(ctx context.Context, dir string, fn func(ObjectInfo) error) error {
	if dir != "" && !strings.HasSuffix(dir, "/") {
		return fmt.Errorf("list %q: %w: a directory ends in /", dir, ErrInvalidKey)
	}
	base := filepath.Join(s.dir, filepath.FromSlash(dir))
	entries, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("list %q: %w", dir, err)
	}
	var out []ObjectInfo
	for _, e := range entries {
		key := dir + e.Name()
		if dir == "" && (e.Name() == fileTmpDir || e.Name() == fileLockName) {
			continue
		}
		if e.IsDir() {
			out = append(out, ObjectInfo{Key: key + "/"})
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted while listing
		}
		out = append(out, s.info(key, filepath.Join(base, e.Name()), fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	for _, o := range out {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Store.
func (s *FileStore) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(s.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	d, err := s.remove(key, p)
	if err != nil || d == "" {
		return err
	}
	if err := syncDir(d); err != nil {
		return fmt.Errorf("delete %s: sync dir: %w", key, err)
	}
	return nil
}

// remove deletes the object at p, under the store lock, and drops the
// directories it leaves empty, as S3 has none. It returns the first
// directory that remains, whose sync makes the removal durable, or "" if
// there was no object to remove.
func (s *FileStore) remove(key, p string) (string, error) {
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return "", nil // a "directory" is not an object
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", nil
		}
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	d := filepath.Dir(p)
	for d != s.dir && strings.HasPrefix(d, s.dir) && os.Remove(d) == nil {
		d = filepath.Dir(d)
	}
	return d, nil
}

// DeleteMany implements Store: Delete for each key, holding the store lock
// for up to maxDeleteBatch keys at a time and syncing each directory a
// batch changed once.
func (s *FileStore) DeleteMany(ctx context.Context, keys []string) error {
	keys, err := deleteKeys(keys)
	if err != nil {
		return err
	}
	paths := make([]string, len(keys))
	for i, k := range keys {
		if paths[i], err = s.path(k); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(s.dir); errors.Is(err, fs.ErrNotExist) || len(keys) == 0 {
		return nil
	}
	e := &deleteError{where: s.url, total: len(keys)}
	for start := 0; start < len(keys); start += maxDeleteBatch {
		end := min(start+maxDeleteBatch, len(keys))
		if done, err := s.deleteBatch(ctx, keys[start:end], paths[start:end], e); err != nil {
			e.skipped = len(keys) - start - done
			e.stopped = err
			break
		}
	}
	return e.result()
}

// deleteBatch deletes keys (at paths) under one hold of the store lock,
// adding per-key failures to e. It stops early only when ctx ends or the
// lock cannot be taken, returning how many keys it attempted and why.
func (s *FileStore) deleteBatch(ctx context.Context, keys, paths []string, e *deleteError) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	unlock, err := s.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	// The removals of a batch become durable together: sync each
	// directory they changed once, after the last of them.
	dirs := map[string]bool{}
	defer func() {
		for d := range dirs {
			// A directory a later removal emptied and dropped is gone;
			// that removal recorded the directory above it.
			if err := syncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
				e.failed = append(e.failed, fmt.Errorf("delete under %s: sync dir: %w", d, err))
			}
		}
	}()
	for i, k := range keys {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		d, err := s.remove(k, paths[i])
		if err != nil {
			e.failed = append(e.failed, err)
		} else if d != "" {
			dirs[d] = true
		}
	}
	return len(keys), nil
}

// Copy implements Store.
func (s *FileStore) Copy(ctx context.Context, src, dst string, opts PutOptions) (ObjectInfo, error) {
	r, _, err := s.Get(ctx, src, 0, -1)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	defer r.Close()
	return s.Put(ctx, dst, r, -1, opts)
}
