package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

func newAdminCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "admin",
		Short: "Inspect a database in its object store; make certificates and tokens",
		Args:  cobra.ArbitraryArgs,
		RunE:  runGroup,
	}
	c.AddCommand(newFenceStatusCmd(), newTiersCmd(), newAdminCACmd(), newAdminCertCmd(), newAdminTokenCmd())
	return c
}

func newFenceStatusCmd() *cobra.Command {
	var db string
	c := &cobra.Command{
		Use:   "fence-status --db URL",
		Short: "Print the database's current fencing epoch and owner",
		Long: `Fence-status reads the epoch claims in the store at --db and prints the
current epoch, when and by whom it was taken, and whether its owner released
it. It needs no running server. --json is a deprecated spelling of -o json.`,
		Example: `  shale admin fence-status --db file:///srv/shale/orders
  shale admin fence-status --db s3://my-bucket/orders -o json`,
		Args: exactArgs(),
	}
	c.Flags().StringVar(&db, "db", "", "database location `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	noFileCompletion(c, "db")
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		if db == "" {
			return usageErrorf("admin fence-status: --db is required (s3://BUCKET/PREFIX or file:///ABS/PATH)")
		}
		store, err := objstore.Open(db)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := shalefs.ReadFenceStatus(ctx, store)
		if err != nil {
			return fmt.Errorf("read fence status of %s: %w", store.URL(), err)
		}
		w := c.OutOrStdout()
		if output() == outputJSON {
			return printJSON(w, st)
		}
		if st.Epoch == 0 {
			fmt.Fprintf(w, "epoch:     0 (no owner has opened %s yet)\n", store.URL())
			return nil
		}
		fmt.Fprintf(w, "epoch:     %d\n", st.Epoch)
		fmt.Fprintf(w, "taken at:  %s (%s ago)\n", st.TakenAt.Format(time.RFC3339), time.Since(st.TakenAt).Round(time.Second))
		fmt.Fprintf(w, "owner:     %s\n", st.Owner)
		if st.Released {
			fmt.Fprintln(w, "state:     released (the owner shut down cleanly)")
		} else {
			fmt.Fprintln(w, "state:     held (an owner may be serving; a new owner must use a higher epoch)")
		}
		return nil
	}
	return c
}
