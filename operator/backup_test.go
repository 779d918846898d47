package operator

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/backup/jobreport"
)

// planBackup and planBackupDelete: what a Backup does next, from its
// status, its database and its Jobs.
func TestPlanBackup(t *testing.T) {
	ready := primaryView{Exists: true, Ready: true, Pod: "orders-primary-1", Epoch: 1}
	rep := &jobreport.Report{ID: "b1", Sequence: 7, Objects: 4, Bytes: 100, CopiedObjects: 1, CopiedBytes: 10}
	bk := func(phase shalev1.BackupPhase, mut ...func(*shalev1.Backup)) *shalev1.Backup {
		b := &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault", DeletePolicy: shalev1.BackupRetain}}
		b.Status.Phase = phase
		for _, m := range mut {
			m(b)
		}
		return b
	}
	asked := func(b *shalev1.Backup) { b.Status.Checkpoint = "backup-b1" }
	released := func(b *shalev1.Backup) { b.Status.CheckpointReleased = true }
	verify := func(b *shalev1.Backup) { b.Spec.Verify = true }
	verifying := func(b *shalev1.Backup) { b.Status.Verification = &shalev1.BackupVerification{Phase: "Running"} }
	jobFailed := func(b *shalev1.Backup) { b.Status.Reason = shalev1.BackupReasonJobFailed }
	del := func(b *shalev1.Backup) { b.Spec.DeletePolicy = shalev1.BackupDelete }
	jobs := func(kv ...any) map[string]jobState {
		m := map[string]jobState{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(jobState)
		}
		return m
	}
	running := jobState{Exists: true}
	succeeded := jobState{Exists: true, Succeeded: true, Report: rep}
	failed := jobState{Exists: true, Failed: true, Message: "Error: connection refused"}
	for _, tc := range []struct {
		name     string
		in       backupInput
		deleting bool
		want     backupAction
		job      string
		phase    shalev1.BackupPhase
		reason   string
		msg      string
	}{
		{name: "new, database ready: ask for the checkpoint", in: backupInput{B: bk(""), DB: ready}, want: backupAskCheckpoint},
		{name: "no database: wait", in: backupInput{B: bk(""), DB: primaryView{}}, phase: shalev1.BackupPending, msg: "RocksDB orders does not exist"},
		{name: "database not ready: wait", in: backupInput{B: bk(""), DB: primaryView{Exists: true, Why: "starting"}}, phase: shalev1.BackupPending, msg: "waiting for a ready primary of RocksDB orders: starting"},
		{name: "database deleting: failed", in: backupInput{B: bk(""), DB: primaryView{Exists: true, Deleting: true}}, phase: shalev1.BackupFailed, reason: shalev1.BackupReasonDatabaseDeleted},
		{name: "backup store missing: wait", in: backupInput{B: bk(""), DB: ready, StoreWait: "ObjectStore vault does not exist"}, phase: shalev1.BackupPending, msg: "ObjectStore vault does not exist"},
		{name: "stores that cannot go together: failed", in: backupInput{B: bk(""), DB: ready, StoreProblem: "one identity"}, phase: shalev1.BackupFailed, reason: shalev1.BackupReasonInvalidStore},
		{name: "asked, no answer recorded: the same request again", in: backupInput{B: bk(shalev1.BackupRunning), DB: ready}, want: backupAskCheckpoint},
		{name: "asked, primary gone meanwhile: wait", in: backupInput{B: bk(shalev1.BackupRunning), DB: primaryView{Exists: true, Why: "failing over"}}, msg: "waiting for a ready primary"},
		{name: "checkpoint taken: the Job", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: ready}, want: backupCreateJob, job: jobCreate},
		{name: "checkpoint taken, database deleted before the Job: failed", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: primaryView{}}, phase: shalev1.BackupFailed, reason: shalev1.BackupReasonDatabaseDeleted},
		{name: "Job running: nothing, even with the database gone", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: primaryView{}, Jobs: jobs(jobCreate, running)}},
		{name: "Job succeeded: completed", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: ready, Jobs: jobs(jobCreate, succeeded)}, phase: shalev1.BackupCompleted, msg: "published backup b1: sequence 7"},
		{name: "Job succeeded without a report: failed", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: ready, Jobs: jobs(jobCreate, jobState{Exists: true, Succeeded: true, ReportErr: "not its report"})}, phase: shalev1.BackupFailed, reason: shalev1.BackupReasonJobFailed, msg: "without a readable report"},
		{name: "Job failed: failed with its message", in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: ready, Jobs: jobs(jobCreate, failed)}, phase: shalev1.BackupFailed, reason: shalev1.BackupReasonJobFailed, msg: "Job b1-backup failed: Error: connection refused"},
		{name: "completed: release the checkpoint", in: backupInput{B: bk(shalev1.BackupCompleted, asked), DB: ready, Jobs: jobs(jobCreate, succeeded)}, want: backupRelease},
		{name: "completed, primary not ready: wait to release", in: backupInput{B: bk(shalev1.BackupCompleted, asked), DB: primaryView{Exists: true}}},
		{name: "completed and released: nothing", in: backupInput{B: bk(shalev1.BackupCompleted, asked, released), DB: ready}},
		{name: "completed, verify: the verify Job", in: backupInput{B: bk(shalev1.BackupCompleted, asked, released, verify), DB: ready}, want: backupCreateJob, job: jobVerify},
		{name: "verify Job running: nothing", in: backupInput{B: bk(shalev1.BackupCompleted, asked, released, verify, verifying), DB: ready, Jobs: jobs(jobVerify, running)}},
		{name: "failed, checkpoint taken: release it", in: backupInput{B: bk(shalev1.BackupFailed, asked, jobFailed), DB: ready}, want: backupRelease},
		{name: "failed Job: discard what it left", in: backupInput{B: bk(shalev1.BackupFailed, asked, released, jobFailed), DB: ready}, want: backupCreateJob, job: jobDrop},
		{name: "checkpoint refused: nothing to discard", in: backupInput{B: bk(shalev1.BackupFailed, func(b *shalev1.Backup) { b.Status.Reason = shalev1.BackupReasonCheckpointRefused }), DB: ready}},

		{name: "delete while the copy runs: wait", deleting: true, in: backupInput{B: bk(shalev1.BackupRunning, asked), DB: ready, Jobs: jobs(jobCreate, running)}, msg: "waiting for it to end"},
		{name: "delete, Retain, completed: finish, backup kept", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked, released), DB: ready, Jobs: jobs(jobCreate, succeeded)}, want: backupFinish, msg: "deletePolicy Retain"},
		{name: "delete, checkpoint held: release first", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked), DB: ready, Jobs: jobs(jobCreate, succeeded)}, want: backupRelease},
		{name: "delete, Delete, completed: the delete Job", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked, released, del), DB: ready, Jobs: jobs(jobCreate, succeeded)}, want: backupCreateJob, job: jobDelete},
		{name: "delete Job done: finish", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked, released, del), DB: ready, Jobs: jobs(jobCreate, succeeded, jobDelete, succeeded)}, want: backupFinish, msg: "deleted backup"},
		{name: "delete Job failed: keep the finalizer, say how", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked, released, del), DB: ready, Jobs: jobs(jobCreate, succeeded, jobDelete, failed)}, msg: "remove the finalizer shale.rocks/backup"},
		{name: "delete, Retain, failed Job not discarded: the delete Job", deleting: true, in: backupInput{B: bk(shalev1.BackupFailed, asked, released, jobFailed), DB: ready, Jobs: jobs(jobCreate, failed)}, want: backupCreateJob, job: jobDelete},
		{name: "delete, database gone: finish without releasing", deleting: true, in: backupInput{B: bk(shalev1.BackupCompleted, asked), DB: primaryView{}}, want: backupFinish},
		{name: "delete, never started: finish", deleting: true, in: backupInput{B: bk(shalev1.BackupPending), DB: ready}, want: backupFinish, msg: "nothing was written"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s backupStep
			if tc.deleting {
				s = planBackupDelete(tc.in)
			} else {
				s = planBackup(tc.in)
			}
			if s.Action != tc.want || s.Job != tc.job || s.Phase != tc.phase || s.Reason != tc.reason || !strings.Contains(s.Message, tc.msg) {
				t.Errorf("got %+v; want action %d job %q phase %q reason %q message with %q", s, tc.want, tc.job, tc.phase, tc.reason, tc.msg)
			}
		})
	}
}

