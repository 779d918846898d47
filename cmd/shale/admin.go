package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

const adminUsage = `Usage: shale admin COMMAND [flags]

Commands:
  fence-status --db URL [--json]   print the database's current fencing epoch and owner
`

func runAdmin(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, adminUsage)
		return errUsage
	}
	switch args[0] {
	case "fence-status":
		fs := newFlags("admin fence-status", "shale admin fence-status --db URL [--json]", stderr)
		db := fs.String("db", "", "database location: s3://BUCKET/PREFIX or file:///ABS/PATH (required)")
		asJSON := fs.Bool("json", false, "print JSON")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return err
		}
		if err := wantArgs(fs, pos); err != nil {
			return err
		}
		if *db == "" {
			fmt.Fprintln(stderr, "admin fence-status: --db is required")
			fs.Usage()
			return errUsage
		}
		store, err := objstore.Open(*db)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := shalefs.ReadFenceStatus(ctx, store)
		if err != nil {
			return fmt.Errorf("read fence status of %s: %w", store.URL(), err)
		}
		if *asJSON {
			b, _ := json.MarshalIndent(st, "", "  ")
			fmt.Fprintln(stdout, string(b))
			return nil
		}
		if st.Epoch == 0 {
			fmt.Fprintf(stdout, "epoch:     0 (no owner has opened %s yet)\n", store.URL())
			return nil
		}
		fmt.Fprintf(stdout, "epoch:     %d\n", st.Epoch)
		fmt.Fprintf(stdout, "taken at:  %s (%s ago)\n", st.TakenAt.Format(time.RFC3339), time.Since(st.TakenAt).Round(time.Second))
		fmt.Fprintf(stdout, "owner:     %s\n", st.Owner)
		if st.Released {
			fmt.Fprintln(stdout, "state:     released (the owner shut down cleanly)")
		} else {
			fmt.Fprintln(stdout, "state:     held (an owner may be serving; a new owner must use a higher epoch)")
		}
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, adminUsage)
		return nil
	}
	fmt.Fprintf(stderr, "shale admin: unknown command %q\n\n%s", args[0], adminUsage)
	return errUsage
}
