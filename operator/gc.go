package operator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The orphan rule of the garbage collector (paper §6.4), a pure function.
// The runner (gc_runner.go) gathers its inputs in an order that matters;
// docs/operator.md has the argument.

// dirObservation is what one GC pass found about one database directory
// (NAMESPACE/NAME-UID/) or, when the directory is empty, its owner record.
type dirObservation struct {
	Namespace string
	Name      string
	UID       types.UID
	// Objects and Bytes count the directory's objects.
	Objects int
	Bytes   int64
	// Newest is the latest modification time among the directory's
	// objects and its owner record.
	Newest time.Time
	// Record is the owner record, nil if there is none; RecordErr is set
	// when it exists but cannot be read or parsed.
	Record    *dirOwnerRecord
	RecordErr error
	// Pins: the clone ids of the directory's _shale/pins/ (clones reading
	// its tables: docs/rfcs/0010-checkpoints-and-clones.md).
	Pins []string
}

// verdict is the GC's judgement of a directory.
type verdict int

const (
	// keepLive: a RocksDB object with the directory's UID exists.
	keepLive verdict = iota
	// keepUnclaimed: no readable owner record from this cluster with this
	// UID: the operator did not create it, or cannot prove it did.
	keepUnclaimed
	// keepRetained: its RocksDB said reclaimPolicy Retain.
	keepRetained
	// keepYoung: something in it changed within the grace period.
	keepYoung
	// keepPinned: an orphan but for the pins of clones reading its
	// tables: everything the pins do not name is deleted, the rest (and
	// the owner record) kept until the last pin is gone.
	keepPinned
	// orphan: delete it.
	orphan
)

func (v verdict) String() string {
	return [...]string{"live", "unclaimed", "retained", "young", "pinned", "orphan"}[v]
}

// classifyDir decides whether a directory is an orphan. live holds the UIDs
// of every RocksDB in the cluster, read from the API server (not a cache)
// after the directory was listed; cluster is this cluster's ID.
//
// A directory is an orphan only if all of these hold:
//
//  1. no live RocksDB has its UID, or adopted it (its owner record's
//     adoptedBy: written before the adopter's first primary, after the
//     adopter was created). A RocksDB being deleted is still live:
//     its finalizer applies the reclaim policy. A directory can only exist
//     after its RocksDB was created (the operator creates the primary that
//     writes it after reading the RocksDB), so a list of RocksDBs read
//     after the directory listing contains every RocksDB whose directory
//     was listed, unless that RocksDB has since been deleted;
//  2. its owner record was written by this cluster's operator for this
//     very UID (so nothing created by hand, by another cluster sharing
//     the prefix, or mangled, is ever deleted);
//  3. the record says reclaimPolicy Delete (Retain means keep, even after
//     the RocksDB is gone);
//  4. nothing in it, record included, changed for grace (a zombie primary
//     still writing, or a directory the checks above misjudge for a
//     reason not thought of, is kept until it has been quiet that long);
//  5. no clone pins it (_shale/pins/): a pinned orphan is never deleted
//     whole (keepPinned: the runner deletes what no pin names); with its
//     last pin gone it is an ordinary orphan.
func classifyDir(d dirObservation, live map[types.UID]bool, cluster string, now time.Time, grace time.Duration) (verdict, string) {
	switch {
	case live[d.UID]:
		return keepLive, "a RocksDB with this UID exists"
	case d.Record != nil && d.Record.AdoptedBy != nil && live[d.Record.AdoptedBy.UID]:
		// Adopted (bootstrap.fromExistingPath): the adopter's finalizer
		// applies its reclaim policy here, as for its own directory.
		return keepLive, fmt.Sprintf("RocksDB %s (UID %s) adopted it and exists", d.Record.AdoptedBy.Name, d.Record.AdoptedBy.UID)
	case d.RecordErr != nil:
		return keepUnclaimed, fmt.Sprintf("its owner record is unreadable: %v", d.RecordErr)
	case d.Record == nil:
		return keepUnclaimed, "it has no owner record"
	case d.Record.Cluster != cluster:
		return keepUnclaimed, fmt.Sprintf("its owner record names another cluster (%s)", d.Record.Cluster)
	case d.Record.UID != d.UID || d.Record.Namespace != d.Namespace || d.Record.Name != d.Name:
		return keepUnclaimed, fmt.Sprintf("its owner record is for %s/%s %s", d.Record.Namespace, d.Record.Name, d.Record.UID)
	case d.Record.ReclaimPolicy != shalev1.ReclaimDelete:
		return keepRetained, fmt.Sprintf("its RocksDB had reclaimPolicy %s", d.Record.ReclaimPolicy)
	case d.Newest.IsZero() || now.Sub(d.Newest) < grace:
		return keepYoung, fmt.Sprintf("it changed %s ago, less than the grace period %s", now.Sub(d.Newest).Round(time.Second), grace)
	}
	if len(d.Pins) > 0 {
		return keepPinned, fmt.Sprintf("no RocksDB has UID %s, but clones read its tables (pins %s)", d.UID, strings.Join(d.Pins, ", "))
	}
	return orphan, fmt.Sprintf("no RocksDB has UID %s and nothing changed for %s", d.UID, now.Sub(d.Newest).Round(time.Second))
}

// namespaceScope is the set of namespaces an operator watches
// (--watch-namespaces); empty means every namespace.
type namespaceScope []string

// covers reports whether the collector may judge the directories of
// namespace ns. An operator judges only the namespaces it watches: the
// RocksDBs of the others are invisible to it (neither its cache nor its
// RBAC reaches them), so a live database there would look orphaned, and
// another operator of the same cluster, sharing the bucket and writing
// owner records with the same cluster ID, may run it.
func (s namespaceScope) covers(ns string) bool {
	return len(s) == 0 || slices.Contains(s, ns)
}
