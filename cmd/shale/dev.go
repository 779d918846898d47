package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/primary"
)

func newDevCmd() *cobra.Command {
	var cfg primary.Config
	var data string
	c := &cobra.Command{
		Use:   "dev --data DIR",
		Short: "Run everything locally on a directory",
		Long: `Dev runs a primary on the file:// database DIR/db, with its cache in
DIR/cache unless --cache-dir says otherwise, and prints how to reach it. It
takes the same flags as "shale primary" (except --db). Data stays in DIR
across restarts.`,
		Example: `  shale dev --data ./.shale-dev
  shale dev --data /tmp/shale --listen 127.0.0.1:7071 --metrics-listen ""`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if data == "" {
				return usageErrorf("dev: --data is required (a directory for all local state)")
			}
			return runDev(c, &cfg, data)
		},
	}
	c.Flags().StringVar(&data, "data", "", "`directory` for all local state (required; created if missing)")
	c.MarkFlagDirname("data")
	primaryFlags(c, &cfg)
	c.Flags().Lookup("cache-dir").Usage = "local cache and staging `directory` (default: DIR/cache)"
	return c
}

func runDev(c *cobra.Command, cfg *primary.Config, data string) error {
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

	ctx, stop := signalContext()
	defer stop()
	s, err := primary.Start(*cfg)
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
