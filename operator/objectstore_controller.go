package operator

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// checkTimeout bounds one reachability check.
const checkTimeout = 30 * time.Second

// unreachableRecheck is how soon an unreachable store is checked again.
const unreachableRecheck = 15 * time.Second

// objectStoreReconciler keeps each ObjectStore's Reachable condition
// current: on every spec change and every CheckInterval.
type objectStoreReconciler struct {
	client.Client
	apiReader     client.Reader
	recorder      record.EventRecorder
	stores        *stores
	checkInterval time.Duration
}

// +kubebuilder:rbac:groups=shale.rocks,resources=objectstores,verbs=get;list;watch
// +kubebuilder:rbac:groups=shale.rocks,resources=objectstores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

func (r *objectStoreReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("objectstore").
		// Status writes (every check updates lastCheckTime) must not
		// trigger another check: only spec changes do.
		For(&shalev1.ObjectStore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

func (r *objectStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	os := &shalev1.ObjectStore{}
	if err := r.Get(ctx, req.NamespacedName, os); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if os.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	reason, checkErr := r.check(cctx, os)
	cancel()

	cond := metav1.Condition{
		Type:               shalev1.ConditionReachable,
		Status:             metav1.ConditionTrue,
		Reason:             shalev1.ReasonReachable,
		Message:            "listed the store; a second create-only write of a probe was refused, as fencing needs",
		ObservedGeneration: os.Generation,
	}
	if checkErr != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reason, checkErr.Error()
	}
	prev := meta.FindStatusCondition(os.Status.Conditions, shalev1.ConditionReachable)
	now := metav1.Now()
	err := patchStatus(ctx, r.Client, r.apiReader, os, func(cur *shalev1.ObjectStore) error {
		cur.Status.ObservedGeneration = cur.Generation
		cur.Status.LastCheckTime = &now
		meta.SetStatusCondition(&cur.Status.Conditions, cond)
		// Entries of RocksDBs the API server no longer has (a finalizer
		// removed by hand), judged on this very copy: a RocksDB that
		// registers meanwhile makes the patch conflict and this run again.
		stale, err := staleUsers(ctx, r.Client, r.apiReader, cur)
		if err != nil {
			return err
		}
		cur.Status.UsedBy = slices.DeleteFunc(cur.Status.UsedBy, func(u shalev1.StoreUser) bool { return slices.Contains(stale, u.Name) })
		if len(cur.Status.UsedBy) == 0 {
			cur.Status.UsedBy = nil
		}
		return nil
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if prev == nil || prev.Status != cond.Status || prev.Reason != cond.Reason {
		if checkErr != nil {
			r.recorder.Event(os, corev1.EventTypeWarning, eventStoreUnreachable, cond.Message)
		} else {
			r.recorder.Event(os, corev1.EventTypeNormal, eventStoreReachable, cond.Message)
		}
	}
	if checkErr != nil {
		log.FromContext(ctx).Info("object store unreachable", "reason", reason, "error", checkErr.Error())
		return ctrl.Result{RequeueAfter: min(unreachableRecheck, r.checkInterval)}, nil
	}
	return ctrl.Result{RequeueAfter: r.checkInterval}, nil
}

// check probes the hot tier (list, conditional writes) and lists the cold
// tier.
func (r *objectStoreReconciler) check(ctx context.Context, os *shalev1.ObjectStore) (string, error) {
	hot, err := r.stores.hot(ctx, os)
	if err != nil {
		return configReason(err), err
	}
	if reason, err := probeStore(ctx, hot); err != nil {
		return reason, err
	}
	if os.Spec.Cold != nil {
		cold, err := r.stores.cold(ctx, os)
		if err != nil {
			return configReason(err), err
		}
		if err := listOne(ctx, cold); err != nil {
			return shalev1.ReasonColdTierUnreachable, fmt.Errorf("listing the cold tier %s: %w", cold.URL(), err)
		}
	}
	return "", nil
}

func configReason(err error) string {
	if ce, ok := asConfigError(err); ok {
		return ce.Reason
	}
	return shalev1.ReasonListFailed
}
