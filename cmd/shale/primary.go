package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/gcpace"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/primary"
)

func newPrimaryCmd() *cobra.Command {
	var cfg primary.Config
	var clone primary.CloneConfig
	var standby bool
	var standbyPoll time.Duration
	archive := backupFlags{archive: true} // --archive-to and its endpoint, credentials and database id
	var archiveRate uint64
	c := &cobra.Command{
		Use:   "primary --db URL",
		Short: "Serve a database read-write over gRPC",
		Long: `Primary owns the database at --db and serves the gRPC KV API on --listen.

It takes the next fencing epoch in the store (or --epoch), seals the previous
owner's logs, and serves until SIGINT or SIGTERM, which stop it gracefully and
release the database. A primary deposed by a newer epoch exits with status 1.

An s3:// store is reached at AWS_ENDPOINT_URL (region AWS_REGION) with the
first credentials found among: the files accessKeyID and secretAccessKey in
SHALE_S3_CREDENTIALS_DIR (a mounted Secret; read again when they change, so
a rotated key needs no restart), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), and the instance's
or container's role (SHALE_S3_INSTANCE_ROLE=true).

With --tls-cert, --tls-key and --tls-ca it serves TLS 1.3 and admits only
clients with a certificate from the CA or a token in --access-file, each with
the role the access file gives it (read, write or admin); the files are
re-read when they change. Without TLS it listens on loopback addresses only,
unless --insecure. See docs/security.md.`,
		Example: `  AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \
    shale primary --db s3://my-bucket/orders --cache-dir /var/cache/shale/orders
  shale primary --db file:///srv/shale/orders --cache-size 2GiB
  shale primary --db s3://my-bucket/orders-test --clone-from s3://my-bucket/orders --clone-checkpoint before-migration --clone-id orders-test-1
  shale primary --db s3://my-bucket/orders --listen :7070 --tls-cert tls.crt --tls-key tls.key --tls-ca ca.crt --access-file access.json
  shale primary --db s3://my-bucket/orders --compaction remote --compaction-scheduler 10.0.0.5:7080`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if cfg.DB == "" {
				return usageErrorf("primary: --db is required (s3://BUCKET/PREFIX or file:///ABS/PATH)")
			}
			if err := cfg.Security.Check(cfg.Listen); err != nil {
				return usageErrorf("primary: %v", err)
			}
			if err := checkCompaction(c.ErrOrStderr(), "primary", cfg.CompactionMode, &cfg.Compaction); err != nil {
				return err
			}
			if err := cfg.Engine.Tuning.Validate(); err != nil {
				return usageErrorf("primary: %v", err)
			}
			if clone.From != "" || clone.Checkpoint != "" || clone.ID != "" || clone.Copy || clone.Endpoint != "" || clone.CredentialsDir != "" {
				if clone.From == "" || clone.Checkpoint == "" || clone.ID == "" {
					return usageErrorf("primary: a clone needs --clone-from, --clone-checkpoint and --clone-id together (--clone-copy, --clone-endpoint and --clone-credentials-dir only with them)")
				}
				if cfg.Storage.Existing {
					return usageErrorf("primary: --existing and --clone-from exclude each other: a clone's first primary creates the database")
				}
				cfg.Clone = &clone
			}
			if standby {
				if cfg.Clone != nil {
					return usageErrorf("primary: --standby and --clone-from exclude each other: a standby takes over a database that has a primary")
				}
				cfg.Standby = &primary.StandbyConfig{Poll: standbyPoll}
			}
			if archive.to != "" {
				loc, err := archive.location(cfg.DB)
				if err != nil {
					return err
				}
				cfg.Archive = &backup.ArchiveConfig{To: loc, Rate: int64(archiveRate)}
			} else if archive.endpoint != "" || archive.credentials != "" || archive.database != "" {
				return usageErrorf("primary: --archive-to-endpoint, --archive-to-credentials-dir and --archive-database need --archive-to")
			}
			cfg.Logger = newLogger(c.ErrOrStderr())
			serverGC()
			ctx, stop := signalContext()
			defer stop()
			return primary.Run(ctx, cfg)
		},
	}
	c.Flags().BoolVar(&standby, "standby", false, "start as the standby of a switchover (docs/rfcs/0012-switchover.md): warm the cache from the store, answer UNAVAILABLE until the current primary steps down (KV StepDown) and releases the database, then take over with --epoch without waiting out a lease")
	c.Flags().DurationVar(&standbyPoll, "standby-poll", 50*time.Millisecond, "with --standby: how often to look for the current primary's release (one HEAD request each)")
	c.Flags().StringVar(&cfg.DB, "db", "", "database location `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	c.Flags().StringVar(&clone.From, "clone-from", "", "make --db a clone of the database at this `URL` before serving (zero-copy on the same endpoint; copied from another store) (with --clone-checkpoint and --clone-id; --db must be empty or hold only this clone's bootstrap; docs/checkpoints.md)")
	c.Flags().StringVar(&clone.Checkpoint, "clone-checkpoint", "", "the `name` of the --clone-from database's checkpoint the clone starts from")
	c.Flags().StringVar(&clone.ID, "clone-id", "", "this clone's `id`: its pin in the parent is _shale/pins/<id> (1-63 lower-case letters, digits or '-')")
	c.Flags().BoolVar(&clone.Copy, "clone-copy", false, "copy every object of the --clone-from checkpoint into --db instead of sharing them (done anyway when the parent is on another endpoint or scheme, or --clone-credentials-dir is given; server-side within one endpoint)")
	c.Flags().StringVar(&clone.Endpoint, "clone-endpoint", "", "S3 endpoint `URL` of the --clone-from database when it is another server than $AWS_ENDPOINT_URL")
	c.Flags().StringVar(&clone.CredentialsDir, "clone-credentials-dir", "", "`directory` with the files accessKeyID and secretAccessKey (a mounted Secret) to read the --clone-from database with, when its store takes other credentials than --db's")
	noFileCompletion(c, "clone-endpoint")
	c.Flags().StringVar(&archive.to, "archive-to", "", "archive the database's logs continuously into this backup store `URL` (s3://BUCKET/PREFIX or file:///ABS/PATH; as shale backup create --to) for point-in-time restores (docs/backup.md)")
	c.Flags().StringVar(&archive.endpoint, "archive-to-endpoint", "", "S3 endpoint `URL` of the --archive-to store when it is another server than $AWS_ENDPOINT_URL")
	c.Flags().StringVar(&archive.credentials, "archive-to-credentials-dir", "", "`directory` with the --archive-to store's accessKeyID and secretAccessKey files (default: the database's credentials)")
	c.Flags().StringVar(&archive.database, "archive-database", "", "the database's `id` in the --archive-to store (default: the last element of --db's path, as shale backup create)")
	c.Flags().Var(newSize(&archiveRate, 64<<20), "archive-rate", "bound on the archive's copy rate, in bytes per second")
	primaryFlags(c, &cfg)
	serverSecurityFlags(c, &cfg.Security, true)
	compactionFlags(c, &cfg.CompactionMode, &cfg.Compaction, "local")
	noFileCompletion(c, "db")
	return c
}

// primaryFlags registers the flags shared by `shale primary` and `shale dev`.
// README.md's flag table documents them; keep the two in step.
func primaryFlags(c *cobra.Command, cfg *primary.Config) {
	fs := c.Flags()
	cfg.Limits = kvserver.DefaultLimits()
	cfg.Engine = engine.DefaultOptions()
	st := &cfg.Storage
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "gRPC `address` to serve the KV API on")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9090", "HTTP `address` for Prometheus /metrics and /healthz (empty: off)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "also serve Go's /debug/pprof profiles on --metrics-listen (off by default: they show internals and cost CPU while taken)")
	fs.Var(newSize(&cfg.Limits.MaxKeyBytes, cfg.Limits.MaxKeyBytes), "max-key-size", "largest key accepted")
	fs.Var(newSize(&cfg.Limits.MaxValueBytes, cfg.Limits.MaxValueBytes), "max-value-size", "largest value accepted")
	fs.Var(newSize(&cfg.Limits.MaxBatchBytes, cfg.Limits.MaxBatchBytes), "max-batch-size", "largest total of keys and values in one Write batch")
	fs.StringVar(&st.CacheDir, "cache-dir", "", "local cache and staging `directory` (default: one per --db under the user cache dir)")
	fs.Var(newSize(&st.CacheBytes, 8<<30), "cache-size", "SST bytes kept in --cache-dir; tables that do not fit are read from the store (0: unbounded)")
	fs.BoolVar(&st.Existing, "existing", false, "the database exists (a primary opened it before): refuse a location that does not hold it, before claiming anything, instead of creating a new, empty database there")
	fs.Var(uintValue{&st.Epoch}, "epoch", "fencing epoch to own the database with; must exceed every epoch in storage (0: the next one, deposing the current owner)")
	fs.Var(newDuration(&st.Lease, 5*time.Second), "lease", "read lease: serve reads only while ownership was confirmed this recently; a new owner waits this long")
	fs.Var(newDuration(&st.IdleConfirmEvery, 30*time.Second), "idle-confirm-interval", "how often a primary serving no reads confirms its ownership (one GET); a deposed idle primary exits within this long")
	fs.Var(newDuration(&st.DeleteGrace, time.Hour), "delete-grace", "keep deleted files in the store this long (readers may still use them)")
	fs.StringVar(&st.LogStorageClass, "wal-storage-class", "", "S3 storage `class` for WAL, MANIFEST and other small files (empty: the store's default)")
	fs.StringVar(&st.TableStorageClass, "sst-storage-class", "", "S3 storage `class` for SST files (empty: the store's default)")
	fs.Var(newDuration(&st.ReadTimeout, 10*time.Second), "read-timeout", "deadline of one foreground read from the store")
	fs.Var(newDuration(&st.WriteTimeout, time.Minute), "write-timeout", "deadline of one upload attempt (flush, compaction, WAL); failed attempts are retried")
	fs.Var(newDuration(&st.RetryFor, 5*time.Minute), "retry-for", "keep retrying a failed background upload this long before failing it")
	fs.IntVar(&st.WALPipelineDepth, "wal-pipeline-depth", 1, "WAL segment uploads kept in flight (1 to 16): durable writes are still acknowledged in order and nobody reads one before it is durable; 1 is one upload at a time (docs/rfcs/0013-pipelined-writes.md)")
	fs.Var(newSize(&cfg.Engine.BlockCacheBytes, cfg.Engine.BlockCacheBytes), "block-cache-size", "RocksDB block cache size")
	fs.Var(newSize(&st.RangeCacheBytes, 64<<20), "range-cache-size", "memory for 64 KiB ranges of tables read from the store (tables not in --cache-size's cache), shared by all reads (0: a GET per read)")
	coldTierFlags(c, &cfg.ColdDB, &cfg.ColdEndpoint)
	fs.Var(durationValue{&cfg.Engine.ColdAfter}, "cold-after", "move data older than this `duration` to the cold tier (--cold-db), e.g. 24h (default: off; docs/tiering.md)")
	noFileCompletion(c, "cold-after")
	tuningFlags(c, &cfg.Engine.Tuning)
	c.MarkFlagDirname("cache-dir")
	noFileCompletion(c, "listen", "metrics-listen", "max-key-size", "max-value-size", "max-batch-size",
		"cache-size", "epoch", "lease", "idle-confirm-interval", "delete-grace", "wal-storage-class", "sst-storage-class",
		"read-timeout", "write-timeout", "retry-for", "wal-pipeline-depth", "block-cache-size", "range-cache-size")
}

