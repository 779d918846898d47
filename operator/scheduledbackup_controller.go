package operator

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The ScheduledBackup resource (docs/rfcs/0011-backups-and-point-in-time-
// restore.md, step 27c): Backups on a cron schedule, one at a time, and
// after each success a prune Job (`shale backup prune`) applying the
// retention to the backup store, then the Backup resources the same rule
// lets go deleted (their deletePolicy is Retain: the prune deleted what
// had to go). planSchedule decides (pure, table-tested).

// Event reasons of a ScheduledBackup.
const (
	eventScheduleCreated     = "BackupScheduled"
	eventScheduleInvalid     = "ScheduleInvalid"
	eventSchedulePruned      = "BackupsPruned"
	eventSchedulePruneFailed = "PruneFailed"
)

// failedKept is how many Failed Backups of a schedule are kept (for their
// messages).
const failedKept = 3

// cronParser reads 5-field schedules (minute hour dom month dow), no
// descriptors, no seconds.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// parseSchedule parses a ScheduledBackup's schedule, naming the fix.
func parseSchedule(s string) (cron.Schedule, error) {
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("spec.schedule %q: %v: want 5 fields, minute hour day-of-month month day-of-week, in UTC, such as \"0 2 * * *\"", s, err)
	}
	return sched, nil
}

// scheduleStep is planSchedule's decision.
type scheduleStep struct {
	// Create names the Backup to create now, for the schedule time Due.
	Create string
	Due    time.Time
	// Next is the next schedule time after now (zero when suspended or
	// invalid); Interval the one after it minus Next.
	Next     time.Time
	Interval time.Duration
	// Prune names the Completed Backup whose success a prune follows.
	Prune string
	// Delete are Backup resources retention lets go.
	Delete []string
	// LastSuccessful is the newest completion of its Backups.
	LastSuccessful *time.Time
	// Problem: the schedule does not parse.
	Problem string
}

// backupName is the Backup a schedule creates for schedule time t.
func backupName(schedule string, t time.Time) string {
	return schedule + "-" + t.UTC().Format("200601021504")
}

// planSchedule decides what a ScheduledBackup does now, from its Backups
// (those labelled as its own). Missed runs (the operator down, a backup
// still running) are one run: the latest due time, created once nothing
// of the schedule runs.
func planSchedule(s *shalev1.ScheduledBackup, backups []shalev1.Backup, now time.Time) scheduleStep {
	var step scheduleStep
	sched, err := parseSchedule(s.Spec.Schedule)
	if err != nil {
		step.Problem = err.Error()
		return step
	}
	active := false
	var completed, failed []shalev1.Backup
	for _, b := range backups {
		switch b.Status.Phase {
		case shalev1.BackupCompleted:
			if b.Status.Completed != nil && b.DeletionTimestamp == nil {
				completed = append(completed, b)
			}
		case shalev1.BackupFailed:
			if b.DeletionTimestamp == nil {
				failed = append(failed, b)
			}
		default:
			active = active || b.DeletionTimestamp == nil
		}
	}
	sort.Slice(completed, func(i, j int) bool { return completed[i].Status.Completed.After(completed[j].Status.Completed.Time) })
	if len(completed) > 0 {
		t := completed[0].Status.Completed.Time
		step.LastSuccessful = &t
		if s.Spec.Retention != nil && completed[0].Name != s.Status.LastPruned {
			step.Prune = completed[0].Name
		}
	}
	if r := s.Spec.Retention; r != nil {
		step.Delete = append(step.Delete, keepBackups(completed, now, r)...)
	}
	sort.Slice(failed, func(i, j int) bool { return failed[j].CreationTimestamp.Before(&failed[i].CreationTimestamp) })
	for i := failedKept; i < len(failed); i++ {
		step.Delete = append(step.Delete, failed[i].Name)
	}
	if s.Spec.Suspend {
		return step
	}
	now = now.UTC()
	step.Next = sched.Next(now)
	step.Interval = sched.Next(step.Next).Sub(step.Next)
	from := s.CreationTimestamp.Time
	if l := s.Status.LastScheduleTime; l != nil {
		from = l.Time
	}
	var due time.Time
	// The latest schedule time in (from, now]; bounded (a schedule every
	// minute and a year down is 525,600 steps).
	for t, i := sched.Next(from.UTC()), 0; !t.IsZero() && !t.After(now) && i < 1_000_000; t, i = sched.Next(t), i+1 {
		due = t
	}
	if !due.IsZero() && !active {
		step.Create, step.Due = backupName(s.Name, due), due
	}
	return step
}

