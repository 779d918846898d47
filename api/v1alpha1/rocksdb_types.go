package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReclaimPolicy says what happens to a database's storage directory when
// its RocksDB object is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type ReclaimPolicy string

const (
	// ReclaimRetain keeps the directory (the default). The garbage
	// collector never deletes it either.
	ReclaimRetain ReclaimPolicy = "Retain"
	// ReclaimDelete deletes every object in the directory.
	ReclaimDelete ReclaimPolicy = "Delete"
)

// RocksDBSpec is the desired state of one database. The primary and the
// secondaries have their own sections; compaction and tiering get theirs
// beside them.
//
// +kubebuilder:validation:XValidation:rule="!has(self.clients) || size(self.clients) == 0 || !has(self.tls) || !has(self.tls.enabled) || self.tls.enabled",message="spec.clients need TLS (client certificates and tokens are only checked over TLS): remove tls.enabled: false, or the clients"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap)",message="bootstrap is set when the RocksDB is created, or never: it says what the database started from (create a new RocksDB to start from something else)"
type RocksDBSpec struct {
	// ObjectStoreRef names the ObjectStore (in this namespace) the
	// database lives in. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="objectStoreRef is immutable: the database stays in the object store it was created in"
	ObjectStoreRef ObjectStoreReference `json:"objectStoreRef"`

	// Bootstrap says what a new database starts from; omitted, it starts
	// empty. Set when the RocksDB is created, immutable after.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bootstrap is immutable: it says what the database started from (create a new RocksDB to start from something else)"
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// ReclaimPolicy: Retain (default) keeps the storage directory when the
	// RocksDB is deleted; Delete removes it.
	// +optional
	// +kubebuilder:default=Retain
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// Primary configures the read-write server.
	// +optional
	// +kubebuilder:default={}
	Primary PrimarySpec `json:"primary,omitempty"`

	// PrimaryUpdateStrategy says how a primary that differs from the spec
	// (or from the operator's image) is replaced: unsupervised (the
	// default) switches it over once the secondaries have rolled out;
	// supervised only says so (condition PrimaryUpToDate, Event
	// PrimaryUpdateWaiting) and waits for a switchover asked by hand
	// (kubectl shale switchover NAME, or the shale.rocks/switchover
	// annotation). docs/operator.md, "Rolling updates".
	// +optional
	// +kubebuilder:validation:Enum=unsupervised;supervised
	// +kubebuilder:default=unsupervised
	PrimaryUpdateStrategy PrimaryUpdateStrategy `json:"primaryUpdateStrategy,omitempty"`

	// Secondaries configures the read replicas, served by the Service
	// NAME-ro.
	// +optional
	// +kubebuilder:default={}
	Secondaries SecondariesSpec `json:"secondaries,omitempty"`

	// Compaction says where the primary runs its compactions: Local (the
	// default) or Remote, on a CompactorPool. Applies to the next primary
	// Pod (a failover or a restart).
	// +optional
	// +kubebuilder:default={}
	Compaction CompactionSpec `json:"compaction,omitempty"`

	// Tiering moves old data to the ObjectStore's cold tier
	// (docs/tiering.md); the ObjectStore must have spec.cold. Once a
	// database has used its cold tier, its primaries and secondaries keep
	// reading it even if tiering is removed.
	// +optional
	Tiering *TieringSpec `json:"tiering,omitempty"`

	// Tuning turns on RocksDB features that trade a guarantee or space for
	// speed (docs/performance.md measures each). Like spec.primary, it
	// reaches the next primary started (a failover, or the current primary
	// Pod deleted).
	// +optional
	Tuning *TuningSpec `json:"tuning,omitempty"`

	// TLS secures the database's gRPC ports: on unless enabled is false.
	// The operator issues the certificates (Secrets NAME-primary-tls,
	// NAME-secondary-tls) and renews them before they expire without
	// restarting anything; the annotation shale.rocks/renew-certificates
	// set to a new value renews them at once.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Clients are the applications that may call the database, each with
	// a role. Each gets a Secret NAME-client-CLIENT to mount: ca.crt,
	// tls.crt, tls.key (its certificate), token (a bearer token, for
	// clients that cannot present a certificate) and client.yaml (for
	// `shale kv --config`). Removing a client revokes it and deletes its
	// Secret. Needs TLS.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Clients []ClientSpec `json:"clients,omitempty"`

	// NetworkPolicy restricts who reaches the database's Pods
	// (docs/kubernetes.md, "Network policies and RBAC").
	// +optional
	// +kubebuilder:default={}
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Backup configures what the database's primaries do for backups:
	// the continuous archive of its logs, for point-in-time restores
	// (docs/backup.md, "On Kubernetes").
	// +optional
	Backup *DatabaseBackupSpec `json:"backup,omitempty"`
}

// DatabaseBackupSpec is spec.backup of a RocksDB.
type DatabaseBackupSpec struct {
	// Archive copies every acknowledged log segment of the database to a
	// backup ObjectStore, continuously, where its Backups go: a
	// bootstrap.recovery with a targetTime or targetSequence restores
	// from there. Changing it rolls the primary (a switchover).
	// +optional
	Archive *ArchiveSpec `json:"archive,omitempty"`
}

