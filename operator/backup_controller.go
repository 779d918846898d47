package operator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/backup/jobreport"
)

// The Backup resource (docs/rfcs/0011-backups-and-point-in-time-restore.md,
// step 27): the operator asks the database's primary for the checkpoint
// backup-NAME (the Backup's UID as request id, as a Checkpoint resource
// does), a Job copies it (`shale backup create --checkpoint`, no KV
// identity needed), the operator reads the Job's report from its Pod's
// termination message and deletes the checkpoint. What to do next is
// planBackup's decision (pure, table-tested); the reconciler only reads
// what it needs and carries the step out.

// backupCheckpointTTL bounds what a Backup that never finishes leaves in
// its database: the checkpoint expires (the backup's pin, if its Job got
// that far, goes with the drop Job).
const backupCheckpointTTL = 24 * time.Hour

// Event reasons of a Backup.
const (
	eventBackupPending    = "BackupPending"
	eventBackupStarted    = "BackupStarted"
	eventBackupCompleted  = "BackupCompleted"
	eventBackupFailed     = "BackupFailed"
	eventBackupVerified   = "BackupVerified"
	eventBackupUnverified = "BackupVerifyFailed"
	eventBackupReleased   = "BackupCheckpointDeleted"
	eventBackupJob        = "BackupJobCreated"
	eventBackupDeleted    = "BackupDeleted"
	eventBackupDeleting   = "BackupDeleteWaiting"
)

// jobState is what a Job of a Backup came to.
type jobState struct {
	Exists, Succeeded, Failed bool
	// Report is the succeeded Pod's report (nil if unreadable: ReportErr).
	Report    *jobreport.Report
	ReportErr string
	// Message is the failed Pod's termination message (its last log
	// lines) or the Job's failure condition.
	Message string
}

// backupInput is what planBackup decides from.
type backupInput struct {
	B  *shalev1.Backup
	DB primaryView
	// StoreWait: an ObjectStore is missing (it may be created); StoreProblem:
	// the stores cannot be used together (for good).
	StoreWait, StoreProblem string
	Jobs                    map[string]jobState
}

type backupAction int

const (
	backupNothing backupAction = iota
	backupAskCheckpoint
	backupCreateJob
	backupRelease
	backupFinish // remove the finalizer
)

// backupStep is planBackup's decision.
type backupStep struct {
	Action backupAction
	Job    string // the kind, for backupCreateJob
	// Phase, Reason, Message for status ("" Phase keeps it).
	Phase   shalev1.BackupPhase
	Reason  string
	Message string
	// Report: the create Job's, to record (Completed).
	Report *jobreport.Report
	// Verify: the verification to record.
	Verify *shalev1.BackupVerification
	// Discarded: a Failed backup's leftovers are gone.
	Discarded bool
	// Released: nothing to release (the database is gone).
	Released bool
	Event    string
	Warning  bool
	Retry    time.Duration
}

// checkpointAsked: the primary reported the checkpoint created.
func checkpointAsked(b *shalev1.Backup) bool { return b.Status.Checkpoint != "" }