// keepBackups is the retention rule on Completed Backups (newest first):
// keep the newest keepLast and every one completed within keepWithin (one
// either keeps is kept), and always the newest; the rest go. The same rule
// as `shale backup prune` (backup.Expired) applies to the store.
func keepBackups(newestFirst []shalev1.Backup, now time.Time, r *shalev1.BackupRetention) []string {
	var gone []string
	for i, b := range newestFirst {
		keep := i == 0
		if r.KeepLast != nil && i < int(*r.KeepLast) {
			keep = true
		}
		if r.KeepWithin != nil && now.Sub(b.Status.Completed.Time) <= r.KeepWithin.Duration {
			keep = true
		}
		if !keep {
			gone = append(gone, b.Name)
		}
	}
	return gone
}

// scheduledBackupReconciler runs ScheduledBackups.
type scheduledBackupReconciler struct {
	client.Client
	apiReader client.Reader
	recorder  record.EventRecorder
	now       func() time.Time
	image     string
}

// +kubebuilder:rbac:groups=shale.rocks,resources=scheduledbackups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=scheduledbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=scheduledbackups/finalizers,verbs=update

func (r *scheduledBackupReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("scheduledbackup").
		For(&shalev1.ScheduledBackup{}).
		Owns(&shalev1.Backup{}).
		Owns(&batchv1.Job{}).
		Complete(r)
}