// The verify's outcome (RFC 0011 step 14a): the source's count it was
// compared with, or "not compared" for a backup created without it; and
// the create Job counts the source's keys only when the Backup verifies.
func TestPlanBackupVerifyComparison(t *testing.T) {
	ready := primaryView{Exists: true, Ready: true, Pod: "orders-primary-1", Epoch: 1}
	b := &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1"}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "vault", Verify: true}}
	b.Status = shalev1.BackupStatus{Phase: shalev1.BackupCompleted, Checkpoint: "backup-b1", CheckpointReleased: true, BackupID: "b1",
		Verification: &shalev1.BackupVerification{Phase: "Running"}}
	src := int64(1000)
	for _, tc := range []struct {
		name   string
		rep    jobreport.Report
		source *int64
		msg    string
	}{
		{"compared", jobreport.Report{Keys: 1000, Sequence: 9, SourceKeys: &src}, &src, "1000 keys (equal to the source checkpoint's 1000)"},
		{"not compared", jobreport.Report{Keys: 1000, Sequence: 9}, nil, "1000 keys (not compared with the source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := planBackup(backupInput{B: b, DB: ready, Jobs: map[string]jobState{jobVerify: {Exists: true, Succeeded: true, Report: &tc.rep}}})
			v := s.Verify
			if v == nil || v.Phase != "Succeeded" || v.Keys != 1000 || (v.SourceKeys == nil) != (tc.source == nil) ||
				(v.SourceKeys != nil && *v.SourceKeys != *tc.source) || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("verification %+v, want Succeeded, sourceKeys %v, message with %q", v, tc.source, tc.msg)
			}
		})
	}
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}}
	store := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "vault"}}
	for _, verify := range []bool{true, false} {
		b := b.DeepCopy()
		b.Spec.Verify = verify
		args := strings.Join(backupArgs(jobCreate, b, db, store, store), " ")
		if strings.Contains(args, "--count-source-keys") != verify {
			t.Errorf("verify %v: create args %q", verify, args)
		}
	}
}

