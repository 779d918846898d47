package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ObjectStoreSpec says how to reach an S3-compatible object store and where
// in it databases live.
//
// +kubebuilder:validation:XValidation:rule="(has(self.credentials) ? 1 : 0) + (has(self.serviceAccountName) && size(self.serviceAccountName) > 0 ? 1 : 0) + (has(self.instanceRole) && self.instanceRole ? 1 : 0) == 1",message="set exactly one of credentials (a Secret with the keys), serviceAccountName (workload identity: the Pods run as that ServiceAccount) or instanceRole: true (the node's or Pod's role): they say where the store's credentials come from"
type ObjectStoreSpec struct {
	// Endpoint is the URL of the S3 API. Its scheme chooses transport
	// security: http:// talks plain HTTP (no TLS, for a MinIO inside the
	// cluster), https:// uses TLS verified against the system roots. It
	// cannot change while RocksDBs keep data in the store (status.usedBy).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@ ]+/?$')",message="endpoint must be http://HOST[:PORT] (plain HTTP, no TLS) or https://HOST[:PORT] (TLS), with no path, user or query: the bucket goes in hot.bucket"
	Endpoint string `json:"endpoint"`

	// Region requests are signed for; empty means us-east-1. It cannot
	// change while RocksDBs keep data in the store (status.usedBy).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]*$`
	Region string `json:"region,omitempty"`

	// Where the credentials come from: exactly one of credentials,
	// serviceAccountName and instanceRole.

	// Credentials names a Secret in the ObjectStore's namespace with the
	// keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Primaries,
	// secondaries and compactor workers mount it read-only and read the
	// keys again when the kubelet updates the volume, so a rotated key
	// (edit the Secret, or point this at another one) needs no failover.
	// The operator reads the Secret (never cached) to check the store and
	// collect garbage.
	// +optional
	Credentials *SecretReference `json:"credentials,omitempty"`

	// ServiceAccountName is workload identity: the Pods of the databases
	// and compactor workers using this store run as this ServiceAccount
	// of their namespace, with its token mounted, and take credentials
	// from what the platform injects for it: annotate it for EKS IAM
	// roles for service accounts (eks.amazonaws.com/role-arn; web
	// identity through AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN) or
	// associate it with an EKS Pod Identity. The operator checks the
	// store, writes owner records and collects garbage as the same
	// ServiceAccount: it asks the API server for a token of it and
	// exchanges it at STS for the role eks.amazonaws.com/role-arn names
	// (docs/kubernetes.md).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="serviceAccountName must be a ServiceAccount name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// InstanceRole: Pods take credentials from the role of the node they
	// run on (EC2 instance metadata) or of their container (ECS, EKS Pod
	// Identity endpoints). The operator uses its own role for it, and
	// only when started with --instance-role-stores (docs/kubernetes.md).
	// +optional
	InstanceRole bool `json:"instanceRole,omitempty"`

	// Checksum is what uploads carry for the store to verify the bytes it
	// received: crc32c (the default when empty: a CRC32C with every
	// object and part) or none, for an S3-compatible store that refuses
	// checksums (its error names this setting; then an MD5 over TLS).
	// Pods get it as SHALE_S3_CHECKSUM.
	// +optional
	// +kubebuilder:validation:Enum=crc32c;none
	Checksum string `json:"checksum,omitempty"`

	// Hot is the bucket and prefix databases live under: each database in
	// HOT.PREFIX/NAMESPACE/NAME-UID. Immutable, because databases stay
	// where they were created.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hot is immutable: databases live under hot.bucket and hot.prefix; create another ObjectStore to use another location"
	Hot BucketLocation `json:"hot"`

	// Cold is the optional second tier (HDD-class storage) that tiered SST
	// placement moves cold files to: a RocksDB with spec.tiering keeps its
	// cold tables in COLD.PREFIX/NAMESPACE/NAME-UID (docs/tiering.md). It
	// can be added at any time, and cannot change or go while a RocksDB
	// keeps tables in it (status.usedBy with coldTier).
	// +optional
	Cold *ColdTier `json:"cold,omitempty"`

	// StorageClasses are the S3 storage classes primaries write with, per
	// file type. Empty means the store's default.
	// +optional
	StorageClasses StorageClasses `json:"storageClasses,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// BucketLocation is a bucket and a key prefix in it.
type BucketLocation struct {
	// Bucket name (S3 rules: 3 to 63 lower-case letters, digits, '.' and
	// '-', starting and ending with a letter or digit).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$') && !self.contains('..')",message="bucket must be 3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit"
	Bucket string `json:"bucket"`

	// Prefix is a key prefix inside the bucket ("shale/prod"): segments
	// separated by '/', none empty, '.' or '..', no leading or trailing
	// '/'. Empty means the bucket's root.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == '' || (self.matches('^[^/]+(/[^/]+)*$') && !self.split('/').exists(s, s == '.' || s == '..'))",message="prefix must be segments separated by '/' (no leading or trailing '/', no empty, '.' or '..' segments), e.g. shale/prod"
	Prefix string `json:"prefix,omitempty"`
}

// ColdTier is a bucket for cold SST files, on the hot tier's endpoint or
// its own (with the same credentials).
type ColdTier struct {
	// Endpoint of the cold tier; empty means the hot tier's endpoint.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^https?://[^/?#@ ]+/?$')",message="cold.endpoint must be http://HOST[:PORT] or https://HOST[:PORT], with no path"
	Endpoint string `json:"endpoint,omitempty"`

	BucketLocation `json:",inline"`
}

// StorageClasses are S3 storage classes per file type.
type StorageClasses struct {
	// WAL is the class of write-ahead log and MANIFEST segments and other
	// small files (primary flag --wal-storage-class).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Z][A-Z0-9_]*)?$')",message="storageClasses.wal must be an S3 storage class such as STANDARD or EXPRESS_ONEZONE"
	WAL string `json:"wal,omitempty"`

	// SST is the class of table files (primary flag --sst-storage-class).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([A-Z][A-Z0-9_]*)?$')",message="storageClasses.sst must be an S3 storage class such as STANDARD or STANDARD_IA"
	SST string `json:"sst,omitempty"`
}

// ObjectStoreStatus is what the operator last found out about the store.
type ObjectStoreStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Reachable is True when the operator could list the
	// store and the store refused a second create-only write of the same
	// key (fencing depends on it).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastCheckTime is when the store was last checked.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`

	// UsedBy lists the RocksDBs (of this namespace) that keep data in the
	// store. The operator adds a RocksDB before its first primary (and
	// marks coldTier before its first cold table can exist), and removes
	// it once its deletion is done. While the list is not empty, endpoint
	// and region cannot change, nor the cold tier once a RocksDB uses it:
	// a primary pointed elsewhere would not find its database.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4096
	UsedBy []StoreUser `json:"usedBy,omitempty"`
}

