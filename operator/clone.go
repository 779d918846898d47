package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Clones in Kubernetes (docs/rfcs/0010-checkpoints-and-clones.md, steps
// 21-22): spec.bootstrap.fromCheckpoint starts a database from a Ready
// Checkpoint of another RocksDB; cloneFrom from a checkpoint the operator
// creates on the parent's primary for it, clone-<clone UID>, with the
// clone's UID as request id (a retry gets the same checkpoint), expiring in
// cloneCheckpointTTL (the bound on what a clone that never starts leaves
// in the parent). The storage layer does the cloning: the clone's first
// primaries run `shale primary --clone-from URL --clone-checkpoint NAME
// --clone-id UID` until the database was ready once (status.created), then
// --existing. The clone's pin in the parent holds the tables from its
// bootstrap on, so the operator deletes clone-<UID> once the clone was
// ready. Nothing is written (no status.storagePath, no Pod, no checkpoint)
// before decideClone passed; the parent is fixed by UID in status.clone.

// cloneCheckpointTTL is the expiry of the checkpoint cloneFrom creates.
const cloneCheckpointTTL = time.Hour

// clones reports whether the RocksDB starts as a clone.
func clones(db *shalev1.RocksDB) bool {
	b := db.Spec.Bootstrap
	return b != nil && (b.FromCheckpoint != nil || b.CloneFrom != nil)
}

// cloneParentName is the RocksDB a clone's bootstrap names ("": none).
func cloneParentName(b *shalev1.BootstrapSpec) string {
	switch {
	case b == nil:
	case b.FromCheckpoint != nil:
		return b.FromCheckpoint.Database
	case b.CloneFrom != nil:
		return b.CloneFrom.Database
	}
	return ""
}

// clonesFromNew reports whether the operator makes the clone's checkpoint
// (cloneFrom).
func clonesFromNew(db *shalev1.RocksDB) bool {
	return db.Spec.Bootstrap != nil && db.Spec.Bootstrap.CloneFrom != nil
}

// cloneCheckpointName is the checkpoint cloneFrom creates in the parent.
func cloneCheckpointName(uid types.UID) string { return "clone-" + string(uid) }

// cloneSource is the parent a clone may start from.
type cloneSource struct {
	// Parent is the parent RocksDB's name, ParentUID its UID, ParentPath
	// its status.storagePath.
	Parent     string
	ParentUID  types.UID
	ParentPath string
	// Checkpoint is the checkpoint's name in the parent; Request: the
	// operator creates it (cloneFrom).
	Checkpoint string
	Request    bool
	// ObjectStore (set: the parent is in another ObjectStore, whose
	// objects the clone copies: RFC 0010 step 20) is reached at Endpoint
	// with CredentialsSecret's keys ("": the Pod's own identity).
	ObjectStore, Endpoint, CredentialsSecret string
}

// decideClone decides whether a RocksDB may start as a clone of what its
// spec.bootstrap.fromCheckpoint or cloneFrom names. It may only if:
//   - the parent is another RocksDB of its namespace, not being deleted,
//     and the same one (UID) the clone checked before, if it did;
//   - a parent in another ObjectStore (copied: RFC 0010 step 20): that
//     ObjectStore exists, its cold tier (if any) is on its own endpoint,
//     and the clone's Pod can hold its credentials (decideCloneCopy);
//   - the parent's status.storagePath ends in its own NAME-UID (not an
//     adopted directory: the pins and the checks name the parent by UID);
//   - cloneFrom: the parent is Ready (its primary makes the checkpoint);
//   - fromCheckpoint: the Checkpoint exists, is of that RocksDB (and not
//     of an earlier one of the same name), is not being deleted, and is
//     Ready (the primary reported it created).
func decideClone(in bootstrapInput) (src cloneSource, problem string) {
	db := in.DB
	b := db.Spec.Bootstrap
	field := "spec.bootstrap.cloneFrom"
	if b.FromCheckpoint != nil {
		field = "spec.bootstrap.fromCheckpoint"
		src.Parent, src.Checkpoint = b.FromCheckpoint.Database, b.FromCheckpoint.Name
	} else {
		src.Parent, src.Checkpoint, src.Request = b.CloneFrom.Database, cloneCheckpointName(db.UID), true
	}
	fix := "(bootstrap is immutable: delete this RocksDB and create it again with another source)"
	if src.Parent == db.Name {
		return src, fmt.Sprintf("%s.database names this RocksDB itself: a database is cloned from another one %s", field, fix)
	}
	var parent *shalev1.RocksDB
	for i := range in.RocksDBs {
		if o := &in.RocksDBs[i]; o.Name == src.Parent && o.Namespace == db.Namespace {
			parent = o
		}
	}
	if parent == nil {
		return src, fmt.Sprintf("RocksDB %s (%s.database) does not exist in namespace %s: create it, or fix the name %s", src.Parent, field, db.Namespace, fix)
	}
	src.ParentUID, src.ParentPath = parent.UID, parent.Status.StoragePath
	if c := db.Status.Clone; c != nil && c.UID != "" && c.UID != parent.UID {
		return src, fmt.Sprintf("RocksDB %s is not the one this clone was started from (UID %s, now %s): it was deleted and created again %s", src.Parent, c.UID, parent.UID, fix)
	}
	if parent.DeletionTimestamp != nil {
		return src, fmt.Sprintf("RocksDB %s is being deleted: a clone starts only from a database that stays %s", src.Parent, fix)
	}
	if got, want := parent.Spec.ObjectStoreRef.Name, db.Spec.ObjectStoreRef.Name; got != want {
		if problem := decideCloneCopy(in, &src, got, want); problem != "" {
			return src, problem
		}
	}
	switch {
	case parent.Status.StoragePath == "":
		return src, fmt.Sprintf("RocksDB %s has no storage directory yet (status.storagePath): waiting until its first primary starts", src.Parent)
	case path.Base(parent.Status.StoragePath) != parent.DirName():
		return src, fmt.Sprintf("RocksDB %s serves the directory %s, not its own %s (it adopted a retained directory): cloning an adopted database is not built yet %s", src.Parent, parent.Status.StoragePath, parent.DirName(), fix)
	}
	if src.Request {
		if !condIsTrue(parent, shalev1.ConditionReady) {
			why := "no Ready condition yet"
			if c := parent.Condition(shalev1.ConditionReady); c != nil {
				why = c.Message
			}
			return src, fmt.Sprintf("RocksDB %s is not Ready (%s): cloneFrom needs its primary to create the checkpoint %s; waiting until it is Ready", src.Parent, why, src.Checkpoint)
		}
		return src, ""
	}
	ck := in.Checkpoint
	switch {
	case ck == nil:
		return src, fmt.Sprintf("Checkpoint %s does not exist in namespace %s: create it (spec.database: %s) and the clone starts once it is Ready", src.Checkpoint, db.Namespace, src.Parent)
	case ck.Spec.Database != src.Parent:
		return src, fmt.Sprintf("Checkpoint %s is of RocksDB %s, not %s: fix spec.bootstrap.fromCheckpoint %s", src.Checkpoint, ck.Spec.Database, src.Parent, fix)
	case ck.CreationTimestamp.Before(&parent.CreationTimestamp):
		return src, fmt.Sprintf("Checkpoint %s is older than RocksDB %s: it was taken of an earlier database of that name, whose directory this one is not %s", src.Checkpoint, src.Parent, fix)
	case ck.DeletionTimestamp != nil:
		return src, fmt.Sprintf("Checkpoint %s is being deleted: a clone starts only from a checkpoint that stays until its first primary started %s", src.Checkpoint, fix)
	case ck.Status.Phase != shalev1.CheckpointReady:
		phase := ck.Status.Phase
		if phase == "" {
			phase = shalev1.CheckpointPending
		}
		return src, fmt.Sprintf("Checkpoint %s is %s, not Ready (%s): a clone starts only from a checkpoint its primary reported created; waiting", src.Checkpoint, phase, ck.Status.Message)
	}
	return src, ""
}

// decideCloneCopy checks a parent in ObjectStore got for a clone in
// want: the clone's primary copies its objects (RFC 0010 step 20), so its
// Pod must reach that store. A Secret is mounted beside the clone's own;
// a ServiceAccount or the instance role is the Pod's identity, so the
// clone's ObjectStore must use the same one.
func decideCloneCopy(in bootstrapInput, src *cloneSource, got, want string) string {
	ps, cs := in.ParentStore, in.StoreSpec
	if ps == nil || ps.Name != got {
		return fmt.Sprintf("ObjectStore %s (RocksDB %s's) does not exist: waiting for it, to copy the parent from it", got, src.Parent)
	}
	if cs == nil {
		return fmt.Sprintf("ObjectStore %s (this RocksDB's) is not known yet: waiting", want)
	}
	if ps.Spec.Cold != nil && ps.ColdEndpoint() != ps.Spec.Endpoint {
		return fmt.Sprintf("ObjectStore %s keeps its cold tier on another endpoint (%s): copying a clone's parent from a store with a separate cold endpoint is not built; clone from a RocksDB of ObjectStore %s (delete this RocksDB and create it again with another source)", got, ps.ColdEndpoint(), want)
	}
	switch {
	case ps.Spec.Credentials != nil:
		src.CredentialsSecret = ps.Spec.Credentials.Name
	case ps.Spec.ServiceAccountName != "":
		if storeAccessOf(cs).serviceAccount != ps.Spec.ServiceAccountName {
			return fmt.Sprintf("ObjectStore %s (the parent's) takes its credentials from ServiceAccount %s, and this RocksDB's ObjectStore %s from %s: a Pod runs as one ServiceAccount; give both ObjectStores the same one, or the parent's a Secret (delete this RocksDB and create it again once they agree)", got, ps.Spec.ServiceAccountName, want, credentialsOrigin(cs))
		}
	case ps.Spec.InstanceRole:
		if !cs.Spec.InstanceRole || cs.Spec.Credentials != nil || cs.Spec.ServiceAccountName != "" {
			return fmt.Sprintf("ObjectStore %s (the parent's) takes its credentials from the instance role, and this RocksDB's ObjectStore %s from %s: the clone's Pod has only its own; give the parent's ObjectStore a Secret (delete this RocksDB and create it again once they agree)", got, want, credentialsOrigin(cs))
		}
	}
	src.ObjectStore, src.Endpoint = got, ps.Spec.Endpoint
	return ""
}

// decideParentRecord is RFC 0010 step 22's last check of a clone's
// parent, once decideClone passed: the owner record of the parent's
// directory, read from the store, names this cluster and the parent
// (namespace, name, UID), and no adopter. The API server says which
// RocksDB a clone names; only the record says the directory its
// status.storagePath points to is that RocksDB's, written by this
// cluster's operator, and not one another cluster (sharing the prefix)
// or an adoption has a claim on. problem, when set, names what is wrong
// and what to do.
func decideParentRecord(in bootstrapInput, src cloneSource) (problem string) {
	db := in.DB
	key := ownerRecordKey(db.Namespace, path.Base(src.ParentPath))
	where := fmt.Sprintf("the directory %s of RocksDB %s", src.ParentPath, src.Parent)
	fix := "(bootstrap is immutable: delete this RocksDB and create it again with another source)"
	rec := in.ParentRecord
	switch {
	case in.ParentRecordErr != nil:
		return fmt.Sprintf("%s: its owner record %s cannot be read (%v): a clone starts only from a directory whose record says it is that RocksDB's; the operator rewrites a record it can parse at the parent's next reconcile (or delete the damaged record so it writes a new one)", where, key, in.ParentRecordErr)
	case rec == nil:
		return fmt.Sprintf("%s has no owner record (%s): the operator writes one before a database's first primary, so this directory may not be RocksDB %s's; waiting until the parent's reconcile writes it (an operator of another cluster sharing the prefix does not count)", where, key, src.Parent)
	case rec.Cluster != in.Cluster:
		return fmt.Sprintf("%s: its owner record %s says another cluster (%s; this one is %s) created it: a clone starts only from a directory this cluster's operator owns; clone it from that cluster %s", where, key, rec.Cluster, in.Cluster, fix)
	case rec.Namespace != db.Namespace || rec.Name != src.Parent || rec.UID != src.ParentUID:
		return fmt.Sprintf("%s: its owner record %s is for %s/%s (UID %s), not RocksDB %s (UID %s): refusing a directory the operator cannot vouch for %s", where, key, rec.Namespace, rec.Name, rec.UID, src.Parent, src.ParentUID, fix)
	case rec.AdoptedBy != nil:
		return fmt.Sprintf("%s: its owner record %s says RocksDB %s (UID %s) adopted it: the directory has another owner, and a clone starts only from its own database's %s", where, key, rec.AdoptedBy.Name, rec.AdoptedBy.UID, fix)
	}
	return ""
}

// readParentRecord reads the owner record of the directory of the parent
// a clone names (in.ParentRecord, in.ParentRecordErr), from the hot tier
// of the parent's ObjectStore. Nothing is read while the parent is
// missing or has no directory: decideClone refuses those first.
func (r *rocksDBReconciler) readParentRecord(ctx context.Context, in *bootstrapInput, store *shalev1.ObjectStore) error {
	b := in.DB.Spec.Bootstrap
	name := ""
	switch {
	case b.FromCheckpoint != nil:
		name = b.FromCheckpoint.Database
	case b.CloneFrom != nil:
		name = b.CloneFrom.Database
	}
	var parent *shalev1.RocksDB
	for i := range in.RocksDBs {
		if o := &in.RocksDBs[i]; o.Name == name && o.Namespace == in.DB.Namespace && o.Name != in.DB.Name {
			parent = o
		}
	}
	if parent == nil || parent.Status.StoragePath == "" {
		return nil
	}
	pstore := store
	if ref := parent.Spec.ObjectStoreRef.Name; ref != store.Name {
		pstore = &shalev1.ObjectStore{}
		switch err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: parent.Namespace, Name: ref}, pstore); {
		case apierrors.IsNotFound(err):
			return nil // decideClone names the store mismatch
		case err != nil:
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	hot, err := r.stores.hot(ctx, pstore)
	if err != nil {
		return fmt.Errorf("opening ObjectStore %s to read the owner record of RocksDB %s: %w", pstore.Name, parent.Name, err)
	}
	key := ownerRecordKey(parent.Namespace, path.Base(parent.Status.StoragePath))
	rec, _, err := readOwnerRecord(ctx, hot, key)
	switch {
	case err != nil && objstore.IsRetryable(err):
		return fmt.Errorf("reading the owner record %s of RocksDB %s: %w", key, parent.Name, err)
	case err != nil:
		in.ParentRecordErr = err
	}
	in.ParentRecord = rec
	return nil
}

// condIsTrue reports whether the RocksDB's condition of type t is True.
func condIsTrue(db *shalev1.RocksDB, t string) bool {
	c := db.Condition(t)
	return c != nil && c.Status == metav1.ConditionTrue
}

// clone carries out the checks and, for cloneFrom, the checkpoint in the
// parent, then sets status.clone and status.storagePath (the clone's own
// NAME-UID directory): from then on startFirstPrimary starts its primary
// with the clone flags. A refusal writes nothing.
func (r *rocksDBReconciler) clone(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) (ctrl.Result, error) {
	refuse := func(msg string) error {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused, "not starting: "+msg)
		return &refusal{shalev1.ReasonBootstrapRefused, msg}
	}
	in := bootstrapInput{DB: db, Prefix: store.Spec.Hot.Prefix, Store: store.Name, Cluster: r.clusterID}
	var dbs shalev1.RocksDBList
	if err := r.apiReader.List(ctx, &dbs, client.InNamespace(db.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	in.RocksDBs = dbs.Items
	in.StoreSpec = store
	for _, o := range dbs.Items {
		// The parent's ObjectStore when it is another (step 20: copied).
		if b := db.Spec.Bootstrap; o.Name == cloneParentName(b) && o.Spec.ObjectStoreRef.Name != store.Name {
			ps := &shalev1.ObjectStore{}
			switch err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: o.Spec.ObjectStoreRef.Name}, ps); {
			case err == nil:
				in.ParentStore = ps
			case !apierrors.IsNotFound(err):
				return ctrl.Result{}, err
			}
		}
	}
	if fc := db.Spec.Bootstrap.FromCheckpoint; fc != nil {
		ck := &shalev1.Checkpoint{}
		switch err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: fc.Name}, ck); {
		case err == nil:
			in.Checkpoint = ck
		case !apierrors.IsNotFound(err):
			return ctrl.Result{}, err
		}
	}
	if err := r.readParentRecord(ctx, &in, store); err != nil {
		return ctrl.Result{}, err
	}
	plan, problem := decideBootstrap(in)
	if problem != "" {
		return ctrl.Result{RequeueAfter: bootstrapRecheck}, refuse(problem)
	}
	src := plan.Clone
	want := shalev1.CloneStatus{Database: src.Parent, UID: src.ParentUID, URL: store.DatabaseURL(src.ParentPath), Checkpoint: src.Checkpoint}
	if src.ObjectStore != "" {
		want.URL = in.ParentStore.DatabaseURL(src.ParentPath)
		want.ObjectStore, want.Endpoint, want.CredentialsSecret = src.ObjectStore, src.Endpoint, src.CredentialsSecret
	}
	detail := ""
	if src.Request {
		now := r.now()
		// The expiry is fixed before the request, so a retry sends the
		// same one; renewed only if it passed before any answer.
		// Whole seconds: what status keeps, so a retry after a re-read
		// sends exactly the same.
		expires := now.Add(cloneCheckpointTTL).Truncate(time.Second)
		if c := db.Status.Clone; c != nil && c.CheckpointExpiresAt != nil && c.CheckpointExpiresAt.Time.After(now.Add(time.Minute)) {
			expires = c.CheckpointExpiresAt.Time
		}
		want.CheckpointExpiresAt = &metav1.Time{Time: expires}
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			c := want
			cur.Status.Clone = &c
			return nil
		}); err != nil {
			return ctrl.Result{}, err
		}
		var parent *shalev1.RocksDB
		for i := range in.RocksDBs {
			if in.RocksDBs[i].UID == src.ParentUID {
				parent = &in.RocksDBs[i]
			}
		}
		wait := func(msg string) (ctrl.Result, error) {
			rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, eventBootstrapWaiting, "not starting yet: "+msg)
			r.recorder.Event(db, corev1.EventTypeWarning, eventBootstrapWaiting, msg)
			return ctrl.Result{RequeueAfter: checkpointRetry}, nil
		}
		addr, dial, err := r.primaryKVAddr(ctx, parent)
		if err != nil {
			return wait(fmt.Sprintf("cannot reach RocksDB %s's primary for the checkpoint %s: %v; trying again", src.Parent, src.Checkpoint, err))
		}
		c, cancel := context.WithTimeout(ctx, checkpointRPCTimeout)
		info, err := r.kv.Checkpoint(c, addr, dial, &kvv1.CheckpointRequest{Name: src.Checkpoint, RequestId: string(db.UID), Expires: timestamppb.New(expires)})
		cancel()
		switch s := status.Convert(err); s.Code() {
		case codes.OK:
			detail = fmt.Sprintf(", made for it at sequence %d, expiring at %s", info.GetSequence(), expires.UTC().Format(time.RFC3339))
		case codes.AlreadyExists, codes.InvalidArgument:
			return ctrl.Result{RequeueAfter: bootstrapRecheck}, refuse(fmt.Sprintf("RocksDB %s's primary refused the checkpoint %s: %s (%s)", src.Parent, src.Checkpoint, s.Message(), s.Code()))
		default:
			// FAILED_PRECONDITION: not created, the next primary is asked;
			// UNAVAILABLE and the rest: maybe created, and the same request
			// id finds out.
			return wait(fmt.Sprintf("RocksDB %s's primary did not create the checkpoint %s: %s (%s); asking again with the same request id", src.Parent, src.Checkpoint, s.Message(), s.Code()))
		}
	}
	own := db.StoragePathUnder(store.Spec.Hot.Prefix)
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		c := want
		if cur.Status.Clone != nil {
			c.CheckpointReleased = cur.Status.Clone.CheckpointReleased
		}
		cur.Status.Clone = &c
		if cur.Status.StoragePath == "" {
			cur.Status.StoragePath = own
		}
		return nil
	}); err != nil {
		return ctrl.Result{}, err
	}
	if src.ObjectStore != "" {
		detail += fmt.Sprintf("; the parent is in ObjectStore %s, so its objects are copied (--clone-copy)", src.ObjectStore)
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventBootstrapCloning, "cloning RocksDB %s (%s) at its checkpoint %s%s: the first primary starts with --clone-from into %s", src.Parent, want.URL, src.Checkpoint, detail, store.DatabaseURL(own))
	return ctrl.Result{}, nil
}

