package operator

import (
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// peer is a Pod that tries to connect: its namespace (with the labels the
// API server puts on it) and its own labels.
type peer struct {
	ns     string
	labels map[string]string
}

// admits evaluates a NetworkPolicy as the Kubernetes API defines it for
// Pods (no IP blocks): does it select a Pod with podLabels, and if so does
// one of its ingress rules admit from on the named port?
func admits(t *testing.T, np *networkingv1.NetworkPolicy, podLabels map[string]string, port string, from peer) (selected, admitted bool) {
	t.Helper()
	sel := func(s *metav1.LabelSelector, l map[string]string) bool {
		ls, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatalf("policy %s: %v", np.Name, err)
		}
		return ls.Matches(labels.Set(l))
	}
	if !sel(&np.Spec.PodSelector, podLabels) {
		return false, false
	}
	nsLabels := map[string]string{labelNamespaceName: from.ns}
	for _, r := range np.Spec.Ingress {
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			portOK = portOK || p.Port == nil || p.Port.StrVal == port
		}
		if !portOK {
			continue
		}
		if len(r.From) == 0 {
			return true, true
		}
		for _, f := range r.From {
			if f.IPBlock != nil {
				continue
			}
			nsOK := from.ns == np.Namespace
			if f.NamespaceSelector != nil {
				nsOK = sel(f.NamespaceSelector, nsLabels)
			}
			podOK := f.PodSelector == nil || sel(f.PodSelector, from.labels)
			if nsOK && podOK {
				return true, true
			}
		}
	}
	return true, false
}

