package operator

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/objstore"
)

// Options configure the operator (cmd/shale-operator's flags).
type Options struct {
	// ShaleImage is the image of primaries and secondaries whose RocksDB
	// names none.
	ShaleImage string
	// FailoverGrace is how long a primary that was ready may be not ready
	// before it is replaced.
	FailoverGrace time.Duration
	// LivenessProbeInterval is how often the operator asks each ready
	// primary's health service itself (RFC 0015), to fail over one on a
	// dead node after FailoverGrace rather than after the node
	// controller's 40 s; 0 turns the probes off.
	LivenessProbeInterval time.Duration
	// WatchPrimaryPorts: hold a connection to each ready primary's KV
	// port and fail over at once when a new one is refused (its process
	// is gone), before the kubelet reports it (portwatch.go).
	WatchPrimaryPorts bool
	// StartupGrace is how long a new primary may take to become ready
	// before it is replaced.
	StartupGrace time.Duration
	// FailoverBackoff is the wait before the primary after a second
	// failure in a row, doubled at each further one up to
	// FailoverBackoffMax; a primary that stays ready for
	// FailoverBackoffMax clears the count.
	FailoverBackoff, FailoverBackoffMax time.Duration
	// MaxConcurrentUpdates bounds the switchovers that replace outdated
	// primaries running at once in this operator (an operator upgrade
	// rolls every database's primary); 0 means no bound.
	MaxConcurrentUpdates int
	// ObjectStoreCheckInterval is how often each ObjectStore is checked.
	ObjectStoreCheckInterval time.Duration
	// GCInterval is the time between garbage-collection passes; 0 turns
	// the collector off.
	GCInterval time.Duration
	// GCGrace is how long an orphaned directory must have been quiet
	// before it is deleted.
	GCGrace time.Duration
	// GCDryRun reports orphans without deleting them.
	GCDryRun bool
	// SecondaryStatusInterval is how often each database's secondaries
	// are asked for their Status (status.secondaryStatus).
	SecondaryStatusInterval time.Duration
	// ArchiveInterval is how often the window of each database's
	// continuous archive is read into status.archive.
	ArchiveInterval time.Duration
	// CompactorPollInterval is how often each CompactorPool's scheduler
	// Stats are read (and its workers resized).
	CompactorPollInterval time.Duration
	// CompactorStats reads a pool's Stats (default: gRPC to its
	// NAME-scheduler Service; tests point it elsewhere).
	CompactorStats StatsFunc

	// Namespace is the operator's own namespace: its CA Secret's, and its
	// identity's (shale://NAMESPACE/operator).
	Namespace string
	// CASecret names the Secret of the operator's CA in Namespace, made
	// when missing with a validity of CAValidity.
	CASecret   string
	CAValidity time.Duration
	// CertValidity is the lifetime of the certificates the operator
	// issues; each is issued again two thirds into it.
	CertValidity time.Duration
	// ClusterDomain is the cluster's DNS domain (certificates name
	// SERVICE.NAMESPACE.svc.DOMAIN).
	ClusterDomain string
	// InstanceRoleStores lets the operator use its own credentials
	// (OwnCredentials) for ObjectStores with instanceRole: true. Off, it
	// refuses them with a condition: anyone who may create an
	// ObjectStore could otherwise have the operator use its role on any
	// bucket the role reaches.
	InstanceRoleStores bool
	// OwnCredentials are those credentials: only the credential settings
	// are used. nil means the operator's environment
	// (objstore.S3ConfigFromEnv, with its node's or Pod's role allowed).
	OwnCredentials *objstore.S3Config
	// NetworkPolicies: keep a NetworkPolicy for each RocksDB (unless its
	// spec.networkPolicy turns it off) and for each CompactorPool
	// (--network-policies).
	NetworkPolicies bool
	// OperatorPodSelector selects the operator's Pods in Namespace (nil:
	// all of them), which every policy admits: the operator reads Status
	// from the secondaries and the primary, and Stats from the schedulers.
	OperatorPodSelector *metav1.LabelSelector
	// MetricsNamespaceSelector selects the namespaces admitted to the
	// metrics ports (--metrics-namespace-selector).
	MetricsNamespaceSelector *metav1.LabelSelector
	// WatchNamespaces, when not empty, are the only namespaces the
	// operator reconciles in and collects garbage of (--watch-namespaces);
	// its cache and its RBAC cover no others.
	WatchNamespaces []string
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		FailoverGrace:            5 * time.Second,
		LivenessProbeInterval:    time.Second,
		WatchPrimaryPorts:        true,
		StartupGrace:             10 * time.Minute,
		FailoverBackoff:          45 * time.Second,
		FailoverBackoffMax:       5 * time.Minute,
		MaxConcurrentUpdates:     2,
		ObjectStoreCheckInterval: 5 * time.Minute,
		GCInterval:               time.Hour,
		GCGrace:                  24 * time.Hour,
		SecondaryStatusInterval:  30 * time.Second,
		ArchiveInterval:          time.Minute,
		CompactorPollInterval:    15 * time.Second,
		CASecret:                 "shale-ca",
		CAValidity:               87600 * time.Hour,
		CertValidity:             2160 * time.Hour,
		ClusterDomain:            "cluster.local",
		NetworkPolicies:          true,
		MetricsNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelNamespaceName: "monitoring"}},
	}
}