// ArchiveSpec turns the continuous archive on.
type ArchiveSpec struct {
	// BackupStore names the ObjectStore (in this namespace) the archive
	// goes to, under _backups/NAMESPACE/NAME-UID/archive/: the same
	// location as this database's Backups to that store. A backup store
	// that is not the database's own needs a credentials Secret (or the
	// same serviceAccountName or instanceRole).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupStore string `json:"backupStore"`
}

// BootstrapSpec is where a new database's data comes from. One source.
//
// +kubebuilder:validation:XValidation:rule="(has(self.fromExistingPath) ? 1 : 0) + (has(self.fromCheckpoint) ? 1 : 0) + (has(self.cloneFrom) ? 1 : 0) + (has(self.recovery) ? 1 : 0) == 1",message="bootstrap needs exactly one source: fromExistingPath, fromCheckpoint, cloneFrom or recovery (or leave bootstrap out for an empty database)"
type BootstrapSpec struct {
	// FromExistingPath adopts the directory a deleted RocksDB with
	// reclaimPolicy Retain left in this RocksDB's ObjectStore: the new
	// RocksDB serves that database, with every key it held
	// (docs/operator.md, "Bring back a deleted Retain database"). The
	// operator refuses, with a BootstrapRefused Event, a directory that a
	// RocksDB still owns, that another RocksDB adopted, or whose owner
	// record does not say Retain.
	// +optional
	FromExistingPath *ExistingPathSource `json:"fromExistingPath,omitempty"`

	// FromCheckpoint makes the database a zero-copy clone of a Checkpoint
	// of another RocksDB of this namespace and ObjectStore: it starts with
	// every key the checkpoint holds, shares the parent's tables (pinned
	// in the parent's directory, nothing copied), and writes only to its
	// own directory (docs/operator.md, "Clone a database"). The Checkpoint
	// must be Ready when the clone is created.
	// +optional
	FromCheckpoint *CheckpointSource `json:"fromCheckpoint,omitempty"`

	// CloneFrom makes the database a zero-copy clone of another RocksDB of
	// this namespace and ObjectStore as it is now: the operator creates a
	// checkpoint clone-<this RocksDB's UID> on the parent's primary
	// (expiring in an hour), the clone's first primary starts from it, and
	// the operator deletes it once the clone was ready (its pin keeps the
	// tables). The parent must be Ready.
	// +optional
	CloneFrom *CloneSource `json:"cloneFrom,omitempty"`

	// Recovery restores a backup (a Backup's, or any `shale backup
	// create`'s) from a backup store into this database's own directory
	// before its first primary starts (docs/backup.md, "On Kubernetes").
	// targetTime and targetSequence are reserved for point-in-time
	// restore, not built yet.
	// +optional
	Recovery *RecoverySource `json:"recovery,omitempty"`
}

