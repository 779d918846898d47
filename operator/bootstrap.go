package operator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// spec.bootstrap (docs/rfcs/0010-checkpoints-and-clones.md, steps 21-22).
// fromExistingPath here (clones, fromCheckpoint and cloneFrom: clone.go):
// a new RocksDB adopts the directory a
// deleted RocksDB with reclaimPolicy Retain left behind. Before its first
// primary, the operator reads what decideBootstrap needs, and claims the
// directory by rewriting its owner record with If-Match on the version it
// read, naming itself in adoptedBy: of two adopters racing, one write
// fails, and that one then finds the directory adopted. Only after the
// claim is status.storagePath set to the adopted directory; its primaries
// run with --existing from the first, at an epoch above every claim there.

// bootstrapRecheck is how soon a refused bootstrap is looked at again (the
// RocksDB holding the directory may be deleted meanwhile).
const bootstrapRecheck = time.Minute

// adopts reports whether the RocksDB starts from a retained directory.
func adopts(db *shalev1.RocksDB) bool {
	return db.Spec.Bootstrap != nil && db.Spec.Bootstrap.FromExistingPath != nil
}

// adoptTarget is a retained directory, parsed from fromExistingPath.
type adoptTarget struct {
	// StoragePath: PREFIX/NAMESPACE/NAME-UID, what status.storagePath
	// becomes.
	StoragePath string
	Namespace   string
	// Dir is NAME-UID, the deleted RocksDB's Name and UID.
	Dir  string
	Name string
	UID  types.UID
}

// recordKey is the key of the directory's owner record in the hot tier.
func (t adoptTarget) recordKey() string { return ownerRecordKey(t.Namespace, t.Dir) }

// parseAdoptPath reads fromExistingPath: the deleted RocksDB's
// status.storagePath (PREFIX/NAMESPACE/NAME-UID), or NAMESPACE/NAME-UID
// relative to the prefix, with or without a trailing '/'. The two forms
// cannot be confused: after the prefix, exactly two segments are left.
// problem is empty when it parses.
func parseAdoptPath(p, prefix string) (t adoptTarget, problem string) {
	prefix = strings.Trim(prefix, "/")
	rel := strings.TrimSuffix(p, "/")
	if prefix != "" {
		if r, ok := strings.CutPrefix(rel, prefix+"/"); ok && strings.Count(r, "/") == 1 {
			rel = r
		}
	}
	ns, dir, ok := strings.Cut(rel, "/")
	want := path.Join(prefix, "NAMESPACE", "NAME-UID")
	if !ok || strings.Contains(dir, "/") {
		return t, fmt.Sprintf("spec.bootstrap.fromExistingPath.path %q is not a database directory under the ObjectStore's prefix %q: write the deleted RocksDB's status.storagePath, %s", p, prefix, want)
	}
	if _, ok := isNamespaceDir(ns + "/"); !ok {
		return t, fmt.Sprintf("spec.bootstrap.fromExistingPath.path %q: %q is not a namespace name: write the deleted RocksDB's status.storagePath, %s", p, ns, want)
	}
	name, uid, ok := parseDirName(dir)
	if !ok {
		return t, fmt.Sprintf("spec.bootstrap.fromExistingPath.path %q: %q is not NAME-UID (a RocksDB's name and UID, as the operator names directories): write the deleted RocksDB's status.storagePath, %s", p, dir, want)
	}
	return adoptTarget{StoragePath: path.Join(prefix, ns, dir), Namespace: ns, Dir: dir, Name: name, UID: uid}, ""
}

// bootstrapInput is what the operator read before an adoption.
type bootstrapInput struct {
	// DB is the adopter.
	DB *shalev1.RocksDB
	// Prefix is its ObjectStore's hot prefix; Store its name (messages).
	Prefix, Store string
	// Cluster is this cluster's ID (the kube-system namespace's UID).
	Cluster string
	// RocksDBs are those of the adopter's namespace, read from the API
	// server (the directory's RocksDB and any adopter of it are there).
	RocksDBs []shalev1.RocksDB
	// Record is the directory's owner record (nil: none); RecordErr set
	// when it exists but does not parse.
	Record    *dirOwnerRecord
	RecordErr error
	// HasCurrent: the directory holds CURRENT. Claims is the highest
	// epoch claimed there (0: none).
	HasCurrent bool
	Claims     uint64
	// Deleting: the directory holds _shale/deleting (a reclaim or the
	// garbage collector started deleting it).
	Deleting bool
	// Checkpoint is the Checkpoint fromCheckpoint names (nil: none).
	Checkpoint *shalev1.Checkpoint
	// StoreSpec is the clone's ObjectStore; ParentStore the parent's when
	// it is another one (nil: missing, or the same).
	StoreSpec   *shalev1.ObjectStore
	ParentStore *shalev1.ObjectStore
	// ParentRecord is the owner record of a clone's parent's directory,
	// read from the parent's store (nil: none); ParentRecordErr is set
	// when it exists but does not parse.
	ParentRecord    *dirOwnerRecord
	ParentRecordErr error
}

