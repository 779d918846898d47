package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// The continuous archive on Kubernetes (docs/rfcs/0011-backups-and-point-
// in-time-restore.md, step 30): spec.backup.archive names a backup
// ObjectStore; the operator resolves where the archive goes into
// status.archive (the Backups' location and database id), every primary
// Pod runs with --archive-to and the backup store's Secret, and once a
// minute the operator reads the archive's window into status.archive.

// Keys of the archive in a backup location (internal/backup:
// ArchiveStartedKey, ArchiveStatusKey, ArchiveGapsPrefix; not imported:
// it links RocksDB).
const (
	archiveStartedKey = "archive/started.json"
	archiveStatusKey  = "archive/status.json"
	archiveGapsPrefix = "archive/gaps/"
)

// archiveRecheck is how soon a refused archive is looked at again (the
// window is read every Options.ArchiveInterval).
const archiveRecheck = time.Minute

// Where a primary finds the backup store's keys (--archive-to-credentials-dir).
const (
	archiveCredentialsVolume = "archive-credentials"
	archiveCredentialsDir    = "/etc/shale/archive-credentials"
)

const eventArchiveRefused = "ArchiveRefused"

// archiving reports whether the RocksDB's spec turns the archive on.
func archiving(db *shalev1.RocksDB) bool {
	return db.Spec.Backup != nil && db.Spec.Backup.Archive != nil
}

// archiveTarget decides where a database's archive goes (pure): the
// Backups' location in dst for the database's namespace and its database
// id, with dst's endpoint when it differs from the database's store src
// and dst's Secret when it is another one. problem is set when a primary
// cannot reach dst (backupAccess: a Pod runs as one identity).
func archiveTarget(db *shalev1.RocksDB, src, dst *shalev1.ObjectStore) (shalev1.ArchiveStatus, string) {
	out := shalev1.ArchiveStatus{BackupStore: dst.Name}
	if _, problem := backupAccess(src, dst); problem != "" {
		return out, "spec.backup.archive: " + strings.Replace(problem, "a backup Pod runs as one identity", "a primary Pod runs as one identity", 1)
	}
	out.Location = backupLocationURL(dst, db.Namespace)
	out.Database = backupDatabaseID(db.Status.StoragePath)
	if dst.Spec.Endpoint != src.Spec.Endpoint {
		out.Endpoint = dst.Spec.Endpoint
	}
	if src.Name != dst.Name && dst.Spec.Credentials != nil && (src.Spec.Credentials == nil || src.Spec.Credentials.Name != dst.Spec.Credentials.Name) {
		out.CredentialsSecret = dst.Spec.Credentials.Name
	}
	return out, ""
}

// sameTarget: a and b send the archive to the same place.
func sameTarget(a, b *shalev1.ArchiveStatus) bool {
	return a != nil && b != nil && a.BackupStore == b.BackupStore && a.Location == b.Location &&
		a.Database == b.Database && a.Endpoint == b.Endpoint && a.CredentialsSecret == b.CredentialsSecret
}

// archivePodArgs are the `shale primary` flags, volume and mount of the
// archive status.archive resolved (none when the spec has no archive, or
// it was refused).
func archivePodArgs(db *shalev1.RocksDB) ([]string, []corev1.Volume, []corev1.VolumeMount) {
	a := db.Status.Archive
	if !archiving(db) || a == nil || a.Location == "" || a.BackupStore != db.Spec.Backup.Archive.BackupStore {
		return nil, nil, nil
	}
	args := []string{"--archive-to", a.Location, "--archive-database", a.Database}
	if a.Endpoint != "" {
		args = append(args, "--archive-to-endpoint", a.Endpoint)
	}
	if a.CredentialsSecret == "" {
		return args, nil, nil
	}
	args = append(args, "--archive-to-credentials-dir", archiveCredentialsDir)
	vol := corev1.Volume{Name: archiveCredentialsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: a.CredentialsSecret,
		Items: []corev1.KeyToPath{
			{Key: shalev1.SecretKeyAccessKeyID, Path: objstore.CredentialsFileAccessKeyID},
			{Key: shalev1.SecretKeySecretAccessKey, Path: objstore.CredentialsFileSecretAccessKey},
		},
		DefaultMode: ptr.To[int32](0o440),
	}}}
	return args, []corev1.Volume{vol}, []corev1.VolumeMount{{Name: archiveCredentialsVolume, MountPath: archiveCredentialsDir, ReadOnly: true}}
}

// archiveWindow is what the operator reads of an archive.
type archiveWindow struct {
	// Started: archive/started.json exists (StartedAt its time).
	Started   bool
	StartedAt time.Time
	// CaughtUpAt from archive/status.json (zero: none yet).
	CaughtUpAt time.Time
	// Gaps: the detection times of the recorded gaps.
	Gaps []time.Time
	// Backups: the published base backups of the location.
	Backups []publishedBackup
}

// archiveWindowStart is the base backup the recoverable window starts at
// (pure; the rule of internal/backup's WindowStart, RFC 0011 step 23): the
// oldest published backup whose checkpoint was created after the archive
// started and after every gap. ok false: none (take a backup).
func archiveWindowStart(w archiveWindow) (publishedBackup, bool) {
	after := w.StartedAt
	for _, g := range w.Gaps {
		if g.After(after) {
			after = g
		}
	}
	var best publishedBackup
	found := false
	for _, b := range w.Backups {
		if !b.Checkpoint.CreatedAt.After(after) {
			continue
		}
		if !found || b.Checkpoint.Sequence < best.Checkpoint.Sequence {
			best, found = b, true
		}
	}
	return best, found
}