// releaseCloneCheckpoint deletes, once the clone was ready, the checkpoint
// cloneFrom made in the parent (its pin holds the tables now), and only
// the one this clone's request id made. A parent gone or being deleted
// has nothing to delete it with: the checkpoint expires (or went with its
// directory).
func (r *rocksDBReconciler) releaseCloneCheckpoint(ctx context.Context, db *shalev1.RocksDB) (ctrl.Result, error) {
	c := db.Status.Clone
	release := func(msg string) (ctrl.Result, error) {
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.Clone == nil || cur.Status.Clone.CheckpointReleased {
				return errNoChange
			}
			cur.Status.Clone.CheckpointReleased = true
			return nil
		}); err != nil && !errors.Is(err, errNoChange) {
			return ctrl.Result{}, err
		}
		r.recorder.Event(db, corev1.EventTypeNormal, eventBootstrapCheckpointDeleted, msg)
		return ctrl.Result{}, nil
	}
	expiry := "when it expires" + expiresAt(c)
	parent, gone, err := r.cloneCheckpointParent(ctx, db)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case parent == nil:
		return release(gone)
	case !condIsTrue(parent, shalev1.ConditionPrimaryAvailable):
		// Looked at again when the parent changes; it expires anyway.
		log.FromContext(ctx).Info("waiting for the parent's primary to delete the clone's checkpoint", "parent", c.Database, "checkpoint", c.Checkpoint)
		return ctrl.Result{RequeueAfter: checkpointWait}, nil
	}
	if err := r.deleteCloneCheckpoint(ctx, db, parent, checkpointRPCTimeout); err != nil {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventBootstrapWaiting, "deleting the checkpoint %s in RocksDB %s (the clone's pin holds its tables now): %v; trying again (it goes anyway %s)", c.Checkpoint, c.Database, err, expiry)
		return ctrl.Result{RequeueAfter: checkpointRetry}, nil
	}
	return release(fmt.Sprintf("deleted the checkpoint %s in RocksDB %s: the clone was ready, and its pin in %s holds the tables it reads", c.Checkpoint, c.Database, c.URL))
}

