package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/inspect"
)

func newAdminCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "admin",
		Short: "Inspect a database in its object store; make certificates and tokens",
		Args:  cobra.ArbitraryArgs,
		RunE:  runGroup,
	}
	c.AddCommand(newFenceStatusCmd(), newTiersCmd(), newCheckpointCmd(), newAdminCACmd(), newAdminCertCmd(), newAdminTokenCmd())
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
		f, err := inspect.ReadFence(db)
		if err != nil {
			return err
		}
		if output() == outputJSON {
			return printJSON(c.OutOrStdout(), f.Status)
		}
		f.Print(c.OutOrStdout(), time.Now())
		return nil
	}
	return c
}
