package operator

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
)

const (
	watchedNS = "watched"
	otherNS   = "other"
	// The operator's identity in TestWatchNamespaces (its namespace is
	// operatorNS).
	operatorSA = "shale-operator"
)

// generatedRules splits the rules controller-gen generated from the RBAC
// markers (config/rbac/role.yaml) as the chart does with watchNamespaces:
// the cluster-scoped ones (Namespaces, Nodes) for a ClusterRole, the rest for a
// Role in each watched namespace.
func generatedRules(t *testing.T) (cluster, namespaced []rbacv1.PolicyRule) {
	t.Helper()
	b, err := os.ReadFile("../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatalf("config/rbac/role.yaml: %v", err)
	}
	for _, r := range role.Rules {
		c, n := splitNamespaces(r)
		cluster, namespaced = append(cluster, c...), append(namespaced, n...)
	}
	return cluster, namespaced
}

// asWatchNamespacesOperator creates, as the admin, the RBAC the chart
// gives the operator with watchNamespaces [watched] (a Role there and a
// ClusterRole with the cluster-scoped rules only), and returns a
// configuration that acts as the operator's ServiceAccount.
func asWatchNamespacesOperator(t *testing.T) func(*testenv.Env) *rest.Config {
	return func(env *testenv.Env) *rest.Config {
		c, ctx := env.Client, t.Context()
		cluster, namespaced := generatedRules(t)
		sa := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: operatorSA, Namespace: operatorNS}}
		for _, o := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNS}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: watchedNS}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: otherNS}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "shale-operator-cluster"}, Rules: cluster},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "shale-operator-cluster"}, Subjects: sa,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "shale-operator-cluster"}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: watchedNS, Name: "shale-operator"}, Rules: namespaced},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: watchedNS, Name: "shale-operator"}, Subjects: sa,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "shale-operator"}},
			// The chart's Role for the CA Secret in the operator's namespace.
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: "shale-operator-ca"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: "shale-operator-ca"}, Subjects: sa,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "shale-operator-ca"}},
		} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("create %T %s: %v", o, o.GetName(), err)
			}
		}
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + operatorNS + ":" + operatorSA,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNS, "system:authenticated"},
		}
		return cfg
	}
}