func (r *scheduledBackupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &shalev1.ScheduledBackup{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		if apierrors.IsNotFound(err) {
			scheduleMetricsGone(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if s.DeletionTimestamp != nil {
		scheduleMetricsGone(s.Namespace, s.Name)
		return ctrl.Result{}, nil
	}
	var bs shalev1.BackupList
	if err := r.List(ctx, &bs, client.InNamespace(s.Namespace), client.MatchingLabels{shalev1.LabelScheduledBackup: s.Name}); err != nil {
		return ctrl.Result{}, err
	}
	now := r.now()
	step := planSchedule(s, bs.Items, now)
	if step.Problem != "" {
		if s.Status.Message != step.Problem {
			r.recorder.Event(s, corev1.EventTypeWarning, eventScheduleInvalid, step.Problem)
		}
		scheduleMetricsGone(s.Namespace, s.Name)
		return ctrl.Result{}, patchStatus(ctx, r.Client, r.apiReader, s, func(cur *shalev1.ScheduledBackup) error {
			cur.Status.Message, cur.Status.NextScheduleTime = step.Problem, nil
			return nil
		})
	}
	if step.Create != "" {
		b := &shalev1.Backup{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: step.Create, Labels: map[string]string{shalev1.LabelScheduledBackup: s.Name}},
			Spec:       shalev1.BackupSpec{Database: s.Spec.Database, BackupStore: s.Spec.BackupStore, Verify: s.Spec.Verify, DeletePolicy: shalev1.BackupRetain},
		}
		if err := controllerutil.SetControllerReference(s, b, r.Scheme()); err != nil {
			return ctrl.Result{}, err
		}
		switch err := r.Create(ctx, b); {
		case err == nil:
			r.recorder.Eventf(s, corev1.EventTypeNormal, eventScheduleCreated, "created Backup %s for %s", b.Name, step.Due.UTC().Format(time.RFC3339))
		case !apierrors.IsAlreadyExists(err):
			return ctrl.Result{}, err
		}
	}
	pruned := ""
	if step.Prune != "" {
		done, err := r.prune(ctx, s, step.Prune)
		if err != nil {
			return ctrl.Result{}, err
		}
		if done {
			pruned = step.Prune
		}
	}
	for _, name := range step.Delete {
		b := &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name}}
		if err := r.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}
	if err := patchStatus(ctx, r.Client, r.apiReader, s, func(cur *shalev1.ScheduledBackup) error {
		st := &cur.Status
		st.ObservedGeneration, st.Message = cur.Generation, ""
		if step.Create != "" {
			st.LastScheduleTime, st.LastBackup = &metav1.Time{Time: step.Due}, step.Create
		}
		if step.LastSuccessful != nil {
			st.LastSuccessfulTime = &metav1.Time{Time: *step.LastSuccessful}
		}
		st.NextScheduleTime = nil
		if !step.Next.IsZero() {
			st.NextScheduleTime = &metav1.Time{Time: step.Next}
		}
		if pruned != "" {
			st.LastPruned = pruned
		}
		return nil
	}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	labels := prometheus.Labels{"namespace": s.Namespace, "rocksdb": s.Spec.Database, "scheduledbackup": s.Name}
	if s.Spec.Suspend {
		scheduleMetricsGone(s.Namespace, s.Name)
		return ctrl.Result{}, nil
	}
	backupScheduleInterval.With(labels).Set(step.Interval.Seconds())
	backupScheduleCreated.With(labels).Set(float64(s.CreationTimestamp.Unix()))
	if step.Create != "" || pruned != "" {
		return ctrl.Result{Requeue: true}, nil
	}
	return ctrl.Result{RequeueAfter: max(step.Next.Sub(r.now()), time.Second)}, nil
}

// scheduleMetricsGone removes a ScheduledBackup's series (deleted,
// suspended or invalid: ShaleBackupMissing does not apply).
func scheduleMetricsGone(ns, name string) {
	l := prometheus.Labels{"namespace": ns, "scheduledbackup": name}
	backupScheduleInterval.DeletePartialMatch(l)
	backupScheduleCreated.DeletePartialMatch(l)
}

// prune runs the retention after Backup name completed: the Job
// NAME-prune (`shale backup prune`). done: it ended (a failure is an
// Event; the next success prunes again).
func (r *scheduledBackupReconciler) prune(ctx context.Context, s *shalev1.ScheduledBackup, name string) (bool, error) {
	jn := name + "-prune"
	js, err := readJob(ctx, r.Client, s.Namespace, jn)
	if err != nil {
		return false, err
	}
	switch {
	case js.Succeeded:
		msg := fmt.Sprintf("Job %s applied the retention to the backup store", jn)
		if js.Report != nil && len(js.Report.Deleted) > 0 {
			msg = fmt.Sprintf("Job %s deleted backups %v from the backup store", jn, js.Report.Deleted)
		}
		r.recorder.Event(s, corev1.EventTypeNormal, eventSchedulePruned, msg)
		return true, nil
	case js.Failed:
		r.recorder.Eventf(s, corev1.EventTypeWarning, eventSchedulePruneFailed, "Job %s failed: %s; the next successful backup prunes again", jn, js.Message)
		return true, nil
	case js.Exists:
		return false, nil
	}
	b := &shalev1.Backup{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: name}, b); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	db, dst := &shalev1.RocksDB{}, &shalev1.ObjectStore{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.BackupStore}, dst); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	primary, image := shalev1.PrimarySpec{}, r.image
	// The Pod's own credentials: the database's store's (a pending
	// backup's pin is there), or the backup store's if it is gone.
	src := dst
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.Database}, db); err == nil {
		primary = db.Spec.Primary
		if primary.Image != "" {
			image = primary.Image
		}
		os := &shalev1.ObjectStore{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: db.Spec.ObjectStoreRef.Name}, os); err == nil {
			src = os
		}
	}
	args := []string{"prune", "--to", backupLocationURL(dst, s.Namespace), "--database", b.Status.DatabaseID}
	if rt := s.Spec.Retention; rt != nil {
		if rt.KeepLast != nil {
			args = append(args, "--keep-last", strconv.Itoa(int(*rt.KeepLast)))
		}
		if rt.KeepWithin != nil {
			args = append(args, "--keep-within", rt.KeepWithin.Duration.String())
		}
	}
	job, problem := backupJob(backupJobSpec{Name: jn, Kind: "prune", Owner: s, Image: image, Args: args, Src: src, Dst: dst, Primary: primary,
		Labels: map[string]string{shalev1.LabelScheduledBackup: s.Name, shalev1.LabelRocksDB: s.Spec.Database}})
	if problem != "" {
		r.recorder.Event(s, corev1.EventTypeWarning, eventSchedulePruneFailed, problem)
		return true, nil
	}
	if err := controllerutil.SetControllerReference(s, job, r.Scheme()); err != nil {
		return false, err
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	return false, nil
}