// tuningFlags registers the RocksDB features of engine.Tuning
// (docs/performance.md measures each).
func tuningFlags(c *cobra.Command, t *engine.Tuning) {
	fs := c.Flags()
	fs.Var(&dataBlockIndexValue{&t.DataBlockHashIndex}, "data-block-index", "index within SST data blocks: binary, or binary-and-hash (a hash index point lookups try first; a little more space)")
	fs.Float64Var(&t.DataBlockHashRatio, "data-block-hash-ratio", 0, "with --data-block-index=binary-and-hash: keys per hash bucket, in (0, 1]; lower is faster and larger (0: RocksDB's 0.75)")
	fs.BoolVar(&t.UnorderedWrite, "unordered-write", false, "insert into the memtable without waiting for earlier writers: more write throughput, but a Scan or MultiGet may see a write before an earlier one lands")
	fs.BoolVar(&t.PipelinedWrite, "pipelined-write", false, "overlap a write group's WAL write with the previous group's memtable insert (not with --unordered-write)")
	fs.Var(offDurationValue{durationValue{&t.GroupCommitWindow}}, "group-commit-window", "how long a durable write group may wait for the previous group's writers to come back before its upload (0: off); a group closes as soon as they are back")
	fs.BoolVar(&t.AsyncIO, "async-io", false, "let RocksDB read ahead asynchronously for scans (ReadOptions.async_io)")
	fs.BoolVar(&t.OptimizeMultiGetForIO, "optimize-multiget-for-io", false, "with --async-io: read the tables of a MultiGet's keys concurrently (while fewer than 4 MultiGets are under way, one of 8+ keys is split into up to 8 parts read at once, under one snapshot)")
	fs.Var(newSize(&t.ScanReadahead, 0), "scan-readahead", "readahead of a scan of a table, from its first block read (0: RocksDB's, 8 KiB after 2 reads doubling up to 256 KiB); on tables left in the store each readahead is a round trip: set it near the bytes a typical scan reads, e.g. 256KiB")
	rocksDBHistogramsFlag(c, t)
	c.RegisterFlagCompletionFunc("data-block-index", cobra.FixedCompletions([]cobra.Completion{"binary", "binary-and-hash"}, cobra.ShellCompDirectiveNoFileComp))
	noFileCompletion(c, "data-block-hash-ratio", "group-commit-window", "scan-readahead")
}

