package shalefs

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// The traps of RocksDB 7.8.3's secondary instance that issue 10 names, on a
// reader of the Shale FileSystem: a MANIFEST switched twice between two
// catch-ups, a WAL deleted while the secondary is about to read it, and
// the MANIFEST rolling while a catch-up reads CURRENT (TryAgain). Each test
// forces its interleaving by standing between the reader and the store.

// trapStore lets a test act at a precise point of a reader's refresh:
// before a listing of a prefix, or before a read of a key.
type trapStore struct {
	objstore.Store
	mu         sync.Mutex
	beforeList func(prefix string)
	beforeGet  func(key string)
}

func (s *trapStore) hooks() (func(string), func(string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beforeList, s.beforeGet
}

func (s *trapStore) set(list, get func(string)) {
	s.mu.Lock()
	s.beforeList, s.beforeGet = list, get
	s.mu.Unlock()
}

func (s *trapStore) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	if h, _ := s.hooks(); h != nil {
		h(prefix)
	}
	return s.Store.List(ctx, prefix, fn)
}

func (s *trapStore) ListDir(ctx context.Context, dir string, fn func(objstore.ObjectInfo) error) error {
	if h, _ := s.hooks(); h != nil {
		h(dir)
	}
	return s.Store.ListDir(ctx, dir, fn)
}

func (s *trapStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if _, h := s.hooks(); h != nil {
		h(key)
	}
	return s.Store.Get(ctx, key, off, n)
}

// trapPrimary is a primary on the store, with a small MANIFEST limit so
// that every flush switches the MANIFEST when asked, and a delete grace of
// a millisecond, so that what it deletes goes at once (unless a reader's
// lease names it).
type trapPrimary struct {
	t     *testing.T
	store objstore.Store
	fs    *Owner
	db    *engine.DB
	want  map[string]string // every acknowledged write
	gone  map[string]bool   // acknowledged deletes
}

func startTrapPrimary(t *testing.T, store objstore.Store, epoch uint64, manifestBytes uint64) *trapPrimary {
	return startTrapPrimaryGrace(t, store, epoch, manifestBytes, time.Millisecond)
}

func startTrapPrimaryGrace(t *testing.T, store objstore.Store, epoch uint64, manifestBytes uint64, grace time.Duration) *trapPrimary {
	t.Helper()
	cache := filepath.Join(t.TempDir(), "primary")
	f, err := Open(context.Background(), Config{Store: store, CacheDir: cache, Epoch: epoch, Lease: 100 * time.Millisecond, DeleteGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	o := engine.DefaultOptions()
	o.FileSystem = f
	o.MaxManifestFileSize = manifestBytes
	d, err := engine.Open(cache, o)
	if err != nil {
		f.Stop()
		t.Fatal(err)
	}
	p := &trapPrimary{t: t, store: store, fs: f, db: d, want: map[string]string{}, gone: map[string]bool{}}
	t.Cleanup(p.stop)
	return p
}

func (p *trapPrimary) stop() {
	if p.db != nil {
		p.db.Close()
		p.fs.Stop()
		p.db = nil
	}
}

// put writes keys prefix000..prefix(n-1), synced.
func (p *trapPrimary) put(prefix string, n int) {
	p.t.Helper()
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("%s%03d", prefix, i), fmt.Sprintf("%s-v%d", prefix, i)
		if err := p.db.Put([]byte(k), []byte(v), true); err != nil {
			p.t.Fatal(err)
		}
		p.want[k] = v
		delete(p.gone, k)
	}
}

func (p *trapPrimary) del(k string) {
	p.t.Helper()
	if err := p.db.Delete([]byte(k), true); err != nil {
		p.t.Fatal(err)
	}
	delete(p.want, k)
	p.gone[k] = true
}

func (p *trapPrimary) flush() {
	p.t.Helper()
	if err := p.db.Flush(); err != nil {
		p.t.Fatal(err)
	}
}

// manifest is the MANIFEST the primary's CURRENT names.
func (p *trapPrimary) manifest() string {
	p.t.Helper()
	b, _, err := p.fs.get(context.Background(), "CURRENT", "CURRENT", ActOpen)
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.TrimSpace(string(layout.CurrentContent(b)))
}

// checkSecondary fails unless the secondary holds every acknowledged write
// and none of the deleted keys, and sees the same tables as the primary.
func checkSecondary(t *testing.T, p *trapPrimary, d *engine.DB) {
	t.Helper()
	if msg := secondaryDiff(p, d); msg != "" {
		t.Fatal(msg)
	}
}

func secondaryDiff(p *trapPrimary, d *engine.DB) string {
	for k, v := range p.want {
		got, ok, err := d.Get([]byte(k))
		if err != nil || !ok || string(got) != v {
			return fmt.Sprintf("acknowledged %s=%s reads %q (found %v, err %v) on the secondary", k, v, got, ok, err)
		}
	}
	for k := range p.gone {
		if got, ok, err := d.Get([]byte(k)); err != nil || ok {
			return fmt.Sprintf("deleted %s reads %q (found %v, err %v) on the secondary", k, got, ok, err)
		}
	}
	ps, err1 := p.db.Stats()
	ss, err2 := d.Stats()
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("stats: %v %v", err1, err2)
	}
	if !reflect.DeepEqual(ps.FilesPerLevel, ss.FilesPerLevel) || ps.LiveSSTBytes != ss.LiveSSTBytes {
		return fmt.Sprintf("the secondary's tables per level %v (%d bytes) differ from the primary's %v (%d bytes): it lost or skipped MANIFEST edits",
			ss.FilesPerLevel, ss.LiveSSTBytes, ps.FilesPerLevel, ps.LiveSSTBytes)
	}
	return ""
}