// planBackup decides what a Backup that is not being deleted needs next.
func planBackup(in backupInput) backupStep {
	b, db := in.B, in.DB
	st := b.Status
	name := b.Spec.Database
	release := func() (backupStep, bool) {
		if !checkpointAsked(b) || st.CheckpointReleased {
			return backupStep{}, false
		}
		switch {
		case !db.Exists || db.Deleting:
			return backupStep{Released: true}, true
		case !db.Ready:
			return backupStep{Retry: checkpointWait}, true
		}
		return backupStep{Action: backupRelease}, true
	}
	switch st.Phase {
	case "", shalev1.BackupPending:
		switch {
		case in.StoreProblem != "":
			return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonInvalidStore, Message: in.StoreProblem, Event: eventBackupFailed, Warning: true}
		case !db.Exists:
			return backupStep{Phase: shalev1.BackupPending, Message: fmt.Sprintf("RocksDB %s does not exist in namespace %s: create it, or fix spec.database (then create a new Backup)", name, b.Namespace), Retry: checkpointWait, Event: eventBackupPending, Warning: true}
		case db.Deleting:
			return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonDatabaseDeleted, Message: fmt.Sprintf("RocksDB %s is being deleted: no backup of it is taken", name), Event: eventBackupFailed, Warning: true}
		case in.StoreWait != "":
			return backupStep{Phase: shalev1.BackupPending, Message: in.StoreWait, Retry: checkpointWait, Event: eventBackupPending, Warning: true}
		case !db.Ready:
			return backupStep{Phase: shalev1.BackupPending, Message: fmt.Sprintf("waiting for a ready primary of RocksDB %s: %s", name, db.Why), Retry: checkpointWait}
		}
		return backupStep{Action: backupAskCheckpoint}
	case shalev1.BackupRunning:
		j := in.Jobs[jobCreate]
		switch {
		case j.Succeeded && j.Report != nil:
			r := j.Report
			return backupStep{Phase: shalev1.BackupCompleted, Report: r, Event: eventBackupCompleted,
				Message: fmt.Sprintf("published backup %s: sequence %d, %d objects (%d bytes); copied %d objects (%d bytes)", r.ID, r.Sequence, r.Objects, r.Bytes, r.CopiedObjects, r.CopiedBytes)}
		case j.Succeeded:
			return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonJobFailed, Event: eventBackupFailed, Warning: true,
				Message: fmt.Sprintf("Job %s-%s succeeded without a readable report (%s): an image older than the operator? set spec.primary.image of RocksDB %s to a newer shale", b.Name, jobCreate, j.ReportErr, name)}
		case j.Failed:
			return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonJobFailed, Event: eventBackupFailed, Warning: true,
				Message: fmt.Sprintf("Job %s-%s failed: %s", b.Name, jobCreate, j.Message)}
		case j.Exists:
			return backupStep{}
		case !db.Exists || db.Deleting:
			return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonDatabaseDeleted, Message: fmt.Sprintf("RocksDB %s was deleted before its backup was copied", name), Event: eventBackupFailed, Warning: true}
		case checkpointAsked(b):
			if in.StoreProblem != "" {
				return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonInvalidStore, Message: in.StoreProblem, Event: eventBackupFailed, Warning: true}
			}
			if in.StoreWait != "" {
				return backupStep{Message: in.StoreWait, Retry: checkpointWait, Event: eventBackupPending, Warning: true}
			}
			return backupStep{Action: backupCreateJob, Job: jobCreate}
		case !db.Ready:
			return backupStep{Message: fmt.Sprintf("waiting for a ready primary of RocksDB %s to take the checkpoint: %s", name, db.Why), Retry: checkpointWait}
		}
		// Asked before, no answer recorded: the same request id again.
		return backupStep{Action: backupAskCheckpoint}
	case shalev1.BackupCompleted:
		if s, ok := release(); ok {
			return s
		}
		if !b.Spec.Verify {
			return backupStep{}
		}
		v := st.Verification
		switch {
		case v == nil:
			return backupStep{Action: backupCreateJob, Job: jobVerify, Verify: &shalev1.BackupVerification{Phase: "Running", Message: "Job " + b.Name + "-" + jobVerify + " verifies the backup"}}
		case v.Phase != "Running":
			return backupStep{}
		}
		j := in.Jobs[jobVerify]
		switch {
		case j.Succeeded && j.Report != nil:
			compared := "not compared with the source (the backup's manifest has no source key count)"
			if j.Report.SourceKeys != nil {
				compared = fmt.Sprintf("equal to the source checkpoint's %d", *j.Report.SourceKeys)
			}
			return backupStep{Verify: &shalev1.BackupVerification{Phase: "Succeeded", Keys: j.Report.Keys, SourceKeys: j.Report.SourceKeys,
				Message: fmt.Sprintf("opened with RocksDB, every checksum matched: %d keys (%s), sequence %d", j.Report.Keys, compared, j.Report.Sequence)}, Event: eventBackupVerified}
		case j.Succeeded, j.Failed:
			msg := j.Message
			if j.Succeeded {
				msg = j.ReportErr
			}
			return backupStep{Verify: &shalev1.BackupVerification{Phase: "Failed", Message: fmt.Sprintf("Job %s-%s: %s (the backup stays listed: verify it again with shale backup verify, or delete it)", b.Name, jobVerify, msg)},
				Event: eventBackupUnverified, Warning: true}
		case !j.Exists:
			return backupStep{Action: backupCreateJob, Job: jobVerify}
		}
		return backupStep{}
	case shalev1.BackupFailed:
		if s, ok := release(); ok {
			return s
		}
		if st.Reason != shalev1.BackupReasonJobFailed || st.Discarded {
			return backupStep{}
		}
		// The copy may have left a pending record and a pin in the
		// database: discard them (shale backup delete).
		j := in.Jobs[jobDrop]
		switch {
		case j.Succeeded:
			return backupStep{Discarded: true}
		case j.Failed:
			return backupStep{}
		case j.Exists:
			return backupStep{}
		case in.StoreWait != "" || in.StoreProblem != "":
			return backupStep{}
		}
		return backupStep{Action: backupCreateJob, Job: jobDrop}
	}
	return backupStep{}
}