// rocksDBHistogramsFlag registers --rocksdb-histograms (primary, dev,
// secondary).
func rocksDBHistogramsFlag(c *cobra.Command, t *engine.Tuning) {
	c.Flags().BoolVar(&t.RocksDBHistograms, "rocksdb-histograms", false, "keep RocksDB's histograms (rocksdb_db_get_micros and the like on /metrics) besides its tickers: two clock reads and a bucket update per Get and Put")
}

// dataBlockIndexValue is --data-block-index.
type dataBlockIndexValue struct{ hash *bool }

func (v *dataBlockIndexValue) String() string {
	if v.hash != nil && *v.hash {
		return "binary-and-hash"
	}
	return "binary"
}

func (v *dataBlockIndexValue) Set(s string) error {
	switch s {
	case "binary":
		*v.hash = false
	case "binary-and-hash":
		*v.hash = true
	default:
		return errors.New(`want "binary" or "binary-and-hash"`)
	}
	return nil
}

func (*dataBlockIndexValue) Type() string { return "index" }

// serverGC paces the Go collector of a server (internal/gcpace): a cycle
// every 64 MiB allocated while the live Go heap is small (GOGC up to
// 1600), GOGC=400 once it is large, unless GOGC is set. A server's Go heap
// is small (RocksDB's memory is not Go's), so at GOGC=100 every few
// thousand requests started a collection: 5-8% of the CPU of a unary Put
// or Get, and still 5-7% of its instructions at 400.
func serverGC() { gcpace.Pace() }

func newLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// coldTierFlags registers --cold-db and --cold-endpoint (primary, dev,
// secondary, admin tiers).
func coldTierFlags(c *cobra.Command, url, endpoint *string) {
	c.Flags().StringVar(url, "cold-db", "", "cold tier `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH, a location of the database's own (docs/tiering.md)")
	c.Flags().StringVar(endpoint, "cold-endpoint", "", "S3 endpoint `URL` of the cold tier when it is another server than $AWS_ENDPOINT_URL (same credentials)")
	noFileCompletion(c, "cold-db", "cold-endpoint")
}
