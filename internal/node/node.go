// Package node is what every Shale process that works on a database does
// when it starts, once: a primary, a secondary and a compactor worker open
// the database's stores and check them (the bucket answers, the cold tier
// lies outside the database), and lock their local cache directory so that
// two processes never share one. Start does all of it for a serving node
// (a primary or a secondary), which then opens the database on what Start
// prepared and serves it.
package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/iometrics"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Kind is what a node is: it names the lock of the node's cache directory
// and where that directory is by default.
type Kind int

const (
	Primary Kind = iota
	Secondary
	Worker // a compactor worker
)

func (k Kind) String() string {
	return [...]string{"primary", "secondary", "compactor worker"}[k]
}

// lockName is the lock file in a node's cache directory: one node of each
// kind per directory. A primary's is the owner's: a second primary on the
// same cache must fail, not depose the first.
func (k Kind) lockName() string {
	return [...]string{"SHALE-OWNER.lock", "SHALE-SECONDARY.lock", "SHALE-WORKER.lock"}[k]
}

// authKind is the identity a serving node's certificate has.
func (k Kind) authKind() auth.Kind {
	if k == Secondary {
		return auth.KindSecondary
	}
	return auth.KindPrimary
}

// DefaultCacheDir is where a node keeps its cache of the database at db
// when --cache-dir is not given, under the user's cache directory: one
// directory per database for a primary, per database and listen address
// for a secondary, so that two secondaries on one machine never share one.
// A compactor worker has none (its --cache-dir is required).
func DefaultCacheDir(k Kind, db, listen string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	var prefix, key string
	switch k {
	case Primary:
		prefix, key = "db-", db
	case Secondary:
		prefix, key = "secondary-", db+"\x00"+listen
	default:
		panic("node: a " + k.String() + " has no default cache directory")
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(base, "shale", prefix+hex.EncodeToString(sum[:8]))
}

// Cache is a node's cache directory, locked while the node runs.
type Cache struct {
	Dir     string
	lock    *os.File
	created bool // by LockCache: a failed start removes it
}

// LockCache creates dir if it is missing and takes its lock for a node of
// kind k; another node of that kind holding it is an error that says so.
// Errors name --cache-dir, or for a primary or a secondary the database db
// whose cache it is.
func LockCache(k Kind, dir, db string) (_ *Cache, err error) {
	c := &Cache{Dir: dir}
	if _, statErr := os.Stat(dir); errors.Is(statErr, os.ErrNotExist) {
		c.created = true
		defer func() {
			if err != nil {
				os.RemoveAll(dir) // created here: leave nothing behind
			}
		}()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--cache-dir %s: %w", dir, err)
	}
	if c.lock, err = engine.LockFile(dir, k.lockName()); err != nil {
		if db == "" {
			return nil, fmt.Errorf("--cache-dir: %w", err)
		}
		return nil, fmt.Errorf("--db %s: cache %w", db, err)
	}
	return c, nil
}

// Close releases the lock.
func (c *Cache) Close() { c.lock.Close() }

// Abandon releases the lock of a node whose start failed, and removes the
// directory if LockCache created it: a failed start leaves nothing behind.
func (c *Cache) Abandon() {
	c.lock.Close()
	if c.created {
		os.RemoveAll(c.Dir)
	}
}

// Config is what a serving node, a primary or a secondary, starts from.
type Config struct {
	Kind          Kind // Primary or Secondary
	Stores        StoreConfig
	Listen        string // gRPC address of the KV API
	MetricsListen string // HTTP address of /metrics and /healthz ("": none)
	Pprof         bool   // serve /debug/pprof on MetricsListen too
	// Security is the KV port's TLS and client access; zero: plaintext,
	// allowed on a loopback Listen or with Insecure.
	Security auth.ServerConfig
	Limits   kvserver.Limits
	// Storage configures the Shale FileSystem the node opens; an empty
	// CacheDir gets DefaultCacheDir.
	Storage shalefs.Config
	Logger  *slog.Logger // nil: slog.Default()
}

// Node is a serving node once started: its stores open and checked, its
// ports bound, its cache directory locked. The caller opens the database
// on Storage and serves it on Endpoint; Close releases the cache when it
// stops, Abandon undoes Start when the rest of its start fails.
type Node struct {
	Stores
	Secured  *auth.Secured // nil: plaintext
	Endpoint *kvserver.Endpoint
	Registry *prometheus.Registry // with the store I/O metrics
	// Storage is Config.Storage with the stores, the logger, the I/O
	// metrics and the cache directory filled in.
	Storage shalefs.Config
	Logger  *slog.Logger
	cache   *Cache
}

// Start checks cfg, opens and checks the stores, binds the ports and
// locks the cache directory, in that order: a bad flag, an unreachable
// store or a busy port creates nothing on disk. On error nothing is left
// open.
func Start(cfg Config) (_ *Node, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	n := &Node{Logger: cfg.Logger}
	if n.Secured, err = kvserver.Secure(cfg.Security, cfg.Listen, cfg.Kind.authKind(), cfg.Logger); err != nil {
		return nil, err
	}
	if n.Stores, err = OpenStores(cfg.Stores); err != nil {
		return nil, err
	}
	if n.Endpoint, err = kvserver.Listen(cfg.Listen, cfg.MetricsListen); err != nil {
		return nil, err
	}
	if cfg.Pprof {
		n.Endpoint.EnableProfiling()
	}
	n.Registry = prometheus.NewRegistry()
	sc := cfg.Storage
	sc.Store, sc.Cold, sc.Logger, sc.Observe = n.DB, n.Cold, cfg.Logger, iometrics.New(n.Registry).Observe
	if sc.CacheDir == "" {
		sc.CacheDir = DefaultCacheDir(cfg.Kind, n.URL, cfg.Listen)
	}
	n.Storage = sc
	// The cache's lock before anything is claimed in the store: a second
	// primary on this machine and cache fails here instead of deposing the
	// first.
	if n.cache, err = LockCache(cfg.Kind, sc.CacheDir, n.URL); err != nil {
		n.Endpoint.Close()
		return nil, err
	}
	return n, nil
}

// Close releases the cache directory, when the node has stopped.
func (n *Node) Close() { n.cache.Close() }

// Abandon undoes Start for a node whose start failed after it: it closes
// the ports and releases the cache directory, removing it if Start created
// it.
func (n *Node) Abandon() {
	n.cache.Abandon()
	n.Endpoint.Close()
}
