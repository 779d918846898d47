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
	fs.StringVar(&cfg.DB, "db", "", "database location: file:///ABS/PATH (required)")
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
