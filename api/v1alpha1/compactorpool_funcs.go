package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SchedulerPort is the gRPC port of a pool's scheduler and its Service.
const SchedulerPort = 7080

// SchedulerName names the scheduler's Deployment and Service:
// NAME-scheduler.
func (p *CompactorPool) SchedulerName() string { return p.Name + "-scheduler" }

// WorkerName names the workers' Deployment: NAME-worker.
func (p *CompactorPool) WorkerName() string { return p.Name + "-worker" }

// SchedulerPolicyName and WorkerPolicyName name the NetworkPolicies of the
// pool's scheduler and workers: NAME-scheduler-ingress, NAME-worker-ingress.
func (p *CompactorPool) SchedulerPolicyName() string { return p.SchedulerName() + "-ingress" }
func (p *CompactorPool) WorkerPolicyName() string    { return p.WorkerName() + "-ingress" }

// SchedulerAddress is the scheduler's address inside the cluster, what
// primaries pass as --compaction-scheduler.
func (p *CompactorPool) SchedulerAddress() string {
	return SchedulerAddressOf(p.Namespace, p.Name)
}

// SchedulerAddressOf is the scheduler address of the pool name in ns.
func SchedulerAddressOf(ns, name string) string {
	return fmt.Sprintf("%s-scheduler.%s.svc:%d", name, ns, SchedulerPort)
}

// MinWorkers is spec.workers.minReplicas, 1 when unset.
func (p *CompactorPool) MinWorkers() int32 {
	if p.Spec.Workers.MinReplicas == nil {
		return 1
	}
	return *p.Spec.Workers.MinReplicas
}

// MaxWorkers is spec.workers.maxReplicas, 4 when unset.
func (p *CompactorPool) MaxWorkers() int32 {
	if p.Spec.Workers.MaxReplicas == 0 {
		return 4
	}
	return p.Spec.Workers.MaxReplicas
}

// WorkerConcurrency is spec.workers.concurrency, 1 when unset.
func (p *CompactorPool) WorkerConcurrency() int32 {
	if p.Spec.Workers.Concurrency == 0 {
		return 1
	}
	return p.Spec.Workers.Concurrency
}

// Labels of the pool's objects of a component (scheduler or worker).
func (p *CompactorPool) Labels(component string) map[string]string {
	return map[string]string{
		LabelCompactorPool: p.Name,
		LabelAppName:       AppName,
		LabelAppInstance:   p.Name,
		LabelAppComponent:  component,
		LabelAppManagedBy:  ManagedBy,
	}
}

// Selector of the pool's Pods of a component.
func (p *CompactorPool) Selector(component string) map[string]string {
	return map[string]string{LabelCompactorPool: p.Name, LabelAppComponent: component}
}

// Condition returns the status condition of a type, or nil.
func (p *CompactorPool) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, t)
}

// EffectiveCompactionMode is spec.compaction.mode, Local when unset.
func (db *RocksDB) EffectiveCompactionMode() CompactionMode {
	if db.Spec.Compaction.Mode == "" {
		return CompactionLocal
	}
	return db.Spec.Compaction.Mode
}
