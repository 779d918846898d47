package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// A CompactorPool: the scheduler (Deployment and Service NAME-scheduler)
// and the workers (Deployment NAME-worker), all owned by the pool. Every
// reconcile reads the scheduler's Stats (one gRPC call), sizes the
// workers on the queue (desiredWorkers), and writes the counts into the
// pool's status, from which each RocksDB copies its own line. Reconciles
// repeat every CompactorPollInterval.

const indexPoolObjectStore = "spec.objectStoreRef.name"

// defaultScaleDownDelay is spec.workers.scaleDownDelay's default.
const defaultScaleDownDelay = 2 * time.Minute

// StatsFunc reads a pool's scheduler Stats, connecting with dial's
// transport (the operator's certificate, or plaintext with TLS off).
type StatsFunc func(ctx context.Context, pool *shalev1.CompactorPool, dial grpc.DialOption) (*compactorv1.StatsResponse, error)

// schedulerStats dials the pool's scheduler Service.
func schedulerStats(ctx context.Context, pool *shalev1.CompactorPool, dial grpc.DialOption) (*compactorv1.StatsResponse, error) {
	return readStats(ctx, pool.SchedulerAddress(), dial)
}

func readStats(ctx context.Context, addr string, dial grpc.DialOption) (*compactorv1.StatsResponse, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return compactorv1.NewCompactorClient(conn).Stats(ctx, &compactorv1.StatsRequest{})
}

type compactorPoolReconciler struct {
	client.Client
	apiReader client.Reader
	recorder  record.EventRecorder
	opts      Options
	now       func() time.Time
	stats     StatsFunc
	issuer    *issuer
	creds     *operatorCreds
}

// schedulerDial is how the operator reaches the pool's scheduler: with
// TLS, its own certificate, verifying the scheduler's by its Service's
// name.
func (r *compactorPoolReconciler) schedulerDial(ctx context.Context, pool *shalev1.CompactorPool) (grpc.DialOption, error) {
	if !pool.TLSEnabled() {
		return plaintext(), nil
	}
	if pool.CertManagerIssuer() != nil {
		return issuedDial(ctx, r.Client, pool.Namespace, pool.OperatorTLSSecretName(), serviceHost(pool.SchedulerName(), pool.Namespace))
	}
	return r.creds.dial(ctx, serviceHost(pool.SchedulerName(), pool.Namespace))
}

// +kubebuilder:rbac:groups=shale.rocks,resources=compactorpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=shale.rocks,resources=compactorpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=shale.rocks,resources=compactorpools/scale,verbs=get;update;patch