// planBackupDelete decides what deleting a Backup takes: wait for its
// copy to end (a delete racing it could remove what it publishes), release
// the checkpoint, and with deletePolicy Delete (or a Failed backup not
// discarded) delete it from the store.
func planBackupDelete(in backupInput) backupStep {
	b, db := in.B, in.DB
	st := b.Status
	if j := in.Jobs[jobCreate]; j.Exists && !j.Succeeded && !j.Failed {
		return backupStep{Message: fmt.Sprintf("Job %s-%s is copying the backup: waiting for it to end before deleting", b.Name, jobCreate), Retry: checkpointRetry, Event: eventBackupDeleting}
	}
	if checkpointAsked(b) && !st.CheckpointReleased && db.Exists && !db.Deleting && db.Ready {
		return backupStep{Action: backupRelease}
	}
	remove := (b.Spec.DeletePolicy == shalev1.BackupDelete && st.Phase == shalev1.BackupCompleted) ||
		(st.Phase == shalev1.BackupFailed && st.Reason == shalev1.BackupReasonJobFailed && !st.Discarded) ||
		(b.Spec.DeletePolicy == shalev1.BackupDelete && st.Phase == shalev1.BackupRunning && in.Jobs[jobCreate].Exists)
	if !remove {
		msg := "nothing was written to the backup store"
		if st.Phase == shalev1.BackupCompleted {
			msg = fmt.Sprintf("deletePolicy Retain: backup %s stays in %s (database %s)", st.BackupID, st.Location, st.DatabaseID)
		}
		return backupStep{Action: backupFinish, Message: msg, Event: eventBackupDeleted}
	}
	j := in.Jobs[jobDelete]
	switch {
	case j.Succeeded:
		return backupStep{Action: backupFinish, Message: fmt.Sprintf("deleted backup %s from %s (the objects no other backup names)", st.BackupID, st.Location), Event: eventBackupDeleted}
	case j.Failed:
		return backupStep{Message: fmt.Sprintf("Job %s-%s failed: %s; delete the Job to try again, or remove the finalizer %s to leave the backup in the store", b.Name, jobDelete, j.Message, shalev1.FinalizerBackup),
			Retry: checkpointWait, Event: eventBackupDeleting, Warning: true}
	case j.Exists:
		return backupStep{}
	case in.StoreProblem != "" || in.StoreWait != "":
		why := in.StoreProblem + in.StoreWait
		return backupStep{Action: backupFinish, Message: fmt.Sprintf("cannot run the delete (%s): backup %s is left in %s; delete it with shale backup delete", why, st.BackupID, st.Location), Event: eventBackupDeleted, Warning: true}
	}
	return backupStep{Action: backupCreateJob, Job: jobDelete}
}

