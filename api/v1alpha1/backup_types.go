package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Backups as resources (docs/backup.md, "On Kubernetes";
// docs/rfcs/0011-backups-and-point-in-time-restore.md, steps 27-29).

// BackupDeletePolicy says what deleting a Backup resource does to the
// backup in the backup store.
// +kubebuilder:validation:Enum=Retain;Delete
type BackupDeletePolicy string

const (
	// BackupRetain keeps the backup in the store (listed by `shale backup
	// list`, restorable with spec.bootstrap.recovery): the default, as
	// CloudNativePG does.
	BackupRetain BackupDeletePolicy = "Retain"
	// BackupDelete deletes it (`shale backup delete`: only the objects no
	// other backup names).
	BackupDelete BackupDeletePolicy = "Delete"
)

// BackupSpec asks for one backup of a database into a backup store.
// Immutable.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a Backup's spec is immutable: it was taken of one database into one store; create another Backup"
type BackupSpec struct {
	// Database names the RocksDB (in this namespace) to back up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database"`

	// BackupStore names the ObjectStore (in this namespace) the backup is
	// copied to, under PREFIX/_backups/NAMESPACE/ in its bucket: another
	// bucket, endpoint or credential than the database's (the database's
	// own ObjectStore works, but then a deleted bucket loses both).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupStore string `json:"backupStore"`

	// Verify runs `shale backup verify` once the backup completed: every
	// object's checksum, RocksDB's checksums, a read-only open and a key
	// count (status.lastVerifiedRestore).
	// +optional
	Verify bool `json:"verify,omitempty"`

	// DeletePolicy: Retain (default) keeps the backup in the store when
	// this resource is deleted; Delete deletes it.
	// +optional
	// +kubebuilder:default=Retain
	DeletePolicy BackupDeletePolicy `json:"deletePolicy,omitempty"`
}

// BackupPhase summarises a Backup's state.
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

const (
	// BackupPending: waiting for a ready primary (the message says why).
	BackupPending BackupPhase = "Pending"
	// BackupRunning: the checkpoint was asked for, or its copy runs.
	BackupRunning BackupPhase = "Running"
	// BackupCompleted: published in the backup store.
	BackupCompleted BackupPhase = "Completed"
	// BackupFailed: not published; status.reason and message say why.
	BackupFailed BackupPhase = "Failed"
)

// Reasons of a Failed Backup (status.reason, and the failures metric).
const (
	BackupReasonCheckpointRefused = "CheckpointRefused"
	BackupReasonJobFailed         = "JobFailed"
	BackupReasonInvalidStore      = "InvalidStore"
	BackupReasonDatabaseDeleted   = "DatabaseDeleted"
)

// BackupStatus is what the operator and the backup's Job reported.
type BackupStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase: Pending, Running, Completed or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// Reason of a Failed phase: CheckpointRefused, JobFailed,
	// InvalidStore, DatabaseDeleted.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why the phase is what it is.
	// +optional
	Message string `json:"message,omitempty"`

	// BackupID is the backup's id in the store (the resource's name).
	// +optional
	BackupID string `json:"backupID,omitempty"`
	// Location is where it is: the backup store's URL and database id
	// (shale backup list --to URL --database ID).
	// +optional
	Location string `json:"location,omitempty"`
	// DatabaseID is the database's id in the backup store: NAME-UID, the
	// last element of its status.storagePath (bootstrap.recovery.database).
	// +optional
	DatabaseID string `json:"databaseID,omitempty"`
	// Checkpoint is the checkpoint asked of the primary (backup-NAME).
	// +optional
	Checkpoint string `json:"checkpoint,omitempty"`
	// CheckpointReleased: the operator deleted it after the copy.
	// +optional
	CheckpointReleased bool `json:"checkpointReleased,omitempty"`

	// Started is when the operator asked for the checkpoint; Completed
	// when the backup was published (or failed).
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// +optional
	Completed *metav1.Time `json:"completed,omitempty"`

	// BytesCopied and ObjectsCopied: what this backup copied (the rest
	// was in the store already); Bytes and Objects: everything it names.
	// +optional
	// +kubebuilder:validation:Minimum=0
	BytesCopied int64 `json:"bytesCopied,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObjectsCopied int64 `json:"objectsCopied,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Objects int64 `json:"objects,omitempty"`
	// Sequence: the backup holds every write up to this sequence number.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence,omitempty"`
	// Time the checkpoint was taken (the state the backup restores).
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// Verification is the state of spec.verify's run.
	// +optional
	Verification *BackupVerification `json:"verification,omitempty"`
	// LastVerifiedRestore is when a verify last opened this backup with
	// RocksDB and every checksum matched.
	// +optional
	LastVerifiedRestore *metav1.Time `json:"lastVerifiedRestore,omitempty"`
	// Discarded: a Failed backup's leftovers (pending record, pin in the
	// database) were deleted.
	// +optional
	Discarded bool `json:"discarded,omitempty"`
}