// cloneCheckpointParent reads the parent a cloneFrom clone's checkpoint
// lives in: nil, and why, when it is gone (or is another RocksDB of that
// name) or being deleted: then there is no primary to ask, and the
// checkpoint goes with its directory or when it expires.
func (r *rocksDBReconciler) cloneCheckpointParent(ctx context.Context, db *shalev1.RocksDB) (*shalev1.RocksDB, string, error) {
	c := db.Status.Clone
	parent := &shalev1.RocksDB{}
	err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: c.Database}, parent)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && parent.UID != c.UID):
		return nil, fmt.Sprintf("RocksDB %s is gone: the checkpoint %s went with its directory (reclaimPolicy Delete) or stays in it until it expires", c.Database, c.Checkpoint), nil
	case err != nil:
		return nil, "", err
	case parent.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("RocksDB %s is being deleted: the checkpoint %s goes with its directory (reclaimPolicy Delete) or stays in it until it expires", c.Database, c.Checkpoint), nil
	}
	return parent, "", nil
}

// expiresAt is " at TIME" for a clone's checkpoint whose expiry status
// knows, else "".
func expiresAt(c *shalev1.CloneStatus) string {
	if c.CheckpointExpiresAt == nil {
		return ""
	}
	return " at " + c.CheckpointExpiresAt.UTC().Format(time.RFC3339)
}

