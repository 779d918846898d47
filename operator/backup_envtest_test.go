package operator

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/backup/jobreport"
	"github.com/shale-rocks/shale/internal/objstore"
)

// forwardingKV is a database's primary Pod behind the real guard (the
// operator's certificate must be let in), its checkpoint RPCs answered by
// a real primary run in this process: envtest runs no Pod.
type forwardingKV struct {
	guardedStatus
	real  kvv1.KVClient
	fmu   sync.Mutex
	calls []checkpointCall
}

func (f *forwardingKV) Checkpoint(ctx context.Context, r *kvv1.CheckpointRequest) (*kvv1.CheckpointResponse, error) {
	id, _ := auth.FromContext(ctx)
	f.fmu.Lock()
	f.calls = append(f.calls, checkpointCall{id, r})
	f.fmu.Unlock()
	return f.real.Checkpoint(ctx, r)
}

func (f *forwardingKV) ListCheckpoints(ctx context.Context, r *kvv1.ListCheckpointsRequest) (*kvv1.ListCheckpointsResponse, error) {
	return f.real.ListCheckpoints(ctx, r)
}

func (f *forwardingKV) DeleteCheckpoint(ctx context.Context, r *kvv1.DeleteCheckpointRequest) (*kvv1.DeleteCheckpointResponse, error) {
	return f.real.DeleteCheckpoint(ctx, r)
}

// jobArgs reads a `shale backup` Job's arguments: the subcommand, the
// positional ones and the flags.
type jobArgs struct {
	cmd   string
	pos   []string
	flags map[string]string
}

func parseJobArgs(t *testing.T, args []string) jobArgs {
	t.Helper()
	if len(args) < 2 || args[0] != "backup" {
		t.Fatalf("Job args %v: want shale backup ...", args)
	}
	a := jobArgs{cmd: args[1], flags: map[string]string{}}
	for i := 2; i < len(args); i++ {
		switch {
		case args[i] == "--resume" || args[i] == "--missing-ok" || args[i] == "--count-source-keys":
			a.flags[args[i]] = "true"
		case strings.HasPrefix(args[i], "--"):
			a.flags[args[i]] = args[i+1]
			i++
		default:
			a.pos = append(a.pos, args[i])
		}
	}
	return a
}

// location opens --to/--database as the CLI does: the backup store's own
// credentials (the test MinIO's keys, which the Secret holds) when
// --to-credentials-dir is given, and then every copy streams.
func (h *harness) backupLocation(a jobArgs) backup.Location {
	h.t.Helper()
	st, err := objstore.OpenS3(a.flags["--to"]+"/"+a.flags["--database"], h.minio.S3Config())
	if err != nil {
		h.t.Fatal(err)
	}
	return backup.Location{Store: st, Database: a.flags["--database"], Stream: a.flags["--to-credentials-dir"] != ""}
}

