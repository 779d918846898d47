package v1alpha1

// Condition types and reasons of ObjectStore and RocksDB status. Reasons
// are CamelCase words that also name the Events the operator records.
const (
	// ConditionReachable (ObjectStore): the store can be listed and honours
	// create-only writes.
	ConditionReachable = "Reachable"

	// ConditionReady (RocksDB): the database serves reads and writes.
	ConditionReady = "Ready"
	// ConditionPrimaryAvailable (RocksDB): the primary Pod of the current
	// epoch is ready.
	ConditionPrimaryAvailable = "PrimaryAvailable"
	// ConditionFailover (RocksDB): True while a failover is in progress
	// (from the decision until the new primary is ready).
	ConditionFailover = "Failover"
	// ConditionSwitchover (RocksDB): True while a switchover runs (reason:
	// its phase, Warming or HandingOver); False once it completed or was
	// abandoned (docs/rfcs/0012-switchover.md).
	ConditionSwitchover = "Switchover"
	// ConditionObjectStoreReachable (RocksDB): the ObjectStore's Reachable
	// condition, copied.
	ConditionObjectStoreReachable = "ObjectStoreReachable"
	// ConditionSecondariesReady (RocksDB): every requested secondary runs
	// the current spec and is ready (True with none requested).
	ConditionSecondariesReady = "SecondariesReady"
	// ConditionCompactorPoolReady (RocksDB, mode Remote): the
	// CompactorPool exists, uses the RocksDB's ObjectStore and is Ready.
	// False does not stop the database: its primary compacts locally.
	ConditionCompactorPoolReady = "CompactorPoolReady"

	// ConditionSchedulerReachable (CompactorPool): the scheduler's Stats
	// were read at the last reconcile.
	ConditionSchedulerReachable = "SchedulerReachable"
	// ConditionCertificatesReady (RocksDB, CompactorPool): every
	// certificate and client Secret the spec asks for is issued and
	// current (True with TLS off: there are none).
	ConditionCertificatesReady = "CertificatesReady"
	// ConditionTiering (RocksDB): old data moves to the cold tier; set only
	// once spec.tiering was ever asked for.
	ConditionTiering = "Tiering"

	// ConditionPrimaryUpToDate: the running primary was built from the
	// current spec and operator image (its shale.rocks/pod-spec-hash).
	ConditionPrimaryUpToDate = "PrimaryUpToDate"
)

