package operator

import (
	"fmt"
	"math/rand"
	"net"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/primary"
)

// TestPointInTimeRecovery (RFC 0011 steps 30-31): a RocksDB with
// spec.backup.archive gets a primary Pod with --archive-to at its
// Backups' location and the backup store's Secret; played by a real
// primary with that archive (and a real MinIO), a Backup and writes, the
// archive's window lands in status.archive. Then bootstrap.recovery with
// a targetSequence: the init container gets --target-sequence, and played
// with the real restore it yields every write up to the target and none
// after. A targetTime the archive has not reached is refused with the
// window in a BootstrapRefused Event and the condition, with no Pod; a
// target only the restore can refuse (a sequence past the archive's end)
// is refused by the init container, and that lands as a BootstrapRefused
// Event and failure in status. Turning the archive off clears
// status.archive and marks the primary outdated (a rolling update).
func TestPointInTimeRecovery(t *testing.T) {
	h := startOperator(t)
	for _, kv := range h.minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ns := h.namespace("pitr")
	sec, store, db := h.samples(ns)
	h.minio.CreateBucket(t, "vault")
	bsec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault-keys"}, StringData: map[string]string{
		shalev1.SecretKeyAccessKeyID: h.minio.AccessKey, shalev1.SecretKeySecretAccessKey: h.minio.SecretKey}}
	vault := store.DeepCopy()
	vault.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "vault"}
	vault.Spec.Hot.Bucket, vault.Spec.Hot.Prefix = "vault", "shale"
	vault.Spec.Credentials.Name = "vault-keys"
	db.Spec.Backup = &shalev1.DatabaseBackupSpec{Archive: &shalev1.ArchiveSpec{BackupStore: "vault"}}
	h.create(sec, store, bsec, vault, db)

	// The primary Pod archives where the Backups go.
	pod := h.waitPod(ns, "orders-primary-1")
	db = h.db(ns, "orders")
	dbID := path.Base(db.Status.StoragePath)
	dbURL := "s3://" + bucket + "/" + db.Status.StoragePath
	locURL := "s3://vault/shale/_backups/" + ns
	args := " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " "
	if want := fmt.Sprintf(" --archive-to %s --archive-database %s --archive-to-credentials-dir %s ", locURL, dbID, archiveCredentialsDir); !strings.Contains(args, want) {
		t.Fatalf("primary args %q lack %q", args, want)
	}
	secretOf := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secretOf[v.Name] = v.Secret.SecretName
		}
	}
	mountedAt := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mountedAt[m.MountPath] = m.Name
	}
	if secretOf[mountedAt[archiveCredentialsDir]] != "vault-keys" {
		t.Errorf("%s mounts %q (Secrets %v), want vault-keys", archiveCredentialsDir, mountedAt[archiveCredentialsDir], secretOf)
	}

	// Play it: a real primary archiving to that location.
	archiveStore, err := objstore.OpenS3(locURL+"/"+dbID, h.minio.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	loc := backup.Location{Store: archiveStore, Database: dbID, Stream: true}
	sc := cloneTestStorage
	sc.CacheDir = filepath.Join(t.TempDir(), "cache")
	srv, err := primary.Start(primary.Config{DB: dbURL, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc,
		Archive: &backup.ArchiveConfig{To: loc}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPrimary{srv: srv, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(p.stop)
	ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
	if err != nil {
		t.Fatal(err)
	}
	fwd := &forwardingKV{guardedStatus: guardedStatus{st: &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY}}, real: p.kv}
	h.serveGuarded(lis, ns, "orders-primary-tls", "orders-access", fwd)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "ready", func(d *shalev1.RocksDB) (bool, string) { return d.Status.Phase == shalev1.PhaseReady, "want Ready" })
	eventually(t, "the archive started", func() (bool, string) {
		_, err := archiveStore.Stat(h.ctx, archiveStartedKey)
		return err == nil, fmt.Sprint(err)
	})
	put := func(key string) uint64 {
		t.Helper()
		r, err := p.kv.Put(h.ctx, &kvv1.PutRequest{Key: []byte(key), Value: []byte("v-" + key), Sync: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.Sequence
	}
	for i := range 20 {
		put(fmt.Sprintf("a%03d", i))
	}
	h.create(&shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault"}})
	if _, err := h.runBackupJob(ns, "base-backup"); err != nil {
		t.Fatal(err)
	}
	h.waitBackup(ns, "base", "Completed", func(b *shalev1.Backup) bool { return b.Status.Phase == shalev1.BackupCompleted })
	var target uint64
	for i := range 20 {
		target = put(fmt.Sprintf("b%03d", i))
	}
	for i := range 20 {
		put(fmt.Sprintf("c%03d", i))
	}
	written := time.Now()
	// The window, read from the archive, in status.
	db = h.waitDB(ns, "orders", "status.archive caught up", func(d *shalev1.RocksDB) (bool, string) {
		a := d.Status.Archive
		return a != nil && a.Location == locURL && a.Database == dbID && a.CredentialsSecret == "vault-keys" && a.StartedAt != nil &&
			a.RecoverableFromBackup == "base" && a.RecoverableFrom != nil && a.CaughtUpAt != nil && a.CaughtUpAt.After(written) && a.Message == "", jsonString(a)
	})
	caughtUp := db.Status.Archive.CaughtUpAt

	recovery := func(name string, mut func(*shalev1.RecoverySource)) *shalev1.RocksDB {
		d := db.DeepCopy()
		d.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name}
		d.Status = shalev1.RocksDBStatus{}
		d.Spec.Backup = nil
		r := &shalev1.RecoverySource{BackupStore: "vault", Database: dbID, Backup: "latest"}
		mut(r)
		d.Spec.Bootstrap = &shalev1.BootstrapSpec{Recovery: r}
		return d
	}
	// (a) Refused by the operator: a time the archive has not reached.
	late := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	beyond := int64(target + 1000)
	h.create(recovery("late", func(r *shalev1.RecoverySource) { r.TargetTime = &late }),
		recovery("pitr", func(r *shalev1.RecoverySource) { r.TargetSequence = ptrInt64(int64(target)) }),
		recovery("beyond", func(r *shalev1.RecoverySource) { r.TargetSequence = &beyond }))
	ev := h.waitEvent(ns, "late", shalev1.ReasonBootstrapRefused)
	wantWindow := fmt.Sprintf("is outside the recoverable window of %s/%s, from %s (sequence ", locURL, dbID, db.Status.Archive.RecoverableFrom.UTC().Format(time.RFC3339))
	if !strings.Contains(ev.Message, "time "+late.UTC().Format(time.RFC3339)+" "+wantWindow) || !strings.Contains(ev.Message, "backup base) to ") || !strings.Contains(ev.Message, "the archive has not reached it") {
		t.Errorf("refusal of a late targetTime: %q, want the window %q...", ev.Message, wantWindow)
	}
	h.waitDB(ns, "late", "refused in status", func(d *shalev1.RocksDB) (bool, string) {
		return condIs(d, shalev1.ConditionPrimaryAvailable, metav1.ConditionFalse, shalev1.ReasonBootstrapRefused) && d.Status.Recovery == nil && d.Status.StoragePath == "", jsonString(d.Status)
	})
	if ps := h.primaries(ns, "late"); len(ps) != 0 {
		t.Errorf("refused late has primaries %v", ps)
	}

	// The target sequence: the init container restores to it.
	rpod := h.waitPod(ns, "pitr-primary-1")
	rdb := h.db(ns, "pitr")
	if r := rdb.Status.Recovery; r == nil || r.Target != fmt.Sprintf("sequence %d", target) || r.Backup != "base" || r.Database != dbID {
		t.Fatalf("status.recovery %s, want sequence %d from base", jsonString(r), target)
	}
	if len(rpod.Spec.InitContainers) != 1 {
		t.Fatalf("init containers %v, want the restore", rpod.Spec.InitContainers)
	}
	ic := rpod.Spec.InitContainers[0]
	intoURL := "s3://" + bucket + "/" + rdb.Status.StoragePath
	want := fmt.Sprintf("backup restore --target-sequence %d --to %s --database %s --into %s --resume --to-credentials-dir %s --report /dev/termination-log", target, locURL, dbID, intoURL, backupCredentialsDir)
	if got := strings.Join(ic.Args, " "); got != want {
		t.Errorf("init container args\n%s\nwant\n%s", got, want)
	}
	into, err := objstore.OpenS3(intoURL, h.minio.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	ra := parseJobArgs(t, ic.Args)
	n, err := strconv.ParseUint(ra.flags["--target-sequence"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.RestoreToPoint(h.ctx, h.backupLocation(ra), backup.Target{Sequence: n}, into); err != nil {
		t.Fatal(err)
	}
	rp, err := startPrimary(t, intoURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"a", "b", "c"} {
		for i := range 20 {
			key := fmt.Sprintf("%s%03d", prefix, i)
			r, err := rp.kv.Get(h.ctx, &kvv1.GetRequest{Key: []byte(key)})
			if err != nil && status.Code(err) != codes.NotFound {
				t.Fatal(err)
			}
			if found, want := err == nil, prefix != "c"; found != want || found && string(r.Value) != "v-"+key {
				t.Fatalf("restored to sequence %d: %s found=%v (%v), want %v", target, key, found, r, want)
			}
		}
	}

	// (b) Refused by the init container: a sequence past the archive's
	// end passes the operator's check (the WAL decides), the restore
	// refuses it, and the failed Pod says so as a refused bootstrap.
	bpod := h.waitPod(ns, "beyond-primary-1")
	ba := parseJobArgs(t, bpod.Spec.InitContainers[0].Args)
	bdb := h.db(ns, "beyond")
	binto, err := objstore.OpenS3("s3://"+bucket+"/"+bdb.Status.StoragePath, h.minio.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := backup.RestoreToPoint(h.ctx, h.backupLocation(ba), backup.Target{Sequence: uint64(beyond)}, binto)
	if rerr == nil {
		t.Fatalf("a restore to sequence %d (past the archive) succeeded", beyond)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Pod{}
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(bpod), cur); err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodFailed
		cur.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: restoreContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "shale: " + rerr.Error() + "\n"}}}}
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
		return h.c.Status().Update(h.ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	ev = h.waitEvent(ns, "beyond", shalev1.ReasonBootstrapRefused)
	if !strings.Contains(ev.Message, fmt.Sprintf("sequence %d is outside the window, from sequence", beyond)) {
		t.Errorf("the init container's refusal as an Event: %q", ev.Message)
	}
	h.waitDB(ns, "beyond", "the refusal in status", func(d *shalev1.RocksDB) (bool, string) {
		pf := d.Status.PrimaryFailures
		return pf != nil && len(pf.Recent) > 0 && pf.Recent[0].Reason == shalev1.ReasonBootstrapRefused && strings.Contains(pf.Recent[0].Message, "outside the window"), jsonString(pf)
	})

	// The archive off: status.archive goes, and the primary is outdated.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := h.db(ns, "orders")
		cur.Spec.Backup = nil
		return h.c.Update(h.ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "the archive off", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Archive == nil && condIs(d, shalev1.ConditionPrimaryUpToDate, metav1.ConditionFalse, shalev1.ReasonPrimaryOutdated), jsonString(d.Status)
	})
	t.Logf("archive caught up at %s; refused: %s", caughtUp.UTC().Format(time.RFC3339Nano), rerr)
}

func ptrInt64(v int64) *int64 { return &v }
