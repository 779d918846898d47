package operator

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// planSchedule: when a Backup is created and under which name, missed runs
// as one, one at a time, suspend, prune after each success, retention on
// the resources, a bad schedule named.
func TestPlanSchedule(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 30, 0, 0, time.UTC) // created
	sch := func(schedule string, mut ...func(*shalev1.ScheduledBackup)) *shalev1.ScheduledBackup {
		s := &shalev1.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", CreationTimestamp: metav1.Time{Time: t0}},
			Spec: shalev1.ScheduledBackupSpec{Schedule: schedule, Database: "orders", BackupStore: "vault"}}
		for _, m := range mut {
			m(s)
		}
		return s
	}
	last := func(t time.Time) func(*shalev1.ScheduledBackup) {
		return func(s *shalev1.ScheduledBackup) { s.Status.LastScheduleTime = &metav1.Time{Time: t} }
	}
	keep := func(n int32) func(*shalev1.ScheduledBackup) {
		return func(s *shalev1.ScheduledBackup) { s.Spec.Retention = &shalev1.BackupRetention{KeepLast: ptr.To(n)} }
	}
	bk := func(name string, phase shalev1.BackupPhase, completed time.Time) shalev1.Backup {
		b := shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Time{Time: completed.Add(-time.Minute)}}}
		b.Status.Phase = phase
		if phase == shalev1.BackupCompleted {
			b.Status.Completed = &metav1.Time{Time: completed}
		}
		return b
	}
	day := func(d int) time.Time { return time.Date(2026, 3, d, 2, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name    string
		s       *shalev1.ScheduledBackup
		backups []shalev1.Backup
		now     time.Time
		create  string
		next    time.Time
		prune   string
		delete  []string
		problem string
	}{
		{name: "before the first time: nothing, next at 02:00", s: sch("0 2 * * *"), now: t0.Add(time.Hour), next: day(1)},
		{name: "the first time: nightly-202603010200", s: sch("0 2 * * *"), now: day(1).Add(time.Second), create: "nightly-202603010200", next: day(2)},
		{name: "done already: nothing until the next", s: sch("0 2 * * *", last(day(1))), now: day(1).Add(time.Hour), next: day(2)},
		{name: "three days missed: one Backup, the latest", s: sch("0 2 * * *", last(day(1))), now: day(4).Add(time.Hour), create: "nightly-202603040200", next: day(5)},
		{name: "one still running: none (it is created once that ends)", s: sch("0 2 * * *", last(day(1))), backups: []shalev1.Backup{bk("nightly-202603010200", shalev1.BackupRunning, time.Time{})}, now: day(2).Add(time.Minute), next: day(3)},
		{name: "suspended: nothing, no next", s: sch("0 2 * * *", func(s *shalev1.ScheduledBackup) { s.Spec.Suspend = true }), now: day(2)},
		{name: "every 15 minutes", s: sch("*/15 * * * *", last(day(1))), now: day(1).Add(16 * time.Minute), create: "nightly-202603010215", next: day(1).Add(30 * time.Minute)},
		{name: "a success: prune after it", s: sch("0 2 * * *", last(day(2)), keep(2)), backups: []shalev1.Backup{bk("nightly-202603020200", shalev1.BackupCompleted, day(2).Add(time.Minute))},
			now: day(2).Add(time.Hour), next: day(3), prune: "nightly-202603020200"},
		{name: "pruned already: not again", s: sch("0 2 * * *", last(day(2)), keep(2), func(s *shalev1.ScheduledBackup) { s.Status.LastPruned = "nightly-202603020200" }),
			backups: []shalev1.Backup{bk("nightly-202603020200", shalev1.BackupCompleted, day(2).Add(time.Minute))}, now: day(2).Add(time.Hour), next: day(3)},
		{name: "no retention: no prune", s: sch("0 2 * * *", last(day(2))), backups: []shalev1.Backup{bk("nightly-202603020200", shalev1.BackupCompleted, day(2).Add(time.Minute))}, now: day(2).Add(time.Hour), next: day(3)},
		{name: "keepLast 2 of 3: the oldest resource goes; 4 failed: the oldest goes", s: sch("0 2 * * *", last(day(7)), keep(2), func(s *shalev1.ScheduledBackup) { s.Status.LastPruned = "c" }),
			backups: []shalev1.Backup{bk("a", shalev1.BackupCompleted, day(1)), bk("c", shalev1.BackupCompleted, day(3)), bk("b", shalev1.BackupCompleted, day(2)),
				bk("f1", shalev1.BackupFailed, day(4)), bk("f2", shalev1.BackupFailed, day(5)), bk("f3", shalev1.BackupFailed, day(6)), bk("f4", shalev1.BackupFailed, day(7))},
			now: day(7).Add(time.Hour), next: day(8), delete: []string{"a", "f1"}},
		{name: "six fields: refused", s: sch("0 0 2 * * *"), now: day(2), problem: "want 5 fields"},
		{name: "a descriptor: refused", s: sch("@daily"), now: day(2), problem: `spec.schedule "@daily"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := planSchedule(tc.s, tc.backups, tc.now)
			if st.Create != tc.create || !st.Next.Equal(tc.next) || st.Prune != tc.prune || !slices.Equal(st.Delete, tc.delete) ||
				!strings.Contains(st.Problem, tc.problem) || (tc.problem == "") != (st.Problem == "") {
				t.Errorf("got %+v; want create %q next %v prune %q delete %v problem %q", st, tc.create, tc.next, tc.prune, tc.delete, tc.problem)
			}
			if st.Create != "" && len(st.Create) > 56 {
				t.Errorf("Backup name %q longer than a backup id", st.Create)
			}
		})
	}
}

// keepBackups: the newest N, every one within D, a backup either keeps is
// kept, the newest always (as backup.Expired).
func TestKeepBackups(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	var bs []shalev1.Backup // newest first: b0 a day ago, b1 two days ago...
	for i := range 5 {
		b := shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Name: "b" + string(rune('0'+i))}}
		b.Status.Completed = &metav1.Time{Time: now.Add(-time.Duration(i+1) * 24 * time.Hour)}
		bs = append(bs, b)
	}
	d := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	for _, tc := range []struct {
		name string
		r    shalev1.BackupRetention
		gone []string
	}{
		{"keep 2", shalev1.BackupRetention{KeepLast: ptr.To[int32](2)}, []string{"b2", "b3", "b4"}},
		{"within 3 days", shalev1.BackupRetention{KeepWithin: d(72)}, []string{"b3", "b4"}},
		{"keep 1 or within 3 days: either keeps", shalev1.BackupRetention{KeepLast: ptr.To[int32](1), KeepWithin: d(72)}, []string{"b3", "b4"}},
		{"within a minute: the newest stays", shalev1.BackupRetention{KeepWithin: &metav1.Duration{Duration: time.Minute}}, []string{"b1", "b2", "b3", "b4"}},
	} {
		if got := keepBackups(bs, now, &tc.r); !slices.Equal(got, tc.gone) {
			t.Errorf("%s: %v go, want %v", tc.name, got, tc.gone)
		}
	}
}
