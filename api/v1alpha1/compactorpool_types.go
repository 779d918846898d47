package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CompactorPoolSpec is a remote compaction service (docs/compaction.md): a
// scheduler (Deployment and Service NAME-scheduler) that queues the
// compactions of the RocksDBs whose spec.compaction names the pool, and
// stateless workers (Deployment NAME-worker) that run them against the
// databases in their object store. The operator scales the workers on the
// scheduler's queue depth between minReplicas and maxReplicas (set both
// to pin the number). The scale subresource sets minReplicas:
// kubectl scale compactorpool/NAME --replicas N keeps at least N workers.
type CompactorPoolSpec struct {
	// ObjectStoreRef names the ObjectStore (in this namespace) whose
	// databases the workers compact: they get its credentials. A RocksDB
	// may use the pool only if it lives in the same ObjectStore.
	ObjectStoreRef ObjectStoreReference `json:"objectStoreRef"`

	// Image of the shale binary; empty means the operator's default.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the pool's containers; empty means IfNotPresent.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Scheduler configures the job queue.
	// +optional
	// +kubebuilder:default={}
	Scheduler CompactorSchedulerSpec `json:"scheduler,omitempty"`

	// Workers configures the workers and their scaling.
	// +optional
	// +kubebuilder:default={}
	Workers CompactorWorkersSpec `json:"workers,omitempty"`

	// TLS secures the scheduler's port: on unless enabled is false. The
	// operator issues the scheduler's and the workers' certificates
	// (Secrets NAME-scheduler-tls, NAME-worker-tls) and renews them. The
	// RocksDBs that use the pool must agree: a database with TLS cannot
	// submit to a plaintext pool, nor the other way round.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`
}

// CompactorSchedulerSpec configures `shale compactor scheduler`.
type CompactorSchedulerSpec struct {
	// Resources of the scheduler's container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// LeaseTTL: a job whose worker has not heartbeated for this long goes
	// back to the queue (--lease-ttl, default 15s).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="leaseTTL must be a duration from 1s to 10m, such as 15s"
	LeaseTTL *metav1.Duration `json:"leaseTTL,omitempty"`
}

// CompactorWorkersSpec configures `shale compactor worker` and how many
// run.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="workers.minReplicas must not exceed workers.maxReplicas"
type CompactorWorkersSpec struct {
	// MinReplicas is the fewest workers (default 1; 0 lets an idle pool
	// scale to none, and a job then waits for a worker to start, or its
	// primary's queue timeout sends it back to compact locally). The
	// scale subresource reads and writes it.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the most workers (default 4).
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// Concurrency is the jobs one worker runs at once (--concurrency,
	// default 1). The operator aims at one slot per queued or running job.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Concurrency int32 `json:"concurrency,omitempty"`

	// ScaleDownDelay is how long the queue must have needed fewer workers
	// before the operator removes any (default 2m): jobs come in bursts.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s')",message="scaleDownDelay must be a duration, such as 2m"
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`

	// JobTimeout bounds one job (--job-timeout, default 30m); keep it well
	// under the databases' deleteGrace.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="jobTimeout must be a positive duration, such as 30m"
	JobTimeout *metav1.Duration `json:"jobTimeout,omitempty"`

	// Resources of each worker's container. A job's inputs are cached in
	// an emptyDir volume: request ephemeral-storage to match.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// CompactorPoolStatus is what the scheduler reports, as last read.
type CompactorPoolStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready (the scheduler serves and the minimum of workers
	// is ready), SchedulerReachable (its Stats were read).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// QueueDepth is the jobs waiting for a worker.
	// +optional
	QueueDepth int64 `json:"queueDepth,omitempty"`
	// Running is the jobs running on workers.
	// +optional
	Running int64 `json:"running,omitempty"`
	// Completed and Failed count jobs since the scheduler started (its
	// queue is soft state: a restart resets them).
	// +optional
	Completed int64 `json:"completed,omitempty"`
	// +optional
	Failed int64 `json:"failed,omitempty"`

	// Replicas is the workers the Deployment runs; ReadyWorkers the ready
	// ones; DesiredWorkers what the queue asks for, within bounds.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyWorkers int32 `json:"readyWorkers,omitempty"`
	// +optional
	DesiredWorkers int32 `json:"desiredWorkers,omitempty"`
	// Selector of the worker Pods (for the scale subresource).
	// +optional
	Selector string `json:"selector,omitempty"`

	// LastScaleTime is when the operator last changed the number of
	// workers.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// Databases are the per-database counters of the scheduler, by
	// database URL.
	// +optional
	// +listType=map
	// +listMapKey=db
	Databases []CompactionStats `json:"databases,omitempty"`
}

// CompactionStats are one database's counters at a scheduler.
type CompactionStats struct {
	// DB is the database's store URL.
	DB string `json:"db"`
	// +optional
	QueueDepth int64 `json:"queueDepth,omitempty"`
	// +optional
	Running int64 `json:"running,omitempty"`
	// +optional
	Completed int64 `json:"completed,omitempty"`
	// +optional
	Failed int64 `json:"failed,omitempty"`
	// Fallbacks are compactions the primary ran locally because remote
	// compaction failed, as it reported them.
	// +optional
	Fallbacks int64 `json:"fallbacks,omitempty"`
}

// CompactorPool is a remote compaction service shared by RocksDBs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.workers.minReplicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cpool,categories=shale
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queueDepth`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completed`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.readyWorkers`,description="ready workers"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a CompactorPool name must be at most 50 lower-case letters, digits and '-', start with a letter and end with a letter or digit (it names the Service NAME-scheduler)"
type CompactorPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CompactorPoolSpec   `json:"spec"`
	Status CompactorPoolStatus `json:"status,omitempty"`
}

// CompactorPoolList is a list of CompactorPools.
//
// +kubebuilder:object:root=true
type CompactorPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompactorPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompactorPool{}, &CompactorPoolList{})
}
