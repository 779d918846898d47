package operator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/testenv"
)

// The operator against a real kube-apiserver and etcd (envtest) and a real
// MinIO. envtest has no kubelet, scheduler or garbage collector: tests play
// the kubelet by writing Pod status themselves.

const (
	bucket     = "shale"
	samplesDir = "../config/samples/"
	// deadline of every wait: generous, for a loaded 2-core machine.
	waitFor = 60 * time.Second
)

// testOptions: short graces so failovers happen within a test.
func testOptions() Options {
	o := DefaultOptions()
	o.ShaleImage = "shale.local/shale:test"
	o.FailoverGrace = time.Second
	o.LivenessProbeInterval = 200 * time.Millisecond
	// The stand-in primaries' listeners come and go with each test, not
	// with their Pods; TestOperatorPortWatch turns the watch on.
	o.WatchPrimaryPorts = false
	o.FailoverBackoff, o.FailoverBackoffMax = 200*time.Millisecond, time.Second
	o.ObjectStoreCheckInterval = 2 * time.Second
	o.GCInterval = 0 // tests drive the collector themselves
	o.SecondaryStatusInterval = 500 * time.Millisecond
	o.ArchiveInterval = 500 * time.Millisecond
	o.CompactorPollInterval = 300 * time.Millisecond
	o.CompactorStats = testCompactorStats
	o.Namespace = operatorNS
	o.OperatorPodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{shalev1.LabelAppComponent: "operator"}}
	return o
}

// operatorNS is the operator's namespace in tests: its CA Secret's.
const operatorNS = "shale-system"

type harness struct {
	t       *testing.T
	ctx     context.Context
	env     *testenv.Env
	c       client.Client
	minio   *miniotest.Server
	gc      *gc
	cluster string
}

func startOperator(t *testing.T) *harness {
	t.Helper()
	return startOperatorWith(t, testOptions())
}

func startOperatorWith(t *testing.T, opts Options) *harness {
	t.Helper()
	return startOperatorAs(t, opts, nil)
}

// startOperatorAs starts the operator with the configuration identity
// returns (nil: the API server's admin), called once the API server and
// MinIO run; envOpts are more options of the API server.
func startOperatorAs(t *testing.T, opts Options, identity func(*testenv.Env) *rest.Config, envOpts ...testenv.Option) *harness {
	t.Helper()
	env := testenv.Start(t, append([]testenv.Option{testenv.WithCRDDirs("../config/crd/bases"), testenv.WithScheme(shalev1.AddToScheme)}, envOpts...)...)
	srv := miniotest.Start(t)
	srv.CreateBucket(t, bucket)
	if opts.OwnCredentials == nil {
		// The operator's "own role" for instanceRole stores (used only
		// with opts.InstanceRoleStores): the test MinIO's keys.
		own := srv.S3Config()
		opts.OwnCredentials = &own
	}
	cfg := env.Config
	if identity != nil {
		cfg = identity(env)
	}

	var logDest io.Writer = io.Discard
	if os.Getenv("SHALE_TEST_OPERATOR_LOG") != "" {
		logDest = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logDest), zap.UseDevMode(true)))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  CacheOptions(opts.WatchNamespaces, opts.Namespace),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:                 ctrl.Log,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	g, err := setup(ctx, mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	g.log = logr.Discard()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	h := &harness{t: t, ctx: ctx, env: env, c: env.Client, minio: srv, gc: g}
	var ks corev1.Namespace
	if err := h.c.Get(ctx, types.NamespacedName{Name: "kube-system"}, &ks); err != nil {
		t.Fatal(err)
	}
	h.cluster = string(ks.UID)
	return h
}

// eventually polls cond until it reports true, failing t with cond's last
// message after waitFor.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", waitFor, what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) namespace(name string) string {
	h.t.Helper()
	if err := h.c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		h.t.Fatal(err)
	}
	return name
}

// samples reads config/samples, pointed at the test's MinIO.
func (h *harness) samples(ns string) (*corev1.Secret, *shalev1.ObjectStore, *shalev1.RocksDB) {
	h.t.Helper()
	var (
		sec   *corev1.Secret
		store *shalev1.ObjectStore
		db    *shalev1.RocksDB
	)
	for _, o := range h.env.Objects(h.t, samplesDir+"objectstore-secret.yaml", samplesDir+"shale_v1alpha1_objectstore.yaml", samplesDir+"shale_v1alpha1_rocksdb.yaml") {
		o.SetNamespace(ns)
		switch o := o.(type) {
		case *corev1.Secret:
			sec = o
		case *shalev1.ObjectStore:
			store = o
		case *shalev1.RocksDB:
			db = o
		}
	}
	if sec == nil || store == nil || db == nil {
		h.t.Fatal("samples: want a Secret, an ObjectStore and a RocksDB")
	}
	sec.StringData = map[string]string{
		shalev1.SecretKeyAccessKeyID:     h.minio.AccessKey,
		shalev1.SecretKeySecretAccessKey: h.minio.SecretKey,
	}
	store.Spec.Endpoint = h.minio.Endpoint
	store.Spec.Region = miniotest.Region
	if store.Spec.Hot.Bucket != bucket {
		h.t.Fatalf("sample ObjectStore uses bucket %q, the test created %q", store.Spec.Hot.Bucket, bucket)
	}
	return sec, store, db
}

