package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// spec.bootstrap.recovery (docs/rfcs/0011-backups-and-point-in-time-
// restore.md, step 28): before the first primary, the operator reads the
// backup store (pure Go: the manifests are JSON), checks the backup is
// published there (latest: resolves the newest, once), and fixes it in
// status.recovery together with the database's own directory. Its
// primaries, until it was ready once, run an init container `shale backup
// restore ID --into <directory> --resume`; the primary then opens the
// restored directory as a new database's first owner.

// Where `shale backup` keeps published manifests in a backup location
// (internal/backup: BackupsPrefix, recordExtension; not imported: it
// links RocksDB).
const (
	backupManifestPrefix = "backups/"
	backupManifestExt    = ".json"
)

// recovers reports whether the RocksDB starts from a backup.
func recovers(db *shalev1.RocksDB) bool {
	return db.Spec.Bootstrap != nil && db.Spec.Bootstrap.Recovery != nil
}

// publishedBackup is what the operator reads of a backup's manifest.
type publishedBackup struct {
	ID          string    `json:"id"`
	Database    string    `json:"database"`
	CompletedAt time.Time `json:"completedAt"`
	Checkpoint  struct {
		Sequence  uint64    `json:"sequence"`
		CreatedAt time.Time `json:"createdAt"`
	} `json:"checkpoint"`
}

// recoveryInput is what decideRecovery decides from.
type recoveryInput struct {
	DB *shalev1.RocksDB
	// Store is the backup ObjectStore (nil: missing); Access its problem
	// with the database's ObjectStore, if any.
	Store  *shalev1.ObjectStore
	Access string
	// Location is --to; ReadErr: the store did not answer.
	Location string
	ReadErr  error
	// Backups are the published backups found (for an id: that one, if
	// it is there).
	Backups []publishedBackup
	// Archive is the location's archive, read for a point-in-time target
	// (its Backups are the same as Backups).
	Archive archiveWindow
}

// recoveryTarget is a point-in-time target as `shale backup restore`
// takes it ("" and no flags: none).
func recoveryTarget(rec *shalev1.RecoverySource) (string, []string) {
	switch {
	case rec.TargetTime != nil:
		t := rec.TargetTime.UTC().Format(time.RFC3339)
		return "time " + t, []string{"--target-time", t}
	case rec.TargetSequence != nil:
		n := strconv.FormatInt(*rec.TargetSequence, 10)
		return "sequence " + n, []string{"--target-sequence", n}
	}
	return "", nil
}

// decideRecovery decides whether a RocksDB may start from the backup its
// spec.bootstrap.recovery names, and which (pure, table-tested). problem,
// when set, names what is wrong and the fix.
func decideRecovery(in recoveryInput) (shalev1.RecoveryStatus, string) {
	rec := in.DB.Spec.Bootstrap.Recovery
	out := shalev1.RecoveryStatus{Location: in.Location, Database: rec.Database}
	fix := "(bootstrap is immutable: delete this RocksDB and create it again with another source)"
	target, _ := recoveryTarget(rec)
	switch {
	case target != "" && rec.Backup != "latest":
		return out, fmt.Sprintf("spec.bootstrap.recovery: a point-in-time restore (%s) picks its base backup itself: set backup: latest, not %s %s", target, rec.Backup, fix)
	case in.Store == nil:
		return out, fmt.Sprintf("ObjectStore %s (spec.bootstrap.recovery.backupStore) does not exist in namespace %s: create it; the restore starts then", rec.BackupStore, in.DB.Namespace)
	case in.Access != "":
		return out, in.Access + " " + fix
	case strings.Contains(rec.Database, "/"):
		return out, fmt.Sprintf("spec.bootstrap.recovery.database %q is not a database id (NAME-UID, the Backup's status.databaseID) %s", rec.Database, fix)
	case in.ReadErr != nil:
		return out, fmt.Sprintf("cannot read the backups in %s/%s (ObjectStore %s): %v; check its endpoint, bucket and credentials; trying again", in.Location, rec.Database, in.Store.Name, in.ReadErr)
	}
	list := fmt.Sprintf("shale backup list --to %s --database %s", in.Location, rec.Database)
	if target != "" {
		return decidePointInTime(in, out, target, list)
	}
	var pick *publishedBackup
	for i := range in.Backups {
		b := &in.Backups[i]
		switch {
		case rec.Backup == "latest" && (pick == nil || b.CompletedAt.After(pick.CompletedAt)):
			pick = b
		case b.ID == rec.Backup:
			pick = b
		}
	}
	if pick == nil {
		if rec.Backup == "latest" {
			return out, fmt.Sprintf("no published backup in %s for database %s: take one (a Backup of the source), or fix spec.bootstrap.recovery.database (the Backup's status.databaseID, NAME-UID of the source); list them with %s", in.Location, rec.Database, list)
		}
		return out, fmt.Sprintf("no published backup %s in %s for database %s (an interrupted one cannot be restored): list them with %s %s", rec.Backup, in.Location, rec.Database, list, fix)
	}
	out.Backup = pick.ID
	out.Sequence = int64(min(pick.Checkpoint.Sequence, 1<<62))
	if !pick.Checkpoint.CreatedAt.IsZero() {
		out.Time = &metav1.Time{Time: pick.Checkpoint.CreatedAt}
	}
	return out, ""
}

