// Package cache holds the storage layer's two caches, independent of the
// FileSystem that uses them: Tables accounts for the tables kept whole in
// the local cache directory (least recently opened out first), Ranges
// keeps aligned ranges of tables read from the store in memory.
package cache

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Tables accounts for the tables kept in the local cache directory and
// evicts the least recently opened ones beyond the budget. Logs and small
// objects are not counted: they are bounded by RocksDB's own limits.
type Tables struct {
	dir    string
	mu     sync.Mutex
	budget int64 // 0: unbounded
	used   int64
	tables map[string]*cachedTable
	evict  func(name string) // makes open readers go remote
}

type cachedTable struct {
	size     int64
	lastOpen time.Time
}

// NewTables accounts for the tables in dir within budget bytes (0:
// unbounded).
func NewTables(dir string, budget int64) *Tables {
	return &Tables{dir: dir, budget: budget, tables: map[string]*cachedTable{}}
}

// Budget is the bytes the tables may take (0: unbounded).
func (c *Tables) Budget() int64 { return c.budget }

// SetEvictor sets the function that makes open readers of a table stop
// using its local copy.
func (c *Tables) SetEvictor(evict func(name string)) {
	c.mu.Lock()
	c.evict = evict
	c.mu.Unlock()
}

// Evictor returns the function set by SetEvictor (nil if none).
func (c *Tables) Evictor() func(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evict
}

// Add accounts for a table's local copy.
func (c *Tables) Add(name string, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.tables[name]; old != nil {
		c.used -= old.size
	}
	c.tables[name] = &cachedTable{size: size, lastOpen: time.Now()}
	c.used += size
}

// Touch marks a table opened now and reports whether it is accounted for.
func (c *Tables) Touch(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[name]; t != nil {
		t.lastOpen = time.Now()
		return true
	}
	return false
}

// Forget stops accounting for a table.
func (c *Tables) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[name]; t != nil {
		c.used -= t.size
		delete(c.tables, name)
	}
}

// MakeRoom evicts least recently opened tables (never keep) until need
// more bytes fit, and reports whether they do.
func (c *Tables) MakeRoom(need int64, keep string) bool {
	if c.budget <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if need > c.budget {
		return false
	}
	if c.used+need <= c.budget {
		return true
	}
	names := make([]string, 0, len(c.tables))
	for n := range c.tables {
		if n != keep {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return c.tables[names[i]].lastOpen.Before(c.tables[names[j]].lastOpen) })
	for _, n := range names {
		if c.used+need <= c.budget {
			break
		}
		if c.evict != nil {
			c.evict(n)
		}
		os.Remove(c.dir + "/" + n)
		c.used -= c.tables[n].size
		delete(c.tables, n)
	}
	return c.used+need <= c.budget
}

// VersionsDir, inside the cache directory, records which epoch's version
// of each cached table the local copy is: two owners can write different
// tables under one name (docs/rfcs/0002-object-layout.md), so a copy is
// reused after a restart only if it is the version the store now serves.
const VersionsDir = ".shale-versions"

// NoteVersion records that the local copy of name is epoch's version.
func (c *Tables) NoteVersion(name string, epoch uint64) {
	dir := filepath.Join(c.dir, VersionsDir)
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, name), []byte(layout.FormatNumber(epoch)), 0o644)
	}
}

// Version is the epoch of the local copy of a table, if recorded.
func (c *Tables) Version(name string) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, VersionsDir, name))
	if err != nil {
		return 0, false
	}
	return layout.ParseNumber(string(b))
}
