package kubectlshale

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func statusCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var events int
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "One screen: phase, epoch, primary, secondaries and their lag, compaction, tiers, checkpoints, recent events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := open(cmd)
			if err != nil {
				return err
			}
			return p.status(cmd.Context(), args[0], events)
		},
	}
	cmd.Flags().IntVar(&events, "events", 8, "how many of the latest events to show")
	return cmd
}

func (p *plugin) status(ctx context.Context, name string, nEvents int) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	defer w.Flush()
	phase := string(db.Status.Phase)
	if phase == "" {
		phase = "Pending"
	}
	fmt.Fprintf(w, "RocksDB\t%s/%s\t%s, epoch %d, %d failovers%s\n", db.Namespace, db.Name, phase, db.Status.Epoch, db.Status.Failovers, p.since(" (last %s ago)", db.Status.LastFailoverTime))
	if db.DeletionTimestamp != nil {
		fmt.Fprintf(w, "\tbeing deleted (reclaim policy %s)\n", db.EffectiveReclaimPolicy())
	}
	if h := db.Status.Hold; h != nil {
		fmt.Fprintf(w, "Hold\t%s\t%s at epoch %d, since %s ago; lift it with kubectl shale unfence|resume %s\n", h.Phase, h.Reason, h.Epoch, duration.HumanDuration(p.now().Sub(h.StartedAt.Time)), db.Name)
	}
	if s := db.Status.Switchover; s != nil {
		fmt.Fprintf(w, "Switchover\t%s\tepoch %d to %d (%s), started %s ago\n", s.Phase, s.FromEpoch, s.ToEpoch, s.Reason, duration.HumanDuration(p.now().Sub(s.StartedAt.Time)))
	}

	// The primary.
	if db.Status.CurrentPrimary == "" {
		fmt.Fprintf(w, "Primary\tnone yet\n")
	} else {
		var pod corev1.Pod
		if err := p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Status.CurrentPrimary}, &pod); err != nil {
			fmt.Fprintf(w, "Primary\t%s\t(%v)\n", db.Status.CurrentPrimary, err)
		} else {
			fmt.Fprintf(w, "Primary\t%s\t%s\n", pod.Name, podSummary(&pod, p.now()))
		}
	}

	// Where the data lives.
	fmt.Fprintf(w, "Storage\t%s\tObjectStore %s, reclaim %s\n", orDash(db.Status.StoragePath), db.Spec.ObjectStoreRef.Name, db.EffectiveReclaimPolicy())
	if db.Status.ColdStoragePath != "" {
		fmt.Fprintf(w, "\t%s\tcold tier\n", db.Status.ColdStoragePath)
	}
	if c := db.Status.Clone; c != nil {
		fmt.Fprintf(w, "Clone of\t%s\tcheckpoint %s\n", c.Database, c.Checkpoint)
	}
	for _, t := range db.Status.Tiers {
		fmt.Fprintf(w, "Tier %s\t%d files\t%s\n", t.Tier, t.Files, bytesString(t.Bytes))
	}

	// Conditions: the ones not as they should be first, all of them shown.
	fmt.Fprintf(w, "Conditions\n")
	conds := append([]metav1.Condition(nil), db.Status.Conditions...)
	sort.SliceStable(conds, func(i, j int) bool {
		return conds[i].Status != conds[j].Status && conds[j].Status == metav1.ConditionTrue
	})
	for _, c := range conds {
		fmt.Fprintf(w, "  %s\t%s\t%s: %s\n", c.Type, c.Status, c.Reason, shorten(c.Message, 100))
	}

	// Secondaries.
	fmt.Fprintf(w, "Secondaries\t%d of %d ready\n", db.Status.Secondaries, db.Spec.Secondaries.Replicas)
	for _, s := range db.Status.SecondaryStatus {
		lag := "-"
		if s.Lag != nil {
			lag = s.Lag.Duration.String()
		}
		line := fmt.Sprintf("  %s\tapplied %d\tbehind %d (%s)", s.Pod, s.AppliedSequence, s.LagSequences, lag)
		if s.Error != "" {
			line += "\terror: " + shorten(s.Error, 80)
		}
		fmt.Fprintln(w, line)
	}

	// Compaction.
	if ref := db.Spec.Compaction.CompactorPoolRef; ref != nil {
		line := fmt.Sprintf("Compaction\tpool %s", ref.Name)
		if c := db.Status.Compaction; c != nil {
			line += fmt.Sprintf("\tqueued %d, running %d, completed %d, failed %d, fallbacks %d", c.QueueDepth, c.Running, c.Completed, c.Failed, c.Fallbacks)
		}
		fmt.Fprintln(w, line)
	} else {
		fmt.Fprintf(w, "Compaction\t%s\n", orDash(string(db.Spec.Compaction.Mode)))
	}

	// Checkpoints of this database.
	var cks shalev1.CheckpointList
	if err := p.c.List(ctx, &cks, client.InNamespace(db.Namespace)); err != nil {
		fmt.Fprintf(w, "Checkpoints\t(%v)\n", err)
	} else {
		var mine []shalev1.Checkpoint
		for _, c := range cks.Items {
			if c.Spec.Database == db.Name {
				mine = append(mine, c)
			}
		}
		sort.Slice(mine, func(i, j int) bool { return mine[i].CreationTimestamp.Before(&mine[j].CreationTimestamp) })
		if len(mine) == 0 {
			fmt.Fprintf(w, "Checkpoints\tnone\n")
		} else {
			last := mine[len(mine)-1]
			fmt.Fprintf(w, "Checkpoints\t%d\tlast %s: %s, sequence %d%s\n", len(mine), last.Name, orDash(string(last.Status.Phase)), last.Status.Sequence, p.since(", %s ago", last.Status.Time))
		}
	}

	// Recent events of the database and its Pods.
	if nEvents > 0 {
		evs, err := p.events(ctx, db)
		if err != nil {
			fmt.Fprintf(w, "Events\t(%v)\n", err)
		} else {
			if len(evs) > nEvents {
				evs = evs[len(evs)-nEvents:]
			}
			fmt.Fprintf(w, "Events\t%d shown\n", len(evs))
			for _, e := range evs {
				fmt.Fprintf(w, "  %s ago\t%s\t%s %s\t%s\n", duration.HumanDuration(p.now().Sub(eventTime(&e))), e.Type, e.InvolvedObject.Kind, e.Reason, shorten(e.Message, 100))
			}
		}
	}
	return nil
}