// decidePointInTime is decideRecovery's check of a point-in-time target
// (RFC 0011 step 31 (a)): the location holds an archive, the window has a
// start (a base backup after the archive started and after its last gap),
// and the target is in the window as far as the operator can tell without
// reading the WALs (a time from the window's start to caughtUpAt, a
// sequence from the start's on; the restore itself checks the rest).
// out.Backup is the base the restore is expected to choose.
func decidePointInTime(in recoveryInput, out shalev1.RecoveryStatus, target, list string) (shalev1.RecoveryStatus, string) {
	rec := in.DB.Spec.Bootstrap.Recovery
	out.Target = target
	w := in.Archive
	w.Backups = in.Backups
	where := in.Location + "/" + rec.Database
	if !w.Started {
		return out, fmt.Sprintf("no archive in %s (archive/started.json): a point-in-time restore needs the source's logs archived there; turn the archive on with spec.backup.archive.backupStore: %s on the source RocksDB (its Backups must go to the same ObjectStore), or leave targetTime and targetSequence out to restore a backup (%s)", where, rec.BackupStore, list)
	}
	start, ok := archiveWindowStart(w)
	if !ok {
		why := "the archive started at " + w.StartedAt.UTC().Format(time.RFC3339)
		if n := len(w.Gaps); n > 0 {
			why += " and has a gap detected at " + slices.MaxFunc(w.Gaps, time.Time.Compare).UTC().Format(time.RFC3339)
		}
		return out, fmt.Sprintf("%s is outside the recoverable window of %s: %s, and no base backup was taken after that; take a Backup of the source and restore to a point after it (%s)", target, where, why, list)
	}
	window := fmt.Sprintf("from %s (sequence %d, backup %s) to %s", start.Checkpoint.CreatedAt.UTC().Format(time.RFC3339), start.Checkpoint.Sequence, start.ID, w.CaughtUpAt.UTC().Format(time.RFC3339))
	tt, ts := rec.TargetTime, rec.TargetSequence
	switch {
	case tt != nil && tt.Time.Before(start.Checkpoint.CreatedAt):
		return out, fmt.Sprintf("%s is outside the recoverable window of %s, %s: it is before the oldest base backup taken since the archive started (older states are restorable as backups only: leave targetTime out and name one)", target, where, window)
	case tt != nil && tt.Time.After(w.CaughtUpAt):
		return out, fmt.Sprintf("%s is outside the recoverable window of %s, %s: the archive has not reached it (yet: looking again in a minute)", target, where, window)
	case ts != nil && uint64(*ts) < start.Checkpoint.Sequence:
		return out, fmt.Sprintf("%s is outside the recoverable window of %s, %s: it is before the oldest base backup taken since the archive started", target, where, window)
	}
	// The base the restore will choose (backup.ChooseBase): the newest
	// from the window's start on at or before the target.
	var base *publishedBackup
	for i := range w.Backups {
		b := &w.Backups[i]
		if b.Checkpoint.Sequence < start.Checkpoint.Sequence ||
			tt != nil && b.Checkpoint.CreatedAt.After(tt.Time) || ts != nil && b.Checkpoint.Sequence > uint64(*ts) {
			continue
		}
		if base == nil || b.Checkpoint.Sequence > base.Checkpoint.Sequence {
			base = b
		}
	}
	if base == nil {
		base = &start
	}
	out.Backup = base.ID
	out.Sequence = int64(min(base.Checkpoint.Sequence, 1<<62))
	if !base.Checkpoint.CreatedAt.IsZero() {
		out.Time = &metav1.Time{Time: base.Checkpoint.CreatedAt}
	}
	return out, ""
}

