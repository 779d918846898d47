package kubectlshale

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func reportCommand(open func(*cobra.Command) (*plugin, error)) *cobra.Command {
	var out, operatorNS string
	cmd := &cobra.Command{
		Use:   "report NAME",
		Short: "A tarball for a bug report: the RocksDB, its ObjectStore, CompactorPool, Checkpoints, Pods, Services, events, and every Pod's logs (never a Secret)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := open(cmd)
			if err != nil {
				return err
			}
			if out == "" {
				out = fmt.Sprintf("shale-report-%s-%s.tar.gz", args[0], p.now().UTC().Format("20060102T150405Z"))
			}
			var w io.Writer = cmd.OutOrStdout()
			if out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			if err := p.report(cmd.Context(), args[0], operatorNS, w); err != nil {
				return err
			}
			if out != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", out)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the tarball to write (- for stdout; default shale-report-NAME-TIME.tar.gz)")
	cmd.Flags().StringVar(&operatorNS, "operator-namespace", "shale-system", "where the operator runs (its Pods' logs are included; empty: skip)")
	return cmd
}

// report writes the bundle. What cannot be read (a log of a Pod that never
// started, a resource the user may not list) becomes an .error.txt file
// beside what could: a partial report is still a report.
func (p *plugin) report(ctx context.Context, name, operatorNS string, w io.Writer) error {
	db, err := p.rocksDB(ctx, name)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	now := p.now()
	add := func(file string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	addObj := func(file string, obj any, err error) error {
		if err != nil {
			return add(file+".error.txt", []byte(err.Error()+"\n"))
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		return add(file, b)
	}
	strip := func(o client.Object) { o.SetManagedFields(nil) }

	strip(db)
	if err := addObj("rocksdb.yaml", db, nil); err != nil {
		return err
	}
	var screen bytes.Buffer
	sp := *p
	sp.out = &screen
	if err := sp.status(ctx, name, 1000); err != nil {
		return err
	}
	if err := add("status.txt", screen.Bytes()); err != nil {
		return err
	}

	var store shalev1.ObjectStore
	err = p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: db.Spec.ObjectStoreRef.Name}, &store)
	strip(&store)
	if err := addObj("objectstore.yaml", &store, err); err != nil { // its spec names Secrets, never holds them
		return err
	}
	if ref := db.Spec.Compaction.CompactorPoolRef; ref != nil {
		var pool shalev1.CompactorPool
		err := p.c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: ref.Name}, &pool)
		strip(&pool)
		if err := addObj("compactorpool.yaml", &pool, err); err != nil {
			return err
		}
	}
	var cks shalev1.CheckpointList
	err = p.c.List(ctx, &cks, client.InNamespace(db.Namespace))
	var mine []shalev1.Checkpoint
	for _, c := range cks.Items {
		if c.Spec.Database == db.Name {
			c.ManagedFields = nil
			mine = append(mine, c)
		}
	}
	if err := addObj("checkpoints.yaml", mine, err); err != nil {
		return err
	}

	sel := []client.ListOption{client.InNamespace(db.Namespace), client.MatchingLabels{shalev1.LabelRocksDB: db.Name}}
	pods, err := p.pods(ctx, db, "all")
	for i := range pods {
		pods[i].ManagedFields = nil
	}
	if err := addObj("pods.yaml", pods, err); err != nil {
		return err
	}
	for _, r := range []struct {
		file string
		list client.ObjectList
	}{
		{"services.yaml", &corev1.ServiceList{}},
		{"deployments.yaml", &appsv1.DeploymentList{}},
		{"poddisruptionbudgets.yaml", &policyv1.PodDisruptionBudgetList{}},
	} {
		err := p.c.List(ctx, r.list, sel...)
		if err := addObj(r.file, r.list, err); err != nil {
			return err
		}
	}
	evs, err := p.events(ctx, db)
	if err := addObj("events.yaml", evs, err); err != nil {
		return err
	}

	logs := func(dir string, ns string, pods []corev1.Pod) error {
		lp := *p
		lp.ns = ns
		for _, pod := range pods {
			tail := int64(20000)
			for _, prev := range []bool{false, true} {
				if prev && !restarted(&pod) {
					continue
				}
				file := dir + "/" + pod.Name + ".log"
				if prev {
					file = dir + "/" + pod.Name + ".previous.log"
				}
				var b bytes.Buffer
				if err := lp.podLog(ctx, pod.Name, corev1.PodLogOptions{Previous: prev, TailLines: &tail}, &b); err != nil {
					if err := add(file+".error.txt", []byte(err.Error()+"\n")); err != nil {
						return err
					}
					continue
				}
				if err := add(file, b.Bytes()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := logs("logs", db.Namespace, pods); err != nil {
		return err
	}
	if operatorNS != "" {
		var ops corev1.PodList
		err := p.c.List(ctx, &ops, client.InNamespace(operatorNS), client.MatchingLabels{shalev1.LabelAppName: shalev1.AppName, shalev1.LabelAppComponent: "operator"})
		if err != nil {
			if err := add("operator/pods.error.txt", []byte(err.Error()+"\n")); err != nil {
				return err
			}
		} else if err := logs("operator", operatorNS, ops.Items); err != nil {
			return err
		}
	}
	if err := add("README.txt", []byte(fmt.Sprintf("kubectl shale report %s -n %s, %s\nNo Secret is included; object-store credentials appear only as Secret names.\n", name, db.Namespace, now.UTC().Format(time.RFC3339)))); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// restarted says whether a Pod has a previous container whose log may
// explain a crash.
func restarted(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.RestartCount > 0 {
			return true
		}
	}
	return false
}