// CheckpointSource names a Checkpoint of a RocksDB.
type CheckpointSource struct {
	// Database is the RocksDB (in this namespace) the checkpoint is of.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Database string `json:"database"`
	// Name is the Checkpoint (the resource, in this namespace; its name is
	// the checkpoint's name in the database).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// CloneSource names the RocksDB a clone starts from.
type CloneSource struct {
	// Database is the RocksDB (in this namespace) to clone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Database string `json:"database"`
}

// CloneStatus is where a clone (spec.bootstrap.fromCheckpoint or
// cloneFrom) starts from, fixed by the operator once its checks passed:
// its first primaries get --clone-from URL --clone-checkpoint CHECKPOINT
// --clone-id UID until the database was ready once.
type CloneStatus struct {
	// Database is the parent RocksDB, UID its UID when checked.
	Database string    `json:"database"`
	UID      types.UID `json:"uid"`
	// URL is the parent's directory in the store.
	// +optional
	URL string `json:"url,omitempty"`
	// Checkpoint is the parent's checkpoint the clone starts from.
	Checkpoint string `json:"checkpoint"`
	// CheckpointExpiresAt (cloneFrom) is the expiry asked for the
	// operator's checkpoint clone-UID.
	// +optional
	CheckpointExpiresAt *metav1.Time `json:"checkpointExpiresAt,omitempty"`
	// CheckpointReleased (cloneFrom): the operator deleted its checkpoint
	// in the parent after the clone was ready (or found it gone).
	// +optional
	CheckpointReleased bool `json:"checkpointReleased,omitempty"`
	// ObjectStore is the parent's ObjectStore when it is not this
	// RocksDB's: the clone copies every object of the checkpoint (RFC 0010
	// step 20) from Endpoint, read with the keys of CredentialsSecret
	// (the parent ObjectStore's Secret; empty: the Pod's own identity,
	// the same ServiceAccount or instance role).
	// +optional
	ObjectStore string `json:"objectStore,omitempty"`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
	// CopiedObjects and CopiedBytes: what the copy wrote into the clone's
	// directory (from its _shale/copy record, read once the clone was
	// Ready; the Event CloneCopied says the same).
	// +optional
	CopiedObjects int64 `json:"copiedObjects,omitempty"`
	// +optional
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
}

// ExistingPathSource names a retained database directory.
type ExistingPathSource struct {
	// Path is the deleted RocksDB's status.storagePath,
	// PREFIX/NAMESPACE/NAME-UID (the Event StorageRetained printed it as
	// s3://BUCKET/PREFIX/NAMESPACE/NAME-UID); NAMESPACE/NAME-UID, relative
	// to the ObjectStore's prefix, is accepted too. NAMESPACE must be this
	// RocksDB's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('//') && !self.contains('://') && !self.split('/').exists(s, s == '..' || s == '.')",message="fromExistingPath.path must be the deleted RocksDB's status.storagePath, PREFIX/NAMESPACE/NAME-UID, without a scheme, bucket, leading '/' or '..'"
	Path string `json:"path"`
}

// NetworkPolicySpec configures the NetworkPolicy NAME-ingress the operator
// keeps for a database (when it runs with --network-policies, the chart's
// default). It selects the primary and the secondaries and admits:
//   - to the KV port (grpc): Pods of this namespace labelled
//     shale.rocks/client=NAME, the peers in clients, the database's own
//     secondaries (they follow the primary) and the operator;
//   - to the metrics port: the operator and the monitoring namespaces
//     (the operator's --metrics-namespace-selector).
//
// Nothing else reaches them. Egress is not restricted.
type NetworkPolicySpec struct {
	// Enabled: keep the NetworkPolicy (default true). false deletes it,
	// and the database's Pods accept connections from anywhere.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// Clients are more peers admitted to the KV port, besides the Pods
	// labelled shale.rocks/client=NAME: Pods of other namespaces, Pods of
	// several databases (a label of your own), or IP blocks.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",message="networkPolicy.clients: each peer needs a podSelector, a namespaceSelector or an ipBlock"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.ipBlock) || !(has(p.podSelector) || has(p.namespaceSelector)))",message="networkPolicy.clients: a peer with an ipBlock cannot have selectors; make them two peers"
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`
}

// CompactionMode is where compactions run.
// +kubebuilder:validation:Enum=Local;Remote
type CompactionMode string

const (
	// CompactionLocal runs compactions in the primary's Pod.
	CompactionLocal CompactionMode = "Local"
	// CompactionRemote submits them to a CompactorPool; the primary
	// compacts locally whenever the pool cannot (counted in its metrics).
	CompactionRemote CompactionMode = "Remote"
)

// CompactionSpec configures where a database's compactions run.
//
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Remote' || has(self.compactorPoolRef)",message="compaction.mode Remote needs compaction.compactorPoolRef (the CompactorPool that runs the compactions)"
type CompactionSpec struct {
	// Mode: Local (default) or Remote.
	// +optional
	// +kubebuilder:default=Local
	Mode CompactionMode `json:"mode,omitempty"`

	// CompactorPoolRef names the CompactorPool (in this namespace) that
	// runs the compactions with mode Remote. It must use the same
	// ObjectStore as the RocksDB.
	// +optional
	CompactorPoolRef *CompactorPoolReference `json:"compactorPoolRef,omitempty"`

	// Priority is the database's share of the pool's workers under
	// contention, 1 to 100 (default 10): a database with priority 30 gets
	// three times the jobs of one with 10 while both wait, and none is
	// starved (--compaction-priority).
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Priority int32 `json:"priority,omitempty"`

	// QueueTimeout: a compaction no worker took within this long runs
	// locally instead (--compaction-queue-timeout, default 20s).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="queueTimeout must be a positive duration, such as 20s"
	QueueTimeout *metav1.Duration `json:"queueTimeout,omitempty"`
}

// CompactorPoolReference names a CompactorPool in the same namespace.
type CompactorPoolReference struct {
	// Name of the CompactorPool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// TieringSpec configures tiered SST placement.
type TieringSpec struct {
	// ColdAfter: data older than this moves to the cold tier
	// (--cold-after), at least 1s. Choose it so that what the database
	// writes in this time stays well below a tenth of its size
	// (docs/tiering.md).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s')",message="coldAfter must be a duration of at least 1s, such as 24h or 168h"
	ColdAfter metav1.Duration `json:"coldAfter"`
}

// TuningSpec holds RocksDB features of the primary, off by default. The
// rules refuse the combinations RocksDB refuses.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.unorderedWrite) && self.unorderedWrite && has(self.pipelinedWrite) && self.pipelinedWrite)",message="unorderedWrite and pipelinedWrite cannot both be true: RocksDB refuses the combination"
// +kubebuilder:validation:XValidation:rule="!has(self.dataBlockHashTableUtilRatio) || (has(self.dataBlockIndexType) && self.dataBlockIndexType == 'BinaryAndHash')",message="dataBlockHashTableUtilRatio needs dataBlockIndexType: BinaryAndHash"
// +kubebuilder:validation:XValidation:rule="!(has(self.optimizeMultigetForIO) && self.optimizeMultigetForIO) || (has(self.asyncIO) && self.asyncIO)",message="optimizeMultigetForIO needs asyncIO: true"
type TuningSpec struct {
	// DataBlockIndexType is Binary (the default: binary search within a
	// data block) or BinaryAndHash (a hash index in every data block that
	// point lookups use first; --data-block-index).
	// +optional
	// +kubebuilder:validation:Enum=Binary;BinaryAndHash
	DataBlockIndexType string `json:"dataBlockIndexType,omitempty"`

	// DataBlockHashTableUtilRatio is the hash index's keys per bucket, a
	// decimal in (0, 1] such as "0.75" (RocksDB's default); lower is
	// faster and larger (--data-block-hash-ratio).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0?[.][0-9]+|1([.]0*)?)$') && double(self) > 0.0 && double(self) <= 1.0",message="dataBlockHashTableUtilRatio must be a decimal in (0, 1], such as \"0.75\""
	DataBlockHashTableUtilRatio string `json:"dataBlockHashTableUtilRatio,omitempty"`

	// UnorderedWrite lets writers insert into the memtable without waiting
	// for earlier writers (--unordered-write): more write throughput, but
	// snapshots are no longer immutable, so a Scan or a MultiGet may see a
	// write without an earlier one until that one lands. Reading one's own
	// acknowledged writes still works.
	// +optional
	UnorderedWrite bool `json:"unorderedWrite,omitempty"`

	// PipelinedWrite overlaps a write group's WAL write with the previous
	// group's memtable insert (--pipelined-write).
	// +optional
	PipelinedWrite bool `json:"pipelinedWrite,omitempty"`

	// AsyncIO lets RocksDB read ahead asynchronously for scans
	// (--async-io).
	// +optional
	AsyncIO bool `json:"asyncIO,omitempty"`

	// OptimizeMultigetForIO reads the files of a MultiGet's keys in several
	// levels in parallel when AsyncIO is on (--optimize-multiget-for-io).
	// +optional
	OptimizeMultigetForIO bool `json:"optimizeMultigetForIO,omitempty"`

	// GroupCommitWindow is how long a durable write group may wait for the
	// previous group's writers to come back before its WAL upload, so that
	// concurrent clients share one upload (--group-commit-window, default
	// 2ms; 0s turns it off). A group closes as soon as they are back.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) <= duration('100ms')",message="groupCommitWindow must be a duration from 0s to 100ms, such as 2ms"
	GroupCommitWindow *metav1.Duration `json:"groupCommitWindow,omitempty"`

	// RocksDBHistograms keeps RocksDB's latency and size histograms
	// (rocksdb_db_get_micros and the like on /metrics) besides its tickers,
	// for two clock reads and a bucket update per Get and Put
	// (--rocksdb-histograms).
	// +optional
	RocksDBHistograms bool `json:"rocksdbHistograms,omitempty"`
}

// ObjectStoreReference names an ObjectStore in the same namespace.
type ObjectStoreReference struct {
	// Name of the ObjectStore.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PrimarySpec configures the primary Pod and the `shale primary` flags it
// runs with. Unset fields take `shale primary`'s defaults.
type PrimarySpec struct {
	// Image of the shale binary; empty means the operator's default
	// (its --shale-image flag).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the primary's container; empty means
	// IfNotPresent.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources of the primary's container. A resource with neither a
	// request nor a limit gets a default request (cpu 100m, memory 256Mi)
	// so that the primary is never BestEffort, the first Pod a node
	// evicts under pressure (docs/kubernetes.md, "Scheduling").
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Scheduling of the primary's Pod: affinity, tolerations,
	// nodeSelector, topologySpreadConstraints and priorityClassName, as
	// in a Pod spec. Applies to the next primary Pod.
	PodScheduling `json:",inline"`

	// Lease is the read lease (--lease, default 5s): the primary serves
	// reads only while it confirmed ownership this recently, and a new
	// owner waits this long before serving.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('100ms') && duration(self) <= duration('10m')",message="lease must be a duration from 100ms to 10m, such as 5s"
	Lease *metav1.Duration `json:"lease,omitempty"`

	// DeleteGrace is how long deleted files stay in the store
	// (--delete-grace, default 1h).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="deleteGrace must be a positive duration, such as 30m or 1h"
	DeleteGrace *metav1.Duration `json:"deleteGrace,omitempty"`

	// ReadTimeout bounds one foreground read from the store
	// (--read-timeout, default 10s).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="readTimeout must be a positive duration, such as 10s"
	ReadTimeout *metav1.Duration `json:"readTimeout,omitempty"`

	// WriteTimeout bounds one upload attempt (--write-timeout, default 1m).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="writeTimeout must be a positive duration, such as 1m"
	WriteTimeout *metav1.Duration `json:"writeTimeout,omitempty"`

	// RetryFor is how long a failed background upload is retried
	// (--retry-for, default 5m).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="retryFor must be a positive duration, such as 5m"
	RetryFor *metav1.Duration `json:"retryFor,omitempty"`

	// CacheSize is how many bytes of SST files the local cache keeps
	// (--cache-size, default 8Gi; 0 means unbounded). The cache is an
	// emptyDir volume: request ephemeral-storage in resources to match.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))",message="cacheSize must be a non-negative size, such as 8Gi"
	CacheSize *resource.Quantity `json:"cacheSize,omitempty"`

	// BlockCacheSize is RocksDB's block cache (--block-cache-size,
	// default 256Mi).
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))",message="blockCacheSize must be a non-negative size, such as 256Mi"
	BlockCacheSize *resource.Quantity `json:"blockCacheSize,omitempty"`

	// MaxKeySize is the largest key accepted (--max-key-size, default 64Ki).
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="maxKeySize must be a positive size, such as 64Ki"
	MaxKeySize *resource.Quantity `json:"maxKeySize,omitempty"`

	// MaxValueSize is the largest value accepted (--max-value-size,
	// default 32Mi).
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="maxValueSize must be a positive size, such as 32Mi"
	MaxValueSize *resource.Quantity `json:"maxValueSize,omitempty"`

	// MaxBatchSize is the largest total of keys and values in one Write
	// (--max-batch-size, default 64Mi).
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",message="maxBatchSize must be a positive size, such as 64Mi"
	MaxBatchSize *resource.Quantity `json:"maxBatchSize,omitempty"`
}

// PodScheduling places a role's Pods: Kubernetes' own fields, copied into
// the Pod spec.
type PodScheduling struct {
	// Affinity of the Pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations of the Pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector of the Pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// TopologySpreadConstraints of the Pods.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the Pods (the PriorityClass must exist).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// SecondariesSpec configures the read replicas: a Deployment NAME-secondary
// of Pods running `shale secondary`, which follow the primary through the
// object store and the primary's notifications, and serve reads through the
// Service NAME-ro. They use the primary's image, pull policy, readTimeout
// and maxKeySize. Unset fields take `shale secondary`'s defaults.
type SecondariesSpec struct {
	// Replicas is the number of secondaries (0, the default, runs none
	// and removes the Deployment and the NAME-ro Service).
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	Replicas int32 `json:"replicas,omitempty"`

	// Resources of each secondary's container; default requests as for
	// the primary (cpu 50m, memory 128Mi).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Scheduling of the secondaries' Pods. By default they spread over
	// nodes (docs/kubernetes.md, "Scheduling"); an affinity with a
	// podAntiAffinity, or topologySpreadConstraints, replace that default.
	PodScheduling `json:",inline"`

	// CacheSize is how many bytes of SST files each secondary's local
	// cache keeps (--cache-size, default 8Gi; 0 means unbounded). The
	// cache is an emptyDir volume: request ephemeral-storage in resources
	// to match.
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))",message="cacheSize must be a non-negative size, such as 8Gi"
	CacheSize *resource.Quantity `json:"cacheSize,omitempty"`

	// BlockCacheSize is each secondary's RocksDB block cache
	// (--block-cache-size, default 256Mi).
	// +optional
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))",message="blockCacheSize must be a non-negative size, such as 256Mi"
	BlockCacheSize *resource.Quantity `json:"blockCacheSize,omitempty"`

	// CatchupInterval is how often a secondary looks for new writes in
	// the store when the primary's notifications do not reach it
	// (--catchup-interval, default 1s; ten times less often while they
	// do).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10ms') && duration(self) <= duration('1m')",message="catchupInterval must be a duration from 10ms to 1m, such as 1s"
	CatchupInterval *metav1.Duration `json:"catchupInterval,omitempty"`

	// LeaseTTL is how long a secondary's reader lease protects the files
	// it reads from the primary's deletions after its last renewal
	// (--lease-ttl, default 30s). A secondary that could not renew for
	// this long refuses reads until it catches up again.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="leaseTTL must be a duration from 1s to 1h, such as 30s"
	LeaseTTL *metav1.Duration `json:"leaseTTL,omitempty"`
}

// RocksDBPhase is a one-word summary of the database's state.
type RocksDBPhase string

const (
	// PhasePending: waiting for something the primary needs (the
	// ObjectStore, its Secret, a reachable store); conditions say what.
	PhasePending RocksDBPhase = "Pending"
	// PhaseStarting: the first primary was created and is not ready yet.
	PhaseStarting RocksDBPhase = "Starting"
	// PhaseReady: the primary is ready.
	PhaseReady RocksDBPhase = "Ready"
	// PhaseDegraded: the primary was ready and is not; it is replaced if
	// it stays so for the operator's failover grace.
	PhaseDegraded RocksDBPhase = "Degraded"
	// PhaseFailingOver: a new primary with a higher epoch replaces a lost
	// one and is not ready yet.
	PhaseFailingOver RocksDBPhase = "FailingOver"
	// PhaseSwitchingOver: a switchover runs: a standby warms while the
	// primary serves, then the primary steps down and the standby takes
	// over (docs/rfcs/0012-switchover.md).
	PhaseSwitchingOver RocksDBPhase = "SwitchingOver"
	// PhaseUpgrading: a switchover replaces an outdated primary (reason
	// PrimaryOutdated): a standby built from the current spec warms.
	PhaseUpgrading RocksDBPhase = "Upgrading"
	// PhaseFenced: fenced by hand (shale.rocks/fenced): no primary runs
	// and no earlier one can write; secondaries serve reads.
	PhaseFenced RocksDBPhase = "Fenced"
	// PhaseHibernated: hibernated (shale.rocks/hibernation): no Pod of
	// the database runs.
	PhaseHibernated RocksDBPhase = "Hibernated"
	// PhaseDeleting: the RocksDB is being deleted (its reclaim policy is
	// being applied).
	PhaseDeleting RocksDBPhase = "Deleting"
)

// PrimaryUpdateStrategy: how an outdated primary is replaced.
type PrimaryUpdateStrategy string

const (
	// PrimaryUpdateUnsupervised: by a switchover the operator starts.
	PrimaryUpdateUnsupervised PrimaryUpdateStrategy = "unsupervised"
	// PrimaryUpdateSupervised: by a switchover asked by hand.
	PrimaryUpdateSupervised PrimaryUpdateStrategy = "supervised"
)

// PrimaryUpdateStatus is the state of the rolling update of an outdated
// primary: the backoff after abandoned update switchovers, and the spec
// hash a supervised update was announced for.
type PrimaryUpdateStatus struct {
	// Failures counts the update switchovers abandoned in a row.
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// NotBefore: no update switchover starts before this time (1 min
	// after the first abandoned one, doubling up to 30 min).
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// Announced is the spec hash the PrimaryUpdateWaiting Event was last
	// emitted for (supervised).
	// +optional
	Announced string `json:"announced,omitempty"`
}

// SwitchoverPhase is the step a switchover is at.
type SwitchoverPhase string

const (
	// SwitchoverWarming: the standby Pod starts and fills its cache; the
	// primary serves as before.
	SwitchoverWarming SwitchoverPhase = "Warming"
	// SwitchoverHandingOver: the standby is warm; the operator asked the
	// primary to step down (StepDown), and the standby takes over once it
	// released the database.
	SwitchoverHandingOver SwitchoverPhase = "HandingOver"
)

// HoldPhase is the step a hold (a fence or a hibernation) is at.
type HoldPhase string

const (
	// HoldSteppingDown: a hibernation asked the primary to step down
	// (StepDown) and waits for its release.
	HoldSteppingDown HoldPhase = "SteppingDown"
	// HoldFencing: the primary Pod is deleted and the fence Pod
	// (NAME-fence-EPOCH) claims Epoch in the store.
	HoldFencing HoldPhase = "Fencing"
	// HoldHeld: the database is released at Epoch and nothing runs as
	// its primary until the hold is lifted.
	HoldHeld HoldPhase = "Held"
)

// HoldStatus is a database fenced or hibernated by hand
// (docs/rfcs/0014-hibernation-and-fencing.md).
type HoldStatus struct {
	// Phase: SteppingDown, Fencing or Held.
	// +kubebuilder:validation:Enum=SteppingDown;Fencing;Held
	Phase HoldPhase `json:"phase"`
	// Reason: FenceRequested or HibernationRequested (what started it).
	Reason string `json:"reason"`
	// FromEpoch is the epoch of the primary it stopped (0: none ran).
	// +optional
	FromEpoch int64 `json:"fromEpoch,omitempty"`
	// Epoch is the epoch the database is held at: the stepped-down
	// primary's, or the fence's.
	Epoch int64 `json:"epoch"`
	// StartedAt is when the current phase began.
	StartedAt metav1.Time `json:"startedAt"`
	// Message says how it got there (a hibernation that had to fence).
	// +optional
	Message string `json:"message,omitempty"`
}

// SwitchoverStatus is a switchover under way.
type SwitchoverStatus struct {
	// Request is the shale.rocks/switchover value it answers ("" when a
	// drain of the primary's node started it).
	// +optional
	Request string `json:"request,omitempty"`
	// Reason: SwitchoverRequested or PrimaryNodeDraining.
	Reason string `json:"reason"`
	// FromEpoch is the primary's epoch, ToEpoch the standby's.
	FromEpoch int64 `json:"fromEpoch"`
	ToEpoch   int64 `json:"toEpoch"`
	// Phase: Warming or HandingOver.
	// +kubebuilder:validation:Enum=Warming;HandingOver
	Phase SwitchoverPhase `json:"phase"`
	// StartedAt is when the operator decided it.
	StartedAt metav1.Time `json:"startedAt"`
}

// RocksDBStatus is the observed state of a database.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.storagePath) || (has(self.storagePath) && self.storagePath == oldSelf.storagePath)",message="status.storagePath is immutable once set: the database lives there"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.coldStoragePath) || (has(self.coldStoragePath) && self.coldStoragePath == oldSelf.coldStoragePath)",message="status.coldStoragePath is immutable once set: the database's cold tables live there"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.epoch) || (has(self.epoch) && self.epoch >= oldSelf.epoch)",message="status.epoch never decreases: the store refuses an owner whose epoch is not above every epoch taken"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.created) || (has(self.created) && self.created == oldSelf.created)",message="status.created is immutable once set: it says where the database was created"
type RocksDBStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase summarises the state: Pending, Starting, Ready, Degraded,
	// FailingOver, SwitchingOver, Fenced, Hibernated or Deleting.
	// +optional
	Phase RocksDBPhase `json:"phase,omitempty"`

	// Conditions: Ready, PrimaryAvailable, Failover, ObjectStoreReachable,
	// SecondariesReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Epoch is the highest fencing epoch handed to a primary; the current
	// primary runs with it. Raised (never lowered) before every new
	// primary is created.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch,omitempty"`

	// CurrentPrimary is the name of the primary Pod created for Epoch.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// StoragePath is the database's directory in the hot tier's bucket:
	// PREFIX/NAMESPACE/NAME-UID. Set once; with
	// spec.bootstrap.fromExistingPath, the adopted directory (another
	// NAME-UID's), once the operator has claimed it.
	// +optional
	StoragePath string `json:"storagePath,omitempty"`

	// Clone is where a clone starts from (spec.bootstrap.fromCheckpoint
	// or cloneFrom), set once the operator checked the source.
	// +optional
	Clone *CloneStatus `json:"clone,omitempty"`

	// Recovery is the backup a spec.bootstrap.recovery database restores,
	// set once the operator checked it.
	// +optional
	Recovery *RecoveryStatus `json:"recovery,omitempty"`

	// LastBackup is the newest Completed Backup of this database.
	// +optional
	LastBackup *LastBackup `json:"lastBackup,omitempty"`

	// Archive is where the continuous archive goes (spec.backup.archive)
	// and the window it makes recoverable, as last read from the backup
	// store (once a minute).
	// +optional
	Archive *ArchiveStatus `json:"archive,omitempty"`

	// FirstRecoverabilityPoint is the checkpoint time of the oldest
	// Completed Backup of this database that is kept (its resource exists
	// and the backup was not deleted): the earliest state it can be
	// restored to.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// LastFailoverTime is when the last failover was decided.
	// +optional
	LastFailoverTime *metav1.Time `json:"lastFailoverTime,omitempty"`

	// Failovers counts the failovers of this database.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failovers int64 `json:"failovers,omitempty"`

	// ReservedEpoch is the highest epoch handed to any Pod, a switchover's
	// standby included (which gets one before it is the primary): a new
	// primary's epoch is chosen above it, so no two Pods share a name.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReservedEpoch int64 `json:"reservedEpoch,omitempty"`

	// Switchover is the switchover under way (docs/rfcs/0012-switchover.md):
	// a standby warms, then the primary steps down and the standby takes
	// the next epoch. Nil when none runs.
	// +optional
	Switchover *SwitchoverStatus `json:"switchover,omitempty"`

	// PrimaryUpdate is the rolling update of an outdated primary
	// (condition PrimaryUpToDate): its backoff after abandoned update
	// switchovers. Nil when none was needed since the last one completed.
	// +optional
	PrimaryUpdate *PrimaryUpdateStatus `json:"primaryUpdate,omitempty"`

	// Hold is the database's fence or hibernation by hand
	// (docs/rfcs/0014-hibernation-and-fencing.md): while set, the operator
	// starts no primary. Nil when the database runs normally.
	// +optional
	Hold *HoldStatus `json:"hold,omitempty"`

	// LastSwitchoverRequest is the last value of the shale.rocks/switchover
	// annotation acted on: a new value asks for a switchover.
	// +optional
	LastSwitchoverRequest string `json:"lastSwitchoverRequest,omitempty"`

	// Switchovers counts the completed switchovers of this database.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Switchovers int64 `json:"switchovers,omitempty"`

	// Secondaries is the number of ready secondaries (the readyReplicas
	// of the Deployment NAME-secondary).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Secondaries int32 `json:"secondaries,omitempty"`

	// SecondaryStatus is what each running secondary Pod last reported
	// about itself (its Status call), polled by the operator about every
	// 30 s while secondaries are requested.
	// +optional
	// +listType=map
	// +listMapKey=pod
	SecondaryStatus []SecondaryStatus `json:"secondaryStatus,omitempty"`

	// Compaction is this database's line of its CompactorPool's status
	// (mode Remote): queue depth, running and completed jobs, fallbacks.
	// +optional
	Compaction *CompactionStats `json:"compaction,omitempty"`
	// ColdStoragePath is the database's directory in the cold tier's
	// bucket: COLDPREFIX/NAMESPACE/NAME-UID. Set once, when tiering is
	// first enabled; from then on every primary and secondary is given
	// the cold tier.
	// +optional
	ColdStoragePath string `json:"coldStoragePath,omitempty"`

	// Tiers is the live table data per storage tier, as the primary last
	// reported it (polled with the secondaries' status).
	// +optional
	// +listType=map
	// +listMapKey=tier
	Tiers []TierStatus `json:"tiers,omitempty"`

	// Created says where the database was when a primary was first seen
	// ready (set once). From then on its data exists: every primary is
	// started with --existing, so one pointed at a location without the
	// database refuses to start an empty one, and the operator says what
	// changed since.
	// +optional
	Created *DatabaseLocation `json:"created,omitempty"`

	// OwnerRecordPolicy is the reclaim policy the owner record in the store
	// says, as the operator last wrote it (empty: not known). A deletion
	// with Retain waits until the record says Retain, so that a later
	// garbage collection at the same location cannot delete the data.
	// +optional
	OwnerRecordPolicy ReclaimPolicy `json:"ownerRecordPolicy,omitempty"`

	// ReadyEpoch is the epoch of the last primary seen ready. A primary of
	// this epoch that stops being ready is failed over after the failover
	// grace, not the startup grace, whatever PrimaryAvailable says
	// meanwhile (a refused failover replaces its reason).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyEpoch int64 `json:"readyEpoch,omitempty"`

	// PrimaryFailures are the primaries that failed since one last stayed
	// ready; a new primary after the first failure waits out an
	// exponential backoff.
	// +optional
	PrimaryFailures *PrimaryFailures `json:"primaryFailures,omitempty"`
}

// DatabaseLocation is where a database's data was found.
type DatabaseLocation struct {
	// Time a primary was first seen ready.
	Time metav1.Time `json:"time"`
	// Endpoint, Region and Bucket of the ObjectStore then (the prefix is
	// in status.storagePath).
	Endpoint string `json:"endpoint"`
	// +optional
	Region string `json:"region,omitempty"`
	Bucket string `json:"bucket"`
}

// PrimaryFailures counts the primaries that failed in a row.
type PrimaryFailures struct {
	// Count of primaries that failed since one last stayed ready (for the
	// operator's longest backoff).
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`

	// Recent are the last few failures, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	Recent []PrimaryFailure `json:"recent,omitempty"`
}

// PrimaryFailure is one primary that failed.
type PrimaryFailure struct {
	// Epoch of the primary (its Pod is NAME-primary-EPOCH).
	Epoch int64 `json:"epoch"`
	// Time the operator found it failed.
	Time metav1.Time `json:"time"`
	// Reason: OOMKilled, ImagePullFailed, BadCredentials,
	// DatabaseNotFound, ColdTierRefused, PrimaryCrashed, PrimaryExited,
	// PrimaryNotReady or PrimaryStartTimeout.
	Reason string `json:"reason"`
	// Message says more (the end of the primary's error, the memory
	// limit, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// Generation of the RocksDB's spec the primary ran with: a changed
	// spec is tried at once, without waiting out the backoff.
	// +optional
	Generation int64 `json:"generation,omitempty"`
}

// TierStatus is what one storage tier holds of a database.
type TierStatus struct {
	// Tier is hot or cold.
	Tier string `json:"tier"`
	// Files is the number of live tables in the tier.
	// +optional
	Files int64 `json:"files,omitempty"`
	// Bytes is their size.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
}

// SecondaryStatus is one secondary's replication state.
type SecondaryStatus struct {
	// Pod is the secondary's Pod.
	Pod string `json:"pod"`

	// AppliedSequence is the last sequence number the secondary applied.
	// +optional
	AppliedSequence int64 `json:"appliedSequence,omitempty"`

	// LagSequences is how many sequence numbers the secondary is behind
	// the latest one the primary announced to it.
	// +optional
	LagSequences int64 `json:"lagSequences,omitempty"`

	// Lag is how old the oldest write is that the primary announced and
	// the secondary has not applied yet (0 when it is caught up).
	// +optional
	Lag *metav1.Duration `json:"lag,omitempty"`

	// Error is why the secondary could not be asked (its Pod not ready
	// or not answering); the other fields are then unset.
	// +optional
	Error string `json:"error,omitempty"`

	// CheckedAt is when the operator asked.
	CheckedAt metav1.Time `json:"checkedAt"`
}

// RocksDB is one database, served by a primary the operator runs and
// fails over, and by read-only secondaries.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rdb,categories=shale
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.currentPrimary`
// +kubebuilder:printcolumn:name="Secondaries",type=integer,JSONPath=`.status.secondaries`,description="ready secondaries"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="a RocksDB name must be at most 50 lower-case letters, digits and '-', start with a letter and end with a letter or digit (it names the Service NAME-rw and the Pods NAME-primary-EPOCH)"
type RocksDB struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RocksDBSpec   `json:"spec"`
	Status RocksDBStatus `json:"status,omitempty"`
}

// RocksDBList is a list of RocksDBs.
//
// +kubebuilder:object:root=true
type RocksDBList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RocksDB `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RocksDB{}, &RocksDBList{})
}