// deleteCloneCheckpoint deletes, through the parent's primary, the
// checkpoint cloneFrom made for db, if it is there and this clone's
// request id made it (a user's checkpoint of that name is left).
func (r *rocksDBReconciler) deleteCloneCheckpoint(ctx context.Context, db, parent *shalev1.RocksDB, timeout time.Duration) error {
	c := db.Status.Clone
	addr, dial, err := r.primaryKVAddr(ctx, parent)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := r.kv.ListCheckpoints(ctx, addr, dial)
	if err != nil {
		return err
	}
	for _, ck := range list {
		if ck.GetName() == c.Checkpoint && ck.GetRequestId() == string(db.UID) {
			if err := r.kv.DeleteCheckpoint(ctx, addr, dial, c.Checkpoint); status.Code(err) != codes.NotFound {
				return err
			}
		}
	}
	return nil
}

// cloneCheckpointDropTimeout bounds the finalizer's attempt to delete a
// clone's checkpoint: the deletion does not wait for the parent.
const cloneCheckpointDropTimeout = 10 * time.Second

// dropCloneCheckpoint runs in the finalizer of a cloneFrom clone whose
// checkpoint in the parent was not released (deleted before it was
// ready, or before the release after it): clone-<UID> is deleted now
// rather than left until it expires, holding in the parent's trash what
// it names. Best-effort and once per attempt at the deletion: a parent
// gone or being deleted has nothing to ask (the checkpoint goes with its
// directory, or stays until it expires), and an unreachable primary is
// said in a Warning; the expiry (cloneCheckpointTTL) still bounds it. The
// clone's own pins, if its bootstrap got that far, hold what it read, and
// its reclaim releases them.
func (r *rocksDBReconciler) dropCloneCheckpoint(ctx context.Context, db *shalev1.RocksDB) {
	c := db.Status.Clone
	expiry := "until it expires" + expiresAt(c)
	parent, gone, err := r.cloneCheckpointParent(ctx, db)
	switch {
	case err == nil && parent == nil:
		log.FromContext(ctx).Info(gone, "parent", c.Database, "checkpoint", c.Checkpoint)
		return
	case err == nil:
		err = r.deleteCloneCheckpoint(ctx, db, parent, cloneCheckpointDropTimeout)
	}
	if err != nil {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventCloneCheckpointLeft,
			"the clone is deleted before its checkpoint %s in RocksDB %s was released, and it could not be deleted (%v): it stays there %s, keeping what it names in the parent's storage; delete it sooner through the parent's primary (shale admin checkpoint delete %s)",
			c.Checkpoint, c.Database, err, expiry, c.Checkpoint)
		return
	}
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Clone == nil || cur.Status.Clone.CheckpointReleased {
			return errNoChange
		}
		cur.Status.Clone.CheckpointReleased = true
		return nil
	}); err != nil && !errors.Is(err, errNoChange) {
		log.FromContext(ctx).Info("recording the clone's checkpoint as released", "err", err)
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventBootstrapCheckpointDeleted, "deleted the checkpoint %s in RocksDB %s: the clone is deleted before it was released", c.Checkpoint, c.Database)
}

