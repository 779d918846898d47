package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/secondary"
)

func newSecondaryCmd() *cobra.Command {
	var cfg secondary.Config
	c := &cobra.Command{
		Use:   "secondary --db URL",
		Short: "Serve a read-only replica of a database over gRPC",
		Long: `Secondary serves reads of the database at --db, which a primary owns, on
--listen. It keeps its own local cache, follows the primary's writes as they
reach the object store, and refuses writes with FAILED_PRECONDITION. With
--primary it catches up as soon as the primary announces a durable write
(milliseconds); without, every --catchup-interval. Its reads are as fresh as
its last catch-up; ` + "`kv status`" + ` shows its sequence number and lag. A
secondary that could not renew its lease within --lease-ttl refuses reads
(UNAVAILABLE) until it has caught up again. It stops on SIGINT or SIGTERM.
See docs/secondary.md.

TLS and client access work as on a primary (--tls-cert, --tls-key, --tls-ca,
--access-file; docs/security.md); with TLS, its certificate (a secondary's
of the same database) is also its identity on the primary's notifications.`,
		Example: `  shale secondary --db s3://my-bucket/orders --listen 127.0.0.1:7071 --cache-dir /var/cache/shale/orders-ro --primary 127.0.0.1:7070
  shale kv --addr 127.0.0.1:7071 get some-key`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if cfg.DB == "" {
				return usageErrorf("secondary: --db is required (s3://BUCKET/PREFIX or file:///ABS/PATH)")
			}
			if err := cfg.Security.Check(cfg.Listen); err != nil {
				return usageErrorf("secondary: %v", err)
			}
			cfg.Logger = newLogger(c.ErrOrStderr())
			serverGC()
			ctx, stop := signalContext()
			defer stop()
			return secondary.Run(ctx, cfg)
		},
	}
	c.Flags().StringVar(&cfg.DB, "db", "", "database location `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	secondaryFlags(c, &cfg)
	serverSecurityFlags(c, &cfg.Security, true)
	noFileCompletion(c, "db")
	return c
}

// secondaryFlags registers the flags of `shale secondary`.
func secondaryFlags(c *cobra.Command, cfg *secondary.Config) {
	fs := c.Flags()
	cfg.Limits = kvserver.DefaultLimits()
	cfg.Engine = engine.DefaultOptions()
	st := &cfg.Storage
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7071", "gRPC `address` to serve the KV API's reads on")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9091", "HTTP `address` for Prometheus /metrics and /healthz (empty: off)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve Go's /debug/pprof profiles on --metrics-listen (off by default: they show internals and cost CPU while taken)")
	fs.StringVar(&st.CacheDir, "cache-dir", "", "local cache `directory`, never the primary's (default: one per --db and --listen under the user cache dir)")
	fs.Var(newSize(&st.CacheBytes, 8<<30), "cache-size", "SST bytes kept in --cache-dir; tables that do not fit are read from the store (0: unbounded)")
	fs.StringVar(&cfg.Primary, "primary", "", "gRPC `address` of the primary: its notifications of new writes make this replica catch up at once (empty: poll every --catchup-interval)")
	fs.Var(newDuration(&cfg.CatchupInterval, time.Second), "catchup-interval", "how often to look for the primary's new writes in the store without notifications (ten times less often with them)")
	fs.StringVar(&cfg.Checkpoint, "checkpoint", "", "serve the checkpoint `NAME` read-only, fixed at its sequence number: it never catches up, and keeps the checkpoint's tables while it runs (docs/checkpoints.md)")
	fs.BoolVar(&cfg.Follower, "follower", false, "experimental: open RocksDB as a follower (DB::OpenAsFollower) that tails the MANIFEST every --catchup-interval; it reads no WAL, so it sees writes only once the primary flushes them (docs/secondary.md)")
	fs.StringVar(&st.ReaderID, "id", "", "name of this replica's lease in the store (default: host, pid and a random suffix; in Kubernetes, the Pod name)")
	fs.Var(newDuration(&st.ReaderTTL, 30*time.Second), "lease-ttl", "the primary keeps the files this replica reads while it renewed its lease within this long; past it, the replica refuses reads until it catches up")
	fs.Var(newDuration(&st.ReadTimeout, 10*time.Second), "read-timeout", "deadline of one foreground read from the store")
	fs.Var(newSize(&cfg.Engine.BlockCacheBytes, cfg.Engine.BlockCacheBytes), "block-cache-size", "RocksDB block cache size")
	rocksDBHistogramsFlag(c, &cfg.Engine.Tuning)
	fs.Var(newSize(&st.RangeCacheBytes, 64<<20), "range-cache-size", "memory for 64 KiB ranges of tables read from the store (tables not in --cache-size's cache), shared by all reads (0: a GET per read)")
	fs.Var(newSize(&cfg.Limits.MaxKeyBytes, cfg.Limits.MaxKeyBytes), "max-key-size", "largest key accepted")
	coldTierFlags(c, &cfg.ColdDB, &cfg.ColdEndpoint)
	c.MarkFlagDirname("cache-dir")
	noFileCompletion(c, "listen", "primary", "metrics-listen", "cache-size", "catchup-interval", "id", "lease-ttl", "read-timeout", "block-cache-size", "range-cache-size", "max-key-size")
}
