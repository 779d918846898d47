package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/primary"
)

// primaryFlags registers the flags shared by `shale primary` and `shale dev`.
func primaryFlags(fs *flag.FlagSet, cfg *primary.Config) {
	cfg.Limits = kvserver.DefaultLimits()
	cfg.Engine = engine.DefaultOptions()
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "gRPC address to serve the KV API on")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9090", "HTTP address for Prometheus /metrics (empty: off)")
	fs.Var(sizeFlag{&cfg.Limits.MaxKeyBytes}, "max-key-size", "largest key accepted")
	fs.Var(sizeFlag{&cfg.Limits.MaxValueBytes}, "max-value-size", "largest value accepted")
	fs.Var(sizeFlag{&cfg.Limits.MaxBatchBytes}, "max-batch-size", "largest total of keys and values in one Write batch")
	st := &cfg.Storage
	fs.StringVar(&st.CacheDir, "cache-dir", "", "local cache and staging directory (default: one per --db under the user cache dir)")
	st.CacheBytes = 8 << 30
	fs.Func("cache-size", "SST bytes kept in --cache-dir; tables that do not fit are read from the store (default 8GiB, 0: unbounded)", func(v string) error {
		n, err := parseSize(v)
		st.CacheBytes = int64(n)
		return err
	})
	fs.Uint64Var(&st.Epoch, "epoch", 0, "fencing epoch to own the database with; must exceed every epoch in storage (0: the next one, deposing the current owner)")
	fs.DurationVar(&st.Lease, "lease", 5*time.Second, "read lease: serve reads only while ownership was confirmed this recently; a new owner waits this long")
	fs.DurationVar(&st.DeleteGrace, "delete-grace", time.Hour, "keep deleted files in the store this long (readers may still use them)")
	fs.StringVar(&st.LogStorageClass, "wal-storage-class", "", "S3 storage class for WAL, MANIFEST and other small files (empty: the store's default)")
	fs.StringVar(&st.TableStorageClass, "sst-storage-class", "", "S3 storage class for SST files (empty: the store's default)")
	fs.DurationVar(&st.ReadTimeout, "read-timeout", 10*time.Second, "deadline of one foreground read from the store")
	fs.DurationVar(&st.WriteTimeout, "write-timeout", time.Minute, "deadline of one upload attempt (flush, compaction, WAL); failed attempts are retried")
	fs.DurationVar(&st.RetryFor, "retry-for", 5*time.Minute, "keep retrying a failed background upload this long before failing it")
	fs.Func("block-cache-size", "RocksDB block cache size (default "+formatSize(int(cfg.Engine.BlockCacheBytes))+")", func(v string) error {
		n, err := parseSize(v)
		cfg.Engine.BlockCacheBytes = uint64(n)
		return err
	})
}

func newLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runPrimary(args []string, stderr io.Writer) error {
	var cfg primary.Config
	fs := newFlags("primary", "shale primary --db file:///ABS/PATH [flags]", stderr)
	fs.StringVar(&cfg.DB, "db", "", "database location: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	primaryFlags(fs, &cfg)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	if cfg.DB == "" {
		fmt.Fprintln(stderr, "primary: --db is required")
		fs.Usage()
		return errUsage
	}
	cfg.Logger = newLogger(stderr)
	ctx, stop := signalContext()
	defer stop()
	return primary.Run(ctx, cfg)
}
