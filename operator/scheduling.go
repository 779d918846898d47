package operator

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Where the database's Pods run and what they ask for (issue 28): the
// user's scheduling fields, default requests, the cache emptyDir's size
// limit, and the secondaries' spreading over nodes. Pure functions of the
// spec and a node count, table-tested in scheduling_test.go.

// Default requests, for a resource that has neither a request nor a limit
// (a limit alone makes Kubernetes request the limit). They keep the Pods
// out of the BestEffort class, the first evicted under node pressure, and
// are small enough that a 2-core kind node, with about 1 core already
// requested by its control plane, holds the operator, MinIO and several
// databases with secondaries (make e2e runs them side by side). Production
// databases set their own: memory is about the block cache (256Mi by
// default) plus the memtables (64Mi each, a few) plus Go's heap.
var (
	primaryDefaultRequests = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("256Mi"),
	}
	secondaryDefaultRequests = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}
)

// withDefaultRequests returns r with a default request for each resource of
// defaults that r neither requests nor limits.
func withDefaultRequests(r corev1.ResourceRequirements, defaults corev1.ResourceList) corev1.ResourceRequirements {
	out := *r.DeepCopy()
	for name, q := range defaults {
		if _, ok := out.Requests[name]; ok {
			continue
		}
		if _, ok := out.Limits[name]; ok {
			continue
		}
		if out.Requests == nil {
			out.Requests = corev1.ResourceList{}
		}
		out.Requests[name] = q.DeepCopy()
	}
	return out
}

// The cache directory holds more than the table cache: RocksDB's info
// logs, the local copies of the logs being written, and tables being
// written (flushes, local compactions) before they are uploaded and become
// cache entries. Its size limit leaves a quarter of the cache for those,
// and at least 2Gi (a few compaction outputs of 64Mi, the memtables'
// logs, with room to spare): the default 8Gi cache gets a 10Gi limit, the
// ephemeral-storage docs/operator.md has always suggested requesting. A
// Pod over its limit is evicted (for a primary, a failover), so the margin
// errs large.
const (
	defaultCacheSize   = 8 << 30 // `shale primary` and `shale secondary`'s --cache-size
	cacheMarginMinimum = 2 << 30
)

// cacheSizeLimit is the cache emptyDir's sizeLimit for a cacheSize (nil:
// the binaries' default); nil (no limit) for 0, an unbounded cache.
func cacheSizeLimit(cacheSize *resource.Quantity) *resource.Quantity {
	size := int64(defaultCacheSize)
	if cacheSize != nil {
		size = cacheSize.Value()
	}
	if size <= 0 {
		return nil
	}
	limit := size + max(size/4, cacheMarginMinimum)
	return resource.NewQuantity(limit, resource.BinarySI)
}

// applyScheduling copies a role's scheduling fields into a Pod spec.
func applyScheduling(spec *corev1.PodSpec, s shalev1.PodScheduling) {
	s = *s.DeepCopy()
	spec.Affinity = s.Affinity
	spec.Tolerations = s.Tolerations
	spec.NodeSelector = s.NodeSelector
	spec.TopologySpreadConstraints = s.TopologySpreadConstraints
	spec.PriorityClassName = s.PriorityClassName
}

// secondarySpreadRequired decides whether the secondaries' anti-affinity
// on the node is required, from the number of nodes they could run on
// (eligibleNodes). Only with at least two replicas (one Pod has nothing to
// stay away from) and at least as many nodes as replicas: with fewer, a
// required rule would leave replicas Pending; with enough, it guarantees
// that losing a node loses at most one secondary. A node count of 0 means
// unknown (the Nodes could not be read): preferred.
func secondarySpreadRequired(replicas, eligibleNodes int32) bool {
	return replicas >= 2 && eligibleNodes >= replicas
}

// secondaryRollout is the Deployment strategy: a successor started before
// its predecessor stops (maxSurge 1, maxUnavailable 0), so reads keep their
// capacity, unless the anti-affinity is required and there is no node
// without a secondary for that extra Pod (nodes == replicas): then one
// stops first (maxUnavailable 1, as the PodDisruptionBudget allows),
// else the rollout would wait forever for a node.
func secondaryRollout(required bool, replicas, eligibleNodes int32) appsv1.DeploymentStrategy {
	surge, unavailable := int32(1), int32(0)
	if required && eligibleNodes <= replicas {
		surge, unavailable = 0, 1
	}
	return appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(unavailable)),
			MaxSurge:       ptr.To(intstr.FromInt32(surge)),
		},
	}
}

// applySecondarySpread adds the default spreading to the secondaries' Pod
// spec (after applyScheduling): an anti-affinity on the node's hostname,
// preferred always and required when secondarySpreadRequired says so, and
// a topology spread over nodes that never refuses to schedule. A user's
// affinity with a podAntiAffinity replaces the anti-affinity (their node
// affinity is kept with ours), and their topologySpreadConstraints ours.
func applySecondarySpread(spec *corev1.PodSpec, selector map[string]string, required bool) {
	sel := &metav1.LabelSelector{MatchLabels: selector}
	if len(spec.TopologySpreadConstraints) == 0 {
		spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelHostname,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     sel,
		}}
	}
	if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
		return
	}
	term := corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname}
	anti := &corev1.PodAntiAffinity{}
	if required {
		anti.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{term}
	} else {
		anti.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}}
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	spec.Affinity.PodAntiAffinity = anti
}

// eligibleNodes counts the nodes a Pod with this nodeSelector and these
// tolerations could run on: labels matching, and every NoSchedule or
// NoExecute taint tolerated. The taints Kubernetes sets for a while
// (node.kubernetes.io/..., such as unschedulable during a drain, or
// not-ready and unreachable) and spec.unschedulable are ignored on
// purpose: the count decides the secondaries' Pod template, and a drain
// or a node's blip must not roll them (a changed rule rewrites the
// template). A node removed from the cluster counts at once.
func eligibleNodes(nodes []corev1.Node, nodeSelector map[string]string, tolerations []corev1.Toleration) int32 {
	sel := labels.SelectorFromSet(nodeSelector)
	var n int32
	for i := range nodes {
		node := &nodes[i]
		if !sel.Matches(labels.Set(node.Labels)) || !toleratesAll(node.Spec.Taints, tolerations) {
			continue
		}
		n++
	}
	return n
}

func toleratesAll(taints []corev1.Taint, tolerations []corev1.Toleration) bool {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule || strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(t) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return false
		}
	}
	return true
}

// preferOtherNode makes the scheduler prefer any node but node (a
// preferred node affinity, next to the user's): where a primary the
// operator could not reach ran (RFC 0015). Preferred, not required: the
// node may be fine (the operator cut off from it alone), and the only one
// with room.
func preferOtherNode(spec *corev1.PodSpec, node string) {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, corev1.PreferredSchedulingTerm{
		Weight: 100,
		Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node},
		}}},
	})
}