// runBackupJob plays the kubelet and the Job controller for a backup Job:
// it runs the Job's `shale backup` command with the real backup code in
// this process, then records a Pod that ended with the report as its
// termination message (or with the error, exit 1) and the Job's outcome.
func (h *harness) runBackupJob(ns, name string) (jobArgs, error) {
	h.t.Helper()
	job := h.waitJob(ns, name)
	c := job.Spec.Template.Spec.Containers[0]
	a := parseJobArgs(h.t, c.Args)
	if a.flags["--report"] != "/dev/termination-log" || c.TerminationMessagePath != "/dev/termination-log" || c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		h.t.Errorf("Job %s: report %q, termination message %s %s", name, a.flags["--report"], c.TerminationMessagePath, c.TerminationMessagePolicy)
	}
	ctx := h.ctx
	loc := h.backupLocation(a)
	var rep jobreport.Report
	var err error
	switch a.cmd {
	case "create":
		var src objstore.Store
		if src, err = objstore.OpenS3(a.flags["--db"], h.minio.S3Config()); err != nil {
			h.t.Fatal(err)
		}
		var m backup.Manifest
		m, err = backup.Create(ctx, backup.CreateConfig{Source: src, To: loc, ID: a.flags["--id"], Checkpoint: a.flags["--checkpoint"],
			CountSourceKeys: a.flags["--count-source-keys"] != "", Scratch: h.t.TempDir()})
		rep = jobreport.Report{Command: "create", ID: m.ID, Bytes: m.Bytes, Objects: int64(len(m.Objects)), CopiedBytes: m.CopiedBytes,
			CopiedObjects: int64(m.CopiedObjects), Sequence: m.Checkpoint.Sequence, Time: m.Checkpoint.CreatedAt, Completed: m.CompletedAt, SourceKeys: keysOf(m.SourceKeys)}
	case "verify":
		var v backup.VerifyReport
		v, err = backup.Verify(ctx, loc, a.pos[0], h.t.TempDir())
		rep = jobreport.Report{Command: "verify", ID: a.pos[0], Keys: int64(v.Keys), Sequence: v.Sequence, SourceKeys: keysOf(v.SourceKeys)}
	case "prune":
		keep, _ := strconv.Atoi(a.flags["--keep-last"])
		var ms []backup.Manifest
		if ms, err = backup.List(ctx, loc); err != nil {
			break
		}
		rep = jobreport.Report{Command: "prune", Deleted: backup.Expired(ms, time.Now(), backup.Policy{KeepLast: keep})}
		for _, id := range rep.Deleted {
			if _, err = backup.Delete(ctx, loc, id, nil); err != nil {
				break
			}
		}
	case "delete":
		_, err = backup.Delete(ctx, loc, a.pos[0], nil)
		if a.flags["--missing-ok"] != "" && errors.Is(err, backup.ErrNotFound) {
			err = nil
		}
		rep = jobreport.Report{Command: "delete", ID: a.pos[0]}
	default:
		h.t.Fatalf("Job %s runs shale backup %s", name, a.cmd)
	}
	if err != nil {
		h.endJob(job, 1, "Error: "+err.Error())
		return a, err
	}
	b, _ := jsonMarshal(rep)
	h.endJob(job, 0, string(b))
	return a, nil
}

func jsonMarshal(v any) ([]byte, error) { return []byte(jsonString(v)), nil }

// failBackupJob ends a Job's Pod with exit 1 and msg, and the Job Failed.
func (h *harness) failBackupJob(ns, name, msg string) {
	h.t.Helper()
	h.endJob(h.waitJob(ns, name), 1, msg)
}

// endJob records a Pod of the Job that terminated with code and message,
// then the Job's outcome, as the kubelet and the Job controller would.
func (h *harness) endJob(job *batchv1.Job, code int32, msg string) {
	h.t.Helper()
	labels := map[string]string{batchv1.JobNameLabel: job.Name}
	for k, v := range job.Spec.Template.Labels {
		labels[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: fmt.Sprintf("%s-%d", job.Name, rand.Intn(100000)), Labels: labels},
		Spec: job.Spec.Template.Spec}
	h.create(pod)
	now := metav1.Now()
	pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, Image: job.Spec.Template.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, StartedAt: now, FinishedAt: now}}}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	job.Status.StartTime = &now
	if code == 0 {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now}}
	} else {
		job.Status.Failed = 3
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now, LastProbeTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now, LastProbeTime: now}}
	}
	if err := h.c.Status().Update(h.ctx, job); err != nil {
		h.t.Fatalf("Job %s status: %v", job.Name, err)
	}
}

func (h *harness) waitJob(ns, name string) *batchv1.Job {
	h.t.Helper()
	job := &batchv1.Job{}
	eventually(h.t, "Job "+name, func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, job)
		return err == nil, fmt.Sprint(err)
	})
	return job
}

func (h *harness) waitBackup(ns, name, what string, cond func(*shalev1.Backup) bool) *shalev1.Backup {
	h.t.Helper()
	var b *shalev1.Backup
	eventually(h.t, "Backup "+name+": "+what, func() (bool, string) {
		b = &shalev1.Backup{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, b); err != nil {
			return false, err.Error()
		}
		return cond(b), fmt.Sprintf("status %s, finalizers %v", jsonString(b.Status), b.Finalizers)
	})
	return b
}

