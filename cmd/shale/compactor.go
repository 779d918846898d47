package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/compactor"
)

func newCompactorCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "compactor",
		Short: "Run remote compaction: the scheduler, workers, and their stats",
		Long: `Remote compaction moves RocksDB's compactions off the primary's machine
(docs/compaction.md). A scheduler queues the jobs primaries submit
("shale primary --compaction remote --compaction-scheduler ADDR"), with
per-database priority and fair share; stateless workers lease them, run them
against the database in its object store, and write the outputs beside it
for the primary to install. Any trouble makes the primary compact locally.`,
		Example: `  shale compactor scheduler --listen :7080
  shale compactor worker --scheduler 127.0.0.1:7080 --cache-dir /var/cache/shale/compactor --concurrency 2
  shale compactor stats --scheduler 127.0.0.1:7080 -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: runGroup,
	}
	c.AddCommand(newSchedulerCmd(), newWorkerCmd(), newCompactorStatsCmd())
	return c
}

func newSchedulerCmd() *cobra.Command {
	var cfg compactor.SchedulerServerConfig
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "Serve the remote compaction job queue over gRPC",
		Long: `Scheduler serves the compaction job queue on --listen and its statistics as
Prometheus series on --metrics-listen. Its queue is soft state: when it stops,
waiting primaries compact locally and workers drop their jobs, so nothing is
lost; a restarted scheduler starts empty. It stops on SIGINT or SIGTERM.`,
		Example: `  shale compactor scheduler --listen 0.0.0.0:7080 --metrics-listen 0.0.0.0:9080`,
		Args:    exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg.Logger = newLogger(c.ErrOrStderr())
			s, err := compactor.StartScheduler(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			select {
			case <-ctx.Done():
			case err = <-s.Done():
			}
			s.Stop()
			return err
		},
	}
	fs := c.Flags()
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7080", "gRPC `address` to serve the job queue on")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9080", "HTTP `address` for Prometheus /metrics and /healthz (empty: off)")
	fs.Var(newDuration(&cfg.Scheduler.LeaseTTL, 15*time.Second), "lease-ttl", "a job whose worker has not heartbeated for this long goes back to the queue")
	var attempts uint64
	fs.Var(uintValue{&attempts}, "max-attempts", "leases of one job before it fails (its primary then compacts locally; default 3)")
	c.PreRunE = func(*cobra.Command, []string) error {
		if attempts > 100 {
			return usageErrorf("compactor scheduler: --max-attempts %d is above 100", attempts)
		}
		cfg.Scheduler.MaxAttempts = uint32(attempts)
		return nil
	}
	noFileCompletion(c, "listen", "metrics-listen", "lease-ttl", "max-attempts")
	return c
}

func newWorkerCmd() *cobra.Command {
	var cfg compactor.WorkerConfig
	var concurrency uint64 = 1
	c := &cobra.Command{
		Use:   "worker --scheduler ADDR --cache-dir DIR",
		Short: "Run compaction jobs leased from a scheduler",
		Long: `Worker leases compaction jobs from the scheduler at --scheduler and runs