// events of the database and of the objects the operator makes for it,
// oldest first. Names are matched exactly or by the operator's own
// patterns (NAME-primary-EPOCH, NAME-secondary-...), so the events of
// another database whose name starts with this one's (orders-archive for
// orders) are not shown.
func (p *plugin) events(ctx context.Context, db *shalev1.RocksDB) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := p.c.List(ctx, &list, client.InNamespace(db.Namespace)); err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if ofDatabase(db.Name, e.InvolvedObject.Kind, e.InvolvedObject.Name) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(&out[i]).Before(eventTime(&out[j])) })
	return out, nil
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// podSummary: phase, readiness, node, restarts, age.
func podSummary(pod *corev1.Pod, now time.Time) string {
	ready := "not ready"
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = "ready"
		}
	}
	var restarts int32
	for _, s := range pod.Status.ContainerStatuses {
		restarts += s.RestartCount
	}
	node := pod.Spec.NodeName
	if node == "" {
		node = "(not scheduled)"
	}
	return fmt.Sprintf("%s, %s, node %s, %d restarts, age %s", orDash(string(pod.Status.Phase)), ready, node, restarts, duration.HumanDuration(now.Sub(pod.CreationTimestamp.Time)))
}

func (p *plugin) since(format string, t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return fmt.Sprintf(format, duration.HumanDuration(p.now().Sub(t.Time)))
}

func bytesString(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String() + "B"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// ofDatabase says whether an object of kind and name is the database
// itself or one the operator makes for it.
func ofDatabase(db, kind, name string) bool {
	switch kind {
	case "RocksDB":
		return name == db
	case "Service":
		return name == db+"-rw" || name == db+"-ro"
	case "PodDisruptionBudget":
		return name == db+"-primary" || name == db+"-secondary"
	case "Deployment":
		return name == db+"-secondary"
	case "ReplicaSet", "Pod":
		for _, role := range []string{"-primary-", "-secondary-", "-fence-", "-backup-"} {
			if rest, ok := strings.CutPrefix(name, db+role); ok && rest != "" {
				return true
			}
		}
	}
	return false
}
