package operator

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestWithDefaultRequests(t *testing.T) {
	q := resource.MustParse
	defaults := corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("256Mi")}
	for _, tc := range []struct {
		name string
		in   corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"nothing set: both defaults (Burstable, not BestEffort)", corev1.ResourceRequirements{},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("256Mi")}}},
		{"a request is kept, the other resource defaulted",
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("2")}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceMemory: q("256Mi")}}},
		{"a limit alone is not given a lower request (Kubernetes requests the limit: Guaranteed stays possible)",
			corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}},
			corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}, Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m")}}},
		{"both set: untouched, other resources too",
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi"), corev1.ResourceEphemeralStorage: q("10Gi")}},
			corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi"), corev1.ResourceEphemeralStorage: q("10Gi")}}},
	} {
		in := *tc.in.DeepCopy()
		got := withDefaultRequests(tc.in, defaults)
		if !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		if !equality.Semantic.DeepEqual(in, tc.in) {
			t.Errorf("%s: the spec's resources were modified", tc.name)
		}
	}
}

func TestCacheSizeLimit(t *testing.T) {
	for _, tc := range []struct {
		cacheSize *resource.Quantity
		want      string // "" for no limit
	}{
		{nil, "10Gi"}, // the binaries' default 8Gi, plus a quarter
		{ptr.To(resource.MustParse("0")), ""},
		{ptr.To(resource.MustParse("1Gi")), "3Gi"}, // the 2Gi minimum margin
		{ptr.To(resource.MustParse("8Gi")), "10Gi"},
		{ptr.To(resource.MustParse("100Gi")), "125Gi"},
	} {
		got := cacheSizeLimit(tc.cacheSize)
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("cacheSize %v: limit %v, want none (an unbounded cache)", tc.cacheSize, got)
		case tc.want != "" && (got == nil || got.Cmp(resource.MustParse(tc.want)) != 0):
			t.Errorf("cacheSize %v: limit %v, want %s", tc.cacheSize, got, tc.want)
		}
	}
}

func TestSecondarySpreadRequired(t *testing.T) {
	for _, tc := range []struct {
		replicas, nodes int32
		want            bool
	}{
		{0, 5, false},
		{1, 5, false}, // one Pod has nothing to stay away from
		{2, 0, false}, // nodes unknown
		{2, 1, false}, // a required rule would leave one Pending
		{2, 2, true},
		{2, 3, true},
		{3, 2, false},
		{16, 16, true},
	} {
		if got := secondarySpreadRequired(tc.replicas, tc.nodes); got != tc.want {
			t.Errorf("replicas %d, nodes %d: required %v, want %v", tc.replicas, tc.nodes, got, tc.want)
		}
	}
}

func TestSecondaryRollout(t *testing.T) {
	for _, tc := range []struct {
		required           bool
		replicas, nodes    int32
		surge, unavailable int32
		why                string
	}{
		{false, 2, 1, 1, 0, "preferred: the successor can share a node"},
		{true, 2, 3, 1, 0, "a free node takes the successor"},
		{true, 2, 2, 0, 1, "no free node: the successor would stay Pending"},
		{true, 3, 3, 0, 1, "no free node"},
	} {
		s := secondaryRollout(tc.required, tc.replicas, tc.nodes)
		if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate.MaxSurge.IntVal != tc.surge || s.RollingUpdate.MaxUnavailable.IntVal != tc.unavailable {
			t.Errorf("%s: surge %v unavailable %v, want %d %d", tc.why, s.RollingUpdate.MaxSurge, s.RollingUpdate.MaxUnavailable, tc.surge, tc.unavailable)
		}
	}
}

func TestEligibleNodes(t *testing.T) {
	node := func(name string, labels map[string]string, unschedulable bool, taints ...corev1.Taint) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
	}
	gpu := corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	controlPlane := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	nodes := []corev1.Node{
		node("a", map[string]string{"pool": "db"}, false),
		node("b", map[string]string{"pool": "db"}, false, gpu),
		node("c", map[string]string{"pool": "web"}, false),
		node("cp", nil, false, controlPlane),
		// Cordoned (a drain) or not ready: still counted, so that a drain
		// or a blip does not rewrite the secondaries' template.
		node("d", map[string]string{"pool": "db"}, true, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}),
		node("e", map[string]string{"pool": "db"}, false, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}),
		node("f", map[string]string{"pool": "db"}, false, corev1.Taint{Key: "slow", Effect: corev1.TaintEffectPreferNoSchedule}),
	}
	for _, tc := range []struct {
		name        string
		selector    map[string]string
		tolerations []corev1.Toleration
		want        int32
	}{
		{"no constraints: all but the tainted", nil, nil, 5},
		{"selector", map[string]string{"pool": "db"}, nil, 4},
		{"toleration of the gpu taint", map[string]string{"pool": "db"}, []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}, 5},
		{"toleration of everything", nil, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, 7},
		{"a selector nothing matches", map[string]string{"pool": "none"}, nil, 0},
	} {
		if got := eligibleNodes(nodes, tc.selector, tc.tolerations); got != tc.want {
			t.Errorf("%s: %d nodes, want %d", tc.name, got, tc.want)
		}
	}
}