func (o Options) validate() error {
	switch {
	case o.ShaleImage == "":
		return fmt.Errorf("no image for primaries (--shale-image)")
	case o.FailoverGrace <= 0:
		return fmt.Errorf("--failover-grace must be positive")
	case o.LivenessProbeInterval < 0:
		return fmt.Errorf("--liveness-probe-interval must not be negative (0 turns the probes off)")
	case o.LivenessProbeInterval > 0 && o.LivenessProbeInterval > o.FailoverGrace/2:
		return fmt.Errorf("--liveness-probe-interval (%s) must be at most half of --failover-grace (%s): a verdict needs several probes in a row to fail", o.LivenessProbeInterval, o.FailoverGrace)
	case o.StartupGrace <= 0:
		return fmt.Errorf("--startup-grace must be positive")
	case o.FailoverBackoff <= 0 || o.FailoverBackoffMax < o.FailoverBackoff:
		return fmt.Errorf("--failover-backoff must be positive and at most --failover-backoff-max")
	case o.MaxConcurrentUpdates < 0:
		return fmt.Errorf("--max-concurrent-updates must not be negative (0: no bound)")
	case o.ObjectStoreCheckInterval <= 0:
		return fmt.Errorf("--objectstore-check-interval must be positive")
	case o.GCInterval < 0:
		return fmt.Errorf("--gc-interval must not be negative (0 turns the collector off)")
	case o.GCGrace <= 0:
		return fmt.Errorf("--gc-grace must be positive")
	case o.CompactorPollInterval <= 0:
		return fmt.Errorf("--compactor-poll-interval must be positive")
	case o.Namespace == "":
		return fmt.Errorf("no namespace for the operator's CA Secret: pass --operator-namespace (the operator's own namespace; read from the service account when it runs in a cluster)")
	case o.CASecret == "":
		return fmt.Errorf("--ca-secret must name a Secret")
	case o.CertValidity <= 0:
		return fmt.Errorf("--cert-validity must be positive")
	case o.CAValidity < o.CertValidity:
		return fmt.Errorf("--ca-validity (%s) must be at least --cert-validity (%s): a certificate never outlives its CA", o.CAValidity, o.CertValidity)
	case o.ClusterDomain == "":
		return fmt.Errorf("--cluster-domain must not be empty")
	}
	return checkNamespaces(o.WatchNamespaces)
}

// ParseNamespaces parses --watch-namespaces: namespace names separated by
// commas; "" means every namespace.
func ParseNamespaces(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(n))
	}
	return out, checkNamespaces(out)
}

func checkNamespaces(nss []string) error {
	seen := map[string]bool{}
	for _, n := range nss {
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return fmt.Errorf("--watch-namespaces: %q is not a namespace name (%s); give names separated by commas, such as --watch-namespaces=team-a,team-b", n, strings.Join(errs, "; "))
		}
		if seen[n] {
			return fmt.Errorf("--watch-namespaces names %s twice", n)
		}
		seen[n] = true
	}
	return nil
}

