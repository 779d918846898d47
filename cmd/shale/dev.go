package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/primary"
	"github.com/shale-rocks/shale/secondary"
)

func newDevCmd() *cobra.Command {
	var cfg primary.Config
	var data, secondaryListen string
	c := &cobra.Command{
		Use:   "dev --data DIR",
		Short: "Run everything locally on a directory",
		Long: `Dev runs a primary on the file:// database DIR/db, with its cache in
DIR/cache unless --cache-dir says otherwise, and a read-only secondary
beside it (--secondary-listen; empty: none), and prints how to reach them.
It takes the same flags as "shale primary" (except --db). Data stays in DIR
across restarts.`,
		Example: `  shale dev --data ./.shale-dev
  shale dev --data /tmp/shale --listen 127.0.0.1:7170 --secondary-listen 127.0.0.1:7171 --metrics-listen ""`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if data == "" {
				return usageErrorf("dev: --data is required (a directory for all local state)")
			}
			if err := cfg.Engine.Tuning.Validate(); err != nil {
				return usageErrorf("dev: %v", err)
			}
			return runDev(c, &cfg, data, secondaryListen)
		},
	}
	c.Flags().StringVar(&data, "data", "", "`directory` for all local state (required; created if missing)")
	c.MarkFlagDirname("data")
	c.Flags().StringVar(&secondaryListen, "secondary-listen", "127.0.0.1:7071", "gRPC `address` of a read-only secondary beside the primary (empty: none)")
	primaryFlags(c, &cfg)
	c.Flags().Lookup("cache-dir").Usage = "local cache and staging `directory` (default: DIR/cache)"
	return c
}

func runDev(c *cobra.Command, cfg *primary.Config, data, secondaryListen string) error {
	stdout := c.OutOrStdout()
	abs, err := filepath.Abs(data)
	if err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	cfg.DB = "file://" + filepath.Join(abs, "db")
	if cfg.Storage.CacheDir == "" {
		cfg.Storage.CacheDir = filepath.Join(abs, "cache")
	}
	cfg.Logger = newLogger(c.ErrOrStderr())
	serverGC()

	ctx, stop := signalContext()
	defer stop()
	s, err := primary.Start(*cfg)
	if err != nil {
		return err
	}
	defer s.Stop(10 * time.Second)
	var sec *secondary.Server
	if secondaryListen != "" {
		sc := secondary.Config{DB: cfg.DB, Listen: secondaryListen, Limits: cfg.Limits, Engine: cfg.Engine, Primary: s.Addr(), Logger: cfg.Logger}
		sc.Storage.CacheDir = filepath.Join(abs, "secondary-cache")
		if sec, err = secondary.Start(sc); err != nil {
			return fmt.Errorf("secondary: %w", err)
		}
		defer sec.Stop(time.Second)
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
	if sec != nil {
		fmt.Fprintf(stdout, "  replica   %s  (reads only: bin/shale kv --addr %s get hello)\n", sec.Addr(), sec.Addr())
	}
	fmt.Fprintf(stdout, `
Try, from another shell:
  bin/shale kv%[1]s put hello world
  bin/shale kv%[1]s get hello
  bin/shale kv%[1]s scan
  bin/shale kv%[1]s status
`, addrFlag)

	var secDone <-chan error
	if sec != nil {
		secDone = sec.Done()
	}
	select {
	case <-ctx.Done():
	case err = <-s.Done():
	case err = <-secDone:
	}
	return err
}
