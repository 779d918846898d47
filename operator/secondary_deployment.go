package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Ports of the secondary container. The NAME-ro Service exposes them on
// the primary's port numbers (7070, 9090), so a client changes only the
// Service name to read from the secondaries.
const (
	portSecondaryKV      = 7071
	portSecondaryMetrics = 9091
	// envPodName carries the Pod's name (downward API) into --id: each
	// secondary's reader lease in the store is named after its Pod.
	envPodName = "POD_NAME"
)

// secondaryDeployment is the Deployment NAME-secondary: spec.secondaries
// .replicas Pods running `shale secondary` on the database's directory,
// following the primary's notifications through the NAME-rw Service.
//
// Unlike a primary, a secondary claims no epoch and may be restarted in
// place, so a Deployment manages them. Nothing in the Pod template depends
// on the epoch, the current primary or anything else that changes at run
// time: a failover leaves the secondaries running (they follow the new
// primary through the store and the Service), and so does a restart of the
// operator. The spec is a function of the RocksDB's spec, its storage path
// and the ObjectStore only; its hash (AnnotationSpecHash) tells the
// operator whether the Deployment must be rewritten.
//
// Credentials reach the container as for the primary: secretKeyRefs to the
// ObjectStore's Secret.
func secondaryDeployment(db *shalev1.RocksDB, store *shalev1.ObjectStore, defaultImage string) *appsv1.Deployment {
	return secondaryDeploymentOn(db, store, defaultImage, 0)
}

// secondaryDeploymentOn is secondaryDeployment for a cluster with
// eligibleNodes nodes the secondaries could run on (0: unknown), which
// decides whether their anti-affinity is required (scheduling.go).
func secondaryDeploymentOn(db *shalev1.RocksDB, store *shalev1.ObjectStore, defaultImage string, eligibleNodes int32) *appsv1.Deployment {
	p, s := db.Spec.Primary, db.Spec.Secondaries
	image := p.Image
	if image == "" {
		image = defaultImage
	}
	pull := p.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	args := []string{
		"secondary",
		"--db", store.DatabaseURL(db.Status.StoragePath),
		"--listen", ":" + strconv.Itoa(portSecondaryKV),
		"--metrics-listen", ":" + strconv.Itoa(portSecondaryMetrics),
		"--cache-dir", cacheDir,
		"--primary", primaryAddress(db),
		"--id", "$(" + envPodName + ")",
	}
	dur := func(flag string, d *metav1.Duration) {
		if d != nil {
			args = append(args, flag, d.Duration.String())
		}
	}
	size := func(flag string, q *resource.Quantity) {
		if q != nil {
			args = append(args, flag, strconv.FormatInt(q.Value(), 10))
		}
	}
	size("--cache-size", s.CacheSize)
	size("--block-cache-size", s.BlockCacheSize)
	// A secondary refuses keys the primary accepts unless both have the
	// same limit; and reads the same store with the same deadline.
	size("--max-key-size", p.MaxKeySize)
	dur("--catchup-interval", s.CatchupInterval)
	dur("--lease-ttl", s.LeaseTTL)
	dur("--read-timeout", p.ReadTimeout)
	args = append(args, secondaryColdArgs(planTiering(db, store).args)...)

	env := []corev1.EnvVar{
		{Name: envPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
	}

	labels := db.SecondaryLabels()
	required := secondarySpreadRequired(s.Replicas, eligibleNodes)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      db.SecondaryDeploymentName(),
			Namespace: db.Namespace,
			Labels:    labels,
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(s.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: db.SecondarySelector()},
			// Replace one secondary at a time, starting its successor
			// first when there is a node for it: reads keep their
			// capacity during a rollout, and a template that cannot start
			// stalls the rollout instead of taking the replicas down.
			Strategy:             secondaryRollout(required, s.Replicas, eligibleNodes),
			RevisionHistoryLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](terminationGrace),
					EnableServiceLinks:            ptr.To(false),
					SecurityContext:               podSecurityContext(),
					Containers: []corev1.Container{{
						Name:            containerName,
						Image:           image,
						ImagePullPolicy: pull,
						Args:            args,
						Env:             env,
						Ports: []corev1.ContainerPort{
							{Name: portNameKV, ContainerPort: portSecondaryKV, Protocol: corev1.ProtocolTCP},
							{Name: portNameMet, ContainerPort: portSecondaryMetrics, Protocol: corev1.ProtocolTCP},
						},
						Resources: withDefaultRequests(s.Resources, secondaryDefaultRequests),
						// SERVING once the database is open as a
						// secondary.
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:     corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: portSecondaryKV}},
							PeriodSeconds:    2,
							TimeoutSeconds:   1,
							FailureThreshold: 3,
						},
						VolumeMounts:             []corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}},
						SecurityContext:          containerSecurityContext(),
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
					Volumes: []corev1.Volume{{
						Name:         "cache",
						VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: cacheSizeLimit(s.CacheSize)}},
					}},
				},
			},
		},
	}
	// Spread the replicas over nodes: the user's rules, else ours.
	applyScheduling(&dep.Spec.Template.Spec, s.PodScheduling)
	applySecondarySpread(&dep.Spec.Template.Spec, db.SecondarySelector(), required)
	applyTLS(&dep.Spec.Template.Spec, podTLS{enabled: db.TLSEnabled(), certSecret: db.SecondaryTLSSecretName(), accessSecret: db.AccessSecretName(), server: true, probePort: portSecondaryKV})
	pod := &dep.Spec.Template.Spec
	storeAccessOf(store).apply(pod, &pod.Containers[0])
	if v := db.Annotations[shalev1.AnnotationRestartedAt]; v != "" {
		// A restart asked for (kubectl shale restart), as `kubectl rollout
		// restart` does it: a new template annotation rolls the Pods.
		dep.Spec.Template.Annotations = map[string]string{shalev1.AnnotationRestartedAt: v}
	}
	dep.Annotations = map[string]string{shalev1.AnnotationSpecHash: specHash(dep.Spec)}
	return dep
}

// specHash hashes a Deployment spec built by secondaryDeployment, replicas
// aside (scaling is not a change of the Pods).
func specHash(spec appsv1.DeploymentSpec) string {
	spec.Replicas = nil
	b, err := json.Marshal(spec)
	if err != nil {
		panic("marshalling a Deployment spec: " + err.Error()) // plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// primaryAddress is the primary's gRPC address for secondaries: the NAME-rw
// Service, which follows the primary of the current epoch.
func primaryAddress(db *shalev1.RocksDB) string {
	return db.ServiceName() + "." + db.Namespace + ".svc:" + strconv.Itoa(portKV)
}
