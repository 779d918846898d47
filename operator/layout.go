package operator

import (
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Where things live in a hot tier (keys relative to the ObjectStore's
// bucket and prefix):
//
//	NAMESPACE/NAME-UID/...              a database (its storage path, minus
//	                                    the prefix); the layout inside is
//	                                    the storage layer's (package
//	                                    internal/shalefs/layout, which the
//	                                    operator reads it with)
//	NAMESPACE/NAME-UID.owner.json       the operator's owner record of it
//	                                    (owner_record.go)
//	.shale-operator/probe-RANDOM        reachability probes, deleted at once
//
// The garbage collector only ever considers NAMESPACE/NAME-UID/ directories
// and NAMESPACE/NAME-UID.owner.json records whose names parse as such.

const (
	// ownerRecordSuffix follows NAME-UID in an owner record's key.
	ownerRecordSuffix = ".owner.json"
	// probeDir holds the reachability probes.
	probeDir = ".shale-operator/"
)

// dbDirKey is the directory of a database relative to the hot prefix:
// NAMESPACE/NAME-UID/.
func dbDirKey(namespace, dirName string) string {
	return path.Join(namespace, dirName) + "/"
}

// ownerRecordKey is the key of a database's owner record relative to the
// hot prefix.
func ownerRecordKey(namespace, dirName string) string {
	return path.Join(namespace, dirName) + ownerRecordSuffix
}

// uidPattern is a Kubernetes UID as the API server generates them.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// dnsLabel is a namespace or RocksDB name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// parseDirName splits NAME-UID. ok is false for anything the operator
// cannot have created, which the garbage collector then leaves alone.
func parseDirName(s string) (name string, uid types.UID, ok bool) {
	const uidLen = 36
	if len(s) < uidLen+2 || s[len(s)-uidLen-1] != '-' {
		return "", "", false
	}
	name, u := s[:len(s)-uidLen-1], s[len(s)-uidLen:]
	if !uidPattern.MatchString(u) || len(name) > 63 || !dnsLabel.MatchString(name) {
		return "", "", false
	}
	return name, types.UID(u), true
}

// isNamespaceDir reports whether a top-level entry of a hot tier can be a
// namespace directory ("NAMESPACE/").
func isNamespaceDir(key string) (string, bool) {
	ns, ok := strings.CutSuffix(key, "/")
	if !ok || len(ns) > 63 || !dnsLabel.MatchString(ns) {
		return "", false
	}
	return ns, true
}
