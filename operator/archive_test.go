package operator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// archiveWindowStart: the window starts at the oldest base backup taken
// after the archive started and after every gap (the rule of
// internal/backup's WindowStart; RFC 0011 step 23).
func TestArchiveWindowStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pb := func(id string, created time.Time, seq uint64) publishedBackup {
		b := publishedBackup{ID: id}
		b.Checkpoint.CreatedAt, b.Checkpoint.Sequence = created, seq
		return b
	}
	bs := []publishedBackup{pb("old", t0.Add(-time.Hour), 10), pb("b1", t0.Add(time.Minute), 20), pb("b2", t0.Add(2*time.Minute), 30)}
	for _, tc := range []struct {
		name string
		w    archiveWindow
		want string
	}{
		{"the oldest after the start", archiveWindow{Started: true, StartedAt: t0, Backups: bs}, "b1"},
		{"a base at the very start is not after it", archiveWindow{Started: true, StartedAt: t0.Add(time.Minute), Backups: bs}, "b2"},
		{"after the last gap", archiveWindow{Started: true, StartedAt: t0, Gaps: []time.Time{t0.Add(90 * time.Second), t0.Add(30 * time.Second)}, Backups: bs}, "b2"},
		{"a gap after every base: none", archiveWindow{Started: true, StartedAt: t0, Gaps: []time.Time{t0.Add(time.Hour)}, Backups: bs}, ""},
		{"no backups", archiveWindow{Started: true, StartedAt: t0}, ""},
		{"order of the list does not matter", archiveWindow{Started: true, StartedAt: t0, Backups: []publishedBackup{bs[2], bs[1], bs[0]}}, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := archiveWindowStart(tc.w)
			if got := map[bool]string{true: b.ID}[ok]; got != tc.want {
				t.Errorf("window starts at %q, want %q", got, tc.want)
			}
		})
	}
}

// archiveTarget: the archive goes where the Backups go (the backup
// store's _backups/NAMESPACE, database NAME-UID), with the backup store's
// endpoint and Secret when they are not the database's; a backup store
// the primary cannot reach as its one identity is refused.
func TestArchiveTarget(t *testing.T) {
	os := func(name, endpoint string, mut func(*shalev1.ObjectStore)) *shalev1.ObjectStore {
		o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: name}}
		o.Spec.Endpoint = endpoint
		o.Spec.Hot.Bucket, o.Spec.Hot.Prefix = name, "shale"
		mut(o)
		return o
	}
	secret := func(n string) func(*shalev1.ObjectStore) {
		return func(o *shalev1.ObjectStore) { o.Spec.Credentials = &shalev1.SecretReference{Name: n} }
	}
	sa := func(n string) func(*shalev1.ObjectStore) {
		return func(o *shalev1.ObjectStore) { o.Spec.ServiceAccountName = n }
	}
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}}
	db.Status.StoragePath = "shale/ns/orders-1234"
	src := os("data", "http://minio:9000", secret("k1"))
	for _, tc := range []struct {
		name    string
		src     *shalev1.ObjectStore
		dst     *shalev1.ObjectStore
		want    shalev1.ArchiveStatus
		problem string
	}{
		{"the database's own store", src, src, shalev1.ArchiveStatus{BackupStore: "data", Location: "s3://data/shale/_backups/ns", Database: "orders-1234"}, ""},
		{"another bucket, the same Secret", src, os("vault", "http://minio:9000", secret("k1")), shalev1.ArchiveStatus{BackupStore: "vault", Location: "s3://vault/shale/_backups/ns", Database: "orders-1234"}, ""},
		{"another Secret", src, os("vault", "http://minio:9000", secret("k2")), shalev1.ArchiveStatus{BackupStore: "vault", Location: "s3://vault/shale/_backups/ns", Database: "orders-1234", CredentialsSecret: "k2"}, ""},
		{"another endpoint", src, os("vault", "https://s3.example", secret("k2")), shalev1.ArchiveStatus{BackupStore: "vault", Location: "s3://vault/shale/_backups/ns", Database: "orders-1234", Endpoint: "https://s3.example", CredentialsSecret: "k2"}, ""},
		{"a ServiceAccount store beside a Secret one", src, os("vault", "http://minio:9000", sa("backup")), shalev1.ArchiveStatus{BackupStore: "vault"}, "spec.backup.archive: ObjectStore vault takes its credentials from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, problem := archiveTarget(db, tc.src, tc.dst)
			if got != tc.want || !strings.Contains(problem, tc.problem) || (problem == "") != (tc.problem == "") {
				t.Errorf("got %+v %q, want %+v %q", got, problem, tc.want, tc.problem)
			}
			if tc.problem != "" && !strings.Contains(problem, "a primary Pod runs as one identity") {
				t.Errorf("problem %q does not say why", problem)
			}
		})
	}
}