func (h *harness) deleteBackup(ns, name string) {
	h.t.Helper()
	b := &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.c.Delete(h.ctx, b); err != nil {
		h.t.Fatal(err)
	}
	eventually(h.t, "Backup "+name+" gone", func() (bool, string) {
		err := h.c.Get(h.ctx, client.ObjectKeyFromObject(b), b)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v, finalizers %v", err, b.Finalizers)
	})
}

// TestBackupResource: Backups of a real database (a primary run in this
// process on the test MinIO, reached through the guard as the operator
// reaches a primary Pod) into a second bucket with its own Secret, the
// Jobs played by running the real backup code here. A Backup: the
// checkpoint asked with the operator's identity and the Backup's UID, the
// Job's command (no KV identity, both credentials), status from the
// termination message, the checkpoint released, RocksDB.status.lastBackup,
// the verify Job and lastVerifiedRestore, metrics, printer columns. A
// failed Job: Failed with its message, the checkpoint released, the
// leftovers discarded. deletePolicy Retain keeps the backup, Delete deletes
// it. Then a RocksDB with bootstrap.recovery from latest: its first
// primary's init container restores it, and a primary opened on the
// restored directory holds every key; a missing backup and a targetTime
// without an archive are refused with BootstrapRefused.
func TestBackupResource(t *testing.T) {
	h := startOperator(t)
	for _, kv := range h.minio.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ns := h.namespace("backups")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	h.minio.CreateBucket(t, "vault")
	bsec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vault-keys"}, StringData: map[string]string{
		shalev1.SecretKeyAccessKeyID: h.minio.AccessKey, shalev1.SecretKeySecretAccessKey: h.minio.SecretKey}}
	vault := store.DeepCopy()
	vault.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "vault"}
	vault.Spec.Hot.Bucket, vault.Spec.Hot.Prefix = "vault", "shale"
	vault.Spec.Credentials.Name = "vault-keys"
	h.create(bsec, vault)

	// The database: a real primary on its directory, 1000 keys.
	pod := h.waitPod(ns, "orders-primary-1")
	db = h.db(ns, "orders")
	dbURL := "s3://" + bucket + "/" + db.Status.StoragePath
	p, err := startPrimary(t, dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var ms []*kvv1.Mutation
	for i := range n {
		ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(fmt.Sprintf("k%05d", i)), Value: []byte(cloneValue(i))}}})
	}
	if _, err := p.kv.Write(h.ctx, &kvv1.WriteRequest{Mutations: ms, Sync: true}); err != nil {
		t.Fatal(err)
	}
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
	dbID := path.Base(db.Status.StoragePath)
	checkpoints := func() []string {
		t.Helper()
		r, err := p.kv.ListCheckpoints(h.ctx, &kvv1.ListCheckpointsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range r.Checkpoints {
			names = append(names, c.Name+"="+c.RequestId)
		}
		return names
	}

	// A Backup with verify.
	b1 := &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-1"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault", Verify: true}}
	h.create(b1)
	job := h.waitJob(ns, "nightly-1-backup")
	b := h.waitBackup(ns, "nightly-1", "Running", func(b *shalev1.Backup) bool { return b.Status.Phase == shalev1.BackupRunning })
	if got := checkpoints(); !slices.Equal(got, []string{"backup-nightly-1=" + string(b.UID)}) {
		t.Errorf("checkpoints in the database while the Job runs: %v, want backup-nightly-1 with the Backup's UID as request id", got)
	}
	fwd.fmu.Lock()
	for _, c := range fwd.calls {
		if c.id.Kind != auth.KindOperator || c.req.Name != "backup-nightly-1" || c.req.RequestId != string(b.UID) || c.req.Expires == nil {
			t.Errorf("Checkpoint %+v by %+v: want the operator, backup-nightly-1, the Backup's UID, an expiry", c.req, c.id)
		}
	}
	fwd.fmu.Unlock()
	c := job.Spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	want := fmt.Sprintf("backup create --db %s --checkpoint backup-nightly-1 --id nightly-1 --count-source-keys --to s3://vault/shale/_backups/%s --database %s --to-credentials-dir %s --report /dev/termination-log", dbURL, ns, dbID, backupCredentialsDir)
	if args != want {
		t.Errorf("Job args\n%s\nwant\n%s", args, want)
	}
	if c.Image != testOptions().ShaleImage || !metav1.IsControlledBy(job, b) || job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job image %s, owners %v, restart %s", c.Image, job.OwnerReferences, job.Spec.Template.Spec.RestartPolicy)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts[credentialsVolume] != credentialsDir || mounts[backupCredentialsVolume] != backupCredentialsDir {
		t.Errorf("Job mounts %v: want the database's and the backup store's credentials", mounts)
	}
	if _, err := h.runBackupJob(ns, "nightly-1-backup"); err != nil {
		t.Fatal(err)
	}
	b = h.waitBackup(ns, "nightly-1", "Completed, checkpoint released", func(b *shalev1.Backup) bool {
		return b.Status.Phase == shalev1.BackupCompleted && b.Status.CheckpointReleased
	})
	st := b.Status
	if st.BackupID != "nightly-1" || st.DatabaseID != dbID || st.Location != "s3://vault/shale/_backups/"+ns || st.Sequence < n || st.Objects < 3 ||
		st.BytesCopied <= 0 || st.BytesCopied != st.Bytes || st.ObjectsCopied != st.Objects || st.Time == nil || st.Started == nil || st.Completed == nil {
		t.Errorf("status %s", jsonString(st))
	}
	if got := checkpoints(); len(got) != 0 {
		t.Errorf("checkpoints left in the database after the backup: %v", got)
	}
	h.waitEvent(ns, "nightly-1", eventBackupCompleted)
	h.waitDB(ns, "orders", "lastBackup", func(d *shalev1.RocksDB) (bool, string) {
		lb := d.Status.LastBackup
		return lb != nil && lb.Name == "nightly-1" && lb.Sequence == st.Sequence && d.Status.FirstRecoverabilityPoint != nil &&
			d.Status.FirstRecoverabilityPoint.Equal(st.Time), jsonString(d.Status.LastBackup)
	})
	if got := testutil.ToFloat64(backupLastSuccess.WithLabelValues(ns, "orders")); got != float64(st.Completed.Unix()) {
		t.Errorf("shale_backup_last_success_timestamp_seconds %v, want %d", got, st.Completed.Unix())
	}
	// The verify Job: lastVerifiedRestore with every key.
	if a, err := h.runBackupJob(ns, "nightly-1-verify"); err != nil || a.pos[0] != "nightly-1" || a.flags["--scratch"] != cacheDir {
		t.Fatalf("verify Job %+v: %v", a, err)
	}
	b = h.waitBackup(ns, "nightly-1", "verified", func(b *shalev1.Backup) bool { return b.Status.LastVerifiedRestore != nil })
	if v := b.Status.Verification; v == nil || v.Phase != "Succeeded" || v.Keys != n || v.SourceKeys == nil || *v.SourceKeys != n ||
		!strings.Contains(v.Message, fmt.Sprintf("equal to the source checkpoint's %d", n)) {
		t.Errorf("verification %s, want Succeeded with %d keys, compared with the source's %d", jsonString(v), n, n)
	}
	h.waitEvent(ns, "nightly-1", eventBackupVerified)

	// A Job that fails: Failed with the Pod's message, the checkpoint
	// released, the leftovers discarded.
	h.create(&shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault"}})
	h.failBackupJob(ns, "broken-backup", "Error: copy objects/000009.sst.1: connection refused")
	b = h.waitBackup(ns, "broken", "Failed", func(b *shalev1.Backup) bool { return b.Status.Phase == shalev1.BackupFailed })
	if b.Status.Reason != shalev1.BackupReasonJobFailed || !strings.Contains(b.Status.Message, "Job broken-backup failed: Error: copy objects/000009.sst.1: connection refused") {
		t.Errorf("failed status %s", jsonString(b.Status))
	}
	h.waitEvent(ns, "broken", eventBackupFailed)
	if a, err := h.runBackupJob(ns, "broken-drop"); err != nil || a.flags["--missing-ok"] == "" {
		t.Fatalf("drop Job %+v: %v", a, err)
	}
	h.waitBackup(ns, "broken", "discarded, released", func(b *shalev1.Backup) bool { return b.Status.Discarded && b.Status.CheckpointReleased })
	if got := checkpoints(); len(got) != 0 {
		t.Errorf("checkpoints left in the database after a failed backup: %v", got)
	}
	if got := testutil.ToFloat64(backupFailures.WithLabelValues(ns, "orders", shalev1.BackupReasonJobFailed)); got != 1 {
		t.Errorf("shale_backup_failures_total{reason=JobFailed} %v, want 1", got)
	}

	// deletePolicy Delete: the backup goes from the store with the
	// resource; Retain (nightly-1's) keeps it.
	h.create(&shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "temp"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault", DeletePolicy: shalev1.BackupDelete}})
	a, err := h.runBackupJob(ns, "temp-backup")
	if err != nil {
		t.Fatal(err)
	}
	loc := h.backupLocation(a)
	h.waitBackup(ns, "temp", "Completed", func(b *shalev1.Backup) bool { return b.Status.Phase == shalev1.BackupCompleted })
	if err := h.c.Delete(h.ctx, &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "temp"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.runBackupJob(ns, "temp-delete"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Backup temp gone", func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "temp"}, &shalev1.Backup{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	h.deleteBackup(ns, "nightly-1")
	listed, err := backup.List(h.ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range listed {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"nightly-1"}) {
		t.Errorf("backups in the store %v, want nightly-1 (Retain) only", ids)
	}

	// The printer columns.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := h.env.Client.Get(h.ctx, types.NamespacedName{Name: "backups.shale.rocks"}, &crd); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		cols = append(cols, c.Name+"="+c.JSONPath)
	}
	if got, want := strings.Join(cols, " "), "Database=.spec.database Store=.spec.backupStore Phase=.status.phase Sequence=.status.sequence Copied=.status.bytesCopied Completed=.status.completed Age=.metadata.creationTimestamp"; got != want {
		t.Errorf("printer columns %s, want %s", got, want)
	}

	// Restores: refused while the backup is not there or a target is
	// given; then latest, restored by the init container.
	recovery := func(name, id string, target *metav1.Time) *shalev1.RocksDB {
		d := db.DeepCopy()
		d.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name}
		d.Status = shalev1.RocksDBStatus{}
		d.Spec.Bootstrap = &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "vault", Database: dbID, Backup: id, TargetTime: target}}
		return d
	}
	h.create(recovery("missing", "nope", nil), recovery("pitr", "latest", &metav1.Time{Time: time.Now()}))
	if ev := h.waitEvent(ns, "missing", shalev1.ReasonBootstrapRefused); !strings.Contains(ev.Message, "no published backup nope in s3://vault/shale/_backups/"+ns) ||
		!strings.Contains(ev.Message, "shale backup list --to s3://vault/shale/_backups/"+ns+" --database "+dbID) {
		t.Errorf("refusal of a missing backup: %q", ev.Message)
	}
	if ev := h.waitEvent(ns, "pitr", shalev1.ReasonBootstrapRefused); !strings.Contains(ev.Message, "no archive in s3://vault/shale/_backups/"+ns+"/"+dbID+" (archive/started.json): a point-in-time restore needs the source's logs archived there; turn the archive on with spec.backup.archive.backupStore: vault") {
		t.Errorf("refusal of a targetTime: %q", ev.Message)
	}
	for _, name := range []string{"missing", "pitr"} {
		if d := h.db(ns, name); d.Status.StoragePath != "" || d.Status.Recovery != nil || len(h.primaries(ns, name)) != 0 {
			t.Errorf("refused %s wrote %s", name, jsonString(d.Status))
		}
	}
	h.create(recovery("restored", "latest", nil))
	rpod := h.waitPod(ns, "restored-primary-1")
	rdb := h.db(ns, "restored")
	if r := rdb.Status.Recovery; r == nil || r.Backup != "nightly-1" || r.Database != dbID || r.Sequence != st.Sequence {
		t.Fatalf("status.recovery %s, want nightly-1 (latest)", jsonString(r))
	}
	if len(rpod.Spec.InitContainers) != 1 {
		t.Fatalf("restored's primary has init containers %v, want the restore", rpod.Spec.InitContainers)
	}
	ic := rpod.Spec.InitContainers[0]
	intoURL := "s3://" + bucket + "/" + rdb.Status.StoragePath
	want = fmt.Sprintf("backup restore nightly-1 --to s3://vault/shale/_backups/%s --database %s --into %s --resume --to-credentials-dir %s --report /dev/termination-log", ns, dbID, intoURL, backupCredentialsDir)
	if got := strings.Join(ic.Args, " "); got != want {
		t.Errorf("init container args\n%s\nwant\n%s", got, want)
	}
	if slices.Contains(rpod.Spec.Containers[0].Args, "--existing") {
		t.Errorf("restored's first primary runs with --existing: %v", rpod.Spec.Containers[0].Args)
	}
	// Play the init container, then the primary: every key is there.
	ra := parseJobArgs(t, ic.Args)
	into, err := objstore.OpenS3(ra.flags["--into"], h.minio.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Restore(h.ctx, h.backupLocation(ra), ra.pos[0], into); err != nil {
		t.Fatal(err)
	}
	rp, err := startPrimary(t, intoURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkEveryKey(t, "the restored database", rp.kv, n)
	h.waitEvent(ns, "restored", eventBootstrapRestoring)

	// A ScheduledBackup every hour, keeping 1, whose last run was two
	// hours ago: one Backup now (the missed runs are one), named after
	// its time; once it completed, the prune Job leaves it alone in the
	// store; status and the interval metric.
	sb := &shalev1.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hourly"},
		Spec: shalev1.ScheduledBackupSpec{Schedule: "0 * * * *", Database: "orders", BackupStore: "vault", Retention: &shalev1.BackupRetention{KeepLast: ptr.To[int32](1)}}}
	h.create(sb)
	twoHours := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(sb), sb); err != nil {
			return err
		}
		sb.Status.LastScheduleTime = &twoHours
		return h.c.Status().Update(h.ctx, sb)
	}); err != nil {
		t.Fatal(err)
	}
	// The operator names the Backup after the schedule time it is for:
	// the latest full hour.
	var name string
	eventually(t, "the scheduled Backup", func() (bool, string) {
		cur := &shalev1.ScheduledBackup{}
		err := h.c.Get(h.ctx, client.ObjectKeyFromObject(sb), cur)
		name = cur.Status.LastBackup
		return err == nil && name != "", fmt.Sprint(err, jsonString(cur.Status))
	})
	due, err := time.Parse("200601021504", strings.TrimPrefix(name, "hourly-"))
	if err != nil || due.Minute() != 0 || time.Since(due) > time.Hour+time.Minute {
		t.Fatalf("Backup %s: want hourly-<the latest full hour> (%v)", name, err)
	}
	if _, err := h.runBackupJob(ns, name+"-backup"); err != nil {
		t.Fatal(err)
	}
	h.waitBackup(ns, name, "Completed", func(b *shalev1.Backup) bool { return b.Status.Phase == shalev1.BackupCompleted })
	pa, err := h.runBackupJob(ns, name+"-prune")
	if err != nil || pa.flags["--keep-last"] != "1" || pa.flags["--database"] != dbID {
		t.Fatalf("prune Job %+v: %v", pa, err)
	}
	h.waitEvent(ns, "hourly", eventSchedulePruned)
	if listed, err = backup.List(h.ctx, loc); err != nil || len(listed) != 1 || listed[0].ID != name {
		t.Errorf("backups in the store after the prune: %v %v, want %s alone", listed, err, name)
	}
	eventually(t, "ScheduledBackup status", func() (bool, string) {
		cur := &shalev1.ScheduledBackup{}
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(sb), cur); err != nil {
			return false, err.Error()
		}
		st := cur.Status
		return st.LastBackup == name && st.LastScheduleTime.Time.Equal(due) && st.LastSuccessfulTime != nil && st.LastPruned == name &&
			st.NextScheduleTime != nil && st.NextScheduleTime.Time.Equal(due.Add(time.Hour)), jsonString(st)
	})
	if got := testutil.ToFloat64(backupScheduleInterval.WithLabelValues(ns, "orders", "hourly")); got != 3600 {
		t.Errorf("shale_backup_schedule_interval_seconds %v, want 3600", got)
	}
}

// keysOf is a key count for a job report, as the CLI writes it.
func keysOf(n *uint64) *int64 {
	if n == nil {
		return nil
	}
	v := int64(*n)
	return &v
}