func (h *harness) create(objs ...client.Object) {
	h.t.Helper()
	for _, o := range objs {
		if err := h.c.Create(h.ctx, o); err != nil {
			h.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// store opens the test's MinIO at s3://shale/PREFIX.
func (h *harness) store(prefix string) objstore.Store {
	h.t.Helper()
	return h.storeAt(bucket, prefix)
}

// storeAt opens the test's MinIO at s3://BUCKET/PREFIX.
func (h *harness) storeAt(bucketName, prefix string) objstore.Store {
	h.t.Helper()
	st, err := objstore.OpenS3("s3://"+bucketName+"/"+prefix, h.minio.S3Config())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) keys(st objstore.Store, prefix string) []string {
	h.t.Helper()
	var keys []string
	if err := st.List(h.ctx, prefix, func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return keys
}

func (h *harness) put(st objstore.Store, key, body string) {
	h.t.Helper()
	if _, err := st.Put(h.ctx, key, strings.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) db(ns, name string) *shalev1.RocksDB {
	h.t.Helper()
	db := &shalev1.RocksDB{}
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, db); err != nil {
		h.t.Fatal(err)
	}
	return db
}

// waitDB waits until cond holds for the RocksDB.
func (h *harness) waitDB(ns, name, what string, cond func(*shalev1.RocksDB) (bool, string)) *shalev1.RocksDB {
	h.t.Helper()
	var db *shalev1.RocksDB
	eventually(h.t, name+": "+what, func() (bool, string) {
		db = &shalev1.RocksDB{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, db); err != nil {
			return false, err.Error()
		}
		ok, msg := cond(db)
		return ok, fmt.Sprintf("%s; status %s", msg, statusString(db))
	})
	return db
}

func statusString(db *shalev1.RocksDB) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "phase=%s epoch=%d primary=%s failovers=%d gen=%d/%d", db.Status.Phase, db.Status.Epoch, db.Status.CurrentPrimary, db.Status.Failovers, db.Status.ObservedGeneration, db.Generation)
	for _, c := range db.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s(%s)", c.Type, c.Status, c.Reason)
	}
	return b.String()
}

func condIs(db *shalev1.RocksDB, t string, s metav1.ConditionStatus, reason string) bool {
	c := db.Condition(t)
	return c != nil && c.Status == s && (reason == "" || c.Reason == reason) && c.ObservedGeneration == db.Generation
}

func (h *harness) pod(ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, pod)
	return pod, err
}

func (h *harness) waitPod(ns, name string) *corev1.Pod {
	h.t.Helper()
	var pod *corev1.Pod
	eventually(h.t, "Pod "+name, func() (bool, string) {
		var err error
		pod, err = h.pod(ns, name)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return pod
}

func (h *harness) waitPodGone(ns, name string) {
	h.t.Helper()
	eventually(h.t, "Pod "+name+" gone", func() (bool, string) {
		_, err := h.pod(ns, name)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("get: %v", err)
	})
}

// setPod plays the kubelet: phase and Ready condition (changed at since).
func (h *harness) setPod(ns, name string, phase corev1.PodPhase, ready bool, since time.Time) {
	h.t.Helper()
	pod := h.waitPod(ns, name)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Phase = phase
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	if ready {
		h.primaryOpened(pod)
	}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatalf("updating the status of Pod %s: %v", name, err)
	}
}

// primaryOpened plays the primary of a Pod that reports ready: what it
// left in the store by then, its epoch claim and CURRENT (the operator
// looks for them before failing over a database that was ready).
func (h *harness) primaryOpened(pod *corev1.Pod) {
	h.t.Helper()
	db := h.db(pod.Namespace, pod.Labels[shalev1.LabelRocksDB])
	if db.Status.StoragePath == "" {
		return
	}
	st := h.store(db.Status.StoragePath)
	epoch, err := strconv.ParseUint(pod.Labels[shalev1.LabelEpoch], 10, 64)
	if err != nil {
		h.t.Fatalf("Pod %s: epoch label: %v", pod.Name, err)
	}
	h.put(st, fmt.Sprintf("_shale/epoch/%020d", epoch), "{}")
	h.put(st, "CURRENT", "MANIFEST-000001\n")
}

// primaries lists the primary Pods of a database.
func (h *harness) primaries(ns, db string) []string {
	h.t.Helper()
	var pods corev1.PodList
	if err := h.c.List(h.ctx, &pods, client.InNamespace(ns), client.MatchingLabels{shalev1.LabelRocksDB: db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

// waitEvent waits for an Event with reason on the named object.
func (h *harness) waitEvent(ns, object, reason string) *corev1.Event {
	h.t.Helper()
	var found *corev1.Event
	eventually(h.t, fmt.Sprintf("event %s on %s", reason, object), func() (bool, string) {
		var evs corev1.EventList
		if err := h.c.List(h.ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for i, e := range evs.Items {
			if e.InvolvedObject.Name == object && e.Reason == reason {
				found = &evs.Items[i]
				return true, ""
			}
			if e.InvolvedObject.Name == object {
				seen = append(seen, e.Reason)
			}
		}
		return false, fmt.Sprintf("events on %s: %v", object, seen)
	})
	return found
}

func histogramCount(t *testing.T) uint64 {
	t.Helper()
	var m dto.Metric
	if err := failoverDuration.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// with returns the harness for a subtest.
func (h *harness) with(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}