// An operator started with --watch-namespaces=watched, holding only the
// RBAC the chart gives it then (no ClusterRole but for getting
// Namespaces and reading Nodes), runs a database in its namespace, ignores one in another,
// and collects garbage only in its namespace.
func TestWatchNamespaces(t *testing.T) {
	opts := testOptions()
	opts.WatchNamespaces = []string{watchedNS}
	h := startOperatorAs(t, opts, asWatchNamespacesOperator(t))

	// The database of the other namespace first: had the operator seen it,
	// it would have acted on it before the watched one.
	osec, ostore, odb := h.samples(otherNS)
	h.create(osec, ostore, odb)
	sec, store, db := h.samples(watchedNS)
	h.create(sec, store, db)

	h.waitDB(watchedNS, db.Name, "started", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 1 && db.Status.StoragePath != "", "want epoch 1"
	})
	h.setPod(watchedNS, db.PrimaryPodName(1), corev1.PodRunning, true, time.Now())
	db = h.waitDB(watchedNS, db.Name, "Ready", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionTrue, ""), "want Ready"
	})
	h.waitEvent(watchedNS, db.Name, eventPrimaryCreated)
	h.waitPolicy(watchedNS, db.NetworkPolicyName(), "as built", specIs(databasePolicy(db, peersOf(opts))))

	odb = h.db(otherNS, odb.Name)
	if controllerutil.ContainsFinalizer(odb, shalev1.FinalizerStorage) || odb.Status.Epoch != 0 || odb.Status.Phase != "" || len(odb.Status.Conditions) != 0 {
		t.Errorf("the RocksDB in %s was touched: finalizers %v, status %s", otherNS, odb.Finalizers, statusString(odb))
	}
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: otherNS, Name: odb.NetworkPolicyName()}, &networkingv1.NetworkPolicy{}); !apierrors.IsNotFound(err) {
		t.Errorf("NetworkPolicy in %s: %v, want none", otherNS, err)
	}
	if names := h.primaries(otherNS, odb.Name); len(names) != 0 {
		t.Errorf("primary Pods in %s: %v", otherNS, names)
	}
	var os shalev1.ObjectStore
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(ostore), &os); err != nil || len(os.Status.Conditions) != 0 {
		t.Errorf("the ObjectStore in %s was checked: %v, conditions %v", otherNS, err, os.Status.Conditions)
	}

	// Garbage collection, past the grace period. Both namespaces share the
	// bucket and prefix; the other namespace's database (run, say, by
	// another operator of this cluster) has data and an owner record
	// saying Delete. The operator cannot see that RocksDB: it must leave
	// its directory alone, and still collect its own namespace's orphans.
	hot := h.store(store.Spec.Hot.Prefix)
	theirs := otherNS + "/" + odb.DirName()
	h.put(hot, theirs+"/000005.sst/00000000000000000001", "a live table")
	if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(otherNS, odb.DirName()),
		dirOwnerRecord{Cluster: h.cluster, Namespace: otherNS, Name: odb.Name, UID: odb.UID, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
		t.Fatal(err)
	}
	ghostDir := "ghost-" + uuid.NewString()
	ghost := watchedNS + "/" + ghostDir
	h.put(hot, ghost+"/000005.sst/00000000000000000001", "an orphaned table")
	_, ghostUID, _ := parseDirName(ghostDir)
	if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(watchedNS, ghostDir),
		dirOwnerRecord{Cluster: h.cluster, Namespace: watchedNS, Name: "ghost", UID: ghostUID, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
		t.Fatal(err)
	}
	theirKeys := h.keys(hot, otherNS+"/")

	g := *h.gc
	g.grace = time.Hour
	g.now = func() time.Time { return time.Now().Add(48 * time.Hour) }
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), store); err != nil {
		t.Fatal(err)
	}
	rep, err := g.pass(h.ctx, store)
	if err != nil {
		t.Fatalf("a GC pass with the watched namespaces' RBAC: %v", err)
	}
	for k := range rep.Verdicts {
		if strings.HasPrefix(k, otherNS+"/") {
			t.Errorf("the collector judged %s (%v), in a namespace it does not watch", k, rep.Verdicts[k])
		}
	}
	if rep.Verdicts[ghost] != orphan || !slices.Contains(rep.Deleted, ghost) {
		t.Errorf("verdicts %v, deleted %v: want %s deleted as an orphan", rep.Verdicts, rep.Deleted, ghost)
	}
	if got := h.keys(hot, otherNS+"/"); !slices.Equal(got, theirKeys) {
		t.Errorf("objects of %s: %v, want them untouched: %v", otherNS, got, theirKeys)
	}

	// A whole run (ObjectStores listed in the watched namespaces only)
	// finds a new orphan of the watched namespace.
	ghost2Dir := "ghost-" + uuid.NewString()
	_, ghost2UID, _ := parseDirName(ghost2Dir)
	h.put(hot, watchedNS+"/"+ghost2Dir+"/CURRENT", "MANIFEST-000001\n")
	if err := putOwnerRecord(h.ctx, hot, ownerRecordKey(watchedNS, ghost2Dir),
		dirOwnerRecord{Cluster: h.cluster, Namespace: watchedNS, Name: "ghost", UID: ghost2UID, ReclaimPolicy: shalev1.ReclaimDelete}); err != nil {
		t.Fatal(err)
	}
	g.runOnce(h.ctx)
	if left := h.keys(hot, watchedNS+"/"+ghost2Dir+"/"); len(left) != 0 {
		t.Errorf("a GC run left the orphan %s: %v", ghost2Dir, left)
	}
	if got := h.keys(hot, otherNS+"/"); !slices.Equal(got, theirKeys) {
		t.Errorf("objects of %s after a run: %v, want them untouched: %v", otherNS, got, theirKeys)
	}
}

// clusterScoped are the cluster-scoped resources in the generated rules
// (the chart's $clusterScoped).
var clusterScoped = []string{"namespaces", "nodes"}

// splitNamespaces splits a generated rule into its cluster-scoped part
// (Namespaces, Nodes) and the rest, as the chart does: controller-gen
// merges rules with the same verbs.
func splitNamespaces(r rbacv1.PolicyRule) (cluster, namespaced []rbacv1.PolicyRule) {
	var cl, rest []string
	for _, res := range r.Resources {
		if slices.Contains(clusterScoped, res) {
			cl = append(cl, res)
		} else {
			rest = append(rest, res)
		}
	}
	if len(cl) > 0 {
		c := *r.DeepCopy()
		c.Resources = cl
		cluster = append(cluster, c)
	}
	if len(rest) > 0 {
		n := *r.DeepCopy()
		n.Resources = rest
		namespaced = append(namespaced, n)
	}
	return cluster, namespaced
}