// bootstrapPlan is what decideBootstrap allows: an adoption (the target)
// or a clone (Clone set).
type bootstrapPlan struct {
	adoptTarget
	Clone *cloneSource
}

// decideBootstrap decides whether a RocksDB may start from what its
// spec.bootstrap names (a pure function, table-tested): a retained
// directory (decideAdopt) or a checkpoint of another RocksDB (decideClone,
// clone.go). problem, when set, names what is wrong and what to do.
func decideBootstrap(in bootstrapInput) (bootstrapPlan, string) {
	if clones(in.DB) {
		src, problem := decideClone(in)
		if problem == "" {
			problem = decideParentRecord(in, src)
		}
		return bootstrapPlan{Clone: &src}, problem
	}
	t, problem := decideAdopt(in)
	return bootstrapPlan{adoptTarget: t}, problem
}

// decideAdopt decides whether a RocksDB may adopt the directory its
// spec.bootstrap.fromExistingPath names. It may only if:
//   - the path is NAMESPACE/NAME-UID/ of its own namespace under its
//     ObjectStore's prefix;
//   - no RocksDB has that UID (the directory's own database is deleted),
//     and no other RocksDB has it as status.storagePath (adopted it);
//   - the directory's owner record is this cluster's, names that NAME and
//     UID, says Retain (a directory left with Delete is the garbage
//     collector's to delete), and its adoptedBy, if any, names no
//     existing RocksDB but this one (a claim of this one's that did not
//     reach status yet);
//   - CURRENT and an epoch claim exist: a database was opened there.
//
// problem, when set, names what is wrong and what to do.
func decideAdopt(in bootstrapInput) (t adoptTarget, problem string) {
	db := in.DB
	t, problem = parseAdoptPath(db.Spec.Bootstrap.FromExistingPath.Path, in.Prefix)
	if problem != "" {
		return t, problem
	}
	where := fmt.Sprintf("directory %s of ObjectStore %s", t.StoragePath, in.Store)
	if t.Namespace != db.Namespace {
		return t, fmt.Sprintf("%s belongs to namespace %s: a RocksDB adopts only a directory of its own namespace (%s); create the RocksDB in namespace %s", where, t.Namespace, db.Namespace, t.Namespace)
	}
	if t.UID == db.UID {
		return t, fmt.Sprintf("%s is this RocksDB's own: leave bootstrap out", where)
	}
	for i := range in.RocksDBs {
		o := &in.RocksDBs[i]
		switch {
		case o.UID == db.UID:
		case o.UID == t.UID && o.DeletionTimestamp != nil:
			return t, fmt.Sprintf("%s belongs to RocksDB %s, which is being deleted: wait until it is gone (with reclaimPolicy Retain, its directory stays and is adopted then)", where, o.Name)
		case o.UID == t.UID:
			return t, fmt.Sprintf("%s belongs to RocksDB %s, which exists: a directory is adopted only after its RocksDB is deleted with reclaimPolicy Retain; use RocksDB %s, or delete it first", where, o.Name, o.Name)
		case o.Status.StoragePath == t.StoragePath:
			return t, fmt.Sprintf("%s is served by RocksDB %s (its status.storagePath): one database has one owner; delete RocksDB %s (with reclaimPolicy Retain) before adopting the directory here", where, o.Name, o.Name)
		}
	}
	rec := in.Record
	switch {
	case in.RecordErr != nil:
		return t, fmt.Sprintf("%s: its owner record %s cannot be read (%v): only a directory whose record says it was retained can be adopted", where, t.recordKey(), in.RecordErr)
	case rec == nil:
		return t, fmt.Sprintf("%s has no owner record (%s): it was not created by this cluster's operator, or its RocksDB was deleted with reclaimPolicy Delete; only a directory retained with reclaimPolicy Retain can be adopted", where, t.recordKey())
	case rec.Cluster != in.Cluster:
		return t, fmt.Sprintf("%s: its owner record says another cluster (%s) created it: adopt it from that cluster's operator", where, rec.Cluster)
	case rec.Namespace != t.Namespace || rec.Name != t.Name || rec.UID != t.UID:
		return t, fmt.Sprintf("%s: its owner record is for %s/%s %s, not the directory's NAME-UID: refusing a directory the operator cannot vouch for", where, rec.Namespace, rec.Name, rec.UID)
	case rec.ReclaimPolicy != shalev1.ReclaimRetain:
		return t, fmt.Sprintf("%s: its owner record says reclaimPolicy %s, not Retain: a directory left with Delete is the garbage collector's to delete, and cannot be adopted", where, rec.ReclaimPolicy)
	}
	if a := rec.AdoptedBy; a != nil && a.UID != db.UID {
		for i := range in.RocksDBs {
			if o := &in.RocksDBs[i]; o.UID == a.UID {
				return t, fmt.Sprintf("%s was adopted by RocksDB %s, which exists: one database has one owner; use RocksDB %s, or delete it (with reclaimPolicy Retain) before adopting the directory here", where, o.Name, o.Name)
			}
		}
	}
	switch {
	case in.Deleting:
		return t, fmt.Sprintf("%s is being deleted (it holds %s: a reclaimPolicy Delete or the garbage collector started, and what is left there, if anything, is only what clones pin): it cannot be adopted", where, layout.DeletingKey)
	case !in.HasCurrent:
		return t, fmt.Sprintf("%s holds no CURRENT: no database was ever opened there, nothing to adopt (leave bootstrap out for a new, empty database)", where)
	case in.Claims == 0:
		return t, fmt.Sprintf("%s holds no epoch claim (%s): no primary ever ran there, nothing to adopt (leave bootstrap out for a new, empty database)", where, layout.EpochPrefix)
	}
	return t, ""
}