// dropCopyPin deletes the pin a copied clone's bootstrap writes in its
// parent's directory, in the parent's ObjectStore (RFC 0010 step 20), for
// a clone deleted after its primaries stopped: a copy that finished
// deleted it itself, one interrupted by the deletion did not, and nothing
// else would (the reclaim releases the pins an origin record names; a copy
// has none once it finished). Best-effort: a pin left keeps the parent's
// tables, never loses data; the warning says how to remove it.
func (r *rocksDBReconciler) dropCopyPin(ctx context.Context, db *shalev1.RocksDB) {
	c := db.Status.Clone
	pin := layout.PinKey(string(db.UID))
	ctx, cancel := context.WithTimeout(ctx, cloneCheckpointDropTimeout)
	defer cancel()
	var ps shalev1.ObjectStore
	err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: c.ObjectStore}, &ps)
	if err == nil {
		var st objstore.Store
		if st, err = r.stores.open(ctx, &ps, ps.Spec.Endpoint, c.URL); err == nil {
			err = st.Delete(ctx, pin)
		}
	}
	if err != nil && !isNotFound(err) {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventCloneCheckpointLeft,
			"the clone is deleted and its copy's pin %s in %s (ObjectStore %s) could not be deleted (%v): it keeps the tables it names in the parent's storage; delete that key by hand",
			pin, c.URL, c.ObjectStore, err)
	}
}

