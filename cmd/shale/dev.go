package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/shale-rocks/shale/primary"
)

func runDev(args []string, stdout, stderr io.Writer) error {
	var cfg primary.Config
	var data string
	fs := newFlags("dev", "shale dev --data DIR [flags]", stderr)
	fs.StringVar(&data, "data", "", "directory for all local state (required; created if missing)")
	primaryFlags(fs, &cfg)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos); err != nil {
		return err
	}
	if data == "" {
		fmt.Fprintln(stderr, "dev: --data is required")
		fs.Usage()
		return errUsage
	}
	abs, err := filepath.Abs(data)
	if err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	cfg.DB = "file://" + filepath.Join(abs, "db")
	if cfg.Storage.CacheDir == "" {
		cfg.Storage.CacheDir = filepath.Join(abs, "cache")
	}
	cfg.Logger = newLogger(stderr)

	ctx, stop := signalContext()
	defer stop()
	s, err := primary.Start(cfg)
	if err != nil {
		return err
	}
	addrFlag := ""
	if s.Addr() != "127.0.0.1:7070" {
		addrFlag = " --addr " + s.Addr()
	}
	fmt.Fprintf(stdout, `Shale dev is running. Stop it with Ctrl-C; data stays in %s.

  database  %s
  KV API    %s  (gRPC; health and reflection enabled)
`, abs, cfg.DB, s.Addr())
	if m := s.MetricsAddr(); m != "" {
		fmt.Fprintf(stdout, "  metrics   http://%s/metrics\n", m)
	}
	fmt.Fprintf(stdout, `
Try, from another shell:
  bin/shale kv%[1]s put hello world
  bin/shale kv%[1]s get hello
  bin/shale kv%[1]s scan
  bin/shale kv%[1]s status
`, addrFlag)

	select {
	case <-ctx.Done():
	case err = <-s.Done():
	}
	s.Stop(10 * time.Second)
	return err
}
