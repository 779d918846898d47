package compactor

import compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"

// SetAfterUpload installs a test hook that runs after a job's outputs are
// in the store and before the worker reports the job complete.
func SetAfterUpload(cfg *WorkerConfig, fn func(j *compactorv1.Job)) { cfg.afterUpload = fn }

// SetBeforeLease installs a test hook that runs before each Lease call.
func SetBeforeLease(cfg *WorkerConfig, fn func()) { cfg.beforeLease = fn }

// SetBeforeComplete installs a test hook that may change a worker's report
// before it is sent.
func SetBeforeComplete(cfg *WorkerConfig, fn func(j *compactorv1.Job, req *compactorv1.CompleteRequest)) {
	cfg.beforeComplete = fn
}
