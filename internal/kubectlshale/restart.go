package kubectlshale

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func restartCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "restart NAME",
		Short: "Restart every Pod of the database without a failover: secondaries one at a time, then the primary by switchover (annotation shale.rocks/restartedAt)",
		Long: "Sets shale.rocks/restartedAt to the current time on the RocksDB. The operator copies it into the primary's and the secondaries' Pod templates, where it enters their spec hashes, so the restart rolls like any other update: the secondaries one at a time, then, once they have rolled out, the primary by switchover (a warmed standby takes the next epoch; no failover is counted; clients see only retryable errors).\n" +
			"spec.primaryUpdateStrategy is respected: with supervised, the operator restarts the secondaries, marks the primary outdated (condition PrimaryUpToDate False) and waits, as for any update, until you run `kubectl shale switchover NAME`.\n" +
			"With --wait the command returns once the primary runs with the restart (PrimaryUpToDate True) and the secondaries have rolled out; supervised, once the secondaries have, saying that the primary waits for a switchover.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := open(cmd)
			if err != nil {
				return err
			}
			return p.restart(cmd.Context(), args[0], wait)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait this long for the restart to finish (0: return once asked)")
	return cmd
}

func (p *plugin) restart(ctx context.Context, name string, wait time.Duration) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	if db.DeletionTimestamp != nil {
		return fmt.Errorf("RocksDB %s is being deleted", name)
	}
	for _, a := range []string{shalev1.AnnotationFenced, shalev1.AnnotationHibernation} {
		if v, ok := db.Annotations[a]; ok {
			return fmt.Errorf("RocksDB %s has %s=%s: no primary runs to restart; kubectl shale unfence|resume %s first", name, a, v, name)
		}
	}
	token := p.now().UTC().Format(time.RFC3339)
	if db.Annotations[shalev1.AnnotationRestartedAt] == token {
		// Twice in one second: the same value would roll nothing.
		token = p.now().UTC().Format(time.RFC3339Nano)
	}
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	db.Annotations[shalev1.AnnotationRestartedAt] = token
	if err := p.c.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("annotate RocksDB %s: %w", name, err)
	}
	supervised := db.Spec.PrimaryUpdateStrategy == shalev1.PrimaryUpdateSupervised
	fmt.Fprintf(p.out, "restart of %s/%s asked (%s=%s)\n", db.Namespace, name, shalev1.AnnotationRestartedAt, token)
	if supervised {
		fmt.Fprintf(p.out, "primaryUpdateStrategy is supervised: the secondaries restart, then the primary waits for `kubectl shale switchover %s`\n", name)
	}
	if wait <= 0 {
		return nil
	}
	// The deadline bounds the waiting, not each read: a read cut short by
	// it would hide where the restart stood.
	deadline, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		st := p.restartState(ctx, name, token)
		if st.why != last {
			last = st.why
			fmt.Fprintf(p.out, "  %s\n", st.why)
		}
		if st.secondariesDone && (st.primaryDone || supervised) {
			if st.primaryDone {
				fmt.Fprintf(p.out, "%s restarted: primary %s at epoch %d\n", name, st.primary, st.epoch)
			} else {
				fmt.Fprintf(p.out, "%s: secondaries restarted; the primary waits for `kubectl shale switchover %s` (supervised)\n", name, name)
			}
			return nil
		}
		select {
		case <-deadline.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the restart of %s did not finish within %s (%s); kubectl shale status %s shows where it stands", name, wait, st.why, name)
		case <-tick.C:
		}
	}
}

// restartProgress is where a restart with token stands.
type restartProgress struct {
	secondariesDone, primaryDone bool
	primary                      string
	epoch                        int64
	why                          string
}

// restartState reads whether the secondaries' Deployment carries token and
// has rolled out, and whether the serving primary's Pod carries it with
// PrimaryUpToDate True: the condition alone may still be the one from
// before the operator saw the annotation.
func (p *plugin) restartState(ctx context.Context, name, token string) restartProgress {
	var st restartProgress
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		st.why = err.Error()
		return st
	}
	st.secondariesDone, st.why = secondariesRestarted(ctx, p.c, db, token)
	if !st.secondariesDone {
		return st
	}
	st.primary, st.epoch = db.Status.CurrentPrimary, db.Status.Epoch
	var pod corev1.Pod
	switch {
	case st.primary == "":
		st.why = "secondaries restarted; no current primary"
	case p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: st.primary}, &pod) != nil:
		st.why = "secondaries restarted; primary Pod " + st.primary + " not found"
	case pod.Annotations[shalev1.AnnotationRestartedAt] != token:
		st.why = "secondaries restarted; primary " + st.primary + " not restarted yet" + conditionNote(db, shalev1.ConditionPrimaryUpToDate)
	case !db.ConditionTrue(shalev1.ConditionPrimaryUpToDate) || !db.ConditionTrue(shalev1.ConditionReady):
		st.why = "primary " + st.primary + " restarted, not ready yet" + conditionNote(db, shalev1.ConditionPrimaryUpToDate)
	default:
		st.primaryDone, st.why = true, "primary "+st.primary+" restarted"
	}
	return st
}

// secondariesRestarted: no secondaries, or their Deployment's template
// carries token and every replica is updated and available.
func secondariesRestarted(ctx context.Context, c client.Client, db *shalev1.RocksDB, token string) (bool, string) {
	if db.Spec.Secondaries.Replicas == 0 {
		return true, "no secondaries"
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.SecondaryDeploymentName()}, &d); err != nil {
		return false, "secondaries: " + err.Error()
	}
	want := db.Spec.Secondaries.Replicas
	switch {
	case d.Spec.Template.Annotations[shalev1.AnnotationRestartedAt] != token:
		return false, "secondaries: the operator has not updated their Deployment yet"
	case d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want || d.Status.Replicas > want:
		return false, fmt.Sprintf("secondaries: %d of %d restarted and available", min(d.Status.UpdatedReplicas, d.Status.AvailableReplicas), want)
	}
	return true, "secondaries restarted"
}

// conditionNote is ": TYPE REASON: MESSAGE" when the condition is there.
func conditionNote(db *shalev1.RocksDB, typ string) string {
	if c := db.Condition(typ); c != nil {
		return fmt.Sprintf(" (%s %s: %s)", typ, c.Reason, c.Message)
	}
	return ""
}