// BackupVerification is a verify's outcome.
type BackupVerification struct {
	// Phase: Running, Succeeded or Failed.
	// +kubebuilder:validation:Enum=Running;Succeeded;Failed
	Phase string `json:"phase"`
	// +optional
	Message string `json:"message,omitempty"`
	// Keys counted in the restored copy.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Keys int64 `json:"keys,omitempty"`
	// SourceKeys is the live key count of the source's checkpoint, counted
	// when the backup was created (spec.verify makes the create Job count
	// it), which Keys was compared with; unset: not compared.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SourceKeys *int64 `json:"sourceKeys,omitempty"`
}

// Backup copies a checkpoint of a RocksDB to a backup store: the operator
// asks the primary for the checkpoint, a Job copies it (`shale backup
// create`), and the backup is listed once its manifest is published.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=shale
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.backupStore`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Sequence",type=integer,JSONPath=`.status.sequence`
// +kubebuilder:printcolumn:name="Copied",type=integer,JSONPath=`.status.bytesCopied`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.status.completed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 56 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a Backup name must be at most 56 lower-case letters, digits and '-', starting and ending with a letter or digit (it is the backup's id in the store, and backup-NAME its checkpoint's name)"
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BackupSpec   `json:"spec"`
	Status BackupStatus `json:"status,omitempty"`
}

// BackupList is a list of Backups.
//
// +kubebuilder:object:root=true
type BackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Backup `json:"items"`
}

// BackupRetention says which backups a ScheduledBackup keeps: the newest
// KeepLast and every one completed within KeepWithin (a backup either
// keeps is kept; the newest always).
//
// +kubebuilder:validation:XValidation:rule="has(self.keepLast) || has(self.keepWithin)",message="retention needs keepLast and/or keepWithin (or leave retention out to keep every backup)"
type BackupRetention struct {
	// KeepLast keeps the newest N backups.
	// +optional
	// +kubebuilder:validation:Minimum=1
	KeepLast *int32 `json:"keepLast,omitempty"`
	// KeepWithin keeps every backup completed within this duration, such
	// as 720h (30 days).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')",message="keepWithin must be a duration of at least 1m, such as 168h or 720h"
	KeepWithin *metav1.Duration `json:"keepWithin,omitempty"`
}

// ScheduledBackupSpec makes Backups on a schedule.
type ScheduledBackupSpec struct {
	// Schedule is a cron schedule of 5 fields (minute hour day-of-month
	// month day-of-week), in UTC, such as "0 2 * * *" (02:00 every day).
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`

	// Database names the RocksDB (in this namespace) to back up.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="database is immutable: a schedule backs up one database (create another ScheduledBackup)"
	Database string `json:"database"`

	// BackupStore names the ObjectStore (in this namespace) backups go to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupStore string `json:"backupStore"`

	// Retention prunes the backup store after each successful backup
	// (`shale backup prune`) and deletes the Backup resources it let go.
	// Omitted: every backup is kept.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// Verify verifies each backup (Backup.spec.verify).
	// +optional
	Verify bool `json:"verify,omitempty"`

	// Suspend stops new Backups (running ones finish).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ScheduledBackupStatus is the schedule's progress.
type ScheduledBackupStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastScheduleTime is the schedule time of the last Backup created.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulTime is the completion time of the last Backup of this
	// schedule that completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// NextScheduleTime is when the next Backup is due (none while
	// suspended).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastBackup is the name of the last Backup created.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// LastPruned is the Backup whose success the last prune followed.
	// +optional
	LastPruned string `json:"lastPruned,omitempty"`
	// Message says what is wrong, if anything (an invalid schedule).
	// +optional
	Message string `json:"message,omitempty"`
}

// ScheduledBackup creates a Backup of a RocksDB on a cron schedule and
// applies a retention policy to the backup store.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=shale
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a ScheduledBackup name must be at most 40 lower-case letters, digits and '-', starting and ending with a letter or digit (its Backups are NAME-YYYYMMDDHHMM)"
type ScheduledBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ScheduledBackupSpec   `json:"spec"`
	Status ScheduledBackupStatus `json:"status,omitempty"`
}

