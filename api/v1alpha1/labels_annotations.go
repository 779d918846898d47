package v1alpha1

// Every label, annotation and finalizer key the operator sets, in one
// place.
const (
	// LabelRocksDB is the name of the RocksDB a Pod or Service belongs to.
	LabelRocksDB = "shale.rocks/rocksdb"
	// LabelRole is the role of a Pod in its database: "primary" or
	// "secondary".
	LabelRole = "shale.rocks/role"
	// LabelEpoch is the fencing epoch a primary Pod runs with. The
	// NAME-rw Service selects the Pod of the current epoch only.
	LabelEpoch = "shale.rocks/epoch"

	// LabelCompactorPool is the name of the CompactorPool a Pod, Service
	// or Deployment belongs to.
	LabelCompactorPool = "shale.rocks/compactorpool"

	// LabelClient, set by users on their Pods, names the RocksDB (in the
	// Pod's namespace) whose KV port the Pod may reach: the database's
	// NetworkPolicy admits Pods with LabelClient=NAME.
	LabelClient = "shale.rocks/client"
	// LabelCompactorPoolClient, on a primary Pod with remote compaction,
	// names the CompactorPool it submits to: the pool's NetworkPolicy
	// admits those primaries to its scheduler.
	LabelCompactorPoolClient = "shale.rocks/compactorpool-client"

	// Recommended labels (app.kubernetes.io/...).
	LabelAppName      = "app.kubernetes.io/name"
	LabelAppInstance  = "app.kubernetes.io/instance"
	LabelAppComponent = "app.kubernetes.io/component"
	LabelAppManagedBy = "app.kubernetes.io/managed-by"

	// RolePrimary is LabelRole's value on primary Pods.
	RolePrimary = "primary"
	// RoleSecondary is LabelRole's value on secondary Pods (and the
	// component label of the secondaries' Deployment).
	RoleSecondary = "secondary"
	// RoleFence is LabelRole's value on fence Pods (`shale fence`, RFC
	// 0014): no Service selects them, no budget counts them.
	RoleFence = "fence"
	// ComponentScheduler and ComponentWorker are LabelAppComponent's
	// values on a CompactorPool's objects.
	ComponentScheduler = "compactor-scheduler"
	ComponentWorker    = "compactor-worker"
	// AppName is LabelAppName's value.
	AppName = "shale"
	// ManagedBy is LabelAppManagedBy's value.
	ManagedBy = "shale-operator"

	// AnnotationSpecHash, on the secondaries' Deployment, is a hash of the
	// Deployment spec the operator built (replicas aside). The operator
	// rewrites the spec only when the hash it computes differs, so
	// neither its restarts nor the API server's defaulting roll the Pods.
	AnnotationSpecHash = "shale.rocks/spec-hash"

	// AnnotationSpecGeneration, on a primary Pod, is the RocksDB generation
	// it was built from: a failure of a Pod built from an older spec does
	// not hold back a primary with the new one.
	AnnotationSpecGeneration = "shale.rocks/spec-generation"

	// AnnotationPodSpecHash, on a primary Pod (and a standby), is a hash
	// of what the operator built from the RocksDB spec, its ObjectStore
	// and the operator's options (image, args, env, resources,
	// scheduling), not of the epoch-specific parts. A primary whose hash
	// differs from the one the operator computes now, or that has none
	// (an older operator's Pod), is outdated (condition PrimaryUpToDate).
	AnnotationPodSpecHash = "shale.rocks/pod-spec-hash"

	// AnnotationRenewCertificates, on a RocksDB or a CompactorPool, asks
	// for its certificates to be issued again now: set it to a value it
	// has not had before (a date will do). Each value is acted on once.
	AnnotationRenewCertificates = "shale.rocks/renew-certificates"

	// AnnotationSwitchover, on a RocksDB, asks for a switchover: a warmed
	// standby takes over from the primary without a failover
	// (docs/rfcs/0012-switchover.md). Set it to a value it has not had
	// before (a date will do); each value is acted on once.
	AnnotationSwitchover = "shale.rocks/switchover"
	// AnnotationRestartedAt, on a RocksDB, asks for a rolling restart
	// without a failover (kubectl shale restart): the operator copies its
	// value onto the primary's Pod and the secondaries' Pod template, where
	// it enters their spec hashes, so a new value rolls the secondaries and
	// then the primary by switchover like any other update (respecting
	// spec.primaryUpdateStrategy). Set it to a value it has not had before
	// (the plugin writes the time, RFC 3339).
	AnnotationRestartedAt = "shale.rocks/restartedAt"
	// AnnotationFenced, on a RocksDB, "true": fence the database by hand
	// (docs/rfcs/0014-hibernation-and-fencing.md): the primary Pod is
	// deleted, a fence Pod claims the next epoch in the store (so no
	// earlier primary can write) and no primary runs until the annotation
	// is removed (or set to anything else). Secondaries keep serving reads.
	AnnotationFenced = "shale.rocks/fenced"
	// AnnotationHibernation, on a RocksDB, "on": the primary steps down
	// cleanly (or is fenced if it cannot), no Pod of the database runs and
	// nothing of it talks to the store, until the annotation is removed
	// (or set to anything else).
	AnnotationHibernation = "shale.rocks/hibernation"
	// AnnotationRenewedFor, on a certificate Secret, is the value of
	// AnnotationRenewCertificates its certificate was issued under (so a
	// request is acted on once per Secret, and a Secret made later does
	// not act on an old one).
	AnnotationRenewedFor = "shale.rocks/renewed-for"

	// LabelCredential, on the Secrets the operator issues, says what the
	// Secret holds: one of the Credential* values.
	LabelCredential = "shale.rocks/credential"
	// LabelClientName, on a client's Secret, is the client's name.
	LabelClientName = "shale.rocks/client-name"
	// Values of LabelCredential.
	CredentialPrimary   = "primary"
	CredentialSecondary = "secondary"
	CredentialAccess    = "access"
	CredentialClient    = "client"
	CredentialScheduler = "scheduler"
	CredentialWorker    = "worker"
	CredentialCA        = "ca"
	// CredentialOperator: the operator's client certificate from a
	// cert-manager issuer (spec.tls.issuerRef).
	CredentialOperator = "operator"

	// FinalizerStorage holds a RocksDB until its reclaim policy has been
	// applied to its storage directory.
	FinalizerStorage = "shale.rocks/storage"
	// FinalizerCheckpoint holds a Checkpoint until it is deleted in its
	// database (or the database is gone).
	FinalizerCheckpoint = "shale.rocks/checkpoint"
	// FinalizerBackup holds a Backup until its Job ended and, with
	// deletePolicy Delete, the backup was deleted from the store.
	FinalizerBackup = "shale.rocks/backup"
	// LabelBackup names the Backup a Job is for; LabelScheduledBackup the
	// ScheduledBackup a Backup or prune Job is for.
	LabelBackup          = "shale.rocks/backup"
	LabelScheduledBackup = "shale.rocks/scheduledbackup"
)
