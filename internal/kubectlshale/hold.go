package kubectlshale

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Fencing and hibernation by hand (docs/rfcs/0014-hibernation-and-fencing.md):
// the plugin sets or removes the annotation the operator acts on, then
// follows status.hold until the operator got there.

// holdOp is one of fence, unfence, hibernate, resume.
type holdOp struct {
	use, short, long string
	annotation       string
	value            string // "" removes the annotation
}

var holdOps = []holdOp{
	{use: "fence NAME", annotation: shalev1.AnnotationFenced, value: "true",
		short: "Fence the database: delete its primary and claim an epoch in the store so no earlier primary can write (shale.rocks/fenced)",
		long: "Sets shale.rocks/fenced=true. The operator deletes the primary Pod without asking it anything, runs `shale fence` in a Pod (it claims the next epoch, seals every log and waits out the old primary's read lease, then releases the epoch) and starts no primary until `kubectl shale unfence`. Secondaries keep serving reads.\n" +
			"With --wait (the default, 5m) the command returns once the database is fenced, or says why it is not."},
	{use: "unfence NAME", annotation: shalev1.AnnotationFenced,
		short: "Lift a fence: the operator starts a primary of the next epoch (shale.rocks/fenced removed)",
		long:  "Removes shale.rocks/fenced. The operator starts a primary of the next epoch, which opens the database without waiting out a lease (the fence released its epoch).\nWith --wait the command returns once the database is Ready (or hibernated, if it is)."},
	{use: "hibernate NAME", annotation: shalev1.AnnotationHibernation, value: "on",
		short: "Hibernate the database: the primary steps down, no Pod of it runs (shale.rocks/hibernation=on)",
		long: "Sets shale.rocks/hibernation=on. The operator asks the primary to step down (writes stop, memtables are flushed, the database is released), deletes it and scales the secondaries to 0; a primary that cannot step down (not ready) is fenced instead. Nothing of the database then talks to the store.\n" +
			"With --wait (the default, 5m) the command returns once the database is hibernated, or says why it is not."},
	{use: "resume NAME", annotation: shalev1.AnnotationHibernation,
		short: "Wake a hibernated database: a primary of the next epoch, the secondaries back (shale.rocks/hibernation removed)",
		long:  "Removes shale.rocks/hibernation. The operator starts a primary of the next epoch (no lease wait: the database was released) and the secondaries.\nWith --wait the command returns once the database is Ready (or fenced, if it is)."},
}

func holdCommands(open func(*cobra.Command) (*plugin, error)) []*cobra.Command {
	var cmds []*cobra.Command
	for _, op := range holdOps {
		var wait time.Duration
		cmd := &cobra.Command{
			Use: op.use, Short: op.short, Long: op.long,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				p, err := open(cmd)
				if err != nil {
					return err
				}
				return p.hold(cmd.Context(), op, args[0], wait)
			},
		}
		cmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "wait this long for the operator to get there (0: return once asked)")
		cmds = append(cmds, cmd)
	}
	return cmds
}

func (p *plugin) hold(ctx context.Context, op holdOp, name string, wait time.Duration) error {
	verb := strings.Fields(op.use)[0]
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	if db.DeletionTimestamp != nil {
		return fmt.Errorf("RocksDB %s is being deleted: nothing to %s", name, verb)
	}
	cur, set := db.Annotations[op.annotation]
	if op.value == "" && !set {
		what := "fenced"
		if op.annotation == shalev1.AnnotationHibernation {
			what = "hibernated"
		}
		return fmt.Errorf("RocksDB %s is not %s (it has no %s annotation); kubectl shale status %s shows its state", name, what, op.annotation, name)
	}
	if op.value != "" && cur == op.value {
		fmt.Fprintf(p.out, "%s/%s already has %s=%s\n", db.Namespace, name, op.annotation, op.value)
	} else {
		patch := client.MergeFrom(db.DeepCopy())
		if db.Annotations == nil {
			db.Annotations = map[string]string{}
		}
		if op.value == "" {
			delete(db.Annotations, op.annotation)
		} else {
			db.Annotations[op.annotation] = op.value
		}
		if err := p.c.Patch(ctx, db, patch); err != nil {
			return fmt.Errorf("annotate RocksDB %s: %w", name, err)
		}
		if op.value == "" {
			fmt.Fprintf(p.out, "%s of %s/%s asked (%s removed), at epoch %d\n", verb, db.Namespace, name, op.annotation, db.Status.Epoch)
		} else {
			fmt.Fprintf(p.out, "%s of %s/%s asked (%s=%s), at epoch %d\n", verb, db.Namespace, name, op.annotation, op.value, db.Status.Epoch)
		}
	}
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		if got, err := p.rocksDB(ctx, name); err == nil {
			db = got
			if h := db.Status.Hold; h != nil && string(h.Phase) != last {
				last = string(h.Phase)
				fmt.Fprintf(p.out, "  %s: epoch %d\n", h.Phase, h.Epoch)
			}
			if done, msg := holdDone(op, db); done {
				fmt.Fprintln(p.out, msg)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			why := "phase " + orDash(string(db.Status.Phase))
			if c := db.Condition(shalev1.ConditionReady); c != nil {
				why += ", Ready " + string(c.Status) + " " + c.Reason + ": " + c.Message
			}
			return fmt.Errorf("%s of %s did not finish within %s (%s); kubectl shale status %s shows where it stands", verb, name, wait, why, name)
		case <-tick.C:
		}
	}
}

// holdDone reports whether the operator got where op asked, and says so.
func holdDone(op holdOp, db *shalev1.RocksDB) (bool, string) {
	h := db.Status.Hold
	switch {
	case op.value != "":
		// The hold and the phase are written by separate status updates:
		// wait for both, so what is printed (and what a script reads
		// next) says Hibernated or Fenced, never the Ready before it.
		held := db.Status.Phase == shalev1.PhaseHibernated || db.Status.Phase == shalev1.PhaseFenced
		if h != nil && h.Phase == shalev1.HoldHeld && held {
			return true, fmt.Sprintf("%s is %s at epoch %d: no primary runs", db.Name, strings.ToLower(string(db.Status.Phase)), h.Epoch)
		}
	case h == nil && db.ConditionTrue(shalev1.ConditionReady):
		return true, fmt.Sprintf("%s serves at epoch %d (%s)", db.Name, db.Status.Epoch, db.Status.CurrentPrimary)
	case h != nil && h.Phase == shalev1.HoldHeld && (db.Annotations[shalev1.AnnotationFenced] == "true" || db.Annotations[shalev1.AnnotationHibernation] == "on"):
		// The other hold is still asked for: nothing more will happen.
		return true, fmt.Sprintf("%s stays %s (the other annotation holds it)", db.Name, strings.ToLower(string(db.Status.Phase)))
	}
	return false, ""
}