func TestApplySecondarySpread(t *testing.T) {
	sel := map[string]string{shalev1.LabelRocksDB: "orders", shalev1.LabelRole: shalev1.RoleSecondary}
	term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: sel}, TopologyKey: corev1.LabelHostname}
	nodeAff := &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"db"}}}}}}}
	userAnti := &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "topology.kubernetes.io/zone"}}}}
	userTSC := []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule}}

	for _, tc := range []struct {
		name     string
		user     shalev1.PodScheduling
		required bool
		want     func(*corev1.PodSpec) bool
	}{
		{"default, preferred", shalev1.PodScheduling{}, false, func(s *corev1.PodSpec) bool {
			a := s.Affinity.PodAntiAffinity
			return len(a.RequiredDuringSchedulingIgnoredDuringExecution) == 0 && len(a.PreferredDuringSchedulingIgnoredDuringExecution) == 1 &&
				equality.Semantic.DeepEqual(a.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm, term) &&
				len(s.TopologySpreadConstraints) == 1 && s.TopologySpreadConstraints[0].WhenUnsatisfiable == corev1.ScheduleAnyway
		}},
		{"default, required", shalev1.PodScheduling{}, true, func(s *corev1.PodSpec) bool {
			a := s.Affinity.PodAntiAffinity
			return len(a.PreferredDuringSchedulingIgnoredDuringExecution) == 0 && len(a.RequiredDuringSchedulingIgnoredDuringExecution) == 1 &&
				equality.Semantic.DeepEqual(a.RequiredDuringSchedulingIgnoredDuringExecution[0], term)
		}},
		{"the user's node affinity is kept beside ours", shalev1.PodScheduling{Affinity: &corev1.Affinity{NodeAffinity: nodeAff}}, true, func(s *corev1.PodSpec) bool {
			return equality.Semantic.DeepEqual(s.Affinity.NodeAffinity, nodeAff) && len(s.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 1
		}},
		{"the user's pod anti-affinity replaces ours", shalev1.PodScheduling{Affinity: &corev1.Affinity{PodAntiAffinity: userAnti}}, true, func(s *corev1.PodSpec) bool {
			return equality.Semantic.DeepEqual(s.Affinity.PodAntiAffinity, userAnti)
		}},
		{"the user's topology spread replaces ours", shalev1.PodScheduling{TopologySpreadConstraints: userTSC}, false, func(s *corev1.PodSpec) bool {
			return equality.Semantic.DeepEqual(s.TopologySpreadConstraints, userTSC)
		}},
	} {
		var spec corev1.PodSpec
		applyScheduling(&spec, tc.user)
		applySecondarySpread(&spec, sel, tc.required)
		if !tc.want(&spec) {
			t.Errorf("%s: affinity %+v, spread %+v", tc.name, spec.Affinity, spec.TopologySpreadConstraints)
		}
	}
}

