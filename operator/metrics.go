package operator

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's metrics, on controller-runtime's registry (served by the
// manager's metrics endpoint beside the controllers' own).
var (
	failoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_failovers_total",
		Help: "Failovers started (epoch bumps that replace a primary), by reason.",
	}, []string{"reason"})
	switchoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_switchovers_total",
		Help: "Switchovers that ended, by how: completed or abandoned.",
	}, []string{"result"})
	failoverDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shale_operator_failover_duration_seconds",
		Help:    "Time from a failover decision to the new primary being ready.",
		Buckets: []float64{1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600},
	})
	gcOrphansFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_orphans_found_total",
		Help: "Orphaned database directories found by garbage-collection passes (counted every pass that finds them; dry runs included).",
	}, []string{"objectstore"})
	gcDirsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_directories_deleted_total",
		Help: "Orphaned database directories deleted.",
	}, []string{"objectstore"})
	gcBytesReclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_bytes_reclaimed_total",
		Help: "Bytes of orphaned database directories deleted.",
	}, []string{"objectstore"})
	gcPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_operator_gc_passes_total",
		Help: "Garbage-collection passes over an ObjectStore, by result (ok, error).",
	}, []string{"objectstore", "result"})
)

func init() {
	metrics.Registry.MustRegister(failoversTotal, switchoversTotal, failoverDuration, gcOrphansFound, gcDirsDeleted, gcBytesReclaimed, gcPasses)
}

// Backups (backup_controller.go, scheduledbackup_controller.go): the
// newest Completed Backup of each database, failures by reason, and each
// ScheduledBackup's interval, for the alert ShaleBackupMissing.
var (
	backupLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_last_success_timestamp_seconds",
		Help: "When the newest Completed Backup of the database was published (Unix seconds).",
	}, []string{"namespace", "rocksdb"})
	backupLastBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_last_size_bytes",
		Help: "Bytes the newest Completed Backup of the database names (what a restore copies).",
	}, []string{"namespace", "rocksdb"})
	backupLastCopied = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_last_copied_bytes",
		Help: "Bytes the newest Completed Backup of the database copied (the rest was in the backup store already).",
	}, []string{"namespace", "rocksdb"})
	backupLastObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_last_objects",
		Help: "Objects the newest Completed Backup of the database names.",
	}, []string{"namespace", "rocksdb"})
	backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shale_backup_failures_total",
		Help: "Backups that failed, by reason (CheckpointRefused, JobFailed, InvalidStore, DatabaseDeleted).",
	}, []string{"namespace", "rocksdb", "reason"})
	backupScheduleInterval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_schedule_interval_seconds",
		Help: "The interval between the next two runs of a ScheduledBackup that is not suspended.",
	}, []string{"namespace", "rocksdb", "scheduledbackup"})
	backupScheduleCreated = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shale_backup_schedule_created_timestamp_seconds",
		Help: "When a ScheduledBackup that is not suspended was created (Unix seconds): ShaleBackupMissing counts from it until a first success.",
	}, []string{"namespace", "rocksdb", "scheduledbackup"})
)

func init() {
	metrics.Registry.MustRegister(backupLastSuccess, backupLastBytes, backupLastCopied, backupLastObjects, backupFailures, backupScheduleInterval, backupScheduleCreated)
}