// adopt carries out an adoption: reads, decideBootstrap, the claim, then
// status.storagePath (and status.coldStoragePath when the directory has
// cold tables). A refusal writes nothing.
func (r *rocksDBReconciler) adopt(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) error {
	refuse := func(msg string) error {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused, "not starting: "+msg)
		return &refusal{shalev1.ReasonBootstrapRefused, msg}
	}
	t, problem := parseAdoptPath(db.Spec.Bootstrap.FromExistingPath.Path, store.Spec.Hot.Prefix)
	if problem != "" {
		return refuse(problem)
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	in := bootstrapInput{DB: db, Prefix: store.Spec.Hot.Prefix, Store: store.Name, Cluster: r.clusterID}
	var dbs shalev1.RocksDBList
	if err := r.apiReader.List(ctx, &dbs, client.InNamespace(db.Namespace)); err != nil {
		return err
	}
	in.RocksDBs = dbs.Items
	hot, err := r.stores.hot(ctx, store)
	if err != nil {
		return err
	}
	rec, info, err := readOwnerRecord(ctx, hot, t.recordKey())
	switch {
	case err != nil && objstore.IsRetryable(err):
		return fmt.Errorf("reading the owner record of %s: %w", t.StoragePath, err)
	case err != nil:
		in.RecordErr = err
	}
	in.Record = rec
	dir, err := r.stores.database(ctx, store, t.StoragePath)
	if err != nil {
		return err
	}
	switch _, err := dir.Stat(ctx, layout.CurrentKey); {
	case err == nil:
		in.HasCurrent = true
	case !errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("looking for CURRENT in %s: %w", t.StoragePath, err)
	}
	switch _, err := dir.Stat(ctx, layout.DeletingKey); {
	case err == nil:
		in.Deleting = true
	case !errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("looking for %s in %s: %w", layout.DeletingKey, t.StoragePath, err)
	}
	if in.Claims, err = highestEpoch(ctx, dir); err != nil {
		return fmt.Errorf("listing the epoch claims of %s: %w", t.StoragePath, err)
	}
	if _, problem := decideBootstrap(in); problem != "" {
		return refuse(problem)
	}

	if rec.AdoptedBy == nil || rec.AdoptedBy.UID != db.UID {
		if info.ETag == "" {
			return fmt.Errorf("claiming %s: the store returned no ETag for the owner record, so it cannot be rewritten conditionally", t.StoragePath)
		}
		// The claim keeps Retain: until this RocksDB's first primary,
		// the record says what it said (the adopter's own policy is
		// written by ensureOwnerRecord, before that primary starts).
		claimed := *rec
		claimed.AdoptedBy = &recordRef{Name: db.Name, UID: db.UID}
		claimed.Updated = r.now().UTC()
		if err := putOwnerRecordIf(ctx, hot, t.recordKey(), claimed, info.ETag); err != nil {
			if errors.Is(err, objstore.ErrPreconditionFailed) {
				// Someone rewrote it since it was read (another adopter?):
				// decide again from what it says now.
				return fmt.Errorf("claiming %s: its owner record changed while it was being adopted; looking again", t.StoragePath)
			}
			return fmt.Errorf("claiming %s: %w", t.StoragePath, err)
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventBootstrapAdopted, "adopted %s (left by RocksDB %s, UID %s): its owner record now names this RocksDB", store.DatabaseURL(t.StoragePath), t.Name, t.UID)
	}

	coldPath := ""
	if store.Spec.Cold != nil {
		// The deleted database's cold tables, if it had any: its
		// primaries cannot open it without them.
		cold, err := r.stores.cold(ctx, store)
		if err != nil {
			return err
		}
		found := false
		if err := cold.List(ctx, dbDirKey(t.Namespace, t.Dir), func(objstore.ObjectInfo) error {
			found = true
			return errStopListing
		}); err != nil && !errors.Is(err, errStopListing) {
			return fmt.Errorf("looking for the cold tables of %s: %w", t.StoragePath, err)
		}
		if found {
			coldPath = path.Join(store.Spec.Cold.Prefix, t.Namespace, t.Dir)
		}
	}
	return patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.StoragePath == "" {
			cur.Status.StoragePath = t.StoragePath
		}
		if cur.Status.ColdStoragePath == "" && coldPath != "" {
			cur.Status.ColdStoragePath = coldPath
		}
		return nil
	})
}