// The primary Pod of a RocksDB with spec.backup.archive runs with
// --archive-to at status.archive's location and the backup store's
// Secret mounted; the flags and the mount are in the pod-spec hash, so
// turning the archive on, off or elsewhere rolls the primary.
func TestArchivePodArgs(t *testing.T) {
	store := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "data"}}
	store.Spec.Hot.Bucket = "data"
	store.Spec.Credentials = &shalev1.SecretReference{Name: "k1"}
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}}
	db.Status.StoragePath = "ns/orders-1234"
	off := primaryPod(db, store, 3, "shale:1")

	on := db.DeepCopy()
	on.Spec.Backup = &shalev1.DatabaseBackupSpec{Archive: &shalev1.ArchiveSpec{BackupStore: "vault"}}
	if p := primaryPod(on, store, 3, "shale:1"); p.Annotations[shalev1.AnnotationPodSpecHash] != off.Annotations[shalev1.AnnotationPodSpecHash] {
		t.Errorf("the archive not resolved yet (no status.archive) changed the Pod")
	}
	on.Status.Archive = &shalev1.ArchiveStatus{BackupStore: "vault", Location: "s3://vault/shale/_backups/ns", Database: "orders-1234", Endpoint: "https://s3.example", CredentialsSecret: "k2"}
	pod := primaryPod(on, store, 3, "shale:1")
	args := " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " "
	want := " --archive-to s3://vault/shale/_backups/ns --archive-database orders-1234 --archive-to-endpoint https://s3.example --archive-to-credentials-dir " + archiveCredentialsDir + " "
	if !strings.Contains(args, want) {
		t.Errorf("primary args %q lack %q", args, want)
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == archiveCredentialsVolume {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "k2" {
		t.Errorf("volumes %+v: want Secret k2 as %s", pod.Spec.Volumes, archiveCredentialsVolume)
	}
	mounted := false
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.Name == archiveCredentialsVolume && m.MountPath == archiveCredentialsDir && m.ReadOnly
	}
	if !mounted {
		t.Errorf("mounts %+v: want %s read-only at %s", pod.Spec.Containers[0].VolumeMounts, archiveCredentialsVolume, archiveCredentialsDir)
	}
	if pod.Annotations[shalev1.AnnotationPodSpecHash] == off.Annotations[shalev1.AnnotationPodSpecHash] {
		t.Errorf("turning the archive on left the pod-spec hash as it was: no rolling update")
	}
	moved := on.DeepCopy()
	moved.Status.Archive.Location = "s3://other/_backups/ns"
	if primaryPod(moved, store, 3, "shale:1").Annotations[shalev1.AnnotationPodSpecHash] == pod.Annotations[shalev1.AnnotationPodSpecHash] {
		t.Errorf("moving the archive left the pod-spec hash as it was")
	}
	// Another backup store in the spec than status resolved: no archive
	// flags until the operator resolved the new one.
	other := on.DeepCopy()
	other.Spec.Backup.Archive.BackupStore = "elsewhere"
	if a, _, _ := archivePodArgs(other); a != nil {
		t.Errorf("archive args for a stale status.archive: %v", a)
	}
	// A standby (switchover) archives too; a fence Pod does not.
	if s := standbyPod(on, store, 4, "shale:1"); !strings.Contains(strings.Join(s.Spec.Containers[0].Args, " "), "--archive-to s3://vault/") {
		t.Errorf("standby args %v lack the archive", s.Spec.Containers[0].Args)
	}
	if f := fencePod(on, store, 4, "shale:1"); strings.Contains(strings.Join(f.Spec.Containers[0].Args, " "), "--archive") {
		t.Errorf("fence args %v carry the archive", f.Spec.Containers[0].Args)
	}
}

// A restore init container that exits non-zero is a BootstrapRefused
// failure with its last line (RFC 0011 step 31 (b)).
func TestClassifyRestoreFailure(t *testing.T) {
	pod := func(init corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{}
		p.Status.Phase = corev1.PodFailed
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{init}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
		return p
	}
	d := failoverDecision{Reason: shalev1.ReasonPrimaryFailed, Message: "the primary Pod failed"}
	refused := "restoring...\nshale: target outside the recoverable window: time 2026-01-01T05:00:00Z is outside the window, from sequence 20 (...) to sequence 60 (...)"
	for _, tc := range []struct {
		name         string
		pod          *corev1.Pod
		reason, want string
	}{
		{"refused", pod(corev1.ContainerStatus{Name: restoreContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: refused}}}),
			shalev1.ReasonBootstrapRefused, "the restore (init container restore) exited with status 1: shale: target outside the recoverable window: time 2026-01-01T05:00:00Z is outside the window"},
		{"finished", pod(corev1.ContainerStatus{Name: restoreContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}),
			shalev1.ReasonPrimaryFailed, "the primary Pod failed"},
		{"another init container", pod(corev1.ContainerStatus{Name: "other", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "x"}}}),
			shalev1.ReasonPrimaryFailed, "the primary Pod failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := classifyFailure(tc.pod, d)
			if reason != tc.reason || !strings.Contains(msg, tc.want) {
				t.Errorf("got %s %q, want %s %q", reason, msg, tc.reason, tc.want)
			}
		})
	}
}
