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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/auth"
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
lost; a restarted scheduler starts empty. It stops on SIGINT or SIGTERM.

With --tls-cert, --tls-key and --tls-ca (a certificate naming
shale://NAMESPACE/scheduler/POOL) it serves TLS 1.3 and authenticates every
caller by its certificate: only primaries of NAMESPACE submit jobs, each only
for the database its certificate names; only workers of POOL take and report
jobs; stats for the operator and NAMESPACE's components. Without them it
serves plaintext to anyone, which it does only on a loopback address or with
--insecure. The files are read again when they change.`,
		Example: `  shale compactor scheduler --listen 0.0.0.0:7080 --metrics-listen 0.0.0.0:9080 \
    --tls-cert /etc/shale/tls/tls.crt --tls-key /etc/shale/tls/tls.key --tls-ca /etc/shale/tls/ca.crt`,
		Args: exactArgs(),
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
	serverTLSFlags(c, &cfg.Security)
	c.PreRunE = func(*cobra.Command, []string) error {
		if attempts > 100 {
			return usageErrorf("compactor scheduler: --max-attempts %d is above 100", attempts)
		}
		cfg.Scheduler.MaxAttempts = uint32(attempts)
		if err := cfg.Security.Check(cfg.Listen); err != nil {
			return usageErrorf("compactor scheduler: %v", err)
		}
		if t := cfg.Security.TLS; t.Enabled() && (t.Cert == "" || t.Key == "" || t.CA == "") {
			return usageErrorf("compactor scheduler: TLS needs all of --tls-cert, --tls-key and --tls-ca")
		}
		return nil
	}
	noFileCompletion(c, "listen", "metrics-listen", "lease-ttl", "max-attempts")
	return c
}

// serverTLSFlags registers --tls-cert, --tls-key, --tls-ca and --insecure
// of a server (the scheduler).
func serverTLSFlags(c *cobra.Command, sc *auth.ServerConfig) {
	fs := c.Flags()
	fs.StringVar(&sc.TLS.Cert, "tls-cert", "", "PEM `file` of this server's certificate (serves TLS; read again when it changes)")
	fs.StringVar(&sc.TLS.Key, "tls-key", "", "PEM `file` of the certificate's private key")
	fs.StringVar(&sc.TLS.CA, "tls-ca", "", "PEM `file` of the CA bundle that callers' certificates are verified against")
	fs.BoolVar(&sc.Insecure, "insecure", false, "serve plaintext with no authentication on a non-loopback --listen")
	for _, n := range []string{"tls-cert", "tls-key", "tls-ca"} {
		c.MarkFlagFilename(n)
	}
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
running jobs back to the scheduler.

With --tls-cert, --tls-key and --tls-ca (a certificate naming
shale://NAMESPACE/worker/POOL) it reaches the scheduler over mutual TLS and
takes jobs only from the scheduler of its own pool.`,
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
			case cfg.Security.TLS.Enabled() && (cfg.Security.TLS.Cert == "" || cfg.Security.TLS.Key == "" || cfg.Security.TLS.CA == ""):
				return usageErrorf("compactor worker: TLS needs all of --tls-cert, --tls-key and --tls-ca (the scheduler gives jobs only to workers with its pool's worker certificate)")
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
	fs.StringVar(&cfg.ColdEndpoint, "cold-endpoint", "", "S3 endpoint `URL` of the databases' cold tiers when they are on another server than $AWS_ENDPOINT_URL (same credentials)")
	fs.Var(newDuration(&cfg.JobTimeout, 30*time.Minute), "job-timeout", "give up a job after this long; keep it well under the databases' --delete-grace")
	fs.StringVar(&cfg.Security.TLS.Cert, "tls-cert", "", "PEM `file` of this worker's certificate (shale://NAMESPACE/worker/POOL; read again when it changes)")
	fs.StringVar(&cfg.Security.TLS.Key, "tls-key", "", "PEM `file` of the certificate's private key")
	fs.StringVar(&cfg.Security.TLS.CA, "tls-ca", "", "PEM `file` of the CA bundle the scheduler's certificate is verified against")
	fs.StringVar(&cfg.Security.ServerName, "tls-server-name", "", "verify the scheduler's certificate for this `name` instead of --scheduler's host")
	for _, n := range []string{"tls-cert", "tls-key", "tls-ca"} {
		c.MarkFlagFilename(n)
	}
	c.MarkFlagDirname("cache-dir")
	noFileCompletion(c, "scheduler", "concurrency", "id", "metrics-listen", "job-timeout", "tls-server-name")
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
integers are strings).

A scheduler serving TLS answers the operator and the Shale components of its
namespace: give --tls-ca and a certificate (--tls-cert, --tls-key), or a
client config file (--config, default $SHALE_CONFIG) naming them.`,
		Example: `  shale compactor stats --scheduler 127.0.0.1:7080
  shale compactor stats --scheduler 127.0.0.1:7080 -o json | jq .total
  shale compactor stats --scheduler shale-compactor.shale:7080 --tls-ca ca.crt --tls-cert tls.crt --tls-key tls.key`,
		Args: exactArgs(),
	}
	c.Flags().StringVar(&addr, "scheduler", "127.0.0.1:7080", "the scheduler's gRPC `address`")
	c.Flags().Var(newDuration(&timeout, 10*time.Second), "timeout", "deadline of the request")
	cf := addClientFlags(c, c.Flags(), "scheduler")
	for _, n := range []string{"config", "tls-ca", "tls-cert", "tls-key", "token-file"} {
		c.MarkFlagFilename(n)
	}
	noFileCompletion(c, "scheduler", "timeout")
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		sec, err := cf.resolve(&addr)
		if err != nil {
			return err
		}
		opts, err := sec.DialOptions()
		if err != nil {
			return usageErrorf("compactor stats: %v", err)
		}
		conn, err := grpc.NewClient(addr, opts...)
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
				hint := "is `shale compactor scheduler` or `shale dev` running? set --scheduler"
				if !sec.TLS.Enabled() {
					hint += "; if it serves TLS, give --tls-ca and a certificate"
				}
				return fmt.Errorf("cannot reach a compactor scheduler at %s: %s (%s)", addr, status.Convert(err).Message(), hint)
			case codes.DeadlineExceeded:
				return fmt.Errorf("no answer from %s within %s (--timeout)", addr, timeout)
			case codes.Unauthenticated, codes.PermissionDenied:
				return fmt.Errorf("the compactor scheduler at %s refused: %s", addr, status.Convert(err).Message())
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