them: it opens the job's database read-only in its object store (S3
endpoint and credentials from AWS_ENDPOINT_URL, AWS_REGION and
SHALE_S3_CREDENTIALS_DIR, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, web
identity or SHALE_S3_INSTANCE_ROLE, as for "shale primary"), compacts with RocksDB's OpenAndCompact,
and uploads the outputs under the database's _shale/compactions/<job>/;
it writes nothing else. It keeps nothing between jobs: each job's files in
--cache-dir are removed when it ends. It stops on SIGINT or SIGTERM, handing
running jobs back to the scheduler.`,
		Example: `  AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \
    shale compactor worker --scheduler 127.0.0.1:7080 --cache-dir /var/cache/shale/compactor`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			switch {
			case cfg.Scheduler == "":
				return usageErrorf("compactor worker: --scheduler is required (the scheduler's gRPC address, host:port)")
			case cfg.CacheDir == "":
				return usageErrorf("compactor worker: --cache-dir is required (a local directory for running jobs' files)")
			case concurrency == 0 || concurrency > 64:
				return usageErrorf("compactor worker: --concurrency %d: want 1 to 64", concurrency)
			}
			cfg.Concurrency = int(concurrency)
			cfg.Logger = newLogger(c.ErrOrStderr())
			w, err := compactor.NewWorker(cfg)
			if err != nil {
				return err
			}
			defer w.Close()
			ctx, stop := signalContext()
			defer stop()
			return w.Run(ctx)
		},
	}
	fs := c.Flags()
	fs.StringVar(&cfg.Scheduler, "scheduler", "", "the scheduler's gRPC `address` (required)")
	fs.StringVar(&cfg.CacheDir, "cache-dir", "", "local `directory` for running jobs' files (required)")
	fs.Var(uintValue{&concurrency}, "concurrency", "jobs to run at once")
	fs.StringVar(&cfg.ID, "id", "", "this worker's name at the scheduler (default: host and pid; in Kubernetes, the Pod name)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9081", "HTTP `address` for Prometheus /metrics and /healthz (empty: off)")
	fs.Var(newDuration(&cfg.JobTimeout, 30*time.Minute), "job-timeout", "give up a job after this long; keep it well under the databases' --delete-grace")
	c.MarkFlagDirname("cache-dir")
	noFileCompletion(c, "scheduler", "concurrency", "id", "metrics-listen", "job-timeout")
	return c
}

func newCompactorStatsCmd() *cobra.Command {
	var addr string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "stats --scheduler ADDR",
		Short: "Print the scheduler's queue: per database and per worker",
		Long: `Stats prints the scheduler's queue depth, running, completed, failed,