// CacheOptions restrict the manager's Pod, Deployment, NetworkPolicy and
// Secret caches to the ones the operator manages (so it does not hold
// every Pod and Deployment of the cluster in memory, nor any Secret but
// its own), and the whole cache to the watched namespaces if there are
// any (the operator's RBAC may cover no others) plus, for Secrets, the
// operator's own namespace, where its CA lives.
func CacheOptions(watchNamespaces []string, operatorNamespace string) cache.Options {
	ours := labels.SelectorFromSet(labels.Set{shalev1.LabelAppManagedBy: shalev1.ManagedBy})
	secrets := cache.ByObject{Label: ours}
	if len(watchNamespaces) > 0 {
		secrets.Namespaces = map[string]cache.Config{operatorNamespace: {}}
		for _, ns := range watchNamespaces {
			secrets.Namespaces[ns] = cache.Config{}
		}
	}
	o := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: ours},
		&appsv1.Deployment{}:            {Label: ours},
		&networkingv1.NetworkPolicy{}:   {Label: ours},
		&corev1.Secret{}:                secrets,
		&policyv1.PodDisruptionBudget{}: {Label: ours},
		&batchv1.Job{}:                  {Label: ours},
		// Nodes are counted for the secondaries' spreading (scheduling.go),
		// which needs their labels and taints only: the status (images,
		// conditions) would make the cache grow with the cluster.
		&corev1.Node{}: {Transform: trimNode},
	}}
	if len(watchNamespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range watchNamespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
}

// trimNode keeps what eligibleNodes reads of a Node.
func trimNode(o any) (any, error) {
	if n, ok := o.(*corev1.Node); ok {
		n.Status = corev1.NodeStatus{}
		n.ManagedFields = nil
		n.Annotations = nil
	}
	return o, nil
}

// LeaderElectionID names the leader-election Lease (in the operator's
// namespace). The chart's leader-election Role grants this Lease only.
const LeaderElectionID = "shale-operator.shale.rocks"

// The cluster-scoped objects the operator reads are Namespaces, with get
// only: kube-system's UID identifies the cluster in owner records, and
// a database's own namespace being deleted lets its finalizer leave the
// data to the garbage collector when its ObjectStore went first (the
// namespace-deletion e2e step hung when the rule named kube-system only).
// Leader election needs a Lease in the operator's own namespace only: the
// chart grants it with a Role there, not here.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// Nodes, also cluster-scoped, are read (get, list, watch) to count where
// the secondaries could run (scheduling.go).
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create

// Setup adds the controllers and the garbage collector to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	_, err := setup(ctx, mgr, opts)
	return err
}

