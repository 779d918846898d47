package kubectlshale

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func logsCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var role string
	var opts corev1.PodLogOptions
	var tail int64
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "The logs of a database's primary (--role secondary or all for the others), each line prefixed by its Pod",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := open(cmd)
			if err != nil {
				return err
			}
			if tail >= 0 {
				opts.TailLines = &tail
			}
			return p.logs(cmd.Context(), args[0], role, opts)
		},
	}
	cmd.Flags().StringVar(&role, "role", "primary", "whose logs: primary (the current one), secondary, or all (every Pod of the database)")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "stream the logs (one Pod only: --role primary)")
	cmd.Flags().BoolVarP(&opts.Previous, "previous", "p", false, "the previous container's logs (after a crash)")
	cmd.Flags().Int64Var(&tail, "tail", -1, "lines from the end of each log (-1: all)")
	return cmd
}

func (p *plugin) logs(ctx context.Context, name, role string, opts corev1.PodLogOptions) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	pods, err := p.pods(ctx, db, role)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return fmt.Errorf("RocksDB %s has no %s Pod now (kubectl shale status %s)", name, role, name)
	}
	if opts.Follow && len(pods) > 1 {
		return fmt.Errorf("--follow streams one Pod: use --role primary, or kubectl logs -f POD")
	}
	for _, pod := range pods {
		if err := p.podLog(ctx, pod.Name, opts, &prefixWriter{w: p.out, prefix: "[" + pod.Name + "] "}); err != nil {
			return err
		}
	}
	return nil
}

// pods of the database for a role, primary first, by name.
func (p *plugin) pods(ctx context.Context, db *shalev1.RocksDB, role string) ([]corev1.Pod, error) {
	labels := client.MatchingLabels{shalev1.LabelRocksDB: db.Name}
	switch role {
	case "primary":
		if db.Status.CurrentPrimary == "" {
			return nil, nil
		}
		var pod corev1.Pod
		if err := p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Status.CurrentPrimary}, &pod); err != nil {
			return nil, fmt.Errorf("primary Pod %s: %w", db.Status.CurrentPrimary, err)
		}
		return []corev1.Pod{pod}, nil
	case "secondary":
		labels[shalev1.LabelRole] = shalev1.RoleSecondary
	case "all":
	default:
		return nil, fmt.Errorf("--role %q: want primary, secondary or all", role)
	}
	var list corev1.PodList
	if err := p.c.List(ctx, &list, client.InNamespace(db.Namespace), labels); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if ra, rb := a.Labels[shalev1.LabelRole] == shalev1.RolePrimary, b.Labels[shalev1.LabelRole] == shalev1.RolePrimary; ra != rb {
			return ra
		}
		return a.Name < b.Name
	})
	return list.Items, nil
}

func (p *plugin) podLog(ctx context.Context, pod string, opts corev1.PodLogOptions, w io.Writer) error {
	rc, err := p.cs.CoreV1().Pods(p.ns).GetLogs(pod, &opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", pod, err)
	}
	defer rc.Close()
	_, err = io.Copy(w, rc)
	return err
}

// prefixWriter starts every line with prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mid    bool // inside a line: the next byte needs no prefix
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	out := make([]byte, 0, len(b)+len(p.prefix))
	for _, c := range b {
		if !p.mid {
			out = append(out, p.prefix...)
			p.mid = true
		}
		out = append(out, c)
		if c == '\n' {
			p.mid = false
		}
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}
