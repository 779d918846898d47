// Package charts holds the tests of the Helm chart charts/shale: the chart
// rendered by the pinned helm (HELM, which `make test` sets) and every
// object it renders created on a real kube-apiserver (envtest), so the API
// server's own validation judges the manifests. hack/chart.sh lint checks
// the values schema and that the chart's CRDs and RBAC rules are the
// generated ones.
package charts

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
	"github.com/shale-rocks/shale/operator"
)

const chartDir = "shale"

// render runs helm template and returns the objects it prints.
func render(t *testing.T, release, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("HELM is not set: run make test (it builds helm), or export HELM=$(hack/chart.sh helm)")
	}
	cmd := exec.Command(helm, append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion(t)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template printed something that is not YAML: %v", err)
		}
		// Strict: a key twice in one mapping (easy to get with includes)
		// is an error, not a silent last-one-wins.
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("helm template %s: %v in\n%s", strings.Join(args, " "), err, doc)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

// kubeVersion is the Kubernetes version pinned in hack/versions.env (helm
// built from its module assumes v1.20 otherwise).
func kubeVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "KUBERNETES_VERSION="); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no KUBERNETES_VERSION in hack/versions.env")
	return ""
}

func find(objs []*unstructured.Unstructured, kind, nameSuffix string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasSuffix(o.GetName(), nameSuffix) {
			return o
		}
	}
	return nil
}

func kinds(objs []*unstructured.Unstructured) map[string]int {
	m := map[string]int{}
	for _, o := range objs {
		m[o.GetKind()]++
	}
	return m
}