// Reasons.
const (
	ReasonReachable             = "Reachable"
	ReasonSecretMissing         = "SecretMissing"
	ReasonSecretInvalid         = "SecretInvalid"
	ReasonInvalidConfig         = "InvalidConfig"
	ReasonListFailed            = "ListFailed"
	ReasonConditionalWriteFails = "ConditionalWriteFailed"
	ReasonNoConditionalWrites   = "ConditionalWritesNotHonoured"
	ReasonColdTierUnreachable   = "ColdTierUnreachable"
	ReasonNotChecked            = "NotCheckedYet"
	// The operator cannot act as the ObjectStore's workload identity:
	// its ServiceAccount is missing, or the operator has no way to use
	// its credentials (docs/kubernetes.md).
	ReasonServiceAccountMissing = "ServiceAccountMissing"
	ReasonNoOperatorCredentials = "NoOperatorCredentials"

	ReasonObjectStoreMissing = "ObjectStoreMissing"
	ReasonPrimaryReady       = "PrimaryReady"
	ReasonPrimaryStarting    = "PrimaryStarting"
	ReasonPrimaryNotReady    = "PrimaryNotReady"
	// ReasonPrimaryUnreachable: the operator's health probes of the
	// primary went unanswered for the failover grace while servers on
	// other nodes answered (RFC 0015): a node that died, before the node
	// controller says so.
	ReasonPrimaryUnreachable = "PrimaryUnreachable"
	ReasonPrimaryGone        = "PrimaryGone"
	ReasonPrimaryDeleted     = "PrimaryDeleted"
	ReasonPrimaryFailed      = "PrimaryFailed"
	ReasonPrimaryExited      = "PrimaryExited"
	ReasonStartTimeout       = "PrimaryStartTimeout"
	ReasonFailoverCompleted  = "FailoverCompleted"
	// Switchover reasons: what started it, and how it ended.
	ReasonSwitchoverRequested = "SwitchoverRequested"
	ReasonPrimaryNodeDraining = "PrimaryNodeDraining"
	ReasonSwitchoverCompleted = "SwitchoverCompleted"
	ReasonSwitchoverAbandoned = "SwitchoverAbandoned"
	// ReasonPrimaryOutdated: the primary differs from the spec (condition
	// PrimaryUpToDate False; the reason of an update switchover).
	ReasonPrimaryOutdated = "PrimaryOutdated"
	ReasonPrimaryUpToDate = "PrimaryUpToDate"
	ReasonNoFailover      = "NoFailover"
	// Hibernation and fencing by hand (RFC 0014): Ready's reason while
	// held, and status.hold's reasons.
	ReasonFenced           = "Fenced"
	ReasonHibernated       = "Hibernated"
	ReasonFenceRequested   = "FenceRequested"
	ReasonHibernationAsked = "HibernationRequested"
	ReasonDeleting         = "Deleting"

	ReasonNoSecondaries       = "NoSecondaries"
	ReasonSecondariesReady    = "SecondariesReady"
	ReasonSecondariesNotReady = "SecondariesNotReady"
	ReasonSecondariesUpdating = "SecondariesUpdating"
	ReasonWaitingForPrimary   = "WaitingForPrimary"
	ReasonSecondariesConflict = "DeploymentConflict"

	ReasonLocalCompaction       = "LocalCompaction"
	ReasonCompactorPoolMissing  = "CompactorPoolMissing"
	ReasonCompactorPoolStore    = "CompactorPoolStoreMismatch"
	ReasonCompactorPoolReady    = "CompactorPoolReady"
	ReasonCompactorPoolNotReady = "CompactorPoolNotReady"
	ReasonSchedulerReachable    = "SchedulerReachable"
	ReasonSchedulerUnreachable  = "SchedulerUnreachable"
	ReasonSchedulerNotReady     = "SchedulerNotReady"
	ReasonWorkersNotReady       = "WorkersNotReady"
	ReasonPoolReady             = "PoolReady"
	ReasonColdTierInUse         = "ColdTierInUse"
	ReasonTieringOff            = "TieringOff"
	ReasonNoColdTier            = "ObjectStoreHasNoColdTier"
	ReasonColdTierMissing       = "ColdTierMissing"
	ReasonCompactorPoolTLS      = "CompactorPoolTLSMismatch"

	ReasonCertificatesIssued = "CertificatesIssued"
	ReasonCertificatesFailed = "CertificatesFailed"
	// ReasonCertificateManagerMissing: spec.tls.issuerRef names a
	// cert-manager issuer but cert-manager's Certificate CRD is not
	// installed.
	ReasonCertificateManagerMissing = "CertificateManagerMissing"
	ReasonTLSDisabled               = "TLSDisabled"

	// Why primaries fail (PrimaryAvailable while no new primary is started,
	// and status.primaryFailures).
	ReasonOOMKilled              = "OOMKilled"
	ReasonImagePullFailed        = "ImagePullFailed"
	ReasonBadCredentials         = "BadCredentials"
	ReasonDatabaseNotFound       = "DatabaseNotFound"
	ReasonColdTierRefused        = "ColdTierRefused"
	ReasonPrimaryCrashed         = "PrimaryCrashed"
	ReasonObjectStoreUnreachable = "ObjectStoreUnreachable"
	// ReasonBootstrapRefused: spec.bootstrap names a source the operator
	// will not start from (PrimaryAvailable False; nothing was written).
	ReasonBootstrapRefused = "BootstrapRefused"
)