func (r *compactorPoolReconciler) setup(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &shalev1.CompactorPool{}, indexPoolObjectStore, func(o client.Object) []string {
		return []string{o.(*shalev1.CompactorPool).Spec.ObjectStoreRef.Name}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("compactorpool").
		For(&shalev1.CompactorPool{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&shalev1.ObjectStore{}, handler.EnqueueRequestsFromMapFunc(r.forObjectStore)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.forCASecret)).
		Complete(r)
}

// forCASecret maps a change of the CA Secret to every pool: their
// certificates are checked against the CA at once.
func (r *compactorPoolReconciler) forCASecret(ctx context.Context, o client.Object) []reconcile.Request {
	if client.ObjectKeyFromObject(o) != r.issuer.ca.key {
		return nil
	}
	r.issuer.ca.invalidate()
	var pools shalev1.CompactorPoolList
	if err := r.List(ctx, &pools); err != nil {
		log.FromContext(ctx).Error(err, "listing the CompactorPools after a change of the CA")
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}

func (r *compactorPoolReconciler) forObjectStore(ctx context.Context, o client.Object) []reconcile.Request {
	var pools shalev1.CompactorPoolList
	if err := r.List(ctx, &pools, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexPoolObjectStore: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing the CompactorPools of an ObjectStore", "objectstore", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pools.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}

// poolReport is what one reconcile of a pool observed.
type poolReport struct {
	conds        []metav1.Condition
	stats        *compactorv1.StatsResponse
	replicas     int32
	readyWorkers int32
	desired      int32
	scaled       bool
	schedReady   bool
	workersSet   bool // the worker Deployment was reconciled
}

func (rep *poolReport) set(t string, s metav1.ConditionStatus, reason, msg string) {
	for i := range rep.conds {
		if rep.conds[i].Type == t {
			rep.conds[i] = metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg}
			return
		}
	}
	rep.conds = append(rep.conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg})
}

func (r *compactorPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &shalev1.CompactorPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pool.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owned objects go with it
	}
	generation := pool.Generation
	rep := &poolReport{}
	err := r.reconcilePool(ctx, pool, rep)
	var ref *refusal
	if errors.As(err, &ref) {
		r.recorder.Event(pool, corev1.EventTypeWarning, ref.reason, ref.msg)
		err = nil
	}
	if serr := r.writeStatus(ctx, pool, generation, rep); serr != nil && !apierrors.IsNotFound(serr) && err == nil {
		err = serr
	}
	return ctrl.Result{RequeueAfter: r.opts.CompactorPollInterval}, err
}

func (r *compactorPoolReconciler) reconcilePool(ctx context.Context, pool *shalev1.CompactorPool, rep *poolReport) (err error) {
	// Before the Deployments: their Pods mount the Secrets. Renewals are
	// picked up by the reconciles every CompactorPollInterval. A failure
	// is reported, and the rest goes on: the Secrets issued before serve.
	_, certErr := r.reconcilePoolCertificates(ctx, pool, rep)
	defer func() {
		if err == nil {
			err = certErr
		}
	}()
	// The NetworkPolicies next (the Pods start behind them); a failure
	// is reported and retried without holding back the pool.
	npErr := r.reconcileNetworkPolicies(ctx, pool)
	return firstErr(r.reconcileWorkloads(ctx, pool, rep), npErr)
}

// reconcileWorkloads is everything of reconcilePool but the certificates
// and the NetworkPolicies.
func (r *compactorPoolReconciler) reconcileWorkloads(ctx context.Context, pool *shalev1.CompactorPool, rep *poolReport) error {
	sched, err := r.ensureDeployment(ctx, pool, schedulerDeployment(pool, r.opts.ShaleImage))
	if err != nil {
		return err
	}
	rep.schedReady = sched != nil && sched.Status.ReadyReplicas > 0
	if err := r.ensureService(ctx, pool, schedulerService(pool)); err != nil {
		return err
	}

	dial, serr := r.schedulerDial(ctx, pool)
	var st *compactorv1.StatsResponse
	if serr == nil {
		st, serr = r.stats(ctx, pool, dial)
	}
	if serr != nil {
		rep.set(shalev1.ConditionSchedulerReachable, metav1.ConditionFalse, shalev1.ReasonSchedulerUnreachable,
			fmt.Sprintf("reading Stats from %s: %v", pool.SchedulerAddress(), serr))
	} else {
		rep.stats = st
		rep.set(shalev1.ConditionSchedulerReachable, metav1.ConditionTrue, shalev1.ReasonSchedulerReachable,
			fmt.Sprintf("%d queued, %d running, %d worker(s) seen", st.GetTotal().GetQueued(), st.GetTotal().GetRunning(), len(st.Workers)))
	}

	store := &shalev1.ObjectStore{}
	err = r.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: pool.Spec.ObjectStoreRef.Name}, store)
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("ObjectStore %s does not exist in namespace %s: no workers until it does", pool.Spec.ObjectStoreRef.Name, pool.Namespace)
		rep.set(shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonObjectStoreMissing, msg)
		return &refusal{eventObjectStoreMissing, msg}
	}
	if err != nil {
		return err
	}

	cur, err := r.deployment(ctx, pool, pool.WorkerName())
	if err != nil {
		return err
	}
	var current int32
	if cur != nil && cur.Spec.Replicas != nil {
		current = *cur.Spec.Replicas
	}
	in := scaleInput{
		min: pool.MinWorkers(), max: pool.MaxWorkers(),
		concurrency: pool.WorkerConcurrency(), known: rep.stats != nil, current: current,
		scaleDownDelay: defaultScaleDownDelay, now: r.now(),
	}
	if d := pool.Spec.Workers.ScaleDownDelay; d != nil {
		in.scaleDownDelay = d.Duration
	}
	if pool.Status.LastScaleTime != nil {
		in.lastScale = pool.Status.LastScaleTime.Time
	}
	if rep.stats != nil {
		in.queued, in.running = int64(rep.stats.GetTotal().GetQueued()), int64(rep.stats.GetTotal().GetRunning())
	}
	rep.desired = desiredWorkers(in)
	workers, err := r.ensureDeployment(ctx, pool, workerDeployment(pool, store, r.opts.ShaleImage, rep.desired))
	if err != nil {
		return err
	}
	if cur == nil || current != rep.desired {
		rep.scaled = true
		if cur != nil {
			r.recorder.Eventf(pool, corev1.EventTypeNormal, eventWorkersScaled, "workers %d -> %d (%d queued, %d running, %d per worker, bounds %d-%d)",
				current, rep.desired, in.queued, in.running, in.concurrency, in.min, in.max)
		}
	}
	rep.replicas, rep.workersSet = rep.desired, true
	if workers != nil {
		rep.readyWorkers = workers.Status.ReadyReplicas
	}
	switch {
	case !rep.schedReady:
		rep.set(shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonSchedulerNotReady, "the scheduler is not ready")
	case rep.readyWorkers < pool.MinWorkers():
		rep.set(shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonWorkersNotReady,
			fmt.Sprintf("%d of at least %d worker(s) ready", rep.readyWorkers, pool.MinWorkers()))
	case rep.stats == nil:
		rep.set(shalev1.ConditionReady, metav1.ConditionFalse, shalev1.ReasonSchedulerUnreachable, "the scheduler's Stats cannot be read")
	default:
		rep.set(shalev1.ConditionReady, metav1.ConditionTrue, shalev1.ReasonPoolReady,
			fmt.Sprintf("scheduler ready, %d worker(s) ready", rep.readyWorkers))
	}
	return nil
}