// TestRenderedObjects checks what the chart renders, without a cluster.
func TestRenderedObjects(t *testing.T) {
	def := render(t, "shale", "shale-system")
	k := kinds(def)
	for kind, n := range map[string]int{"Deployment": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Service": 1, "CustomResourceDefinition": 6, "NetworkPolicy": 1} {
		if k[kind] != n {
			t.Errorf("default values: %d %s, want %d (all: %v)", k[kind], kind, n, k)
		}
	}
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "ConfigMap", "Secret"} {
		if k[kind] != 0 {
			t.Errorf("default values render a %s", kind)
		}
	}

	// The operator's Deployment: the image of this chart, probes, resources
	// and a locked-down security context.
	dep := find(def, "Deployment", "-operator")
	c, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	ctr := c[0].(map[string]any)
	if img := ctr["image"].(string); img != "shale.local/shale-operator:0.1.0" || ctr["imagePullPolicy"] != "IfNotPresent" {
		t.Errorf("operator image %s %s", img, ctr["imagePullPolicy"])
	}
	for _, p := range []string{"livenessProbe", "readinessProbe", "startupProbe", "resources"} {
		if ctr[p] == nil {
			t.Errorf("operator container has no %s", p)
		}
	}
	sc := ctr["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("operator securityContext %v", sc)
	}
	psc, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec", "securityContext")
	if psc["runAsNonRoot"] != true {
		t.Errorf("operator Pod securityContext %v", psc)
	}
	args := strings.Join(toStrings(ctr["args"]), " ")
	for _, want := range []string{"--leader-elect=true", "--shale-image=shale.local/shale:0.1.0", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--gc-grace=24h",
		"--operator-namespace=shale-system", "--ca-secret=shale-ca", "--ca-validity=87600h", "--cert-validity=2160h", "--cluster-domain=cluster.local"} {
		if !strings.Contains(args, want) {
			t.Errorf("operator args %q lack %s", args, want)
		}
	}

	// The CRDs are kept on uninstall, unless told otherwise.
	for _, o := range def {
		if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s lacks helm.sh/resource-policy: keep", o.GetName())
		}
	}
	for _, o := range render(t, "shale", "shale-system", "--set", "crds.keep=false") {
		if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "" {
			t.Errorf("crds.keep=false: CRD %s still has helm.sh/resource-policy", o.GetName())
		}
	}

	full := render(t, "full", "full", "-f", "shale/ci/full-values.yaml")

	// The ClusterRole has exactly the rules controller-gen generated.
	role := find(def, "ClusterRole", "-operator")
	want := readYAML(t, "../config/rbac/role.yaml")
	if !reflect.DeepEqual(role.Object["rules"], want["rules"]) {
		t.Errorf("the chart's ClusterRole rules differ from config/rbac/role.yaml (run hack/chart.sh sync)")
	}
	checkNetworkPolicies(t, def, "shale-system", false)
	checkNetworkPolicies(t, render(t, "shale", "shale-system", "--set", "demo.minio.enabled=true"), "shale-system", true)
	checkNetworkPolicies(t, full, "full", true)
	off := render(t, "shale", "shale-system", "--set", "networkPolicy.enabled=false", "--set", "demo.minio.enabled=true")
	if n := kinds(off)["NetworkPolicy"]; n != 0 {
		t.Errorf("networkPolicy.enabled=false renders %d NetworkPolicies", n)
	}
	if args := operatorArgs(t, off); args["--network-policies"] != "false" {
		t.Errorf("networkPolicy.enabled=false: --network-policies=%q, want false (the operator makes none either)", args["--network-policies"])
	}
	checkRBAC(t, def, "shale-system", nil)
	checkRBAC(t, render(t, "shale", "shale-system", "--set", "watchNamespaces={team-a,team-b}"), "shale-system", []string{"team-a", "team-b"})
	if k := kinds(render(t, "minimal", "minimal", "-f", "shale/ci/minimal-values.yaml")); k["Role"]+k["RoleBinding"]+k["ClusterRole"]+k["ClusterRoleBinding"] != 0 {
		t.Errorf("rbac.create=false renders RBAC objects: %v", k)
	}

	// Prometheus Operator objects only when its API is served.
	if kinds(full)["ServiceMonitor"] != 0 || kinds(full)["PodMonitor"] != 0 {
		t.Errorf("a ServiceMonitor or PodMonitor is rendered for a cluster without monitoring.coreos.com/v1")
	}
	prom := render(t, "full", "full", "-f", "shale/ci/full-values.yaml", "--api-versions", "monitoring.coreos.com/v1")
	if kinds(prom)["ServiceMonitor"] != 1 || kinds(prom)["PodMonitor"] != 1 {
		t.Errorf("with monitoring.coreos.com/v1: %v, want a ServiceMonitor and a PodMonitor", kinds(prom))
	}
	sm := find(prom, "ServiceMonitor", "")
	svc := find(prom, "Service", "-operator-metrics")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service does not carry (%v)", k, v, svc.GetLabels())
		}
	}

	// The dashboard is JSON with panels.
	cm := find(full, "ConfigMap", "-dashboard")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	var dash struct {
		Panels []any `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data["shale.json"]), &dash); err != nil || len(dash.Panels) < 10 {
		t.Errorf("dashboard ConfigMap: %v, %d panels", err, len(dash.Panels))
	}
	if cm.GetNamespace() != "monitoring" {
		t.Errorf("dashboard ConfigMap in %q, want monitoring", cm.GetNamespace())
	}
}

// TestObjectsOnAPIServer creates everything the chart renders (with the
// default, full and minimal values) on a real kube-apiserver, then the
// repository's samples against the CRDs the chart installed.
func TestObjectsOnAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.WithScheme(shalev1.AddToScheme))
	c := env.Client
	ctx := t.Context()

	apply := func(t *testing.T, objs []*unstructured.Unstructured) {
		t.Helper()
		// CRDs first, and served before anything uses them.
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("CRD %s: %v", o.GetName(), err)
			}
			waitEstablished(t, c, o.GetName())
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("the API server refused %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	ns := func(names ...string) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, n := range names {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("Namespace")
			u.SetName(n)
			out = append(out, u)
		}
		return out
	}

	apply(t, ns("shale-system", "full", "monitoring", "minimal", "team-a", "team-b"))
	def := render(t, "shale", "shale-system", "--set", "demo.minio.enabled=true")
	apply(t, def)
	apply(t, render(t, "full", "full", "-f", "shale/ci/full-values.yaml"))
	apply(t, render(t, "minimal", "minimal", "-f", "shale/ci/minimal-values.yaml"))

	// The API server's RBAC judges what the operators may do: the default
	// release's everywhere; the full release's (watchNamespaces team-a and
	// team-b) only there, and neither any Lease but its own.
	for _, tc := range []struct {
		user      string
		ns        string
		verb      string
		group     string
		resource  string
		name      string
		wantAllow bool
	}{
		{"shale-system:shale", "prod", "create", "", "pods", "", true},
		{"shale-system:shale", "", "list", "shale.rocks", "rocksdbs", "", true},
		{"shale-system:shale", "shale-system", "update", "coordination.k8s.io", "leases", operator.LeaderElectionID, true},
		{"shale-system:shale", "shale-system", "update", "coordination.k8s.io", "leases", "kube-scheduler", false},
		{"shale-system:shale", "prod", "get", "coordination.k8s.io", "leases", operator.LeaderElectionID, false},
		{"full:full-shale", "team-a", "create", "", "pods", "", true},
		{"full:full-shale", "team-b", "list", "shale.rocks", "rocksdbs", "", true},
		{"full:full-shale", "team-b", "update", "shale.rocks", "rocksdbs", "", true},
		{"full:full-shale", "prod", "create", "", "pods", "", false},
		{"full:full-shale", "prod", "get", "", "secrets", "", false},
		{"full:full-shale", "", "list", "shale.rocks", "rocksdbs", "", false},
		{"full:full-shale", "", "get", "", "namespaces", "kube-system", true},
		{"full:full-shale", "", "get", "", "namespaces", "prod", true}, // a terminating namespace lets a finalizer go
		{"full:full-shale", "", "list", "", "namespaces", "", false},
		{"full:full-shale", "", "list", "", "nodes", "", true}, // the secondaries' spreading counts them
		{"full:full-shale", "", "update", "", "nodes", "", false},
		{"full:full-shale", "team-a", "create", "policy", "poddisruptionbudgets", "", true},
		{"full:full-shale", "full", "create", "coordination.k8s.io", "leases", "", true},
		{"full:full-shale", "full", "get", "coordination.k8s.io", "leases", operator.LeaderElectionID, true},
		{"full:full-shale", "full", "list", "coordination.k8s.io", "leases", "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + tc.user,
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.ns, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Name: tc.name,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.wantAllow {
			t.Errorf("%s may %s %s.%s %q in %q: %v, want %v (%s)", tc.user, tc.verb, tc.resource, tc.group, tc.name, tc.ns,
				sar.Status.Allowed, tc.wantAllow, sar.Status.Reason)
		}
	}

	// The CRDs the chart installed are the real ones: the samples are
	// accepted, and a bad spec is refused with its CEL message.
	samples, err := filepath.Glob("../config/samples/*.yaml")
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples in ../config/samples: %v", err)
	}
	for _, o := range env.Objects(t, samples...) {
		o.SetNamespace("shale-system")
		if o.GetName() == "shale-objectstore" {
			continue // the demo MinIO's Secret has this name
		}
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("sample %s %s: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	raw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "shale.rocks/v1alpha1", "kind": "RocksDB",
		"metadata": map[string]any{"name": "bad", "namespace": "shale-system"},
		"spec":     map[string]any{"objectStoreRef": map[string]any{"name": "minio"}, "primary": map[string]any{"cacheSize": "-1"}},
	}}
	if err := c.Create(ctx, raw); err == nil || !strings.Contains(err.Error(), "cacheSize must be a non-negative size") {
		t.Fatalf("a negative cacheSize: %v, want the CEL message", err)
	}
}

// checkRBAC checks the operator's RBAC in a rendered release: the
// leader-election Role in the release namespace grants the one Lease and
// nothing else grants Leases; without watched namespaces one ClusterRole
// holds every generated rule; with them, a ClusterRole holds only the
// rules on cluster-scoped resources and each watched namespace a Role with
// the rest, each bound to the operator's ServiceAccount.
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, releaseNS string, watched []string) {
	t.Helper()
	generated := rulesOf(t, readYAML(t, "../config/rbac/role.yaml"))
	var cluster, namespaced []rbacv1.PolicyRule
	for _, r := range generated {
		if slices.Contains(r.Resources, "leases") {
			t.Errorf("config/rbac/role.yaml grants Leases cluster-wide: %+v", r)
		}
		// controller-gen merges rules with the same verbs; the chart
		// splits the cluster-scoped part (Namespaces, Nodes) off.
		isCluster := func(s string) bool { return s == "namespaces" || s == "nodes" }
		if cl := slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return !isCluster(s) }); len(cl) > 0 {
			c := *r.DeepCopy()
			c.Resources = cl
			cluster = append(cluster, c)
			if rest := slices.DeleteFunc(slices.Clone(r.Resources), isCluster); len(rest) > 0 {
				n := *r.DeepCopy()
				n.Resources = rest
				namespaced = append(namespaced, n)
			}
		} else {
			namespaced = append(namespaced, r)
		}
	}
	// Only get of Namespaces and reading Nodes (the secondaries'
	// spreading counts them).
	wantCluster := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	}
	if !reflect.DeepEqual(cluster, wantCluster) {
		t.Errorf("cluster-scoped rules %+v, want %+v", cluster, wantCluster)
	}

	var roles, bindings = map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Role":
			roles[o.GetNamespace()+"/"+o.GetName()] = o
		case "RoleBinding":
			bindings[o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	le := find(objs, "Role", "-leader-election")
	if le == nil || le.GetNamespace() != releaseNS {
		t.Fatalf("no leader-election Role in %s (roles %v)", releaseNS, mapsKeys(roles))
	}
	leaseName := false
	for _, r := range rulesOf(t, le.Object) {
		if slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, "update") {
			leaseName = reflect.DeepEqual(r.ResourceNames, []string{operator.LeaderElectionID})
		}
		for _, v := range r.Verbs {
			if v == "list" || v == "watch" || v == "delete" || v == "*" {
				t.Errorf("the leader-election Role grants %s: %+v", v, r)
			}
		}
	}
	if !leaseName {
		t.Errorf("the leader-election Role does not limit get/update to the Lease %s: %v", operator.LeaderElectionID, le.Object["rules"])
	}

	cr := rulesOf(t, find(objs, "ClusterRole", "-operator").Object)
	if len(watched) == 0 {
		if !reflect.DeepEqual(cr, generated) {
			t.Errorf("ClusterRole rules %+v, want the generated %+v", cr, generated)
		}
		if len(roles) != 1 {
			t.Errorf("roles %v, want only the leader-election Role", mapsKeys(roles))
		}
	} else if !reflect.DeepEqual(cr, cluster) {
		t.Errorf("with watchNamespaces the ClusterRole has %+v, want only %+v", cr, cluster)
	}
	for _, ns := range watched {
		var role, binding *unstructured.Unstructured
		for k, o := range roles {
			if strings.HasPrefix(k, ns+"/") {
				role = o
			}
		}
		for k, o := range bindings {
			if strings.HasPrefix(k, ns+"/") {
				binding = o
			}
		}
		if role == nil || binding == nil {
			t.Errorf("namespace %s: Role %v, RoleBinding %v", ns, role != nil, binding != nil)
			continue
		}
		if got := rulesOf(t, role.Object); !reflect.DeepEqual(got, namespaced) {
			t.Errorf("Role in %s: rules %+v, want %+v", ns, got, namespaced)
		}
		if ref, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name"); ref != role.GetName() {
			t.Errorf("RoleBinding in %s binds %s, want %s", ns, ref, role.GetName())
		}
		subj, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
		if len(subj) != 1 || subj[0].(map[string]any)["namespace"] != releaseNS {
			t.Errorf("RoleBinding in %s: subjects %v, want the operator's ServiceAccount in %s", ns, subj, releaseNS)
		}
	}
	dep := find(objs, "Deployment", "-operator")
	c, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args := toStrings(c[0].(map[string]any)["args"])
	flag := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--watch-namespaces="); ok {
			flag = v
		}
	}
	if flag != strings.Join(watched, ",") {
		t.Errorf("--watch-namespaces=%q, want %q", flag, strings.Join(watched, ","))
	}
}

// operatorArgs are the operator container's --flag=value arguments.
func operatorArgs(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	dep := find(objs, "Deployment", "-operator")
	c, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args := map[string]string{}
	for _, a := range toStrings(c[0].(map[string]any)["args"]) {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	return args
}

// checkNetworkPolicies checks the chart's NetworkPolicies and the flags
// with which the operator makes the others: the operator's Pod admits
// metrics from the monitoring namespaces and its health port, the demo
// MinIO only Shale's Pods and the operator; the flags parse as the
// operator parses them and select the operator's Pods and the values'
// namespaces.
func checkNetworkPolicies(t *testing.T, objs []*unstructured.Unstructured, releaseNS string, minio bool) {
	t.Helper()
	dep := find(objs, "Deployment", "-operator")
	podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	args := operatorArgs(t, objs)
	if args["--network-policies"] != "true" || args["--operator-namespace"] != releaseNS {
		t.Errorf("operator args %v: want --network-policies=true --operator-namespace=%s", args, releaseNS)
	}
	opSel, err := operator.ParseSelector("--operator-pod-selector", args["--operator-pod-selector"])
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := metav1.LabelSelectorAsSelector(opSel); s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("--operator-pod-selector=%s does not select the operator's Pods (%v)", s, podLabels)
	}
	metricsSel, err := operator.ParseSelector("--metrics-namespace-selector", args["--metrics-namespace-selector"])
	if err != nil {
		t.Fatal(err)
	}

	np := find(objs, "NetworkPolicy", "-operator")
	if np == nil {
		t.Fatalf("no NetworkPolicy for the operator")
	}
	var spec networkingv1.NetworkPolicySpec
	fromMap(t, np.Object["spec"], &spec)
	if s, _ := metav1.LabelSelectorAsSelector(&spec.PodSelector); !s.Matches(labels.Set(podLabels)) {
		t.Errorf("the operator's NetworkPolicy selects %s, not its Pods (%v)", s, podLabels)
	}
	ports := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, r := range spec.Ingress {
		for _, p := range r.Ports {
			ports[p.Port.String()] = r.From
		}
	}
	if len(ports) != 2 || len(ports["health"]) != 0 {
		t.Errorf("the operator's NetworkPolicy admits %v, want metrics and health", ports)
	}
	if m := ports["metrics"]; len(m) != 1 || selString(t, m[0].NamespaceSelector) != selString(t, metricsSel) || m[0].PodSelector != nil {
		t.Errorf("metrics peers %+v, want the namespaces %+v (what the operator's own policies admit)", m, metricsSel)
	}

	mp := find(objs, "NetworkPolicy", "-minio")
	if (mp != nil) != minio {
		t.Fatalf("demo MinIO NetworkPolicy rendered: %v, want %v", mp != nil, minio)
	}
	if mp == nil {
		return
	}
	fromMap(t, mp.Object["spec"], &spec)
	if len(spec.Ingress) != 1 || len(spec.Ingress[0].Ports) != 1 || spec.Ingress[0].Ports[0].Port.String() != "s3" {
		t.Fatalf("demo MinIO policy ingress %+v, want the s3 port only", spec.Ingress)
	}
	var shalePods, op bool
	for _, f := range spec.Ingress[0].From {
		switch {
		case f.NamespaceSelector != nil && f.PodSelector != nil && f.PodSelector.MatchLabels[shalev1.LabelAppManagedBy] == shalev1.ManagedBy:
			shalePods = true
		case f.NamespaceSelector == nil && f.PodSelector != nil && selString(t, f.PodSelector) == selString(t, opSel):
			op = true
		default:
			t.Errorf("demo MinIO admits %+v", f)
		}
	}
	if !shalePods || !op {
		t.Errorf("demo MinIO admits Shale's Pods %v, the operator %v: want both", shalePods, op)
	}
}

func selString(t *testing.T, sel *metav1.LabelSelector) string {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}

func fromMap(t *testing.T, in any, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func rulesOf(t *testing.T, obj map[string]any) []rbacv1.PolicyRule {
	t.Helper()
	b, err := json.Marshal(obj["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := json.Unmarshal(b, &rules); err != nil {
		t.Fatalf("rules %s: %v", b, err)
	}
	return rules
}

func mapsKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not established after a minute", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