// backupReconciler runs Backups.
type backupReconciler struct {
	client.Client
	apiReader client.Reader
	recorder  record.EventRecorder
	now       func() time.Time
	kv        checkpointKV
	dbs       *rocksDBReconciler
	image     string

	// newest is the completion time of the newest Completed Backup seen
	// per database, so that the gauges are right after a restart (every
	// Backup is reconciled then).
	mu     sync.Mutex
	newest map[types.NamespacedName]time.Time
}

// noteCompleted sets the database's backup gauges from b if it is the
// newest Completed Backup seen.
func (r *backupReconciler) noteCompleted(b *shalev1.Backup) {
	if b.Status.Phase != shalev1.BackupCompleted || b.Status.Completed == nil {
		return
	}
	k := types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Database}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.newest == nil {
		r.newest = map[types.NamespacedName]time.Time{}
	}
	if t, ok := r.newest[k]; ok && !b.Status.Completed.After(t) {
		return
	}
	r.newest[k] = b.Status.Completed.Time
	backupLastSuccess.WithLabelValues(k.Namespace, k.Name).Set(float64(b.Status.Completed.Unix()))
	backupLastBytes.WithLabelValues(k.Namespace, k.Name).Set(float64(b.Status.Bytes))
	backupLastCopied.WithLabelValues(k.Namespace, k.Name).Set(float64(b.Status.BytesCopied))
	backupLastObjects.WithLabelValues(k.Namespace, k.Name).Set(float64(b.Status.Objects))
}

// indexBackupDatabase indexes Backups by their database.
const indexBackupDatabase = "spec.database"

// +kubebuilder:rbac:groups=shale.rocks,resources=backups,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=shale.rocks,resources=backups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=backups/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete

func (r *backupReconciler) setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &shalev1.Backup{}, indexBackupDatabase, func(o client.Object) []string {
		return []string{o.(*shalev1.Backup).Spec.Database}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("backup").
		For(&shalev1.Backup{}).
		Owns(&batchv1.Job{}).
		Watches(&shalev1.RocksDB{}, handler.EnqueueRequestsFromMapFunc(r.forRocksDB)).
		Complete(r)
}

// forRocksDB wakes the Backups of a RocksDB that wait for it (a primary
// becoming ready).
func (r *backupReconciler) forRocksDB(ctx context.Context, o client.Object) []reconcile.Request {
	var bs shalev1.BackupList
	if err := r.List(ctx, &bs, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexBackupDatabase: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, b := range bs.Items {
		if b.Status.Phase == shalev1.BackupCompleted && b.Status.CheckpointReleased && (b.Status.Verification == nil || b.Status.Verification.Phase != "Running") {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
	}
	return reqs
}

// jobName is the name of a Backup's Job of kind.
func jobName(owner, kind string) string { return owner + "-" + kind }

// readJob reads a Job and, once it ended, its Pods' reports.
func readJob(ctx context.Context, c client.Reader, ns, name string) (jobState, error) {
	var s jobState
	job := &batchv1.Job{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job); err != nil {
		return s, client.IgnoreNotFound(err)
	}
	s.Exists = true
	for _, cond := range job.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			s.Succeeded = true
		case batchv1.JobFailed:
			s.Failed = true
			s.Message = fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
		}
	}
	if !s.Succeeded && !s.Failed {
		return s, nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: name}); err != nil {
		return s, err
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp) })
	s.ReportErr = "no Pod of the Job reported"
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			t := cs.State.Terminated
			if t == nil || cs.Name != containerName {
				continue
			}
			if t.ExitCode == 0 && s.Succeeded {
				rep, err := jobreport.Parse(t.Message)
				if err != nil {
					s.ReportErr = err.Error()
					continue
				}
				s.Report, s.ReportErr = &rep, ""
			}
			if t.ExitCode != 0 && s.Failed && t.Message != "" {
				// The last failed Pod's message: its last log lines.
				s.Message = lastLines(t.Message, 1024)
			}
		}
	}
	return s, nil
}

