// Package kubectlshale is the kubectl plugin `kubectl shale`: one screen of
// a database's state, a bug-report bundle, and its Pods' logs, read with the
// user's own kubeconfig and RBAC (the plugin holds no credentials of its
// own; it reads no Secret but the client Secret `kv` connects with).
package kubectlshale

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Target is a cluster and a namespace: the kubeconfig's (tests give an
// envtest API server's).
type Target struct {
	Config    *rest.Config
	Namespace string
	// Forward, when not nil, replaces the port-forward to a Pod (tests:
	// envtest has no kubelet).
	Forward func(ctx context.Context, pod *corev1.Pod, port int32) (addr string, stop func(), err error)
}

// plugin holds the clients of one invocation.
type plugin struct {
	c   client.Client
	cs  kubernetes.Interface
	ns  string
	cfg *rest.Config
	out io.Writer
	now func() time.Time
	// forward port-forwards to a Pod's port: portForward, or a test's.
	forward func(ctx context.Context, pod *corev1.Pod, port int32) (addr string, stop func(), err error)
}

// NewCommand returns `kubectl shale`. connect, when not nil, replaces the
// kubeconfig (tests); otherwise the usual kubectl flags apply.
func NewCommand(connect func() (Target, error)) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-shale",
		Short:         "Inspect and operate Shale RocksDB databases",
		Long:          "kubectl shale: the state of a Shale database on one screen, a bug-report bundle, its Pods' logs, switchover, rolling restart, fencing and hibernation, and a port-forwarded KV client.\nInstall by copying the kubectl-shale binary onto your PATH; kubectl then runs it as `kubectl shale`.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var loading clientcmd.ClientConfig
	if connect == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		overrides := &clientcmd.ConfigOverrides{}
		root.PersistentFlags().StringVar(&rules.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file")
		root.PersistentFlags().StringVar(&overrides.CurrentContext, "context", "", "the kubeconfig context to use")
		root.PersistentFlags().StringVarP(&overrides.Context.Namespace, "namespace", "n", "", "the namespace of the RocksDB (default: the context's)")
		loading = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
		connect = func() (Target, error) {
			cfg, err := loading.ClientConfig()
			if err != nil {
				return Target{}, fmt.Errorf("kubeconfig: %w (set --kubeconfig or KUBECONFIG)", err)
			}
			ns, _, err := loading.Namespace()
			if err != nil {
				return Target{}, fmt.Errorf("kubeconfig namespace: %w", err)
			}
			return Target{Config: cfg, Namespace: ns}, nil
		}
	}
	open := func(cmd *cobra.Command) (*plugin, error) {
		t, err := connect()
		if err != nil {
			return nil, err
		}
		scheme := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, shalev1.AddToScheme} {
			if err := add(scheme); err != nil {
				return nil, err
			}
		}
		c, err := client.New(t.Config, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("connect to the cluster: %w", err)
		}
		cs, err := kubernetes.NewForConfig(t.Config)
		if err != nil {
			return nil, fmt.Errorf("connect to the cluster: %w", err)
		}
		p := &plugin{c: c, cs: cs, cfg: t.Config, ns: t.Namespace, out: cmd.OutOrStdout(), now: time.Now, forward: t.Forward}
		if p.forward == nil {
			p.forward = p.portForward
		}
		return p, nil
	}
	root.AddCommand(statusCommand(open), reportCommand(open), logsCommand(open), switchoverCommand(open), restartCommand(open), kvCommand(open))
	root.AddCommand(holdCommands(open)...)
	return root
}

// rocksDB reads the named RocksDB, with an error that says where it looked.
func (p *plugin) rocksDB(ctx context.Context, name string) (*shalev1.RocksDB, error) {
	var db shalev1.RocksDB
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: name}, &db); err != nil {
		return nil, fmt.Errorf("RocksDB %s in namespace %s: %w (kubectl get rocksdb -A lists them)", name, p.ns, err)
	}
	return &db, nil
}