// deployment returns the pool's Deployment of that name, nil if none.
func (r *compactorPoolReconciler) deployment(ctx context.Context, pool *shalev1.CompactorPool, name string) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	err := r.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: name}, dep)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return dep, err
}

// ensureDeployment creates want, or rewrites the existing Deployment's
// spec when its hash differs and its replicas when they differ. A
// Deployment of that name the pool does not own is refused.
func (r *compactorPoolReconciler) ensureDeployment(ctx context.Context, pool *shalev1.CompactorPool, want *appsv1.Deployment) (*appsv1.Deployment, error) {
	if err := controllerutil.SetControllerReference(pool, want, r.Scheme()); err != nil {
		return nil, err
	}
	cur, err := r.deployment(ctx, pool, want.Name)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		return want, nil
	}
	if !metav1.IsControlledBy(cur, pool) {
		return nil, &refusal{eventDeploymentConflict, fmt.Sprintf("Deployment %s exists and is not owned by this CompactorPool; delete it or rename the pool", cur.Name)}
	}
	hash := want.Annotations[shalev1.AnnotationSpecHash]
	if cur.Annotations[shalev1.AnnotationSpecHash] == hash && ptr.Deref(cur.Spec.Replicas, 1) == ptr.Deref(want.Spec.Replicas, 1) {
		return cur, nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations[shalev1.AnnotationSpecHash] != hash {
		cur.Spec = want.Spec
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[shalev1.AnnotationSpecHash] = hash
		cur.Labels = want.Labels
	}
	cur.Spec.Replicas = want.Spec.Replicas
	if err := r.Patch(ctx, cur, patch); err != nil {
		return nil, err
	}
	return cur, nil
}

// ensureService creates the scheduler's Service or resets its selector.
func (r *compactorPoolReconciler) ensureService(ctx context.Context, pool *shalev1.CompactorPool, want *corev1.Service) error {
	if err := controllerutil.SetControllerReference(pool, want, r.Scheme()); err != nil {
		return err
	}
	var cur corev1.Service
	err := r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(&cur, pool) {
		return &refusal{eventServiceConflict, fmt.Sprintf("Service %s exists and is not owned by this CompactorPool; delete it or rename the pool", cur.Name)}
	}
	if labels.Equals(cur.Spec.Selector, want.Spec.Selector) {
		return nil
	}
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Selector = want.Spec.Selector
	return r.Patch(ctx, &cur, patch)
}

func (r *compactorPoolReconciler) writeStatus(ctx context.Context, pool *shalev1.CompactorPool, generation int64, rep *poolReport) error {
	now := metav1.NewTime(r.now())
	return patchStatus(ctx, r.Client, r.apiReader, pool, func(cur *shalev1.CompactorPool) error {
		st := &cur.Status
		for _, c := range rep.conds {
			c.ObservedGeneration = generation
			meta.SetStatusCondition(&st.Conditions, c)
		}
		if s := rep.stats; s != nil {
			t := s.GetTotal()
			st.QueueDepth, st.Running, st.Completed, st.Failed = int64(t.GetQueued()), int64(t.GetRunning()), int64(t.GetCompleted()), int64(t.GetFailed())
			st.Databases = nil
			for _, d := range s.Dbs {
				c := d.GetCounters()
				st.Databases = append(st.Databases, shalev1.CompactionStats{
					DB: d.Db, QueueDepth: int64(c.GetQueued()), Running: int64(c.GetRunning()), Completed: int64(c.GetCompleted()),
					Failed: int64(c.GetFailed()), Fallbacks: int64(c.GetFallbacks()),
				})
			}
		}
		if rep.workersSet {
			st.Replicas, st.DesiredWorkers, st.ReadyWorkers = rep.replicas, rep.desired, rep.readyWorkers
		}
		if rep.scaled {
			st.LastScaleTime = &now
		}
		st.Selector = labels.SelectorFromSet(cur.Selector(shalev1.ComponentWorker)).String()
		st.ObservedGeneration = generation
		return nil
	})
}
