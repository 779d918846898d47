package v1alpha1

import (
	"path"

	"k8s.io/apimachinery/pkg/api/meta"
)

// The keys of the credentials Secret.
const (
	SecretKeyAccessKeyID     = "AWS_ACCESS_KEY_ID"
	SecretKeySecretAccessKey = "AWS_SECRET_ACCESS_KEY"
)

// URL is s3://BUCKET/PREFIX (s3://BUCKET for an empty prefix), the form
// Shale's store URLs take.
func (l BucketLocation) URL() string {
	return "s3://" + path.Join(l.Bucket, l.Prefix)
}

// DatabaseURL is the --db URL of a database whose storage path (relative
// to the hot bucket) is storagePath.
func (s *ObjectStore) DatabaseURL(storagePath string) string {
	return "s3://" + path.Join(s.Spec.Hot.Bucket, storagePath)
}

// ColdDatabaseURL is the --cold-db URL of a database whose cold storage
// path (relative to the cold bucket) is coldPath.
func (s *ObjectStore) ColdDatabaseURL(coldPath string) string {
	if s.Spec.Cold == nil {
		return ""
	}
	return "s3://" + path.Join(s.Spec.Cold.Bucket, coldPath)
}

// ColdEndpoint is the cold tier's endpoint: its own, or the hot tier's.
func (s *ObjectStore) ColdEndpoint() string {
	if s.Spec.Cold == nil || s.Spec.Cold.Endpoint == "" {
		return s.Spec.Endpoint
	}
	return s.Spec.Cold.Endpoint
}

// IsReachable reports whether the last check found the store reachable
// for the current spec.
func (s *ObjectStore) IsReachable() bool {
	c := meta.FindStatusCondition(s.Status.Conditions, ConditionReachable)
	return c != nil && c.Status == "True" && c.ObservedGeneration == s.Generation
}