// forBootstrapSource maps a RocksDB or a Checkpoint to the RocksDBs of its
// namespace whose spec.bootstrap names it (a parent becoming Ready, a
// Checkpoint becoming Ready wake the clones waiting for them).
func (r *rocksDBReconciler) forBootstrapSource(ctx context.Context, o client.Object) []reconcile.Request {
	var dbs shalev1.RocksDBList
	if err := r.List(ctx, &dbs, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing the RocksDBs that clone", "source", o.GetName())
		return nil
	}
	_, isCheckpoint := o.(*shalev1.Checkpoint)
	var reqs []reconcile.Request
	for _, db := range dbs.Items {
		b := db.Spec.Bootstrap
		if b == nil || (db.Status.StoragePath != "" && (b.CloneFrom == nil || db.Status.Clone == nil || db.Status.Clone.CheckpointReleased)) {
			continue
		}
		match := false
		switch {
		case isCheckpoint:
			match = b.FromCheckpoint != nil && b.FromCheckpoint.Name == o.GetName()
		case b.CloneFrom != nil:
			match = b.CloneFrom.Database == o.GetName()
		case b.FromCheckpoint != nil:
			match = b.FromCheckpoint.Database == o.GetName()
		}
		if match {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
		}
	}
	return reqs
}

// reportCloneCopied reads, once a clone copied from another ObjectStore
// was ready, its _shale/copy record (what the bootstrap copied: the
// checkpoint's frozen MANIFEST and every table) and says so in
// status.clone and a CloneCopied Event.
func (r *rocksDBReconciler) reportCloneCopied(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	dir, err := r.stores.database(ctx, store, db.Status.StoragePath)
	if err != nil {
		return err
	}
	b, err := readAll(ctx, dir, layout.CopyKey)
	if err != nil {
		if isNotFound(err) {
			// Copied by a primary before step 20 recorded it: nothing to say.
			log.FromContext(ctx).Info("a copied clone without a copy record", "key", layout.CopyKey)
			err = nil
		}
		return err
	}
	rec, err := layout.ParseCopyRecord(b)
	if err != nil {
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventCloneCopied, "the clone's %s is unreadable: %v", layout.CopyKey, err)
		return nil
	}
	objects, bytes := rec.Totals()
	c := db.Status.Clone
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Clone == nil || cur.Status.Clone.CopiedObjects != 0 {
			return errNoChange
		}
		cur.Status.Clone.CopiedObjects, cur.Status.Clone.CopiedBytes = int64(objects), bytes
		return nil
	}); err != nil {
		if errors.Is(err, errNoChange) {
			return nil
		}
		return err
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventCloneCopied, "copied %d objects (%d bytes: the checkpoint %s's frozen MANIFEST and %d tables) from RocksDB %s in ObjectStore %s (%s); the clone owns them and reads nothing of its parent",
		objects, bytes, c.Checkpoint, objects-1, c.Database, c.ObjectStore, c.URL)
	return nil
}

// readAll reads a whole object.
func readAll(ctx context.Context, st objstore.Store, key string) ([]byte, error) {
	r, _, err := st.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
