package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/primary"
	"github.com/shale-rocks/shale/secondary"
)

func newDevCmd() *cobra.Command {
	var cfg primary.Config
	var data, secondaryListen, compactorListen string
	c := &cobra.Command{
		Use:   "dev --data DIR",
		Short: "Run everything locally on a directory",
		Long: `Dev runs a primary on the file:// database DIR/db, with its cache in
DIR/cache unless --cache-dir says otherwise, a read-only secondary beside it
(--secondary-listen; empty: none), and a compactor scheduler
(--compactor-listen) with one worker that run the primary's compactions
(--compaction local: none), and prints how to reach them. Everything is
plaintext with no authentication, so dev listens on loopback addresses only.
It takes the same flags as "shale primary" (except --db). With --cold-after
and no --cold-db, the cold tier is DIR/cold. Data stays in DIR across
restarts.`,
		Example: `  shale dev --data ./.shale-dev
  shale dev --data /tmp/shale --listen 127.0.0.1:7170 --secondary-listen 127.0.0.1:7171 --compactor-listen 127.0.0.1:7180 --metrics-listen ""
  shale dev --data /tmp/shale --compaction local`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if data == "" {
				return usageErrorf("dev: --data is required (a directory for all local state)")
			}
			for _, l := range []struct{ flag, addr string }{{"listen", cfg.Listen}, {"secondary-listen", secondaryListen}, {"compactor-listen", compactorListen}} {
				if l.addr != "" && !auth.IsLoopback(l.addr) {
					return usageErrorf("dev: --%s %s is reachable from other machines, but dev serves plaintext with no authentication: listen on 127.0.0.1 (for a server others reach, run `shale primary` with TLS; docs/security.md)", l.flag, l.addr)
				}
			}
			if err := checkCompaction(c.ErrOrStderr(), "dev", cfg.CompactionMode, &cfg.Compaction); err != nil && compactorListen == "" {
				return err
			}
			if err := cfg.Engine.Tuning.Validate(); err != nil {
				return usageErrorf("dev: %v", err)
			}
			return runDev(c, &cfg, data, secondaryListen, compactorListen)
		},
	}
	c.Flags().StringVar(&data, "data", "", "`directory` for all local state (required; created if missing)")
	c.MarkFlagDirname("data")
	c.Flags().StringVar(&secondaryListen, "secondary-listen", "127.0.0.1:7071", "gRPC `address` of a read-only secondary beside the primary (empty: none)")
	primaryFlags(c, &cfg)
	c.Flags().Lookup("cache-dir").Usage = "local cache and staging `directory` (default: DIR/cache)"
	compactionFlags(c, &cfg.CompactionMode, &cfg.Compaction, "remote")
	c.Flags().Lookup("compaction-scheduler").Usage = "gRPC `address` of an external compactor scheduler (default: the one dev runs on --compactor-listen)"
	c.Flags().StringVar(&compactorListen, "compactor-listen", "127.0.0.1:7080", "gRPC `address` of the compactor scheduler dev runs, with one worker, for --compaction remote (empty: none)")
	noFileCompletion(c, "compactor-listen")
	return c
}

func runDev(c *cobra.Command, cfg *primary.Config, data, secondaryListen, compactorListen string) error {
	stdout := c.OutOrStdout()
	abs, err := filepath.Abs(data)
	if err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	}
	cfg.DB = "file://" + filepath.Join(abs, "db")
	if cfg.Engine.ColdAfter > 0 && cfg.ColdDB == "" {
		cfg.ColdDB = "file://" + filepath.Join(abs, "cold") // the cold tier beside the database
	}
	if cfg.Storage.CacheDir == "" {
		cfg.Storage.CacheDir = filepath.Join(abs, "cache")
	}
	cfg.Logger = newLogger(c.ErrOrStderr())
	serverGC()

	ctx, stop := signalContext()
	defer stop()
	var sched *compactor.SchedulerServer
	if cfg.CompactionMode == "remote" && cfg.Compaction.Scheduler == "" {
		// A scheduler and one worker in this process, stopped after the
		// primary (deferred first).
		if sched, err = compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: compactorListen, Logger: cfg.Logger}); err != nil {
			return fmt.Errorf("compactor: %w (--compactor-listen; or --compaction local)", err)
		}
		defer sched.Stop()
		w, err := compactor.NewWorker(compactor.WorkerConfig{Scheduler: sched.Addr(), CacheDir: filepath.Join(abs, "compactor-cache"), ID: "dev-worker", Logger: cfg.Logger})
		if err != nil {
			return fmt.Errorf("compactor worker: %w", err)
		}
		wctx, wcancel := context.WithCancel(context.Background())
		wdone := make(chan struct{})
		go func() {
			defer close(wdone)
			w.Run(wctx)
		}()
		defer func() {
			wcancel()
			<-wdone
			w.Close()
		}()
		cfg.Compaction.Scheduler = sched.Addr()
	}
	s, err := primary.Start(*cfg)
	if err != nil {
		return err
	}
	defer s.Stop(10 * time.Second)
	var sec *secondary.Server
	if secondaryListen != "" {
		sc := secondary.Config{DB: cfg.DB, ColdDB: cfg.ColdDB, ColdEndpoint: cfg.ColdEndpoint, Listen: secondaryListen, Limits: cfg.Limits, Engine: cfg.Engine, Primary: s.Addr(), Logger: cfg.Logger}
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
  security  plaintext, no authentication: loopback only
`, abs, cfg.DB, s.Addr())
	if cfg.ColdDB != "" {
		fmt.Fprintf(stdout, "  cold tier %s  (bin/shale admin tiers --db %s --cold-db %s)\n", cfg.ColdDB, cfg.DB, cfg.ColdDB)
	}
	if m := s.MetricsAddr(); m != "" {
		fmt.Fprintf(stdout, "  metrics   http://%s/metrics\n", m)
	}
	if sec != nil {
		fmt.Fprintf(stdout, "  replica   %s  (reads only: bin/shale kv --addr %s get hello)\n", sec.Addr(), sec.Addr())
	}
	switch {
	case sched != nil:
		fmt.Fprintf(stdout, "  compactor %s  (remote compaction, one worker: bin/shale compactor stats --scheduler %s)\n", sched.Addr(), sched.Addr())
	case cfg.CompactionMode == "remote":
		fmt.Fprintf(stdout, "  compactor %s  (remote compaction on an external scheduler)\n", cfg.Compaction.Scheduler)
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
