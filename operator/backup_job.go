package operator

import (
	"fmt"
	"path"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The Pods that run `shale backup` (docs/rfcs/0011-backups-and-point-in-
// time-restore.md, step 27): the operator does not link RocksDB, so every
// copy, verify, delete, prune and restore is the shale CLI in a Pod of the
// shale image, with the database's ObjectStore credentials as a primary
// gets them and the backup ObjectStore's mounted beside them. Each reports
// its outcome as JSON in its termination message (--report), which the
// operator reads from the Pod's container status.

// backupsDir is where backups live in a backup ObjectStore's hot bucket,
// under its prefix: never a namespace name (a leading '_'), so the
// garbage collector and the reclaim, which read NAMESPACE/NAME-UID/
// directories, never see it.
const backupsDir = "_backups"

// backupCredentialsDir is where the backup store's Secret is mounted when
// it is not the database's.
const (
	backupCredentialsVolume = "backup-credentials"
	backupCredentialsDir    = "/etc/shale/backup-credentials"
	terminationLog          = "/dev/termination-log"
)

// Job kinds: the suffix of the Job's name (NAME-KIND), at most 7
// characters with the '-' (a Backup's name has at most 56: 63 in all).
const (
	jobCreate = "backup"
	jobVerify = "verify"
	jobDelete = "delete"
	jobDrop   = "drop"
)

// backupLocationURL is --to for backups of namespace ns in store:
// s3://BUCKET/PREFIX/_backups/NAMESPACE.
func backupLocationURL(store *shalev1.ObjectStore, ns string) string {
	return "s3://" + path.Join(store.Spec.Hot.Bucket, store.Spec.Hot.Prefix, backupsDir, ns)
}

// backupDatabaseID is --database: the last element of the database's
// directory (NAME-UID; for an adopted directory, the adopted one's, whose
// backups it continues).
func backupDatabaseID(storagePath string) string {
	return path.Base(strings.TrimSuffix(storagePath, "/"))
}

// backupStoreAccess says how a Pod whose own credentials are src's reaches
// the backup store dst: flags for `shale backup`, and the volume and mount
// of dst's Secret. problem is set when the Pod cannot (it runs as one
// ServiceAccount, with one instance role).
type backupStoreAccess struct {
	args    []string
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
}

func backupAccess(src, dst *shalev1.ObjectStore) (a backupStoreAccess, problem string) {
	if dst.Spec.Endpoint != src.Spec.Endpoint {
		a.args = append(a.args, "--to-endpoint", dst.Spec.Endpoint)
	}
	if src.Name == dst.Name {
		return a, ""
	}
	switch {
	case dst.Spec.Credentials != nil && src.Spec.Credentials != nil && dst.Spec.Credentials.Name == src.Spec.Credentials.Name:
		// The same keys: server-side copies where the endpoint is shared.
	case dst.Spec.Credentials != nil:
		a.args = append(a.args, "--to-credentials-dir", backupCredentialsDir)
		a.volumes = []corev1.Volume{{
			Name: backupCredentialsVolume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: dst.Spec.Credentials.Name,
				Items: []corev1.KeyToPath{
					{Key: shalev1.SecretKeyAccessKeyID, Path: "accessKeyID"},
					{Key: shalev1.SecretKeySecretAccessKey, Path: "secretAccessKey"},
				},
				DefaultMode: ptr.To[int32](0o440),
			}},
		}}
		a.mounts = []corev1.VolumeMount{{Name: backupCredentialsVolume, MountPath: backupCredentialsDir, ReadOnly: true}}
	case dst.Spec.ServiceAccountName != "" && dst.Spec.ServiceAccountName == src.Spec.ServiceAccountName,
		dst.Spec.InstanceRole && src.Spec.InstanceRole:
		// The same identity.
	default:
		return a, fmt.Sprintf("ObjectStore %s takes its credentials from %s and ObjectStore %s from %s: a backup Pod runs as one identity, so a backup store that is not the database's own needs a credentials Secret (or the same serviceAccountName or instanceRole as the database's)",
			dst.Name, credentialsOrigin(dst), src.Name, credentialsOrigin(src))
	}
	return a, ""
}

// backupJobSpec is what a backup Job runs.
type backupJobSpec struct {
	// Name of the Job; Kind its kind (jobCreate...); Owner the object it
	// belongs to (a Backup or a ScheduledBackup).
	Name, Kind string
	Owner      metav1.Object
	// Labels added to the Job and its Pod.
	Labels map[string]string
	// Args after `shale backup`.
	Args  []string
	Image string
	// Src is the database's ObjectStore (the Pod's own credentials), Dst
	// the backup store.
	Src, Dst *shalev1.ObjectStore
	// Scheduling and resources of the database's primary.
	Primary shalev1.PrimarySpec
}