// catchUpOnce is one catch-up as the secondary runs it: refresh, then
// RocksDB's TryCatchUpWithPrimary.
func catchUpOnce(r *Reader, d *engine.DB) error {
	// A refresh that fails before RocksDB reads anything (a WAL it listed
	// deleted before its lease named it: these primaries delete after
	// 1 ms) is retried, as the secondary does; the catch-up runs once.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = r.Refresh(context.Background()); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	if err := d.TryCatchUp(); err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	return nil
}

// openTrapSecondary opens a reader and a RocksDB secondary on it, caught up.
func openTrapSecondary(t *testing.T, store objstore.Store, p *trapPrimary) (*Reader, *engine.DB) {
	t.Helper()
	c := filepath.Join(t.TempDir(), "secondary")
	r, err := OpenReader(context.Background(), Config{Store: store, CacheDir: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	d := openSecondary(t, r, c)
	if err := catchUpOnce(r, d); err != nil {
		t.Fatal(err)
	}
	checkSecondary(t, p, d)
	return r, d
}

// The primary switches its MANIFEST twice (and compacts, deletes keys and
// trashes the old MANIFESTs) between two catch-ups of
// the secondary: RocksDB before 6.19 lost the edits of the middle MANIFEST
// this way (facebook/rocksdb#7815). One catch-up must bring every edit.
func TestReaderManifestSwitchedTwice(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		// Every edit rolls the MANIFEST. Deletes wait an hour: with the
		// 1 ms grace of the other traps, a table compacted away could go
		// before the secondary's lease named it, and the one catch-up this
		// test allows failed on it (a race of that grace, not of MANIFEST
		// switches; TestReaderWALDeletedMidCatchUp covers deletes).
		p := startTrapPrimaryGrace(t, store, 1, 1, time.Hour)
		p.put("a", 50)
		p.flush()
		r, d := openTrapSecondary(t, store, p)

		seen := map[string]bool{p.manifest(): true}
		p.put("b", 50)
		p.flush()
		seen[p.manifest()] = true
		p.del("a007")
		p.put("a0", 5) // overwrite a000..a004
		p.flush()
		seen[p.manifest()] = true
		if err := p.db.Compact(nil, nil); err != nil {
			t.Fatal(err)
		}
		seen[p.manifest()] = true
		p.put("c", 20) // in the WAL only
		if len(seen) < 3 {
			t.Fatalf("the primary switched its MANIFEST %d times; the test needs at least two", len(seen)-1)
		}
		if err := catchUpOnce(r, d); err != nil {
			t.Fatalf("one catch-up after %d MANIFEST switches: %v", len(seen)-1, err)
		}
		checkSecondary(t, p, d)
		t.Logf("%s: one catch-up followed %d MANIFEST switches (%v)", loc.Name, len(seen)-1, keys(seen))
	})
}

// The same across takeovers: each new owner writes a new MANIFEST when it
// opens, so two failovers between two catch-ups switch it twice, and the
// secondary follows without reopening.
func TestReaderManifestSwitchedTwiceByTakeovers(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		p := startTrapPrimary(t, store, 1, 0)
		p.put("a", 50)
		p.flush()
		p.put("b", 10)
		r, d := openTrapSecondary(t, store, p)

		want, gone := p.want, p.gone
		seen := map[string]bool{p.manifest(): true}
		for epoch := uint64(2); epoch <= 3; epoch++ {
			p.put(fmt.Sprintf("e%d-", epoch), 10)
			p.stop()
			p = startTrapPrimary(t, store, epoch, 0)
			p.want, p.gone = want, gone
			seen[p.manifest()] = true
			p.del("a003")
			p.put(fmt.Sprintf("f%d-", epoch), 10)
			p.flush()
		}
		p.put("g", 10)
		if len(seen) < 3 {
			t.Fatalf("two takeovers switched the MANIFEST %d times; the test needs two", len(seen)-1)
		}
		if err := catchUpOnce(r, d); err != nil {
			t.Fatalf("one catch-up after two takeovers: %v", err)
		}
		checkSecondary(t, p, d)
	})
}