// StoreUser is a RocksDB that keeps data in an ObjectStore.
type StoreUser struct {
	// Name of the RocksDB.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// ColdTier: the RocksDB keeps tables in the cold tier too
	// (status.coldStoragePath is set).
	// +optional
	ColdTier bool `json:"coldTier,omitempty"`
}

// ObjectStore is an S3-compatible store that databases live in.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=shale
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.hot.bucket`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.usedBy) || size(oldSelf.status.usedBy) == 0 || (self.spec.endpoint == oldSelf.spec.endpoint && has(self.spec.region) == has(oldSelf.spec.region) && (!has(self.spec.region) || self.spec.region == oldSelf.spec.region))",message="endpoint and region cannot change while RocksDBs keep data in this ObjectStore (status.usedBy): their next primaries would not find their databases; to move the data, create another ObjectStore"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.usedBy) || !oldSelf.status.usedBy.exists(u, has(u.coldTier) && u.coldTier) || !has(oldSelf.spec.cold) || (has(self.spec.cold) && self.spec.cold == oldSelf.spec.cold)",message="cold cannot change while RocksDBs keep tables in the cold tier (status.usedBy with coldTier): their next primaries would not find them"
type ObjectStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ObjectStoreSpec   `json:"spec"`
	Status ObjectStoreStatus `json:"status,omitempty"`
}

// ObjectStoreList is a list of ObjectStores.
//
// +kubebuilder:object:root=true
type ObjectStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ObjectStore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ObjectStore{}, &ObjectStoreList{})
}
