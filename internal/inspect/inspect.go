// Package inspect reads a database in its object store, with no server
// running and writing nothing, and prints what it finds: the fencing
// state (`shale admin fence-status`) and the tables per storage tier
// (`shale admin tiers`). cmd/shale wires the flags and picks text or JSON.
package inspect

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Fence is the fencing state of a database.
type Fence struct {
	URL    string // the database's, normalized
	Status shalefs.FenceStatus
}

// ReadFence reads the epoch claims of the database at db (--db).
func ReadFence(db string) (*Fence, error) {
	store, err := objstore.Open(db)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := shalefs.ReadFenceStatus(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("read fence status of %s: %w", store.URL(), err)
	}
	return &Fence{URL: store.URL(), Status: st}, nil
}

// Print writes the fencing state as text; ages are as of now.
func (f *Fence) Print(w io.Writer, now time.Time) {
	st := f.Status
	if st.Epoch == 0 {
		fmt.Fprintf(w, "epoch:     0 (no owner has opened %s yet)\n", f.URL)
		return
	}
	fmt.Fprintf(w, "epoch:     %d\n", st.Epoch)
	fmt.Fprintf(w, "taken at:  %s (%s ago)\n", st.TakenAt.Format(time.RFC3339), now.Sub(st.TakenAt).Round(time.Second))
	fmt.Fprintf(w, "owner:     %s\n", st.Owner)
	if st.Released {
		fmt.Fprintln(w, "state:     released (the owner shut down cleanly)")
	} else {
		fmt.Fprintln(w, "state:     held (an owner may be serving; a new owner must use a higher epoch)")
	}
}

// ReadTiers lists the live tables of the database at db in its hot and
// cold tiers. Without coldDB it uses the cold tier the database recorded,
// reached at coldEndpoint when that is given (--cold-db, --cold-endpoint).
func ReadTiers(db, coldDB, coldEndpoint string) (*shalefs.TierStatus, error) {
	hot, err := objstore.Open(db)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if coldDB == "" {
		if coldDB, err = shalefs.RecordedColdTier(ctx, hot); err != nil {
			return nil, fmt.Errorf("read the cold tier record of %s: %w", hot.URL(), err)
		}
	}
	var cold objstore.Store
	if coldDB != "" {
		if cold, err = shalefs.OpenTierStore(coldDB, coldEndpoint); err != nil {
			return nil, fmt.Errorf("--cold-db: %w", err)
		}
	}
	st, err := shalefs.ReadTierStatus(ctx, hot, cold)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hot.URL(), err)
	}
	return &st, nil
}

// PrintTiers writes st as text: a row per tier, the cold share and the
// age of the oldest hot data as of now.
func PrintTiers(w io.Writer, st *shalefs.TierStatus, now time.Time) {
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
		fmt.Fprintf(w, "oldest hot data:  written %s ago (%s, in %s)\n", now.Sub(st.OldestHotData).Round(time.Second), st.OldestHotData.UTC().Format(time.RFC3339), st.OldestHotTable)
	}
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