// lastLines keeps the end of a message of at most n bytes.
func lastLines(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

func (r *backupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &shalev1.Backup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(b, shalev1.FinalizerBackup) {
		return ctrl.Result{}, nil
	}
	r.noteCompleted(b)
	if b.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(b, shalev1.FinalizerBackup) {
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(b, shalev1.FinalizerBackup)
		if err := r.Patch(ctx, b, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	ckr := &checkpointReconciler{Client: r.Client, dbs: r.dbs}
	view, db, err := ckr.view(ctx, &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace}, Spec: shalev1.CheckpointSpec{Database: b.Spec.Database}})
	if err != nil {
		return ctrl.Result{}, err
	}
	if db != nil && b.Status.DatabaseID == "" && db.Status.StoragePath == "" && view.Ready {
		view.Ready, view.Why = false, "no storage directory yet"
	}
	in := backupInput{B: b, DB: view, Jobs: map[string]jobState{}}
	src, dst, err := r.stores(ctx, b, db, &in)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, k := range []string{jobCreate, jobVerify, jobDelete, jobDrop} {
		if in.Jobs[k], err = readJob(ctx, r.Client, b.Namespace, jobName(b.Name, k)); err != nil {
			return ctrl.Result{}, err
		}
	}
	var step backupStep
	if b.DeletionTimestamp != nil {
		step = planBackupDelete(in)
	} else {
		step = planBackup(in)
	}
	return r.carryOut(ctx, b, db, src, dst, view, step)
}

// stores reads the Backup's ObjectStores and whether they can be used
// together (in.StoreWait, in.StoreProblem).
func (r *backupReconciler) stores(ctx context.Context, b *shalev1.Backup, db *shalev1.RocksDB, in *backupInput) (src, dst *shalev1.ObjectStore, err error) {
	get := func(name, what string) (*shalev1.ObjectStore, error) {
		os := &shalev1.ObjectStore{}
		err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: name}, os)
		if apierrors.IsNotFound(err) {
			in.StoreWait = fmt.Sprintf("ObjectStore %s (%s) does not exist in namespace %s: create it", name, what, b.Namespace)
			return nil, nil
		}
		return os, err
	}
	if dst, err = get(b.Spec.BackupStore, "spec.backupStore"); err != nil || dst == nil {
		return nil, nil, err
	}
	if db == nil {
		return nil, dst, nil
	}
	if src, err = get(db.Spec.ObjectStoreRef.Name, "the database's"); err != nil || src == nil {
		return nil, dst, err
	}
	if _, problem := backupAccess(src, dst); problem != "" {
		in.StoreProblem = problem
	}
	return src, dst, nil
}

