package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/compactor"
)

// testSchedulers maps "namespace/pool" to the address of a real scheduler
// a test runs in-process: envtest has no cluster DNS for NAME-scheduler.
var testSchedulers sync.Map

func testCompactorStats(ctx context.Context, pool *shalev1.CompactorPool, dial grpc.DialOption) (*compactorv1.StatsResponse, error) {
	addr, ok := testSchedulers.Load(pool.Namespace + "/" + pool.Name)
	if !ok {
		return nil, fmt.Errorf("no scheduler runs for %s/%s in this test", pool.Namespace, pool.Name)
	}
	return readStats(ctx, addr.(string), dial)
}

func (h *harness) pool(ns, name string) *shalev1.CompactorPool {
	h.t.Helper()
	p := &shalev1.CompactorPool{}
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) waitPool(ns, name, what string, cond func(*shalev1.CompactorPool) (bool, string)) *shalev1.CompactorPool {
	h.t.Helper()
	var p *shalev1.CompactorPool
	eventually(h.t, name+": "+what, func() (bool, string) {
		p = &shalev1.CompactorPool{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			return false, err.Error()
		}
		ok, msg := cond(p)
		return ok, fmt.Sprintf("%s; status %+v", msg, p.Status)
	})
	return p
}

func (h *harness) waitReplicas(ns, name string, want int32) *appsv1.Deployment {
	h.t.Helper()
	var dep *appsv1.Deployment
	eventually(h.t, fmt.Sprintf("Deployment %s with %d replicas", name, want), func() (bool, string) {
		var err error
		if dep, err = h.deployment(ns, name); err != nil {
			return false, err.Error()
		}
		got := ptr.Deref(dep.Spec.Replicas, -1)
		return got == want, fmt.Sprintf("replicas %d", got)
	})
	return dep
}

