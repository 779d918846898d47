package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/primary"
)

// fenceTimeout bounds a fence: a takeover (its lease wait included)
// without RocksDB.
const fenceTimeout = 10 * time.Minute

func newFenceCmd() *cobra.Command {
	var cfg primary.FenceConfig
	c := &cobra.Command{
		Use:   "fence --db URL",
		Short: "Fence the database: stop every primary from writing, leaving none (docs/rfcs/0014-hibernation-and-fencing.md)",
		Long: `Fence takes ownership of the database at --db the way a new primary does,
but opens no RocksDB: it claims the next epoch (or --epoch), seals every log of
every earlier owner, waits out their read leases, then releases the epoch and
exits 0, printing it. From then on no primary of an earlier epoch can write
(the store refuses its appends past the seals) or serve a read (its lease ran
out), and the next primary opens without waiting out a lease.

Fence a primary you do not trust any more (a partitioned node, an incident)
without asking it anything. In Kubernetes, annotate the RocksDB instead
(shale.rocks/fenced: "true", or kubectl shale fence NAME): the operator runs
this command in a Pod and starts no primary until the annotation is removed.`,
		Example: `  shale fence --db s3://my-bucket/orders
  shale fence --db file:///srv/shale/orders --existing`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if cfg.DB == "" {
				return usageErrorf("fence: --db is required (s3://BUCKET/PREFIX or file:///ABS/PATH)")
			}
			cfg.Logger = newLogger(c.ErrOrStderr())
			ctx, stop := signalContext()
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
			defer cancel()
			rep, err := primary.Fence(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "fenced %s at epoch %d (waited %s for earlier owners' leases); released: the next primary waits no lease\n",
				cfg.DB, rep.Epoch, rep.LeaseWaited.Round(time.Millisecond))
			return nil
		},
	}
	fs := c.Flags()
	st := &cfg.Storage
	fs.StringVar(&cfg.DB, "db", "", "database location `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	fs.Var(uintValue{&st.Epoch}, "epoch", "fencing epoch to claim; must exceed every epoch in storage (0: the next one)")
	fs.BoolVar(&st.Existing, "existing", false, "the database exists: refuse a location that does not hold it, before claiming anything")
	fs.StringVar(&st.CacheDir, "cache-dir", "", "scratch `directory` (default: a temporary one, removed on exit); nothing of the database is kept")
	fs.Var(newDuration(&st.Lease, 5*time.Second), "lease", "the read lease recorded with the claim: what the next primary waits if this fence could not record its release")
	fs.Var(newDuration(&st.ReadTimeout, 10*time.Second), "read-timeout", "deadline of one read from the store")
	fs.Var(newDuration(&st.WriteTimeout, time.Minute), "write-timeout", "deadline of one write to the store")
	fs.Var(newDuration(&st.RetryFor, 5*time.Minute), "retry-for", "keep retrying a failed request this long")
	coldTierFlags(c, &cfg.ColdDB, &cfg.ColdEndpoint)
	c.MarkFlagDirname("cache-dir")
	noFileCompletion(c, "db", "epoch", "lease", "read-timeout", "write-timeout", "retry-for")
	return c
}
