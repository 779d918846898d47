package kubectlshale

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func switchoverCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "switchover NAME",
		Short: "Move the primary to a fresh, warmed Pod without a failover (annotation shale.rocks/switchover; docs/rfcs/0012-switchover.md)",
		Long: "Asks the operator for a switchover: it starts a standby Pod, warms its cache, then the primary stops taking writes, flushes and releases the database, and the standby takes the next epoch without waiting out a lease. Clients see only retryable errors.\n" +
			"With --wait (the default, 5m) the command returns once the new primary serves, or says why it did not.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := open(cmd)
			if err != nil {
				return err
			}
			return p.switchover(cmd.Context(), args[0], wait)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for the new primary to serve (0: return once asked)")
	return cmd
}

func (p *plugin) switchover(ctx context.Context, name string, wait time.Duration) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	if db.DeletionTimestamp != nil {
		return fmt.Errorf("RocksDB %s is being deleted", name)
	}
	if !db.ConditionTrue(shalev1.ConditionReady) {
		return fmt.Errorf("RocksDB %s is not Ready (phase %s): a switchover hands over from a serving primary; see kubectl shale status %s", name, orDash(string(db.Status.Phase)), name)
	}
	from := db.Status.Epoch
	token := p.now().UTC().Format(time.RFC3339Nano)
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[shalev1.AnnotationSwitchover] = token
	if err := p.c.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("annotate RocksDB %s: %w", name, err)
	}
	fmt.Fprintf(p.out, "switchover of %s/%s asked (%s=%s), from epoch %d\n", db.Namespace, name, shalev1.AnnotationSwitchover, token, from)
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastPhase := ""
	cur := db
	for {
		if got, err := p.rocksDB(ctx, name); err == nil {
			cur = got
			if s := cur.Status.Switchover; s != nil && string(s.Phase) != lastPhase {
				lastPhase = string(s.Phase)
				fmt.Fprintf(p.out, "  %s: epoch %d to %d\n", s.Phase, s.FromEpoch, s.ToEpoch)
			}
			if cur.Status.Epoch > from && cur.ConditionTrue(shalev1.ConditionReady) && cur.Status.Switchover == nil {
				fmt.Fprintf(p.out, "%s serves at epoch %d (%s)\n", name, cur.Status.Epoch, cur.Status.CurrentPrimary)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			c := cur.Condition(shalev1.ConditionSwitchover)
			why := "no Switchover condition"
			if c != nil {
				why = c.Reason + ": " + c.Message
			}
			return fmt.Errorf("the switchover of %s did not finish within %s (%s); kubectl shale status %s shows where it stands", name, wait, why, name)
		case <-tick.C:
		}
	}
}