// testCompactorPool: a RocksDB with spec.compaction Remote and its
// CompactorPool. The pool's scheduler runs in-process (the real one);
// the test plays the primaries and workers over its gRPC API, and the
// Deployment controller by writing Deployment status.
func testCompactorPool(h *harness) {
	t := h.t
	ns := h.namespace("compaction")
	sec, store, db := h.samples(ns)
	db.Spec.Compaction = shalev1.CompactionSpec{Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{Name: "pool"}, Priority: 30,
		QueueTimeout: &metav1.Duration{Duration: 45 * time.Second}}
	// Plaintext here (the in-process scheduler serves it); TLS pools are
	// testCompactorPoolCertificates'.
	db.Spec.TLS = &shalev1.TLSSpec{Enabled: ptr.To(false)}
	db.Spec.Clients = nil // clients need TLS
	h.create(sec, store, db)

	// The primary gets the flags even before the pool exists (it
	// compacts locally until the scheduler answers).
	pod := h.waitPod(ns, "orders-primary-1")
	args := " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " "
	for _, want := range []string{" --compaction remote ", " --compaction-scheduler pool-scheduler.compaction.svc:7080 ", " --compaction-priority 30 ", " --compaction-queue-timeout 45s "} {
		if !strings.Contains(args, want) {
			t.Errorf("primary args %q lack %q", args, want)
		}
	}
	h.waitDB(ns, "orders", "CompactorPoolMissing", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolMissing), "want CompactorPoolMissing"
	})
	h.waitEvent(ns, "orders", eventCompactorPoolProblem)

	sched, err := compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	testSchedulers.Store(ns+"/pool", sched.Addr())
	defer testSchedulers.Delete(ns + "/pool")
	pool := &shalev1.CompactorPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: shalev1.CompactorPoolSpec{
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: store.Name},
			Scheduler:      shalev1.CompactorSchedulerSpec{LeaseTTL: &metav1.Duration{Duration: 20 * time.Second}},
			Workers: shalev1.CompactorWorkersSpec{MinReplicas: ptr.To[int32](1), MaxReplicas: 3, Concurrency: 1,
				ScaleDownDelay: &metav1.Duration{}, JobTimeout: &metav1.Duration{Duration: 10 * time.Minute}},
			TLS: &shalev1.TLSSpec{Enabled: ptr.To(false)},
		},
	}
	h.create(pool)

	// Scheduler: Deployment (Recreate, one replica) and Service.
	sd := h.waitDeployment(ns, "pool-scheduler")
	p := h.pool(ns, "pool")
	if !metav1.IsControlledBy(sd, p) || ptr.Deref(sd.Spec.Replicas, 0) != 1 || sd.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("scheduler Deployment: owners %v replicas %v strategy %v", sd.OwnerReferences, sd.Spec.Replicas, sd.Spec.Strategy.Type)
	}
	sargs := strings.Join(sd.Spec.Template.Spec.Containers[0].Args, " ")
	if sargs != "compactor scheduler --listen :7080 --metrics-listen :9080 --lease-ttl 20s --insecure" {
		t.Errorf("scheduler args %q", sargs)
	}
	svc := h.waitService(ns, "pool-scheduler")
	if svc.Spec.Selector[shalev1.LabelCompactorPool] != "pool" || svc.Spec.Selector[shalev1.LabelAppComponent] != shalev1.ComponentScheduler || svc.Spec.Ports[0].Port != 7080 {
		t.Errorf("scheduler Service: selector %v ports %+v", svc.Spec.Selector, svc.Spec.Ports)
	}
	// Workers: the minimum, with the ObjectStore's credentials.
	wd := h.waitReplicas(ns, "pool-worker", 1)
	ctr := wd.Spec.Template.Spec.Containers[0]
	wargs := " " + strings.Join(ctr.Args, " ") + " "
	for _, want := range []string{" compactor worker ", " --scheduler pool-scheduler.compaction.svc:7080 ", " --cache-dir /var/cache/shale ", " --concurrency 1 ", " --id $(POD_NAME) ", " --job-timeout 10m0s "} {
		if !strings.Contains(wargs, want) {
			t.Errorf("worker args %q lack %q", wargs, want)
		}
	}
	// NetworkPolicies: the scheduler admits this pool's primaries (the
	// label is on the Pod), workers and the operator; the workers serve
	// metrics only.
	if l := pod.Labels[shalev1.LabelCompactorPoolClient]; l != "pool" {
		t.Errorf("primary Pod label %s=%q, want pool", shalev1.LabelCompactorPoolClient, l)
	}
	for name, want := range map[string]*networkingv1.NetworkPolicy{
		"pool-scheduler-ingress": schedulerPolicy(p, peersOf(testOptions())),
		"pool-worker-ingress":    workerPolicy(p, peersOf(testOptions())),
	} {
		np := h.waitPolicy(ns, name, "as built", specIs(want))
		if !metav1.IsControlledBy(np, p) {
			t.Errorf("NetworkPolicy %s owners %v: not controlled by the pool", name, np.OwnerReferences)
		}
	}
	for name, c := range map[string]corev1.Container{"scheduler": sd.Spec.Template.Spec.Containers[0], "worker": ctr} {
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s container security context %+v: want readOnlyRootFilesystem", name, sc)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	wantSecretAccess(t, "worker", wd.Spec.Template.Spec, ctr, sec.Name)
	if env["AWS_ENDPOINT_URL"].Value != h.minio.Endpoint {
		t.Errorf("worker endpoint %q", env["AWS_ENDPOINT_URL"].Value)
	}

	// Ready once the scheduler and the minimum of workers are.
	h.setDeploymentStatus(ns, "pool-scheduler", 1)
	h.setDeploymentStatus(ns, "pool-worker", 1)
	h.waitPool(ns, "pool", "Ready", func(p *shalev1.CompactorPool) (bool, string) {
		c := p.Condition(shalev1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && p.Status.Selector != "", "want Ready and a selector"
	})
	h.waitDB(ns, "orders", "CompactorPoolReady", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCompactorPoolReady, metav1.ConditionTrue, shalev1.ReasonCompactorPoolReady), "want CompactorPoolReady"
	})

	// Three jobs of the database: three workers, and the counts in both
	// statuses.
	url := store.DatabaseURL(h.db(ns, "orders").Status.StoragePath)
	conn, err := grpc.NewClient(sched.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cc := compactorv1.NewCompactorClient(conn)
	var cancels []context.CancelFunc
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithCancel(h.ctx)
		cancels = append(cancels, cancel)
		st, err := cc.Compact(ctx, &compactorv1.CompactRequest{Db: url, JobId: fmt.Sprintf("%020d-%d", 1, i), Priority: 30, Input: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	h.waitReplicas(ns, "pool-worker", 3)
	h.waitPool(ns, "pool", "3 queued", func(p *shalev1.CompactorPool) (bool, string) {
		return p.Status.QueueDepth == 3 && p.Status.DesiredWorkers == 3 && p.Status.Replicas == 3 && p.Status.LastScaleTime != nil, ""
	})
	h.waitEvent(ns, "pool", eventWorkersScaled)
	lr, err := cc.Lease(h.ctx, &compactorv1.LeaseRequest{Worker: "w", Slots: 1})
	if err != nil || lr.Job == nil {
		t.Fatalf("lease: %v %v", lr, err)
	}
	if _, err := cc.Complete(h.ctx, &compactorv1.CompleteRequest{Worker: "w", Job: &compactorv1.JobRef{JobId: lr.Job.JobId, Attempt: lr.Job.Attempt}, Result: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	h.waitPool(ns, "pool", "one completed", func(p *shalev1.CompactorPool) (bool, string) {
		return p.Status.Completed == 1 && p.Status.QueueDepth == 2 && len(p.Status.Databases) == 1 && p.Status.Databases[0].DB == url, ""
	})
	h.waitDB(ns, "orders", "its line of the pool's status", func(db *shalev1.RocksDB) (bool, string) {
		c := db.Status.Compaction
		return c != nil && c.DB == url && c.Completed == 1 && c.QueueDepth == 2, fmt.Sprintf("compaction %+v", c)
	})

	// The scale subresource raises the minimum.
	for _, c := range cancels {
		c()
	}
	h.waitPool(ns, "pool", "an empty queue", func(p *shalev1.CompactorPool) (bool, string) {
		return p.Status.QueueDepth == 0 && p.Status.Running == 0, ""
	})
	h.waitReplicas(ns, "pool-worker", 1) // no delay in this pool
	eventually(t, "scale to 2", func() (bool, string) {
		p := h.pool(ns, "pool")
		scale := &autoscalingv1.Scale{}
		if err := h.c.SubResource("scale").Get(h.ctx, p, scale); err != nil {
			return false, err.Error()
		}
		scale.Spec.Replicas = 2
		if err := h.c.SubResource("scale").Update(h.ctx, p, client.WithSubResourceBody(scale)); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	h.waitReplicas(ns, "pool-worker", 2)
	if r := h.pool(ns, "pool").Spec.Workers.MinReplicas; r == nil || *r != 2 {
		t.Fatalf("spec.workers.minReplicas %v after scaling, want 2", r)
	}

	// The scheduler gone: SchedulerReachable False, workers kept.
	testSchedulers.Delete(ns + "/pool")
	h.waitPool(ns, "pool", "SchedulerUnreachable", func(p *shalev1.CompactorPool) (bool, string) {
		c := p.Condition(shalev1.ConditionSchedulerReachable)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == shalev1.ReasonSchedulerUnreachable, ""
	})
	h.waitReplicas(ns, "pool-worker", 2)

	// A pool of another ObjectStore cannot serve the database.
	other := store.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "elsewhere", Namespace: ns}
	other.Status = shalev1.ObjectStoreStatus{}
	pool2 := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool2", Namespace: ns},
		Spec: shalev1.CompactorPoolSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "elsewhere"}}}
	h.create(other, pool2)
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Compaction.CompactorPoolRef.Name = "pool2" })
	h.waitDB(ns, "orders", "CompactorPoolStoreMismatch", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCompactorPoolReady, metav1.ConditionFalse, shalev1.ReasonCompactorPoolStore), ""
	})
	// Back to local: the condition says so and the line goes.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Compaction = shalev1.CompactionSpec{Mode: shalev1.CompactionLocal} })
	h.waitDB(ns, "orders", "LocalCompaction", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCompactorPoolReady, metav1.ConditionTrue, shalev1.ReasonLocalCompaction) && db.Status.Compaction == nil, ""
	})
}
