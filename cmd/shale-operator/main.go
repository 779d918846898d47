// Command shale-operator is the Kubernetes operator that runs Shale
// databases: it reconciles ObjectStore and RocksDB resources (group
// shale.rocks), runs each database's primary as a Pod it fails over by
// epoch, and collects orphaned database directories. It is a pure-Go
// binary (CGO_ENABLED=0). The kubeconfig comes from --kubeconfig, the
// KUBECONFIG variable, the in-cluster service account or ~/.kube/config,
// in that order.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/version"
	"github.com/shale-rocks/shale/operator"
)

func main() {
	os.Exit(run())
}

func run() int {
	opts := operator.DefaultOptions()
	var (
		showVersion   bool
		leaderElect   bool
		leaderElectNS string
		metricsAddr   string
		probeAddr     string
		defaultImage  = "shale.local/shale:" + version.Version
		leaseDuration = 15 * time.Second
		renewDeadline = 10 * time.Second
		retryPeriod   = 2 * time.Second
		zapOpts       = zap.Options{}
		watchNS       string
		opPods        string
		metricsNS     = "kubernetes.io/metadata.name=monitoring"
	)
	fs := flag.CommandLine
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	fs.BoolVar(&leaderElect, "leader-elect", false, "elect a leader among operator replicas (a Lease object); only the leader reconciles")
	fs.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader-election Lease (default: the operator's own namespace in a cluster; required outside one)")
	fs.DurationVar(&leaseDuration, "leader-elect-lease-duration", leaseDuration, "how long a leader's lease lasts without renewal")
	fs.DurationVar(&renewDeadline, "leader-elect-renew-deadline", renewDeadline, "how long the leader keeps trying to renew before giving up leadership")
	fs.DurationVar(&retryPeriod, "leader-elect-retry-period", retryPeriod, "how often candidates try to acquire or renew the lease")
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (\"0\" turns it off)")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (\"0\" turns them off)")
	fs.StringVar(&opts.ShaleImage, "shale-image", defaultImage, "image of primaries, secondaries and compactor pools that name none")
	fs.DurationVar(&opts.FailoverGrace, "failover-grace", opts.FailoverGrace, "replace a primary that was ready once it has been not ready this long (a deleted, failed or vanished primary is replaced at once)")
	fs.DurationVar(&opts.LivenessProbeInterval, "liveness-probe-interval", opts.LivenessProbeInterval, "ask each ready primary's health service this often, and fail over one that has not answered for --failover-grace while a server on another node did (a dead node, before the node controller notices); 0: off, only Kubernetes' readiness counts")
	fs.BoolVar(&opts.WatchPrimaryPorts, "watch-primary-ports", opts.WatchPrimaryPorts, "hold a connection to each ready primary's KV port and fail over as soon as a new one is refused (its process is gone), before the kubelet reports it")
	fs.DurationVar(&opts.StartupGrace, "startup-grace", opts.StartupGrace, "replace a new primary that has not become ready in this long (must exceed the longest takeover: lease wait plus log replay)")
	fs.IntVar(&opts.MaxConcurrentUpdates, "max-concurrent-updates", opts.MaxConcurrentUpdates, "at most this many switchovers replacing outdated primaries (spec or image changes, an operator upgrade) run at once; 0: no bound")
	fs.DurationVar(&opts.FailoverBackoff, "failover-backoff", opts.FailoverBackoff, "wait this long before the primary after a second failure in a row, twice as long after each further one (a changed spec is tried at once)")
	fs.DurationVar(&opts.FailoverBackoffMax, "failover-backoff-max", opts.FailoverBackoffMax, "longest wait between failing primaries; a primary ready this long clears the count")
	fs.DurationVar(&opts.ObjectStoreCheckInterval, "objectstore-check-interval", opts.ObjectStoreCheckInterval, "how often each ObjectStore is checked (one LIST, two PUTs and a DELETE)")
	fs.DurationVar(&opts.GCInterval, "gc-interval", opts.GCInterval, "time between garbage-collection passes over each ObjectStore (0: no garbage collection)")
	fs.DurationVar(&opts.GCGrace, "gc-grace", opts.GCGrace, "delete an orphaned database directory only when nothing in it changed for this long")
	fs.BoolVar(&opts.GCDryRun, "gc-dry-run", false, "report orphaned database directories (events, metrics, log) without deleting them")
	fs.DurationVar(&opts.SecondaryStatusInterval, "secondary-status-interval", opts.SecondaryStatusInterval, "how often each database's secondaries are asked for their replication state (status.secondaryStatus)")
	fs.DurationVar(&opts.ArchiveInterval, "archive-interval", opts.ArchiveInterval, "how often the window of each database's continuous archive (spec.backup.archive) is read from its backup store into status.archive")
	fs.DurationVar(&opts.CompactorPollInterval, "compactor-poll-interval", opts.CompactorPollInterval, "how often each CompactorPool's scheduler is asked for its queue (one gRPC call) and its workers resized")
	fs.StringVar(&opts.Namespace, "operator-namespace", inClusterNamespace(), "the operator's own namespace, where its CA Secret lives and which its identity names (default: its service account's namespace in a cluster; required outside one)")
	fs.StringVar(&opts.CASecret, "ca-secret", opts.CASecret, "Secret (in --operator-namespace) of the CA that signs every certificate the operator issues; made if missing")
	fs.DurationVar(&opts.CAValidity, "ca-validity", opts.CAValidity, "validity of a CA the operator makes (it does not renew its CA: docs/operator.md describes the rotation)")
	fs.DurationVar(&opts.CertValidity, "cert-validity", opts.CertValidity, "validity of the certificates the operator issues; each is issued again two thirds into it, without restarting anything")
	fs.StringVar(&opts.ClusterDomain, "cluster-domain", opts.ClusterDomain, "the cluster's DNS domain, named in server certificates (SERVICE.NAMESPACE.svc.DOMAIN)")
	fs.BoolVar(&opts.InstanceRoleStores, "instance-role-stores", false, "check, write owner records in and collect garbage of ObjectStores with instanceRole: true using the operator's own role (its node's or Pod's; anyone who may create an ObjectStore can then have the operator use that role: grant it only Shale's buckets)")
	fs.BoolVar(&opts.NetworkPolicies, "network-policies", opts.NetworkPolicies, "keep a NetworkPolicy for each RocksDB (unless its spec.networkPolicy.enabled is false) and CompactorPool: only labelled clients reach the KV port")
	fs.StringVar(&opPods, "operator-pod-selector", "", "label selector of the operator's Pods in --operator-namespace, admitted by the NetworkPolicies (default: every Pod of that namespace)")
	fs.StringVar(&metricsNS, "metrics-namespace-selector", metricsNS, "label selector (or JSON LabelSelector) of the namespaces admitted to the metrics ports by the NetworkPolicies")
	fs.StringVar(&watchNS, "watch-namespaces", "", "reconcile only in these namespaces, separated by commas (default: all); the operator's cache and RBAC then cover no others")
	zapOpts.BindFlags(fs)
	// --kubeconfig is registered by controller-runtime's config package.
	flag.Parse()
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "shale-operator: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if showVersion {
		fmt.Printf("shale-operator %s\n", version.Version)
		return 0
	}
	var err error
	if opts.WatchNamespaces, err = operator.ParseNamespaces(watchNS); err != nil {
		fmt.Fprintf(os.Stderr, "shale-operator: %v\n", err)
		return 2
	}
	if opPods != "" {
		if opts.OperatorPodSelector, err = operator.ParseSelector("--operator-pod-selector", opPods); err != nil {
			fmt.Fprintf(os.Stderr, "shale-operator: %v\n", err)
			return 2
		}
	}
	if opts.MetricsNamespaceSelector, err = operator.ParseSelector("--metrics-namespace-selector", metricsNS); err != nil {
		fmt.Fprintf(os.Stderr, "shale-operator: %v\n", err)
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, shalev1.AddToScheme} {
		if err := add(scheme); err != nil {
			log.Error(err, "building the scheme")
			return 1
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "no Kubernetes configuration (set --kubeconfig or KUBECONFIG, or run in a cluster)")
		return 1
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: metricsAddr},
		// Events per reason, not per object: an incident's failovers must
		// not silence the events after them (operator/eventbroadcaster.go).
		EventBroadcaster:        operator.NewEventBroadcaster(), //nolint:staticcheck // the one way to set the correlator's options
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        operator.LeaderElectionID,
		LeaderElectionNamespace: leaderElectNS,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		// The operator exits when it loses leadership; a new process
		// starts from the API server's state, never from memory.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         operator.CacheOptions(opts.WatchNamespaces, opts.Namespace),
	})
	if err != nil {
		log.Error(err, "creating the manager")
		return 1
	}
	ctx := ctrl.SetupSignalHandler()
	if err := operator.Setup(ctx, mgr, opts); err != nil {
		log.Error(err, "setting up the controllers")
		return 1
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "health check")
		return 1
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "readiness check")
		return 1
	}
	log.Info("starting", "version", version.Version, "shaleImage", opts.ShaleImage, "failoverGrace", opts.FailoverGrace,
		"gcInterval", opts.GCInterval, "gcGrace", opts.GCGrace, "gcDryRun", opts.GCDryRun, "leaderElect", leaderElect,
		"caSecret", opts.Namespace+"/"+opts.CASecret, "certValidity", opts.CertValidity,
		"watchNamespaces", opts.WatchNamespaces, "networkPolicies", opts.NetworkPolicies)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		return 1
	}
	return 0
}

// inClusterNamespace is $POD_NAMESPACE, or the namespace of the service
// account the Pod runs as, or "" outside a cluster.
func inClusterNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