// readBackups reads the published manifests in a backup location (only
// id's, if id is not "latest").
func readBackups(ctx context.Context, loc objstore.Store, id string) ([]publishedBackup, error) {
	var keys []string
	if id != "latest" {
		keys = []string{backupManifestPrefix + id + backupManifestExt}
	} else if err := loc.List(ctx, backupManifestPrefix, func(o objstore.ObjectInfo) error {
		if strings.HasSuffix(o.Key, backupManifestExt) {
			keys = append(keys, o.Key)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []publishedBackup
	for _, k := range keys {
		rc, _, err := loc.Get(ctx, k, 0, -1)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, 64<<20))
		rc.Close()
		if err != nil {
			return nil, err
		}
		var m publishedBackup
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CompletedAt.Before(out[j].CompletedAt) })
	return out, nil
}

// recover checks spec.bootstrap.recovery, then sets status.recovery and
// status.storagePath (the RocksDB's own NAME-UID directory): from then on
// its first primaries get the restore init container. A refusal writes
// nothing.
func (r *rocksDBReconciler) recover(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) error {
	refuse := func(msg string) error {
		rep.set(shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused, "not starting: "+msg)
		return &refusal{shalev1.ReasonBootstrapRefused, msg}
	}
	rec := db.Spec.Bootstrap.Recovery
	in := recoveryInput{DB: db}
	dst := &shalev1.ObjectStore{}
	switch err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: rec.BackupStore}, dst); {
	case err == nil:
		in.Store = dst
		in.Location = backupLocationURL(dst, db.Namespace)
		_, in.Access = backupAccess(store, dst)
	case !apierrors.IsNotFound(err):
		return err
	}
	if in.Store != nil && in.Access == "" && !strings.Contains(rec.Database, "/") {
		ctx, cancel := context.WithTimeout(ctx, storeTimeout)
		defer cancel()
		loc, err := r.stores.open(ctx, dst, dst.Spec.Endpoint, in.Location+"/"+rec.Database)
		if target, _ := recoveryTarget(rec); err == nil && target != "" {
			in.Archive, err = readArchiveWindow(ctx, loc)
			in.Backups = in.Archive.Backups
		} else if err == nil {
			in.Backups, err = readBackups(ctx, loc, rec.Backup)
		}
		in.ReadErr = err
	}
	out, problem := decideRecovery(in)
	if problem != "" {
		return refuse(problem)
	}
	own := db.StoragePathUnder(store.Spec.Hot.Prefix)
	if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Recovery == nil {
			o := out
			cur.Status.Recovery = &o
		}
		if cur.Status.StoragePath == "" {
			cur.Status.StoragePath = own
		}
		return nil
	}); err != nil {
		return err
	}
	if out.Target != "" {
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventBootstrapRestoring, "restoring %s to %s from %s/%s (base backup %s expected, sequence %d, then the archived logs): the first primary's init container writes it into %s", out.Database, out.Target, out.Location, out.Database, out.Backup, out.Sequence, store.DatabaseURL(own))
		return nil
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventBootstrapRestoring, "restoring backup %s (sequence %d) from %s/%s: the first primary's init container writes it into %s", out.Backup, out.Sequence, out.Location, out.Database, store.DatabaseURL(own))
	return nil
}

// withRestore adds the restore init container to a recovering database's
// primary Pod until the database was ready once.
func (r *rocksDBReconciler) withRestore(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod *corev1.Pod) error {
	if !recovers(db) || db.Status.Recovery == nil || db.Status.Created != nil {
		return nil
	}
	dst := &shalev1.ObjectStore{}
	if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.Bootstrap.Recovery.BackupStore}, dst); err != nil {
		if apierrors.IsNotFound(err) {
			return &refusal{shalev1.ReasonBootstrapRefused, fmt.Sprintf("ObjectStore %s (spec.bootstrap.recovery.backupStore) is gone before the restore finished: create it again", db.Spec.Bootstrap.Recovery.BackupStore)}
		}
		return err
	}
	image := pod.Spec.Containers[0].Image
	c, vols, problem := restoreInitContainer(db, store, dst, image)
	if problem != "" {
		return &refusal{shalev1.ReasonBootstrapRefused, problem}
	}
	c.Resources = pod.Spec.Containers[0].Resources
	// The primary's credentials (the restore writes its directory).
	c.Env = append(c.Env, pod.Spec.Containers[0].Env...)
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == credentialsVolume {
			c.VolumeMounts = append(c.VolumeMounts, m)
		}
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	return nil
}