// The primary Pod carries spec.primary's scheduling fields, default
// requests and a cache size limit; the secondaries' template the same of
// spec.secondaries, with their spreading decided by the node count.
func TestPodSchedulingFields(t *testing.T) {
	db, store := secondaryFixture()
	tol := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "shale", Effect: corev1.TaintEffectNoSchedule}}
	aff := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5,
		Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
	tsc := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway}}
	db.Spec.Primary.PodScheduling = shalev1.PodScheduling{Affinity: aff, Tolerations: tol, NodeSelector: map[string]string{"pool": "db"}, TopologySpreadConstraints: tsc, PriorityClassName: "databases"}
	db.Spec.Primary.CacheSize = ptr.To(resource.MustParse("4Gi"))

	pod := primaryPod(db, store, 3, "img")
	s := pod.Spec
	if !equality.Semantic.DeepEqual(s.Affinity, aff) || !equality.Semantic.DeepEqual(s.Tolerations, tol) || s.NodeSelector["pool"] != "db" ||
		!equality.Semantic.DeepEqual(s.TopologySpreadConstraints, tsc) || s.PriorityClassName != "databases" {
		t.Errorf("primary Pod scheduling: affinity %+v tolerations %+v nodeSelector %v spread %+v priority %q", s.Affinity, s.Tolerations, s.NodeSelector, s.TopologySpreadConstraints, s.PriorityClassName)
	}
	if r := s.Containers[0].Resources.Requests; r.Cpu().Cmp(resource.MustParse("100m")) != 0 || r.Memory().Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("primary requests %v, want the defaults", r)
	}
	if l := s.Volumes[0].EmptyDir.SizeLimit; s.Volumes[0].Name != "cache" || l == nil || l.Cmp(resource.MustParse("6Gi")) != 0 {
		t.Errorf("primary cache volume %+v, want sizeLimit 6Gi", s.Volumes[0])
	}

	db.Spec.Secondaries.Replicas = 3
	db.Spec.Secondaries.Tolerations = tol
	for _, tc := range []struct {
		nodes    int32
		required bool
	}{{0, false}, {2, false}, {3, true}, {10, true}} {
		dep := secondaryDeploymentOn(db, store, "img", tc.nodes)
		s := dep.Spec.Template.Spec
		anti := s.Affinity.PodAntiAffinity
		if got := len(anti.RequiredDuringSchedulingIgnoredDuringExecution) == 1; got != tc.required {
			t.Errorf("%d nodes: required anti-affinity %v, want %v", tc.nodes, got, tc.required)
		}
		if !equality.Semantic.DeepEqual(s.Tolerations, tol) || s.Containers[0].Resources.Requests.Cpu().Cmp(resource.MustParse("50m")) != 0 {
			t.Errorf("secondaries: tolerations %+v requests %v", s.Tolerations, s.Containers[0].Resources.Requests)
		}
		if l := s.Volumes[0].EmptyDir.SizeLimit; l == nil || l.Cmp(resource.MustParse("10Gi")) != 0 {
			t.Errorf("secondary cache sizeLimit %v, want 10Gi (default 8Gi cache)", l)
		}
	}
}

func TestDisruptionBudgets(t *testing.T) {
	db, _ := secondaryFixture()
	p := primaryPDB(db)
	// minAvailable, not maxUnavailable: a RocksDB has no scale
	// subresource, which the disruption controller needs for the latter.
	if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntVal != 1 || p.Spec.MaxUnavailable != nil ||
		p.Spec.Selector.MatchLabels[shalev1.LabelRole] != shalev1.RolePrimary || p.Spec.Selector.MatchLabels[shalev1.LabelEpoch] != "" {
		t.Errorf("primary budget %+v: want minAvailable 1 over the primaries of every epoch", p.Spec)
	}
	for _, tc := range []struct {
		replicas int32
		want     bool
	}{{0, false}, {1, false}, {2, true}, {5, true}} {
		db.Spec.Secondaries.Replicas = tc.replicas
		s := secondaryPDB(db)
		if (s != nil) != tc.want {
			t.Errorf("replicas %d: secondary budget %v, want one: %v", tc.replicas, s, tc.want)
			continue
		}
		if s != nil && (s.Spec.MaxUnavailable.IntVal != 1 || s.Spec.Selector.MatchLabels[shalev1.LabelRole] != shalev1.RoleSecondary) {
			t.Errorf("replicas %d: secondary budget %+v, want maxUnavailable 1", tc.replicas, s.Spec)
		}
	}
}

func TestDrainNotice(t *testing.T) {
	db, _ := secondaryFixture()
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-primary-3", Namespace: "prod"}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	node := func(cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want bool
	}{
		{"running on a cordoned node", pod(corev1.PodRunning, false), node(true), true},
		{"node schedulable", pod(corev1.PodRunning, false), node(false), false},
		{"already being deleted (moving)", pod(corev1.PodRunning, true), node(true), false},
		{"failed: failed over anyway", pod(corev1.PodFailed, false), node(true), false},
	} {
		msg := drainNotice(db, tc.pod, tc.node)
		if (msg != "") != tc.want {
			t.Errorf("%s: %q", tc.name, msg)
		}
		if tc.want && !strings.Contains(msg, "until a switchover moves it") {
			t.Errorf("%s: %q does not say how the primary moves", tc.name, msg)
		}
	}
}
