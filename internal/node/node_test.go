package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/objstore"
)

// The default cache directories stay where they were before they were
// computed here: a restarted node finds its cache again.
func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/var/cache/test")
	for _, tc := range []struct {
		kind       Kind
		db, listen string
		want       string
	}{
		{Primary, "s3://bucket/orders", "127.0.0.1:7070", "/var/cache/test/shale/db-29ba362b729343af"},
		{Primary, "s3://bucket/orders", "127.0.0.1:7170", "/var/cache/test/shale/db-29ba362b729343af"}, // per database
		{Secondary, "s3://bucket/orders", "127.0.0.1:7071", "/var/cache/test/shale/secondary-56a954fb39473fbd"},
	} {
		if got := DefaultCacheDir(tc.kind, tc.db, tc.listen); got != tc.want {
			t.Errorf("DefaultCacheDir(%s, %s, %s) = %s, want %s", tc.kind, tc.db, tc.listen, got, tc.want)
		}
	}
	// Two secondaries of one database on one machine: two directories.
	if a, b := DefaultCacheDir(Secondary, "s3://b/db", "127.0.0.1:7071"), DefaultCacheDir(Secondary, "s3://b/db", "127.0.0.1:7072"); a == b {
		t.Errorf("two secondaries share %s", a)
	}
}

// One node of a kind per cache directory; a failed start removes the
// directory it created and keeps one that was there.
func TestLockCache(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cache")
	c, err := LockCache(Primary, dir, "file:///srv/db")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind Kind
		db   string
		want string
	}{
		{Primary, "file:///srv/db", "--db file:///srv/db: cache " + dir + ": database is already open in another process"},
		{Worker, "", "--cache-dir: " + dir + ": database is already open in another process"},
	} {
		if tc.kind == Worker {
			w, err := LockCache(Worker, dir, "")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
		}
		if _, err := LockCache(tc.kind, dir, tc.db); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a second %s on %s: %v, want an error containing %q", tc.kind, dir, err, tc.want)
		}
	}
	c.Abandon()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Abandon left the directory it created: %v", err)
	}

	existing := filepath.Join(root, "existing")
	os.Mkdir(existing, 0o755)
	c, err = LockCache(Secondary, existing, "file:///srv/db")
	if err != nil {
		t.Fatal(err)
	}
	c.Abandon()
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("Abandon removed a directory it did not create: %v", err)
	}
	c, err = LockCache(Secondary, existing, "file:///srv/db")
	if err != nil {
		t.Fatalf("locking again after Abandon: %v", err)
	}
	c.Close()

	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := LockCache(Primary, file, "file:///srv/db"); err == nil || !strings.HasPrefix(err.Error(), "--cache-dir "+file+": ") {
		t.Errorf("a cache dir that is a file: %v", err)
	}
}

// Bad store flags are refused before anything is written, naming the flag.
func TestOpenStores(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "db")
	given, err := objstore.Open("file://" + filepath.Join(dir, "given"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  StoreConfig
		want string // "": no error
	}{
		{"a database and no cold tier", StoreConfig{DB: db}, ""},
		{"a cold tier beside the database", StoreConfig{DB: db, ColdDB: db + "-cold"}, ""},
		{"no scheme", StoreConfig{DB: "relative/db"}, "--db: "},
		{"a relative path", StoreConfig{DB: "file://relative/db"}, "--db: "},
		{"the cold tier is the database", StoreConfig{DB: db, ColdDB: db}, "--cold-db " + db + " overlaps --db " + db},
		{"the cold tier inside the database", StoreConfig{DB: db, ColdDB: db + "/cold"}, "overlaps --db"},
		{"a given cold store inside the database", StoreConfig{DB: db, Cold: mustOpen(t, db+"/cold")}, "overlaps --db"},
		{"--cold-endpoint without --cold-db", StoreConfig{DB: db, ColdEndpoint: "http://127.0.0.1:1"}, "--cold-endpoint needs --cold-db"},
		{"a given store", StoreConfig{DB: db, Store: given}, ""},
	} {
		s, err := OpenStores(tc.cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		case err == nil:
			if s.URL != db || s.DB == nil || (s.Cold != nil) != (tc.cfg.ColdDB != "") || (tc.cfg.Store != nil && s.DB != tc.cfg.Store) {
				t.Errorf("%s: %+v", tc.name, s)
			}
		}
	}
}

func mustOpen(t *testing.T, url string) objstore.Store {
	t.Helper()
	s, err := objstore.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
