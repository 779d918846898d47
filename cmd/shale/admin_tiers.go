package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

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
		hot, err := objstore.Open(db)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if coldDB == "" {
			if coldDB, err = shalefs.RecordedColdTier(ctx, hot); err != nil {
				return fmt.Errorf("read the cold tier record of %s: %w", hot.URL(), err)
			}
		}
		var cold objstore.Store
		if coldDB != "" {
			if cold, err = shalefs.OpenTierStore(coldDB, coldEndpoint); err != nil {
				return fmt.Errorf("--cold-db: %w", err)
			}
		}
		st, err := shalefs.ReadTierStatus(ctx, hot, cold)
		if err != nil {
			return fmt.Errorf("%s: %w", hot.URL(), err)
		}
		w := c.OutOrStdout()
		if output() == outputJSON {
			return printJSON(w, st)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIER\tFILES\tBYTES\tLOCATION")
		for _, t := range st.Tiers {
			loc := t.Location
			if loc == "" {
				loc = "(none: start the primary with --cold-db and --cold-after)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", t.Tier, t.Files, byteCount(t.Bytes), loc)
		}
		tw.Flush()
		fmt.Fprintf(w, "\ncold share:       %.1f%% of table bytes\n", 100*st.ColdFraction)
		if st.OldestHotData.IsZero() {
			fmt.Fprintln(w, "oldest hot data:  - (no hot table)")
		} else {
			fmt.Fprintf(w, "oldest hot data:  written %s ago (%s, in %s)\n", time.Since(st.OldestHotData).Round(time.Second), st.OldestHotData.UTC().Format(time.RFC3339), st.OldestHotTable)
		}
		return nil
	}
	return c
}

// byteCount prints n in B, KiB, MiB or GiB with one decimal.
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 2; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMG"[exp])
}
