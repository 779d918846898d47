package v1alpha1

// Every label, annotation and finalizer key the operator sets, in one
// place.
const (
	// LabelRocksDB is the name of the RocksDB a Pod or Service belongs to.
	LabelRocksDB = "shale.rocks/rocksdb"
	// LabelRole is the role of a Pod in its database: "primary" today.
	LabelRole = "shale.rocks/role"
	// LabelEpoch is the fencing epoch a primary Pod runs with. The
	// NAME-rw Service selects the Pod of the current epoch only.
	LabelEpoch = "shale.rocks/epoch"

	// Recommended labels (app.kubernetes.io/...).
	LabelAppName      = "app.kubernetes.io/name"
	LabelAppInstance  = "app.kubernetes.io/instance"
	LabelAppComponent = "app.kubernetes.io/component"
	LabelAppManagedBy = "app.kubernetes.io/managed-by"

	// RolePrimary is LabelRole's value on primary Pods.
	RolePrimary = "primary"
	// AppName is LabelAppName's value.
	AppName = "shale"
	// ManagedBy is LabelAppManagedBy's value.
	ManagedBy = "shale-operator"

	// FinalizerStorage holds a RocksDB until its reclaim policy has been
	// applied to its storage directory.
	FinalizerStorage = "shale.rocks/storage"
)