// ScheduledBackupList is a list of ScheduledBackups.
//
// +kubebuilder:object:root=true
type ScheduledBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ScheduledBackup `json:"items"`
}

// RecoverySource restores a backup into a new database
// (spec.bootstrap.recovery).
//
// +kubebuilder:validation:XValidation:rule="!has(self.targetTime) || !has(self.targetSequence)",message="spec.bootstrap.recovery: give targetTime or targetSequence, not both"
// +kubebuilder:validation:XValidation:rule="(!has(self.targetTime) && !has(self.targetSequence)) || self.backup == 'latest'",message="spec.bootstrap.recovery: a point-in-time restore (targetTime, targetSequence) picks its base backup: set backup: latest"
type RecoverySource struct {
	// BackupStore names the ObjectStore (in this namespace) holding the
	// backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupStore string `json:"backupStore"`
	// Database is the backed-up database's id in the store: NAME-UID,
	// the Backup's status.databaseID (shale backup list --database).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Database string `json:"database"`
	// Backup is the backup's id (a Backup's name), or "latest": the newest
	// published one, resolved once into status.recovery.backup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=56
	Backup string `json:"backup"`
	// TargetTime restores the database as it was at this time (RFC 3339,
	// whole seconds), from the archive (spec.backup.archive of the
	// source): every write acknowledged before it, none after. Needs
	// backup: latest (the restore picks the base backup). At most one of
	// targetTime and targetSequence.
	// +optional
	TargetTime *metav1.Time `json:"targetTime,omitempty"`
	// TargetSequence restores the database as it was at this sequence
	// number (as a Write returns it), from the archive: exact.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TargetSequence *int64 `json:"targetSequence,omitempty"`
}

// RecoveryStatus is the backup a recovering database restores, fixed once
// the operator checked it.
type RecoveryStatus struct {
	// Backup is the backup's id (latest resolved).
	Backup string `json:"backup"`
	// Location is the backup store's URL, Database its database id.
	Location string `json:"location"`
	Database string `json:"database"`
	// Sequence and Time of the backup's checkpoint.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// Target is the point-in-time target ("time T" or "sequence N"),
	// when there is one; Backup is then the base the operator expects
	// the restore to start from (the restore decides).
	// +optional
	Target string `json:"target,omitempty"`
}

// ArchiveStatus is a RocksDB's continuous archive: where it goes, and
// what it makes recoverable.
type ArchiveStatus struct {
	// BackupStore, Location (the backup store's URL for this namespace)
	// and Database (NAME-UID): where the archive goes, as the primary is
	// told (--archive-to, --archive-database).
	BackupStore string `json:"backupStore"`
	// +optional
	Location string `json:"location,omitempty"`
	// +optional
	Database string `json:"database,omitempty"`
	// Endpoint is the backup store's endpoint when it is not the
	// database's; CredentialsSecret its Secret when it is another.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
	// StartedAt is the archive's first start; CaughtUpAt: every log
	// object stored before it is archived.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	CaughtUpAt *metav1.Time `json:"caughtUpAt,omitempty"`
	// Gaps recorded (segments deleted before the archive had them): the
	// window restarts at the first base backup after the last.
	// +optional
	Gaps int32 `json:"gaps,omitempty"`
	// RecoverableFrom is the window's start: the checkpoint time of the
	// oldest base backup taken after the archive started and after every
	// gap (RecoverableFromBackup; none yet: take a Backup). A target time
	// from there to CaughtUpAt can be restored.
	// +optional
	RecoverableFrom *metav1.Time `json:"recoverableFrom,omitempty"`
	// +optional
	RecoverableFromBackup string `json:"recoverableFromBackup,omitempty"`
	// Checked is when the operator last read the archive.
	// +optional
	Checked *metav1.Time `json:"checked,omitempty"`
	// Message says why the archive is not running or could not be read.
	// +optional
	Message string `json:"message,omitempty"`
}

// LastBackup is a RocksDB's newest completed Backup.
type LastBackup struct {
	// Name of the Backup (its id in the store).
	Name string `json:"name"`
	// Time the backup's checkpoint was taken; Completed when it was
	// published.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// +optional
	Completed *metav1.Time `json:"completed,omitempty"`
	// Sequence: it holds every write up to this sequence number.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence,omitempty"`
}

func init() {
	SchemeBuilder.Register(&Backup{}, &BackupList{}, &ScheduledBackup{}, &ScheduledBackupList{})
}
