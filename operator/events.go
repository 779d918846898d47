package operator

// Event reasons beyond the condition reasons of api/v1alpha1. Every
// refusal and every failover is an Event on the object concerned.
const (
	eventPrimaryCreated         = "PrimaryCreated"
	eventFailover               = "Failover"
	eventFailoverRefused        = "FailoverRefused"
	eventFailoverCompleted      = "FailoverCompleted"
	eventObjectStoreMissing     = "ObjectStoreMissing"
	eventObjectStoreUnreachable = "ObjectStoreUnreachable"
	eventEpochExhausted         = "EpochExhausted"
	eventOwnerRecordFailed      = "OwnerRecordFailed"
	eventStorageDeleted         = "StorageDeleted"
	eventStorageRetained        = "StorageRetained"
	eventStorageDeleteFailed    = "StorageDeleteFailed"
	eventStorageDeleteRefused   = "StorageDeleteRefused"
	eventWaitingForPods         = "WaitingForPods"
	eventStoreReachable         = "Reachable"
	eventStoreUnreachable       = "Unreachable"
	eventOrphanFound            = "OrphanFound"
	eventOrphanDeleted          = "OrphanDeleted"
	eventOrphanDeleteFailed     = "OrphanDeleteFailed"
	eventGCFailed               = "GarbageCollectionFailed"
	eventSecondariesScaled      = "SecondariesScaled"
	eventSecondariesUpdated     = "SecondariesUpdated"
	eventDeploymentConflict     = "DeploymentConflict"
	eventServiceConflict        = "ServiceConflict"
	eventWorkersScaled          = "WorkersScaled"
	eventCompactorPoolProblem   = "CompactorPoolProblem"
	eventColdTierMissing        = "ColdTierMissing"
)