// Who reaches what: the policies of a database and of a compactor pool,
// judged by the rules of NetworkPolicy for each kind of caller.
func TestNetworkPolicies(t *testing.T) {
	opts := testOptions()
	opts.Namespace = "shale-system"
	opts.OperatorPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{shalev1.LabelAppComponent: "operator"}}
	peers := peersOf(opts)

	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod"}}
	withClients := db.DeepCopy()
	withClients.Spec.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labelNamespaceName: "analytics"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "reports"}},
	}}
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "prod"}}
	primary := db.PrimaryLabels(4)
	secondary := db.SecondaryLabels()
	remote := db.DeepCopy()
	remote.Spec.Compaction = shalev1.CompactionSpec{Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{Name: "pool"}}
	local := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "local", Namespace: "prod"}}

	var (
		client      = peer{"prod", map[string]string{shalev1.LabelClient: "orders"}}
		otherClient = peer{"prod", map[string]string{shalev1.LabelClient: "billing"}}
		unlabelled  = peer{"prod", map[string]string{"app": "web"}}
		elsewhere   = peer{"dev", map[string]string{shalev1.LabelClient: "orders"}}
		reports     = peer{"analytics", map[string]string{"app": "reports"}}
		otherInAna  = peer{"analytics", map[string]string{"app": "notebook"}}
		ownSecond   = peer{"prod", secondary}
		otherSecond = peer{"prod", (&shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "billing"}}).SecondaryLabels()}
		operator    = peer{"shale-system", map[string]string{shalev1.LabelAppComponent: "operator"}}
		nextToOp    = peer{"shale-system", map[string]string{"app": "minio"}}
		prometheus  = peer{"monitoring", map[string]string{"app": "prometheus"}}
		remotePrim  = peer{"prod", primaryPodLabels(remote, 2)}
		localPrim   = peer{"prod", primaryPodLabels(local, 1)}
		worker      = peer{"prod", pool.Labels(shalev1.ComponentWorker)}
		otherWorker = peer{"prod", (&shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "other"}}).Labels(shalev1.ComponentWorker)}
		poolElse    = peer{"dev", primaryPodLabels(remote, 2)}
	)
	for _, tc := range []struct {
		name   string
		np     *networkingv1.NetworkPolicy
		pod    map[string]string
		port   string
		from   peer
		admits bool
	}{
		// The database's KV port.
		{"client-to-primary", databasePolicy(db, peers), primary, portNameKV, client, true},
		{"client-to-secondary", databasePolicy(db, peers), secondary, portNameKV, client, true},
		{"client-of-another-db", databasePolicy(db, peers), primary, portNameKV, otherClient, false},
		{"unlabelled-pod", databasePolicy(db, peers), primary, portNameKV, unlabelled, false},
		{"client-label-in-another-namespace", databasePolicy(db, peers), primary, portNameKV, elsewhere, false},
		{"own-secondary-watches-primary", databasePolicy(db, peers), primary, portNameKV, ownSecond, true},
		{"another-db-secondary", databasePolicy(db, peers), primary, portNameKV, otherSecond, false},
		{"operator-polls-kv", databasePolicy(db, peers), secondary, portNameKV, operator, true},
		{"operator-namespace-neighbour", databasePolicy(db, peers), primary, portNameKV, nextToOp, false},
		{"monitoring-not-kv", databasePolicy(db, peers), primary, portNameKV, prometheus, false},
		{"extra-client", databasePolicy(withClients, peers), primary, portNameKV, reports, true},
		{"extra-client-selector-is-exact", databasePolicy(withClients, peers), primary, portNameKV, otherInAna, false},
		{"extra-client-not-metrics", databasePolicy(withClients, peers), primary, portNameMet, reports, false},
		// The database's metrics port.
		{"monitoring-metrics", databasePolicy(db, peers), primary, portNameMet, prometheus, true},
		{"monitoring-secondary-metrics", databasePolicy(db, peers), secondary, portNameMet, prometheus, true},
		{"operator-metrics", databasePolicy(db, peers), primary, portNameMet, operator, true},
		{"client-not-metrics", databasePolicy(db, peers), primary, portNameMet, client, false},
		{"any-other-port", databasePolicy(db, peers), primary, "debug", client, false},
		// The scheduler.
		{"remote-primary-to-scheduler", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, remotePrim, true},
		{"local-primary-to-scheduler", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, localPrim, false},
		{"primary-of-same-pool-name-elsewhere", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, poolElse, false},
		{"worker-to-scheduler", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, worker, true},
		{"other-pool-worker-to-scheduler", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, otherWorker, false},
		{"operator-reads-stats", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, operator, true},
		{"kv-client-to-scheduler", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameKV, client, false},
		{"scheduler-metrics", schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), portNameMet, prometheus, true},
		// The workers serve metrics only.
		{"worker-metrics", workerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), portNameMet, prometheus, true},
		{"worker-metrics-operator", workerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), portNameMet, operator, true},
		{"worker-metrics-client", workerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), portNameMet, remotePrim, false},
		{"worker-any-other-port", workerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), portNameKV, operator, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			selected, admitted := admits(t, tc.np, tc.pod, tc.port, tc.from)
			if !selected {
				t.Fatalf("policy %s does not select the Pod %v", tc.np.Name, tc.pod)
			}
			if admitted != tc.admits {
				t.Errorf("policy %s: %v in %s to port %s: admitted %v, want %v", tc.np.Name, tc.from.labels, tc.from.ns, tc.port, admitted, tc.admits)
			}
		})
	}

	// Each policy selects its own Pods and no others.
	for _, tc := range []struct {
		np   *networkingv1.NetworkPolicy
		pod  map[string]string
		want bool
	}{
		{databasePolicy(db, peers), primary, true},
		{databasePolicy(db, peers), secondary, true},
		{databasePolicy(db, peers), (&shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "billing"}}).PrimaryLabels(1), false},
		{databasePolicy(db, peers), map[string]string{shalev1.LabelRocksDB: "orders"}, false}, // not one of ours
		{schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), true},
		{schedulerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), false},
		{workerPolicy(pool, peers), pool.Labels(shalev1.ComponentWorker), true},
		{workerPolicy(pool, peers), pool.Labels(shalev1.ComponentScheduler), false},
	} {
		if selected, _ := admits(t, tc.np, tc.pod, portNameMet, prometheus); selected != tc.want {
			t.Errorf("policy %s selects %v: %v, want %v", tc.np.Name, tc.pod, selected, tc.want)
		}
	}

	// Ingress only; egress (the object store) is left alone.
	for _, np := range []*networkingv1.NetworkPolicy{databasePolicy(db, peers), schedulerPolicy(pool, peers), workerPolicy(pool, peers)} {
		if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress || len(np.Spec.Egress) != 0 {
			t.Errorf("policy %s: types %v, egress %v", np.Name, np.Spec.PolicyTypes, np.Spec.Egress)
		}
		if np.Labels[shalev1.LabelAppManagedBy] != shalev1.ManagedBy {
			t.Errorf("policy %s labels %v: the operator's cache selects on %s", np.Name, np.Labels, shalev1.LabelAppManagedBy)
		}
	}

	// Without a pod selector for the operator, its whole namespace.
	opts.OperatorPodSelector = nil
	if _, ok := admits(t, databasePolicy(db, peersOf(opts)), primary, portNameKV, nextToOp); !ok {
		t.Errorf("without --operator-pod-selector a Pod of the operator's namespace is not admitted")
	}
}

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"kubernetes.io/metadata.name=monitoring", "kubernetes.io/metadata.name=monitoring", ""},
		{"team in (obs,sre),!legacy", "!legacy,team in (obs,sre)", ""},
		{`{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}`, "kubernetes.io/metadata.name=monitoring", ""},
		{`{"matchExpressions":[{"key":"team","operator":"In","values":["obs"]}]}`, "team in (obs)", ""},
		{"", "", ""}, // every namespace
		{"a in (", "", "is not a label selector"},
		{`{"matchLabel":{"a":"b"}}`, "", "is not a JSON label selector"},
		{`{"matchExpressions":[{"key":"team","operator":"Near"}]}`, "", "not a valid label selector operator"},
	} {
		sel, err := ParseSelector("--metrics-namespace-selector", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--metrics-namespace-selector") {
				t.Errorf("ParseSelector(%q): %v, want an error naming the flag with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.in, err)
			continue
		}
		s, _ := metav1.LabelSelectorAsSelector(sel)
		if s.String() != tc.want {
			t.Errorf("ParseSelector(%q) = %q, want %q", tc.in, s.String(), tc.want)
		}
	}
}
