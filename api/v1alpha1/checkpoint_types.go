package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CheckpointSpec asks for a checkpoint of a database: its state at one
// sequence number, kept under the Checkpoint's name by the database's
// primary (docs/rfcs/0010-checkpoints-and-clones.md); no delete removes
// what it names until the Checkpoint is deleted or expires. Immutable.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a Checkpoint's spec is immutable: it was taken of one database at one moment; create another Checkpoint"
type CheckpointSpec struct {
	// Database names the RocksDB (in this namespace) to checkpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Database string `json:"database"`

	// Expires is how long the checkpoint is kept once it is asked of the
	// primary, such as 24h or 168h; absent, until the Checkpoint is
	// deleted. A duration rather than a time: a manifest applied again
	// later (GitOps) still means "keep it this long", not a moment that
	// may have passed; the moment, fixed before the first request so that
	// retries send the same one, is status.expiresAt. Expiry is the
	// primary's: with no primary running, nothing expires.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')",message="expires must be a duration of at least 1m, such as 24h or 168h"
	Expires *metav1.Duration `json:"expires,omitempty"`
}

// CheckpointPhase summarises a Checkpoint's state.
// +kubebuilder:validation:Enum=Pending;Ready;Failed;Expired
type CheckpointPhase string

const (
	// CheckpointPending: not created yet (the database has no ready
	// primary, or a request is to be retried); the message says why.
	CheckpointPending CheckpointPhase = "Pending"
	// CheckpointReady: the primary reported it created; it is kept.
	CheckpointReady CheckpointPhase = "Ready"
	// CheckpointFailed: the primary refused it for good (its name is
	// another checkpoint's, or the request is invalid); the message says
	// why. Nothing was created.
	CheckpointFailed CheckpointPhase = "Failed"
	// CheckpointExpired: status.expiresAt has passed; the primary deletes
	// it (or never created it).
	CheckpointExpired CheckpointPhase = "Expired"
)

// CheckpointStatus is what the database's primary reported.
type CheckpointStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase: Pending, Ready, Failed or Expired.
	// +optional
	Phase CheckpointPhase `json:"phase,omitempty"`

	// Message says why the phase is what it is.
	// +optional
	Message string `json:"message,omitempty"`

	// RequestedAt is when the operator first asked the primary (set
	// before the request: a checkpoint may exist from then on).
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`

	// ExpiresAt is when it expires: requestedAt plus spec.expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// ID is the checkpoint's id in the database's directory
	// (_shale/checkpoints/ID/).
	// +optional
	ID string `json:"id,omitempty"`

	// Epoch of the primary that created it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch,omitempty"`

	// Sequence: the checkpoint holds every write up to this sequence
	// number, and none after.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Sequence int64 `json:"sequence,omitempty"`

	// Time the primary created it.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// Tables the checkpoint names, and their bytes (both tiers).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Tables int64 `json:"tables,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes,omitempty"`
}

// Checkpoint is a named, durable state of a RocksDB: the request is sent
// to the database's primary with the Checkpoint's UID as its request id
// (retries are idempotent), and deleting the Checkpoint deletes it there.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ckpt,categories=shale
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.database`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Sequence",type=integer,JSONPath=`.status.sequence`
// +kubebuilder:printcolumn:name="Tables",type=integer,JSONPath=`.status.tables`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.bytes`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="a Checkpoint name must be at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit (it names the checkpoint in the database)"
type Checkpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CheckpointSpec   `json:"spec"`
	Status CheckpointStatus `json:"status,omitempty"`
}

// CheckpointList is a list of Checkpoints.
//
// +kubebuilder:object:root=true
type CheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Checkpoint `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Checkpoint{}, &CheckpointList{})
}