// setup is Setup, returning the collector for tests.
func setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*gc, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	cluster, err := clusterID(ctx, mgr.GetAPIReader())
	if err != nil {
		return nil, err
	}
	// The CA before any controller: every certificate comes from it.
	ca := &caSource{c: mgr.GetClient(), reader: mgr.GetAPIReader(), key: types.NamespacedName{Namespace: opts.Namespace, Name: opts.CASecret},
		validity: opts.CAValidity, now: time.Now}
	if _, _, err := ca.get(ctx); err != nil {
		return nil, err
	}
	is := &issuer{ca: ca, validity: opts.CertValidity, domain: opts.ClusterDomain, now: time.Now}
	creds := &operatorCreds{ca: ca, id: auth.Identity{Namespace: opts.Namespace, Kind: auth.KindOperator}, validity: opts.CertValidity, now: time.Now}
	var own *objstore.S3Config
	if opts.InstanceRoleStores {
		own = opts.OwnCredentials
		if own == nil {
			c := objstore.S3ConfigFromEnv()
			c.InstanceRole = true
			own = &c
		}
	}
	st := newStores(mgr.GetAPIReader(), mgr.GetClient(), own)
	osr := &objectStoreReconciler{
		Client:        mgr.GetClient(),
		apiReader:     mgr.GetAPIReader(),
		recorder:      mgr.GetEventRecorderFor("shale-operator"),
		stores:        st,
		checkInterval: opts.ObjectStoreCheckInterval,
	}
	if err := osr.setup(mgr); err != nil {
		return nil, fmt.Errorf("ObjectStore controller: %w", err)
	}
	dbr := &rocksDBReconciler{
		Client:          mgr.GetClient(),
		apiReader:       mgr.GetAPIReader(),
		recorder:        mgr.GetEventRecorderFor("shale-operator"),
		stores:          st,
		opts:            opts,
		clusterID:       cluster,
		now:             time.Now,
		records:         make(map[types.NamespacedName]recordState),
		failoverStarted: make(map[types.NamespacedName]failoverStart),
		secondaryPolled: make(map[types.NamespacedName]time.Time),
		tiersPolled:     make(map[types.NamespacedName]time.Time),
		updateSlots:     make(map[types.NamespacedName]time.Time),
		coldAfterSeen:   make(map[types.NamespacedName]time.Duration),
		setTiering:      grpcSetTiering,
		stepDown:        grpcStepDown,
		kv:              grpcCheckpointKV{},
		secondaryStatus: grpcSecondaryStatus,
		issuer:          is,
		creds:           creds,
		portEvents:      make(chan event.GenericEvent),
	}
	if opts.WatchPrimaryPorts {
		dbr.ports = newPortWatches()
	}
	if opts.LivenessProbeInterval > 0 {
		dbr.liveness = newLivenessProber(mgr.GetClient(), dbr.kvDial, opts.LivenessProbeInterval, opts.FailoverGrace, ctrl.Log.WithName("liveness"))
		if err := mgr.Add(dbr.liveness); err != nil {
			return nil, err
		}
	}
	if err := dbr.setup(ctx, mgr); err != nil {
		return nil, fmt.Errorf("RocksDB controller: %w", err)
	}
	ckr := &checkpointReconciler{
		Client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorderFor("shale-operator"),
		now:       time.Now,
		kv:        grpcCheckpointKV{},
		dbs:       dbr,
	}
	if err := ckr.setup(ctx, mgr); err != nil {
		return nil, fmt.Errorf("Checkpoint controller: %w", err)
	}
	br := &backupReconciler{
		Client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorderFor("shale-operator"),
		now:       time.Now,
		kv:        grpcCheckpointKV{},
		dbs:       dbr,
		image:     opts.ShaleImage,
	}
	if err := br.setup(ctx, mgr); err != nil {
		return nil, fmt.Errorf("Backup controller: %w", err)
	}
	sbr := &scheduledBackupReconciler{
		Client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorderFor("shale-operator"),
		now:       time.Now,
		image:     opts.ShaleImage,
	}
	if err := sbr.setup(mgr); err != nil {
		return nil, fmt.Errorf("ScheduledBackup controller: %w", err)
	}
	cpr := &compactorPoolReconciler{
		Client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorderFor("shale-operator"),
		opts:      opts,
		now:       time.Now,
		stats:     opts.CompactorStats,
		issuer:    is,
		creds:     creds,
	}
	if cpr.stats == nil {
		cpr.stats = schedulerStats
	}
	if err := cpr.setup(ctx, mgr); err != nil {
		return nil, fmt.Errorf("CompactorPool controller: %w", err)
	}
	registerStateMetrics(mgr.GetClient())
	g := &gc{
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorderFor("shale-operator-gc"),
		stores:    st,
		clusterID: cluster,
		interval:  opts.GCInterval,
		grace:     opts.GCGrace,
		dryRun:    opts.GCDryRun,
		now:       time.Now,
		log:       ctrl.Log.WithName("gc"),
		scope:     namespaceScope(opts.WatchNamespaces),
	}
	if opts.GCInterval > 0 {
		if err := mgr.Add(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// clusterID identifies the cluster: the UID of its kube-system Namespace,
// which lives as long as the cluster.
func clusterID(ctx context.Context, r client.Reader) (string, error) {
	var ns corev1.Namespace
	if err := r.Get(ctx, types.NamespacedName{Name: "kube-system"}, &ns); err != nil {
		return "", fmt.Errorf("reading the kube-system Namespace (the cluster's identity for owner records): %w", err)
	}
	return string(ns.UID), nil
}