// readArchiveWindow reads an archive's window from its backup location
// (the store at LOCATION/DATABASE).
func readArchiveWindow(ctx context.Context, loc objstore.Store) (archiveWindow, error) {
	var w archiveWindow
	var started struct {
		StartedAt time.Time `json:"startedAt"`
	}
	switch err := getJSON(ctx, loc, archiveStartedKey, &started); {
	case errors.Is(err, objstore.ErrNotFound):
		return w, nil
	case err != nil:
		return w, err
	}
	w.Started, w.StartedAt = true, started.StartedAt
	var st struct {
		CaughtUpAt time.Time `json:"caughtUpAt"`
	}
	if err := getJSON(ctx, loc, archiveStatusKey, &st); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return w, err
	}
	w.CaughtUpAt = st.CaughtUpAt
	var keys []string
	if err := loc.List(ctx, archiveGapsPrefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return w, fmt.Errorf("list %s: %w", archiveGapsPrefix, err)
	}
	for _, k := range keys {
		var g struct {
			DetectedAt time.Time `json:"detectedAt"`
		}
		if err := getJSON(ctx, loc, k, &g); err != nil {
			return w, err
		}
		w.Gaps = append(w.Gaps, g.DetectedAt)
	}
	var err error
	w.Backups, err = readBackups(ctx, loc, "latest")
	return w, err
}

// getJSON reads a small JSON object.
func getJSON(ctx context.Context, s objstore.Store, key string, v any) error {
	rc, _, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// reconcileArchive keeps status.archive: where the archive goes (before a
// primary Pod is built from it) and, once a minute, its window. It
// returns how soon to look again (0: not archiving).
func (r *rocksDBReconciler) reconcileArchive(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (time.Duration, error) {
	if !archiving(db) {
		if db.Status.Archive == nil {
			return 0, nil
		}
		return 0, ignoreNoChange(patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if archiving(cur) {
				return errNoChange
			}
			cur.Status.Archive = nil
			return nil
		}))
	}
	if store == nil || db.Status.StoragePath == "" {
		return 0, nil
	}
	name := db.Spec.Backup.Archive.BackupStore
	dst := &shalev1.ObjectStore{}
	var want shalev1.ArchiveStatus
	problem := ""
	switch err := r.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: name}, dst); {
	case apierrors.IsNotFound(err):
		want = shalev1.ArchiveStatus{BackupStore: name}
		problem = fmt.Sprintf("spec.backup.archive.backupStore: ObjectStore %s does not exist in namespace %s: create it (the primaries run without an archive until then)", name, db.Namespace)
	case err != nil:
		return 0, err
	default:
		want, problem = archiveTarget(db, store, dst)
	}
	cur := db.Status.Archive
	if problem != "" {
		want.Message = problem
		if cur == nil || cur.Message != problem || cur.Location != "" || cur.BackupStore != want.BackupStore {
			r.recorder.Event(db, corev1.EventTypeWarning, eventArchiveRefused, problem)
			if err := patchStatus(ctx, r.Client, r.apiReader, db, func(c *shalev1.RocksDB) error {
				c.Status.Archive = &want
				return nil
			}); err != nil {
				return 0, err
			}
		}
		return archiveRecheck, nil
	}
	if !sameTarget(cur, &want) {
		// A new target: what was read of another location does not apply.
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(c *shalev1.RocksDB) error {
			c.Status.Archive = &want
			return nil
		}); err != nil {
			return 0, err
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, "ArchiveConfigured", "the primaries archive the database's logs to %s/%s (ObjectStore %s)", want.Location, want.Database, want.BackupStore)
		cur = db.Status.Archive
	}
	now := r.now()
	every := r.opts.ArchiveInterval
	if every <= 0 {
		every = time.Minute
	}
	if cur != nil && cur.Checked != nil && now.Sub(cur.Checked.Time) < every {
		return every - now.Sub(cur.Checked.Time), nil
	}
	next := want
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	loc, err := r.stores.open(ctx, dst, dst.Spec.Endpoint, want.Location+"/"+want.Database)
	var w archiveWindow
	if err == nil {
		w, err = readArchiveWindow(ctx, loc)
	}
	next.Checked = &metav1.Time{Time: now}
	switch {
	case err != nil:
		if cur != nil {
			next.StartedAt, next.CaughtUpAt, next.Gaps = cur.StartedAt, cur.CaughtUpAt, cur.Gaps
			next.RecoverableFrom, next.RecoverableFromBackup = cur.RecoverableFrom, cur.RecoverableFromBackup
		}
		next.Message = fmt.Sprintf("cannot read the archive in %s/%s: %v (what is shown is from the last read)", want.Location, want.Database, err)
	case !w.Started:
		next.Message = "the archive has not started yet (the primary starts it once it is open)"
	default:
		next.StartedAt = &metav1.Time{Time: w.StartedAt}
		if !w.CaughtUpAt.IsZero() {
			next.CaughtUpAt = &metav1.Time{Time: w.CaughtUpAt}
		}
		next.Gaps = int32(min(len(w.Gaps), 1<<30))
		if b, ok := archiveWindowStart(w); ok {
			next.RecoverableFrom = &metav1.Time{Time: b.Checkpoint.CreatedAt}
			next.RecoverableFromBackup = b.ID
		} else {
			next.Message = "no base backup taken since the archive started (or since its last gap): nothing is recoverable to a point in time until a Backup completes"
		}
	}
	return every, ignoreNoChange(patchStatus(ctx, r.Client, r.apiReader, db, func(c *shalev1.RocksDB) error {
		if c.Status.Archive == nil || !sameTarget(c.Status.Archive, &want) {
			return errNoChange
		}
		n := next
		c.Status.Archive = &n
		return nil
	}))
}

// ignoreNoChange: a transaction that found nothing to do succeeded.
func ignoreNoChange(err error) error {
	if errors.Is(err, errNoChange) {
		return nil
	}
	return err
}