// carryOut does what planBackup or planBackupDelete decided.
func (r *backupReconciler) carryOut(ctx context.Context, b *shalev1.Backup, db *shalev1.RocksDB, src, dst *shalev1.ObjectStore, view primaryView, step backupStep) (ctrl.Result, error) {
	now := r.now()
	acted := step.Action != backupNothing
	switch step.Action {
	case backupAskCheckpoint:
		step = r.askCheckpoint(ctx, b, db, view, now)
	case backupCreateJob:
		kind := step.Job
		if dst == nil || (kind == jobCreate && (db == nil || src == nil)) {
			return ctrl.Result{RequeueAfter: checkpointWait}, nil
		}
		image, primary := r.image, shalev1.PrimarySpec{}
		if db != nil {
			primary = db.Spec.Primary
			if primary.Image != "" {
				image = primary.Image
			}
		}
		if src == nil {
			// The database is gone: the Pod reaches the backup store only
			// (a pin in a deleted directory needs no delete).
			src = dst
		}
		job, problem := backupJob(backupJobSpec{Name: jobName(b.Name, kind), Kind: kind, Owner: b, Image: image,
			Labels: map[string]string{shalev1.LabelBackup: b.Name, shalev1.LabelRocksDB: b.Spec.Database},
			Args:   backupArgs(kind, b, db, src, dst), Src: src, Dst: dst, Primary: primary})
		if problem != "" {
			step = backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonInvalidStore, Message: problem, Event: eventBackupFailed, Warning: true}
			break
		}
		if err := controllerutil.SetControllerReference(b, job, r.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, err
		}
		if step.Event == "" {
			step.Event = eventBackupJob
			step.Message = fmt.Sprintf("created Job %s: shale %v", job.Name, job.Spec.Template.Spec.Containers[0].Args)
			if kind == jobCreate {
				step.Event, step.Message = eventBackupStarted, fmt.Sprintf("Job %s copies checkpoint %s of RocksDB %s to %s (database %s)", job.Name, b.Status.Checkpoint, b.Spec.Database, b.Status.Location, b.Status.DatabaseID)
				step.Phase = shalev1.BackupRunning
			}
		}
	case backupRelease:
		deleted, err := ckr(r).deleteNamed(ctx, db, b.Status.Checkpoint, string(b.UID))
		if err != nil {
			r.recorder.Eventf(b, corev1.EventTypeWarning, eventBackupDeleting, "deleting checkpoint %s in RocksDB %s: %v; trying again (it expires anyway)", b.Status.Checkpoint, b.Spec.Database, err)
			return ctrl.Result{RequeueAfter: checkpointRetry}, nil
		}
		step.Released = true
		step.Event = eventBackupReleased
		step.Message = fmt.Sprintf("checkpoint %s of RocksDB %s is not needed any more (the backup's own objects are in the store)", b.Status.Checkpoint, b.Spec.Database)
		if deleted {
			step.Message = fmt.Sprintf("deleted checkpoint %s in RocksDB %s", b.Status.Checkpoint, b.Spec.Database)
		}
	case backupFinish:
		if step.Event != "" {
			typ := corev1.EventTypeNormal
			if step.Warning {
				typ = corev1.EventTypeWarning
			}
			r.recorder.Event(b, typ, step.Event, step.Message)
		}
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(b, shalev1.FinalizerBackup)
		if err := r.Patch(ctx, b, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		return ctrl.Result{}, r.summarise(ctx, b.Namespace, b.Spec.Database)
	}
	if step.Event != "" && (step.Phase != b.Status.Phase || step.Message != b.Status.Message || step.Action == backupCreateJob || step.Released || step.Verify != nil) {
		typ := corev1.EventTypeNormal
		if step.Warning {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Event(b, typ, step.Event, step.Message)
	}
	if b.DeletionTimestamp != nil {
		// Only the checkpoint's release is recorded while deleting.
		if step.Released {
			if err := patchStatus(ctx, r.Client, r.apiReader, b, func(cur *shalev1.Backup) error {
				cur.Status.CheckpointReleased = true
				return nil
			}); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{RequeueAfter: step.Retry}, nil
	}
	was := b.Status.Phase
	// changed is decided on the API server's copy (patchStatus re-reads
	// it), not on the cache's: a stale cached phase would count one
	// transition twice (the failures metric).
	changed := false
	if err := patchStatus(ctx, r.Client, r.apiReader, b, func(cur *shalev1.Backup) error {
		s := &cur.Status
		before := s.Phase
		defer func() { changed = s.Phase != before }()
		s.ObservedGeneration = cur.Generation
		if step.Phase != "" {
			s.Phase, s.Reason = step.Phase, step.Reason
		}
		if step.Message != "" && step.Verify == nil && !step.Released && step.Event != eventBackupJob {
			s.Message = step.Message
		}
		if s.Phase == "" {
			s.Phase = shalev1.BackupPending
		}
		if (step.Phase == shalev1.BackupCompleted || step.Phase == shalev1.BackupFailed) && s.Completed == nil {
			s.Completed = &metav1.Time{Time: now}
		}
		if rep := step.Report; rep != nil {
			s.BytesCopied, s.ObjectsCopied, s.Bytes, s.Objects = rep.CopiedBytes, rep.CopiedObjects, rep.Bytes, rep.Objects
			s.Sequence = int64(min(rep.Sequence, 1<<62))
			if !rep.Time.IsZero() {
				s.Time = &metav1.Time{Time: rep.Time}
			}
			if !rep.Completed.IsZero() {
				s.Completed = &metav1.Time{Time: rep.Completed}
			}
		}
		if v := step.Verify; v != nil {
			s.Verification = v
			if v.Phase == "Succeeded" {
				s.LastVerifiedRestore = &metav1.Time{Time: now}
			}
		}
		if step.Released {
			s.CheckpointReleased = true
		}
		if step.Discarded {
			s.Discarded = true
		}
		return nil
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if changed {
		switch b.Status.Phase {
		case shalev1.BackupFailed:
			backupFailures.WithLabelValues(b.Namespace, b.Spec.Database, b.Status.Reason).Inc()
		case shalev1.BackupCompleted:
			if err := r.summarise(ctx, b.Namespace, b.Spec.Database); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if (acted && step.Retry == 0) || step.Released || step.Discarded || step.Phase != was && step.Phase != "" {
		// One step done: plan the next at once.
		return ctrl.Result{Requeue: true}, nil
	}
	return ctrl.Result{RequeueAfter: step.Retry}, nil
}

// askCheckpoint asks the primary for checkpoint backup-NAME, recording
// the start (and the backup's id and location) before the request: from
// then on a checkpoint may exist.
func (r *backupReconciler) askCheckpoint(ctx context.Context, b *shalev1.Backup, db *shalev1.RocksDB, view primaryView, now time.Time) backupStep {
	ckName := "backup-" + b.Name
	if err := patchStatus(ctx, r.Client, r.apiReader, b, func(cur *shalev1.Backup) error {
		s := &cur.Status
		if s.Started == nil {
			s.Started = &metav1.Time{Time: now}
		}
		s.Phase = shalev1.BackupRunning
		s.BackupID = cur.Name
		if s.DatabaseID == "" {
			s.DatabaseID = backupDatabaseID(db.Status.StoragePath)
		}
		s.Message = fmt.Sprintf("asking primary %s for checkpoint %s", view.Pod, ckName)
		return nil
	}); err != nil {
		return backupStep{Retry: checkpointRetry}
	}
	// The location, once the backup store is known.
	dst := &shalev1.ObjectStore{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.BackupStore}, dst); err == nil && b.Status.Location == "" {
		_ = patchStatus(ctx, r.Client, r.apiReader, b, func(cur *shalev1.Backup) error {
			cur.Status.Location = backupLocationURL(dst, cur.Namespace)
			return nil
		})
	}
	addr, dial, err := r.dbs.primaryKVAddr(ctx, db)
	if err != nil {
		return backupStep{Message: fmt.Sprintf("cannot reach RocksDB %s's primary: %v", db.Name, err), Retry: checkpointRetry}
	}
	expires := b.Status.Started.Add(backupCheckpointTTL)
	c, cancel := context.WithTimeout(ctx, checkpointRPCTimeout)
	info, err := r.kv.Checkpoint(c, addr, dial, &kvv1.CheckpointRequest{Name: ckName, RequestId: string(b.UID), Expires: timestamppb.New(expires)})
	cancel()
	who := fmt.Sprintf("primary %s (epoch %d)", view.Pod, view.Epoch)
	switch s := status.Convert(err); s.Code() {
	case codes.OK:
		if perr := patchStatus(ctx, r.Client, r.apiReader, b, func(cur *shalev1.Backup) error {
			cur.Status.Checkpoint = ckName
			return nil
		}); perr != nil {
			return backupStep{Retry: checkpointRetry}
		}
		return backupStep{Message: fmt.Sprintf("checkpoint %s taken by %s at sequence %d", ckName, who, info.GetSequence())}
	case codes.AlreadyExists, codes.InvalidArgument:
		return backupStep{Phase: shalev1.BackupFailed, Reason: shalev1.BackupReasonCheckpointRefused, Event: eventBackupFailed, Warning: true,
			Message: fmt.Sprintf("%s refused the checkpoint %s: %s (%s): delete that checkpoint (shale admin checkpoint delete) or give the Backup another name", who, ckName, s.Message(), s.Code())}
	default:
		return backupStep{Message: fmt.Sprintf("%s did not take the checkpoint %s: %s (%s); asking again with the same request id", who, ckName, s.Message(), s.Code()),
			Retry: checkpointRetry, Event: eventBackupPending, Warning: true}
	}
}

// ckr is a Checkpoint reconciler's view of the databases, for its
// helpers.
func ckr(r *backupReconciler) *checkpointReconciler {
	return &checkpointReconciler{Client: r.Client, dbs: r.dbs, kv: r.kv}
}

// deleteNamed deletes the checkpoint name in db if its request id is
// requestID (never someone else's of the same name); false when there was
// none.
func (r *checkpointReconciler) deleteNamed(ctx context.Context, db *shalev1.RocksDB, name, requestID string) (bool, error) {
	addr, dial, err := r.primaryAddr(ctx, db)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, checkpointRPCTimeout)
	defer cancel()
	list, err := r.kv.ListCheckpoints(ctx, addr, dial)
	if err != nil {
		return false, err
	}
	for _, c := range list {
		if c.GetName() == name && c.GetRequestId() == requestID {
			err = r.kv.DeleteCheckpoint(ctx, addr, dial, name)
			if status.Code(err) == codes.NotFound {
				return false, nil
			}
			return err == nil, err
		}
	}
	return false, nil
}

// backupSummary is a database's last backup and first recoverability
// point, from its Backups (pure): the newest Completed by completion
// time, and the oldest checkpoint time among the Completed ones not being
// deleted with deletePolicy Delete.
func backupSummary(bs []shalev1.Backup) (*shalev1.LastBackup, *metav1.Time) {
	var last *shalev1.Backup
	var first *metav1.Time
	for i := range bs {
		b := &bs[i]
		st := b.Status
		if st.Phase != shalev1.BackupCompleted || st.Completed == nil {
			continue
		}
		if b.DeletionTimestamp != nil && b.Spec.DeletePolicy == shalev1.BackupDelete {
			continue
		}
		if last == nil || st.Completed.After(last.Status.Completed.Time) {
			last = b
		}
		t := st.Time
		if t == nil {
			t = st.Completed
		}
		if first == nil || t.Before(first) {
			first = t.DeepCopy()
		}
	}
	if last == nil {
		return nil, nil
	}
	return &shalev1.LastBackup{Name: last.Name, Time: last.Status.Time, Completed: last.Status.Completed, Sequence: last.Status.Sequence}, first
}

// summarise writes a database's lastBackup and firstRecoverabilityPoint
// and the backup metrics.
func (r *backupReconciler) summarise(ctx context.Context, ns, name string) error {
	// From the API server: the cache may not have the status just written.
	var all shalev1.BackupList
	if err := r.apiReader.List(ctx, &all, client.InNamespace(ns)); err != nil {
		return err
	}
	var bs shalev1.BackupList
	for _, b := range all.Items {
		if b.Spec.Database == name {
			bs.Items = append(bs.Items, b)
		}
	}
	last, first := backupSummary(bs.Items)
	for i := range bs.Items {
		r.noteCompleted(&bs.Items[i])
	}
	db := &shalev1.RocksDB{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, db); err != nil {
		return client.IgnoreNotFound(err)
	}
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		cur.Status.LastBackup, cur.Status.FirstRecoverabilityPoint = last, first
		return nil
	})
	if apierrors.IsNotFound(err) || errors.Is(err, errNoChange) {
		return nil
	}
	return err
}
