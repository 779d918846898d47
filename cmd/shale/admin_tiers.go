package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/inspect"
)

// The reader behind `shale admin tiers` is internal/inspect; this file
// wires its flags.

func newTiersCmd() *cobra.Command {
	var db, coldDB, coldEndpoint string
	c := &cobra.Command{
		Use:   "tiers --db URL [--cold-db URL]",
		Short: "Print the database's tables and bytes per storage tier",
		Long: `Tiers lists the live tables of the database at --db in its hot and cold
tiers (docs/tiering.md) and prints, per tier, the files and bytes, the share of
bytes that is cold, and when the oldest data still in the hot tier was written.
It needs no running server and writes nothing.

Without --cold-db it uses the cold location the database recorded when its
cold tier was created, with the credentials and endpoint of the environment
(--cold-endpoint overrides the endpoint).`,
		Example: `  shale admin tiers --db file:///srv/shale/orders --cold-db file:///srv/shale-cold/orders
  shale admin tiers --db s3://hot/orders --cold-endpoint http://hdd-minio:9000 -o json`,
		Args: exactArgs(),
	}
	c.Flags().StringVar(&db, "db", "", "database location `URL`: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
	noFileCompletion(c, "db")
	coldTierFlags(c, &coldDB, &coldEndpoint)
	output := addOutputFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		if db == "" {
			return usageErrorf("admin tiers: --db is required (s3://BUCKET/PREFIX or file:///ABS/PATH)")
		}
		st, err := inspect.ReadTiers(db, coldDB, coldEndpoint)
		if err != nil {
			return err
		}
		if output() == outputJSON {
			return printJSON(c.OutOrStdout(), st)
		}
		inspect.PrintTiers(c.OutOrStdout(), st, time.Now())
		return nil
	}
	return c
}
