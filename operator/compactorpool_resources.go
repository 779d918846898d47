package operator

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Ports of a CompactorPool's containers.
const (
	portSchedulerMetrics = 9080
	portWorkerMetrics    = 9081
)

// schedulerDeployment is NAME-scheduler: one `shale compactor scheduler`.
// Its queue is soft state, so a Recreate rollout (never two schedulers,
// which would split the primaries between two queues) costs only a few
// local compactions.
func schedulerDeployment(pool *shalev1.CompactorPool, defaultImage string) *appsv1.Deployment {
	args := []string{
		"compactor", "scheduler",
		"--listen", ":" + strconv.Itoa(shalev1.SchedulerPort),
		"--metrics-listen", ":" + strconv.Itoa(portSchedulerMetrics),
	}
	if d := pool.Spec.Scheduler.LeaseTTL; d != nil {
		args = append(args, "--lease-ttl", d.Duration.String())
	}
	ctr := poolContainer(pool, defaultImage, args, pool.Spec.Scheduler.Resources)
	ctr.Ports = []corev1.ContainerPort{
		{Name: portNameKV, ContainerPort: shalev1.SchedulerPort, Protocol: corev1.ProtocolTCP},
		{Name: portNameMet, ContainerPort: portSchedulerMetrics, Protocol: corev1.ProtocolTCP},
	}
	ctr.ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: shalev1.SchedulerPort}},
		PeriodSeconds:    2,
		TimeoutSeconds:   1,
		FailureThreshold: 3,
	}
	dep := poolDeployment(pool, pool.SchedulerName(), shalev1.ComponentScheduler, 1, ctr, nil)
	dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	applyTLS(&dep.Spec.Template.Spec, podTLS{enabled: pool.TLSEnabled(), certSecret: pool.SchedulerTLSSecretName(), server: true, probePort: shalev1.SchedulerPort})
	dep.Annotations = map[string]string{shalev1.AnnotationSpecHash: specHash(dep.Spec)}
	return dep
}

// schedulerService is NAME-scheduler: the address primaries submit to and
// workers lease from.
func schedulerService(pool *shalev1.CompactorPool) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pool.SchedulerName(),
			Namespace: pool.Namespace,
			Labels:    pool.Labels(shalev1.ComponentScheduler),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: pool.Selector(shalev1.ComponentScheduler),
			Ports: []corev1.ServicePort{
				{Name: portNameKV, Port: shalev1.SchedulerPort, TargetPort: intstr.FromString(portNameKV), Protocol: corev1.ProtocolTCP},
				{Name: portNameMet, Port: portSchedulerMetrics, TargetPort: intstr.FromString(portNameMet), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// workerDeployment is NAME-worker: `shale compactor worker` Pods with the
// ObjectStore's credentials, as many as replicas. A worker keeps nothing
// between jobs, so Pods may come and go: a job whose worker vanished goes
// back to the queue when its lease runs out.
func workerDeployment(pool *shalev1.CompactorPool, store *shalev1.ObjectStore, defaultImage string, replicas int32) *appsv1.Deployment {
	w := pool.Spec.Workers
	args := []string{
		"compactor", "worker",
		"--scheduler", pool.SchedulerAddress(),
		"--cache-dir", cacheDir,
		"--concurrency", strconv.Itoa(int(pool.WorkerConcurrency())),
		"--id", "$(" + envPodName + ")",
		"--metrics-listen", ":" + strconv.Itoa(portWorkerMetrics),
	}
	if d := w.JobTimeout; d != nil {
		args = append(args, "--job-timeout", d.Duration.String())
	}
	ctr := poolContainer(pool, defaultImage, args, w.Resources)
	ctr.Ports = []corev1.ContainerPort{{Name: portNameMet, ContainerPort: portWorkerMetrics, Protocol: corev1.ProtocolTCP}}
	ctr.Env = []corev1.EnvVar{
		{Name: envPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
	}
	ctr.ReadinessProbe = &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(portWorkerMetrics)}},
		PeriodSeconds:    5,
		TimeoutSeconds:   1,
		FailureThreshold: 3,
	}
	dep := poolDeployment(pool, pool.WorkerName(), shalev1.ComponentWorker, replicas, ctr, &corev1.Volume{
		Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	dep.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}}
	applyTLS(&dep.Spec.Template.Spec, podTLS{enabled: pool.TLSEnabled(), certSecret: pool.WorkerTLSSecretName()})
	pod := &dep.Spec.Template.Spec
	storeAccessOf(store).apply(pod, &pod.Containers[0])
	// A worker being replaced hands its jobs back on SIGTERM; rolling
	// one at a time keeps the pool's capacity.
	dep.Spec.Strategy = appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			MaxSurge:       ptr.To(intstr.FromInt32(1)),
		},
	}
	dep.Annotations = map[string]string{shalev1.AnnotationSpecHash: specHash(dep.Spec)}
	return dep
}

func poolContainer(pool *shalev1.CompactorPool, defaultImage string, args []string, res corev1.ResourceRequirements) corev1.Container {
	image := pool.Spec.Image
	if image == "" {
		image = defaultImage
	}
	pull := pool.Spec.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	return corev1.Container{
		Name:                     containerName,
		Image:                    image,
		ImagePullPolicy:          pull,
		Args:                     args,
		Resources:                *res.DeepCopy(),
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func poolDeployment(pool *shalev1.CompactorPool, name, component string, replicas int32, ctr corev1.Container, vol *corev1.Volume) *appsv1.Deployment {
	labels := pool.Labels(component)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(replicas),
			Selector:             &metav1.LabelSelector{MatchLabels: pool.Selector(component)},
			RevisionHistoryLimit: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](terminationGrace),
					EnableServiceLinks:            ptr.To(false),
					AutomountServiceAccountToken:  ptr.To(false),
					SecurityContext:               podSecurityContext(),
					Containers:                    []corev1.Container{ctr},
				},
			},
		},
	}
	if vol != nil {
		dep.Spec.Template.Spec.Volumes = []corev1.Volume{*vol}
	}
	return dep
}
