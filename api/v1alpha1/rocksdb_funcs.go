package v1alpha1

import (
	"path"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DirName is the last segment of the database's storage path: NAME-UID.
// The UID makes a RocksDB created again under an old name start empty
// instead of adopting (or deleting) its predecessor's data.
func (db *RocksDB) DirName() string {
	return db.Name + "-" + string(db.UID)
}

// StoragePathUnder is the database's directory under a hot-tier prefix:
// PREFIX/NAMESPACE/NAME-UID (NAMESPACE/NAME-UID for an empty prefix).
func (db *RocksDB) StoragePathUnder(prefix string) string {
	return path.Join(prefix, db.Namespace, db.DirName())
}

// ServiceName is the read-write Service: NAME-rw.
func (db *RocksDB) ServiceName() string {
	return db.Name + "-rw"
}

// ReadOnlyServiceName is the Service of the secondaries: NAME-ro.
func (db *RocksDB) ReadOnlyServiceName() string {
	return db.Name + "-ro"
}

// SecondaryDeploymentName is the Deployment of the secondaries:
// NAME-secondary.
func (db *RocksDB) SecondaryDeploymentName() string {
	return db.Name + "-secondary"
}

// NetworkPolicyName is the database's NetworkPolicy: NAME-ingress.
func (db *RocksDB) NetworkPolicyName() string {
	return db.Name + "-ingress"
}

// NetworkPolicyEnabled is spec.networkPolicy.enabled, true when unset.
func (db *RocksDB) NetworkPolicyEnabled() bool {
	return db.Spec.NetworkPolicy.Enabled == nil || *db.Spec.NetworkPolicy.Enabled
}

// PrimaryPodName is the name of the primary Pod of an epoch:
// NAME-primary-EPOCH. One name per epoch makes creating it idempotent.
func (db *RocksDB) PrimaryPodName(epoch int64) string {
	return db.Name + "-primary-" + strconv.FormatInt(epoch, 10)
}

// EffectiveReclaimPolicy is the reclaim policy, Retain when unset.
func (db *RocksDB) EffectiveReclaimPolicy() ReclaimPolicy {
	if db.Spec.ReclaimPolicy == "" {
		return ReclaimRetain
	}
	return db.Spec.ReclaimPolicy
}

// Condition returns the status condition of a type, or nil.
func (db *RocksDB) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(db.Status.Conditions, t)
}

// ConditionTrue reports whether the condition of a type is True.
func (db *RocksDB) ConditionTrue(t string) bool {
	return meta.IsStatusConditionTrue(db.Status.Conditions, t)
}

// SelectorLabels are the labels every Pod of the database carries.
func (db *RocksDB) SelectorLabels() map[string]string {
	return map[string]string{LabelRocksDB: db.Name}
}

// PrimaryLabels are the labels of the primary Pod of an epoch.
func (db *RocksDB) PrimaryLabels(epoch int64) map[string]string {
	return map[string]string{
		LabelRocksDB:      db.Name,
		LabelRole:         RolePrimary,
		LabelEpoch:        strconv.FormatInt(epoch, 10),
		LabelAppName:      AppName,
		LabelAppInstance:  db.Name,
		LabelAppComponent: RolePrimary,
		LabelAppManagedBy: ManagedBy,
	}
}

// PrimaryServiceSelector selects the primary Pod of an epoch.
func (db *RocksDB) PrimaryServiceSelector(epoch int64) map[string]string {
	return map[string]string{
		LabelRocksDB: db.Name,
		LabelRole:    RolePrimary,
		LabelEpoch:   strconv.FormatInt(epoch, 10),
	}
}

// SecondaryLabels are the labels of the secondaries' Deployment and Pods.
func (db *RocksDB) SecondaryLabels() map[string]string {
	return map[string]string{
		LabelRocksDB:      db.Name,
		LabelRole:         RoleSecondary,
		LabelAppName:      AppName,
		LabelAppInstance:  db.Name,
		LabelAppComponent: RoleSecondary,
		LabelAppManagedBy: ManagedBy,
	}
}

// SecondarySelector selects the secondary Pods of the database (the
// Deployment's selector, immutable, and the NAME-ro Service's).
func (db *RocksDB) SecondarySelector() map[string]string {
	return map[string]string{
		LabelRocksDB: db.Name,
		LabelRole:    RoleSecondary,
	}
}