re-queued and cancelled jobs and the fallbacks primaries reported, per
database and in total, and the workers it has seen recently. With -o json it
prints the Compactor API's StatsResponse in protobuf's JSON mapping (64-bit
integers are strings).`,
		Example: `  shale compactor stats --scheduler 127.0.0.1:7080
  shale compactor stats --scheduler 127.0.0.1:7080 -o json | jq .total`,
		Args: exactArgs(),
	}
	c.Flags().StringVar(&addr, "scheduler", "127.0.0.1:7080", "the scheduler's gRPC `address`")
	c.Flags().Var(newDuration(&timeout, 10*time.Second), "timeout", "deadline of the request")
	noFileCompletion(c, "scheduler", "timeout")
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("--scheduler %s: %w", addr, err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		st, err := compactorv1.NewCompactorClient(conn).Stats(ctx, &compactorv1.StatsRequest{})
		if err != nil {
			switch status.Code(err) {
			case codes.Unavailable:
				return fmt.Errorf("cannot reach a compactor scheduler at %s: %s (is `shale compactor scheduler` or `shale dev` running? set --scheduler)", addr, status.Convert(err).Message())
			case codes.DeadlineExceeded:
				return fmt.Errorf("no answer from %s within %s (--timeout)", addr, timeout)
			}
			return err
		}
		if output() == outputJSON {
			b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
			if err != nil {
				return err
			}
			var v any // re-encoded: protojson's spacing is deliberately unstable
			if err := json.Unmarshal(b, &v); err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), v)
		}
		printCompactorStats(c.OutOrStdout(), addr, st)
		return nil
	}
	return c
}

func printCompactorStats(w io.Writer, addr string, st *compactorv1.StatsResponse) {
	var slots uint32
	for _, wk := range st.Workers {
		slots += wk.Slots
	}
	fmt.Fprintf(w, "scheduler %s, up %s; %d worker(s), %d slot(s)\n\n", addr, time.Duration(st.UptimeSeconds)*time.Second, len(st.Workers), slots)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DB\tPRIORITY\tQUEUED\tRUNNING\tCOMPLETED\tFAILED\tREQUEUED\tCANCELLED\tFALLBACKS\tREAD\tWRITTEN")
	row := func(name, prio string, k *compactorv1.Counters) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", name, prio, k.Queued, k.Running, k.Completed, k.Failed,
			k.Requeued, k.Cancelled, k.Fallbacks, humanBytes(k.BytesRead), humanBytes(k.BytesWritten))
	}
	for _, d := range st.Dbs {
		row(d.Db, fmt.Sprint(d.Priority), d.Counters)
	}
	row("total", "", st.Total)
	tw.Flush()
	if len(st.Workers) == 0 {
		fmt.Fprintln(w, "\nno worker seen recently")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSLOTS\tRUNNING\tCOMPLETED\tLAST SEEN")
	for _, wk := range st.Workers {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s ago\n", wk.Worker, wk.Slots, wk.Running, wk.Completed, (time.Duration(wk.SeenMillisAgo) * time.Millisecond).Round(100*time.Millisecond))
	}
	tw.Flush()
}

// humanBytes is n in B, KiB, MiB or GiB with one decimal.
func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// compactionFlags registers the remote compaction flags of `shale primary`
// and `shale dev`.
func compactionFlags(c *cobra.Command, mode *string, cc *compactor.ClientConfig, def string) {
	fs := c.Flags()
	*mode = def
	fs.Var(&compactionMode{mode}, "compaction", "where compactions run: local, or remote (submitted to --compaction-scheduler; local on any trouble)")
	fs.StringVar(&cc.Scheduler, "compaction-scheduler", "", "gRPC `address` of the compactor scheduler (with --compaction remote)")
	cc.Priority = compactor.DefaultPriority
	fs.Var(&priorityValue{p: &cc.Priority}, "compaction-priority", "this database's share of the compactor workers under contention, 1 to 100")
	fs.Var(newDuration(&cc.QueueTimeout, 20*time.Second), "compaction-queue-timeout", "compact locally when no worker took a job within this long")
	c.RegisterFlagCompletionFunc("compaction", cobra.FixedCompletions([]cobra.Completion{"local", "remote"}, cobra.ShellCompDirectiveNoFileComp))
	noFileCompletion(c, "compaction-scheduler", "compaction-priority", "compaction-queue-timeout")
}

type compactionMode struct{ p *string }

func (m *compactionMode) String() string {
	if m.p == nil {
		return ""
	}
	return *m.p
}

func (m *compactionMode) Set(v string) error {
	switch v {
	case "local", "remote":
		*m.p = v
		return nil
	}
	return fmt.Errorf(`want "local" or "remote"`)
}

func (*compactionMode) Type() string { return "mode" }

type priorityValue struct{ p *uint32 }

func (p *priorityValue) String() string {
	if p.p == nil {
		return "0"
	}
	return fmt.Sprint(*p.p)
}

func (p *priorityValue) Set(s string) error {
	var n uint64
	if _, err := fmt.Sscan(s, &n); err != nil || n < compactor.MinPriority || n > compactor.MaxPriority || strings.TrimSpace(s) != fmt.Sprint(n) {
		return fmt.Errorf("want a whole number from %d to %d", compactor.MinPriority, compactor.MaxPriority)
	}
	*p.p = uint32(n)
	return nil
}

func (*priorityValue) Type() string { return "int" }

// checkCompaction validates the remote compaction flags together.
func checkCompaction(stderr io.Writer, cmd string, mode string, cc *compactor.ClientConfig) error {
	if mode == "remote" && cc.Scheduler == "" {
		return usageErrorf("%s: --compaction remote needs --compaction-scheduler (the scheduler's gRPC address, host:port)", cmd)
	}
	if mode == "local" && cc.Scheduler != "" {
		fmt.Fprintf(stderr, "%s: --compaction-scheduler is ignored with --compaction local\n", cmd)
	}
	return nil
}