// decideRecovery: which backup a bootstrap.recovery restores, or why not.
func TestDecideRecovery(t *testing.T) {
	store := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "vault"}}
	t0 := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	pb := func(id string, completed time.Time) publishedBackup {
		b := publishedBackup{ID: id, CompletedAt: completed}
		b.Checkpoint.Sequence = uint64(completed.Unix())
		return b
	}
	two := []publishedBackup{pb("b1", t0), pb("b2", t0.Add(time.Hour))}
	two[0].Checkpoint.CreatedAt, two[1].Checkpoint.CreatedAt = t0, t0.Add(time.Hour)
	archived := archiveWindow{Started: true, StartedAt: t0.Add(-time.Hour), CaughtUpAt: t0.Add(2 * time.Hour)}
	at := func(t time.Time) func(*shalev1.RecoverySource) {
		return func(r *shalev1.RecoverySource) { r.TargetTime = &metav1.Time{Time: t} }
	}
	seq := func(n int64) func(*shalev1.RecoverySource) {
		return func(r *shalev1.RecoverySource) { r.TargetSequence = &n }
	}
	db := func(id string, mut ...func(*shalev1.RecoverySource)) *shalev1.RocksDB {
		r := &shalev1.RecoverySource{BackupStore: "vault", Database: "orders-1", Backup: id}
		for _, m := range mut {
			m(r)
		}
		return &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new"}, Spec: shalev1.RocksDBSpec{Bootstrap: &shalev1.BootstrapSpec{Recovery: r}}}
	}
	for _, tc := range []struct {
		name    string
		in      recoveryInput
		backup  string
		problem string
	}{
		{"latest: the newest by completion", recoveryInput{DB: db("latest"), Store: store, Location: "s3://v/_backups/ns", Backups: []publishedBackup{two[1], two[0]}}, "b2", ""},
		{"an id", recoveryInput{DB: db("b1"), Store: store, Location: "s3://v/_backups/ns", Backups: two}, "b1", ""},
		{"an id not published", recoveryInput{DB: db("b9"), Store: store, Location: "s3://v/_backups/ns", Backups: two}, "", "no published backup b9 in s3://v/_backups/ns for database orders-1 (an interrupted one cannot be restored): list them with shale backup list --to s3://v/_backups/ns --database orders-1"},
		{"latest of nothing", recoveryInput{DB: db("latest"), Store: store, Location: "s3://v/_backups/ns"}, "", "no published backup in s3://v/_backups/ns for database orders-1: take one"},
		// Point in time (RFC 0011 step 31 (a)): the archive started at
		// t0-1h, b1 (checkpoint at t0) and b2 (t0+1h) after it, caught up
		// at t0+2h.
		{"targetTime in the window: the newest base at or before it", recoveryInput{DB: db("latest", at(t0.Add(90*time.Minute))), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "b2", ""},
		{"targetTime between the bases", recoveryInput{DB: db("latest", at(t0.Add(30*time.Minute))), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "b1", ""},
		{"targetTime at caughtUpAt", recoveryInput{DB: db("latest", at(t0.Add(2*time.Hour))), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "b2", ""},
		{"targetTime after caughtUpAt", recoveryInput{DB: db("latest", at(t0.Add(3*time.Hour))), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "",
			"time 2026-01-01T05:00:00Z is outside the recoverable window of s3://v/_backups/ns/orders-1, from 2026-01-01T02:00:00Z (sequence " + fmt.Sprint(t0.Unix()) + ", backup b1) to 2026-01-01T04:00:00Z: the archive has not reached it"},
		{"targetTime before the first base", recoveryInput{DB: db("latest", at(t0.Add(-time.Minute))), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "", "it is before the oldest base backup taken since the archive started"},
		{"targetSequence from the first base's", recoveryInput{DB: db("latest", seq(t0.Unix()+1)), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "b1", ""},
		{"targetSequence past the last base: the restore decides", recoveryInput{DB: db("latest", seq(t0.Unix()+99999)), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "b2", ""},
		{"targetSequence before the first base", recoveryInput{DB: db("latest", seq(t0.Unix()-1)), Store: store, Location: "s3://v/_backups/ns", Backups: two, Archive: archived}, "", "sequence " + fmt.Sprint(t0.Unix()-1) + " is outside the recoverable window"},
		{"a gap after b1: the window starts at b2", recoveryInput{DB: db("latest", at(t0.Add(30*time.Minute))), Store: store, Location: "s3://v/_backups/ns", Backups: two,
			Archive: archiveWindow{Started: true, StartedAt: t0.Add(-time.Hour), CaughtUpAt: t0.Add(2 * time.Hour), Gaps: []time.Time{t0.Add(10 * time.Minute)}}}, "", "from 2026-01-01T03:00:00Z (sequence " + fmt.Sprint(t0.Add(time.Hour).Unix()) + ", backup b2)"},
		{"no base after the archive started", recoveryInput{DB: db("latest", at(t0.Add(30*time.Minute))), Store: store, Location: "s3://v/_backups/ns", Backups: two,
			Archive: archiveWindow{Started: true, StartedAt: t0.Add(3 * time.Hour), CaughtUpAt: t0.Add(4 * time.Hour)}}, "", "the archive started at 2026-01-01T05:00:00Z, and no base backup was taken after that; take a Backup"},
		{"no archive", recoveryInput{DB: db("latest", at(t0)), Store: store, Location: "s3://v/_backups/ns", Backups: two}, "", "no archive in s3://v/_backups/ns/orders-1 (archive/started.json): a point-in-time restore needs the source's logs archived there; turn the archive on with spec.backup.archive.backupStore: vault"},
		{"a target with a backup id", recoveryInput{DB: db("b1", seq(5)), Store: store, Backups: two, Archive: archived}, "", "picks its base backup itself: set backup: latest, not b1"},
		{"no backup store", recoveryInput{DB: db("b1")}, "", "ObjectStore vault (spec.bootstrap.recovery.backupStore) does not exist in namespace ns"},
		{"stores that cannot go together", recoveryInput{DB: db("b1"), Store: store, Access: "a backup Pod runs as one identity"}, "", "runs as one identity"},
		{"store unreachable", recoveryInput{DB: db("b1"), Store: store, Location: "s3://v/_backups/ns", ReadErr: errors.New("connection refused")}, "", "cannot read the backups in s3://v/_backups/ns/orders-1 (ObjectStore vault): connection refused"},
		{"a path for a database id", recoveryInput{DB: db("b1", func(r *shalev1.RecoverySource) { r.Database = "ns/orders-1" }), Store: store}, "", "is not a database id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, problem := decideRecovery(tc.in)
			if out.Backup != tc.backup || !strings.Contains(problem, tc.problem) || (tc.problem == "") != (problem == "") {
				t.Errorf("got %+v, %q; want backup %q, problem %q", out, problem, tc.backup, tc.problem)
			}
		})
	}
}

// backupAccess: which flags and mounts reach the backup store, or why a
// Pod cannot.
func TestBackupAccess(t *testing.T) {
	os := func(name, endpoint string, mut func(*shalev1.ObjectStore)) *shalev1.ObjectStore {
		o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: name}}
		o.Spec.Endpoint = endpoint
		mut(o)
		return o
	}
	secret := func(n string) func(*shalev1.ObjectStore) {
		return func(o *shalev1.ObjectStore) { o.Spec.Credentials = &shalev1.SecretReference{Name: n} }
	}
	sa := func(n string) func(*shalev1.ObjectStore) {
		return func(o *shalev1.ObjectStore) { o.Spec.ServiceAccountName = n }
	}
	src := os("db", "http://minio:9000", secret("k1"))
	for _, tc := range []struct {
		name    string
		src     *shalev1.ObjectStore
		dst     *shalev1.ObjectStore
		args    string
		mounts  int
		problem string
	}{
		{"the database's own store", src, src, "", 0, ""},
		{"another bucket, the same Secret: server-side", src, os("vault", "http://minio:9000", secret("k1")), "", 0, ""},
		{"another Secret: mounted, streamed", src, os("vault", "http://minio:9000", secret("k2")), "--to-credentials-dir " + backupCredentialsDir, 1, ""},
		{"another endpoint", src, os("vault", "https://s3.example", secret("k2")), "--to-endpoint https://s3.example --to-credentials-dir " + backupCredentialsDir, 1, ""},
		{"the same ServiceAccount", os("db", "e", sa("s")), os("vault", "e", sa("s")), "", 0, ""},
		{"another ServiceAccount: refused", os("db", "e", sa("s")), os("vault", "e", sa("t")), "", 0, "a backup Pod runs as one identity"},
		{"instance role to a Secret's database: mounted", os("db", "e", func(o *shalev1.ObjectStore) { o.Spec.InstanceRole = true }), os("vault", "e", secret("k2")), "--to-credentials-dir " + backupCredentialsDir, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, problem := backupAccess(tc.src, tc.dst)
			if got := strings.Join(a.args, " "); got != tc.args || len(a.mounts) != tc.mounts || len(a.volumes) != tc.mounts || !strings.Contains(problem, tc.problem) || (tc.problem == "") != (problem == "") {
				t.Errorf("got %q, %d mounts, %q; want %q, %d, %q", got, len(a.mounts), problem, tc.args, tc.mounts, tc.problem)
			}
		})
	}
}

// backupSummary: lastBackup is the newest Completed, the first
// recoverability point the oldest kept one's checkpoint time.
func TestBackupSummary(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := func(name string, phase shalev1.BackupPhase, h int, mut ...func(*shalev1.Backup)) shalev1.Backup {
		x := shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name}}
		x.Status.Phase = phase
		x.Status.Time = &metav1.Time{Time: t0.Add(time.Duration(h) * time.Hour)}
		x.Status.Completed = &metav1.Time{Time: t0.Add(time.Duration(h)*time.Hour + time.Minute)}
		x.Status.Sequence = int64(h)
		for _, m := range mut {
			m(&x)
		}
		return x
	}
	deleting := func(x *shalev1.Backup) {
		x.DeletionTimestamp = &metav1.Time{Time: t0}
		x.Spec.DeletePolicy = shalev1.BackupDelete
	}
	last, first := backupSummary([]shalev1.Backup{b("a", shalev1.BackupCompleted, 1, deleting), b("b", shalev1.BackupCompleted, 2), b("c", shalev1.BackupCompleted, 3), b("d", shalev1.BackupFailed, 4), b("e", shalev1.BackupRunning, 5)})
	if last == nil || last.Name != "c" || last.Sequence != 3 || first == nil || !first.Time.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("last %+v, first %v: want c, and b's time (a is being deleted from the store)", last, first)
	}
	if last, first := backupSummary([]shalev1.Backup{b("d", shalev1.BackupFailed, 4)}); last != nil || first != nil {
		t.Errorf("no Completed backup: %+v %v", last, first)
	}
}