// backupJob builds a Job running `shale backup ARGS --report
// /dev/termination-log` with the stores' credentials. RestartPolicy Never
// and backoffLimit 2: a rerun of create with the same id resumes (RFC 0011
// step 6), verify and delete are idempotent; the message of the Pod that
// failed last is its last log lines (FallbackToLogsOnError).
func backupJob(s backupJobSpec) (*batchv1.Job, string) {
	acc, problem := backupAccess(s.Src, s.Dst)
	if problem != "" {
		return nil, problem
	}
	args := append([]string{"backup"}, s.Args...)
	args = append(args, acc.args...)
	args = append(args, "--report", terminationLog)
	labels := map[string]string{
		shalev1.LabelAppName:      shalev1.AppName,
		shalev1.LabelAppInstance:  s.Owner.GetName(),
		shalev1.LabelAppComponent: "backup-" + s.Kind,
		shalev1.LabelAppManagedBy: shalev1.ManagedBy,
	}
	for k, v := range s.Labels {
		labels[k] = v
	}
	pull := s.Primary.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	c := corev1.Container{
		Name:            containerName,
		Image:           s.Image,
		ImagePullPolicy: pull,
		Args:            args,
		// Verify downloads the backup here, and create's
		// --count-source-keys keeps its bounded reader cache here;
		// nothing else writes locally.
		Env:                      []corev1.EnvVar{{Name: "TMPDIR", Value: cacheDir}},
		VolumeMounts:             append([]corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}}, acc.mounts...),
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePath:   terminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Resources:                withDefaultRequests(s.Primary.Resources, primaryDefaultRequests),
	}
	spec := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		EnableServiceLinks: ptr.To(false),
		SecurityContext:    podSecurityContext(),
		Containers:         []corev1.Container{c},
		Volumes:            append([]corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, acc.volumes...),
	}
	applyScheduling(&spec, s.Primary.PodScheduling)
	storeAccessOf(s.Src).apply(&spec, &spec.Containers[0])
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Owner.GetNamespace(), Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](2),
			// Finished Jobs go a day after (the Backup keeps the outcome).
			TTLSecondsAfterFinished: ptr.To[int32](86400),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       spec,
			},
		},
	}, ""
}

// backupArgs are the `shale backup` arguments of a Backup's Job of kind.
func backupArgs(kind string, b *shalev1.Backup, db *shalev1.RocksDB, src, dst *shalev1.ObjectStore) []string {
	loc := []string{"--to", backupLocationURL(dst, b.Namespace), "--database", b.Status.DatabaseID}
	switch kind {
	case jobCreate:
		args := []string{"create", "--db", src.DatabaseURL(db.Status.StoragePath), "--checkpoint", b.Status.Checkpoint, "--id", b.Status.BackupID}
		if b.Spec.Verify {
			// The verify compares the copy's key count with this one
			// (RFC 0011 step 14a); it costs a read of every table.
			args = append(args, "--count-source-keys")
		}
		return append(args, loc...)
	case jobVerify:
		return append([]string{"verify", b.Status.BackupID, "--scratch", cacheDir}, loc...)
	case jobDrop:
		// A failed create may have written nothing.
		return append([]string{"delete", b.Status.BackupID, "--missing-ok"}, loc...)
	default:
		return append([]string{"delete", b.Status.BackupID}, loc...)
	}
}

// restoreContainerName names the restore's init container.
const restoreContainerName = "restore"

// restoreInitContainer is the init container of a recovering database's
// primaries until it was ready once: `shale backup restore ID --into
// <its own directory> --resume` (--resume: a restart after the restore
// finished is a success, RFC 0011 step 28).
func restoreInitContainer(db *shalev1.RocksDB, src, dst *shalev1.ObjectStore, image string) (corev1.Container, []corev1.Volume, string) {
	rec := db.Status.Recovery
	acc, problem := backupAccess(src, dst)
	if problem != "" {
		return corev1.Container{}, nil, problem
	}
	args := []string{"backup", "restore"}
	if _, flags := recoveryTarget(db.Spec.Bootstrap.Recovery); flags != nil {
		// A point in time: the restore picks its base (RFC 0011 step 31).
		args = append(args, flags...)
	} else {
		args = append(args, rec.Backup)
	}
	args = append(args, "--to", rec.Location, "--database", rec.Database,
		"--into", src.DatabaseURL(db.Status.StoragePath), "--resume")
	args = append(args, acc.args...)
	args = append(args, "--report", terminationLog)
	c := corev1.Container{
		Name:                     restoreContainerName,
		Image:                    image,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Args:                     args,
		Env:                      []corev1.EnvVar{{Name: "TMPDIR", Value: cacheDir}},
		VolumeMounts:             append([]corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}}, acc.mounts...),
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePath:   terminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	return c, acc.volumes, ""
}