// The primary flushes between the reader's listing of tables and its
// listing of the MANIFEST: the MANIFEST the secondary reads names a table
// that the reader's view must hold. RocksDB's catch-up treats a table it
// cannot find as missing and stops its version there until that table is
// deleted again: the secondary would serve an old version indefinitely.
func TestReaderTableUploadedDuringRefresh(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		base, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		store := &trapStore{Store: base}
		p := startTrapPrimary(t, base, 1, 0)
		p.put("a", 50)
		p.flush()
		r, d := openTrapSecondary(t, store, p)

		p.put("b", 50)
		var once sync.Once
		flushed := false
		store.set(func(prefix string) {
			if strings.HasPrefix(prefix, "MANIFEST-") {
				once.Do(func() { p.flush(); flushed = true })
			}
		}, nil)
		err = catchUpOnce(r, d)
		store.set(nil, nil)
		if !flushed {
			t.Fatal("the reader's refresh listed no MANIFEST: the test did not run")
		}
		if err != nil {
			t.Logf("the catch-up during the flush failed (retried): %v", err)
		}
		p.put("c", 10)
		waitSecondary(t, p, r, d)
	})
}

// waitSecondary catches up until the secondary agrees with the primary, or
// fails after a generous deadline.
func waitSecondary(t *testing.T, p *trapPrimary, r *Reader, d *engine.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	n := 0
	for {
		n++
		err := catchUpOnce(r, d)
		msg := secondaryDiff(p, d)
		if err == nil && msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d catch-ups in 30s: %v; %s", n, err, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The secondary is about to read a WAL it has not read yet when the
// primary flushes it, trashes it, and the WAL is deleted from the store
// (a deleter that no lease held back, as for a replica paused past its
// lease). The catch-up may fail; the next ones succeed and the secondary
// loses nothing, since the flush put the WAL's writes in a table.
func TestReaderWALDeletedMidCatchUp(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		base, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		store := &trapStore{Store: base}
		p := startTrapPrimary(t, base, 1, 0)
		p.put("a", 50)
		r, d := openTrapSecondary(t, store, p)
		known := map[string]bool{}
		for _, n := range r.List() {
			known[n] = true
		}

		p.flush() // the WAL the secondary has goes; a new one starts
		p.put("b", 50)
		var victim string
		var once sync.Once
		store.set(nil, func(key string) {
			name := layout.FileOfKey(key)
			if layout.KindOf(name) != layout.KindLog || !strings.HasSuffix(name, ".log") || known[name] {
				return
			}
			once.Do(func() {
				victim = name
				p.flush()
				ctx := context.Background()
				// The flush trashes the WAL in the background.
				for deadline := time.Now().Add(30 * time.Second); ; {
					if n, err := count(t, base, layout.TrashPrefix+name+"/"); err == nil && n > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("the primary did not trash %s after flushing it", name)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
				var keys []string
				base.List(ctx, name+"/", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil })
				if err := base.DeleteMany(ctx, keys); err != nil {
					t.Error(err)
				}
			})
		})
		err = catchUpOnce(r, d)
		store.set(nil, nil)
		if victim == "" {
			t.Fatal("the secondary read no new WAL: the test did not run")
		}
		t.Logf("%s: catch-up while %s was deleted: %v", loc.Name, victim, err)
		waitSecondary(t, p, r, d)
		p.put("c", 10)
		waitSecondary(t, p, r, d)

		// What makes this safe: after a refresh, RocksDB's catch-up reads
		// no log from the store (it would fail halfway when one is gone,
		// after applying the MANIFEST but before installing the version).
		p.flush()
		p.put("d", 10)
		if err := r.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var read []string
		store.set(nil, func(key string) {
			if layout.KindOf(layout.FileOfKey(key)) == layout.KindLog {
				mu.Lock()
				read = append(read, key)
				mu.Unlock()
			}
		})
		err = d.TryCatchUp()
		store.set(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(read) > 0 {
			t.Fatalf("RocksDB's catch-up read logs from the store: %v", read)
		}
		checkSecondary(t, p, d)
	})
}

// The MANIFEST rolls over between the reader's listing and its read of
// CURRENT: CURRENT then names a MANIFEST the listing did not have, which
// RocksDB's catch-up reports as TryAgain. The reader must hand RocksDB a
// view that holds the MANIFEST CURRENT names.
func TestReaderManifestRollsDuringRefresh(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		base, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		store := &trapStore{Store: base}
		// A grace longer than a refresh, as in production: a WAL trashed
		// during the refresh must not go before the reader's lease names it.
		p := startTrapPrimaryGrace(t, base, 1, 1, time.Minute)
		p.put("a", 50)
		p.flush()
		r, d := openTrapSecondary(t, store, p)

		p.put("b", 20)
		p.flush() // rolls the MANIFEST: CURRENT changed, the refresh reads it
		p.put("c", 20)
		before := p.manifest()
		var once sync.Once
		store.set(nil, func(key string) {
			if key == "CURRENT" {
				once.Do(p.flush) // and it rolls again, after the listing
			}
		})
		err = catchUpOnce(r, d)
		store.set(nil, nil)
		if p.manifest() == before {
			t.Fatal("the MANIFEST did not roll while the refresh read CURRENT: the test did not run")
		}
		if err != nil {
			t.Fatalf("a catch-up while the MANIFEST rolled: %v", err)
		}
		checkSecondary(t, p, d)
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
