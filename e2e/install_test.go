//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Values the suite installs the chart with: the demo MinIO, the images
// built for this run, and garbage collection and failover shortened so that
// the steps finish in minutes.
func (s *suite) chartArgs() []string {
	p := s.cfg.imagePrefix
	args := []string{
		"--set-string", "imageTag=" + s.cfg.imageTag, // a revision of digits only is a string too
		"--set", "operator.image.repository=" + p + "/shale-operator",
		"--set", "operator.shaleImage.repository=" + p + "/shale",
		"--set", "demo.minio.image.repository=" + p + "/minio",
		"--set", "demo.minio.enabled=true",
		// On a volume: the store-outage step scales MinIO to zero, and an
		// emptyDir would go with its Pod (and every database with it).
		// kind's fallback host-path provisioner makes its directories in
		// the controller manager's container, where the kubelet cannot
		// mount them, so the volume is one the suite makes (minioVolume).
		"--set", "demo.minio.persistence.enabled=true",
		"--set", "demo.minio.persistence.storageClass=" + minioStorageClass,
		"--set", "operator.gc.interval=5s",
		"--set", "operator.gc.grace=20s",
		"--set", "operator.logLevel=debug",
	}
	// E2E_HELM_SET: more chart values (a=b,c=d), e.g. to compare with a
	// feature off (operator.watchPrimaryPorts=false).
	if extra := os.Getenv("E2E_HELM_SET"); extra != "" {
		args = append(args, "--set", extra)
	}
	return args
}

// minioStorageClass names the PersistentVolume minioVolume makes for the
// demo MinIO's claim (no provisioner serves it: the claim binds to it).
const minioStorageClass = "shale-e2e-minio"

// minioVolume makes a hostPath PersistentVolume on the node for the demo
// MinIO's claim, unless it exists (a volume whose claim is gone is made
// anew, empty).
func (s *suite) minioVolume(t *testing.T) {
	t.Helper()
	name := "shale-e2e-minio-" + s.cfg.namespace
	var pv corev1.PersistentVolume
	err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Name: name}, &pv)
	if err == nil && pv.Status.Phase == corev1.VolumeAvailable {
		return
	}
	if err == nil {
		if err := s.kube.Delete(ctx(t, time.Minute), &pv); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		eventually(t, 2*time.Minute, "the old MinIO volume to go", func() (bool, string) {
			err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Name: name}, &pv)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Made on the node, with its bucket directories (the chart mounts
	// them as subPaths), owned by the user the demo MinIO runs as: the
	// kubelet would make them root's, and fsGroup does not apply to
	// hostPath.
	dir := fmt.Sprintf("/var/lib/shale-e2e/minio-%s-%d", s.cfg.namespace, time.Now().UnixNano())
	s.nodeExec(t, fmt.Sprintf("mkdir -p %[1]s/%[2]s %[1]s/%[3]s && chown -R 65532:65532 %[1]s", dir, hotBucket, coldBucket))
	dirType := corev1.HostPathDirectory
	pv = corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:              minioStorageClass,
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: dir, Type: &dirType}},
		},
	}
	if err := s.kube.Create(ctx(t, time.Minute), &pv); err != nil {
		t.Fatalf("creating the demo MinIO's volume: %v", err)
	}
}

func (s *suite) chartDir() string { return filepath.Join(s.cfg.repo, "charts", "shale") }

// stepInstall: helm install with the demo MinIO; an ObjectStore and a
// RocksDB; the RocksDB becomes Ready.
func stepInstall(t *testing.T, s *suite) {
	s.cleanNamespace(t)
	s.minioVolume(t)

	start := time.Now()
	args := append([]string{"install", s.cfg.release, s.chartDir(), "--namespace", s.cfg.namespace, "--create-namespace",
		"--wait", "--timeout", "5m"}, s.chartArgs()...)
	out := s.helm(t, args...)
	t.Logf("helm install took %s", time.Since(start).Round(100*time.Millisecond))
	// NOTES.txt tells the user what to apply next, for this namespace.
	for _, want := range []string{"kind: ObjectStore", "kind: RocksDB", "http://minio." + s.cfg.namespace + ":9000", "get rdb"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's notes do not mention %q:\n%s", want, out)
		}
	}

	// The operator runs as the chart says: non-root, read-only root file
	// system, no privilege escalation, leader election on.
	var dep appsv1.Deployment
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: s.operatorDeployment()}, &dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("operator Pod is not runAsNonRoot: %+v", pod.SecurityContext)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("operator container security context: %+v", sc)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--leader-elect=true") {
		t.Errorf("operator args %v: no --leader-elect=true", c.Args)
	}
	if !strings.HasSuffix(c.Image, ":"+s.cfg.imageTag) || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("operator image %s (%s), want tag %s, IfNotPresent", c.Image, c.ImagePullPolicy, s.cfg.imageTag)
	}
	s.waitLeader(t)

	// The CRDs came with the chart and are kept on uninstall.
	for _, crd := range []string{"rocksdbs.shale.rocks", "objectstores.shale.rocks"} {
		out := s.kubectl(t, "get", "crd", crd, "-o", "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}")
		if out != "keep" {
			t.Errorf("CRD %s: helm.sh/resource-policy=%q, want keep", crd, out)
		}
	}

	s.createObjectStore(t)
	s.createRocksDB(t, s.db, shalev1.ReclaimRetain)
	db := s.waitReady(t, s.db, 1, 5*time.Minute)
	t.Logf("RocksDB %s is Ready %s after helm install: %s", s.db, time.Since(start).Round(time.Second), describe(db))
}

// cleanNamespace removes what an earlier run left in the namespace (a
// failed run keeps its cluster for a look): RocksDBs first, while their
// operator still runs to apply their reclaim policy, then the release,
// then the namespace.
func (s *suite) cleanNamespace(t *testing.T) {
	var ns corev1.Namespace
	err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Name: s.cfg.namespace}, &ns)
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("namespace %s exists (from an earlier run): deleting it", s.cfg.namespace)
	var dbs shalev1.RocksDBList
	if err := s.kube.List(ctx(t, time.Minute), &dbs, client.InNamespace(s.cfg.namespace)); err == nil {
		for i := range dbs.Items {
			s.kube.Delete(ctx(t, time.Minute), &dbs.Items[i])
		}
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if err := s.kube.List(ctx(t, time.Minute), &dbs, client.InNamespace(s.cfg.namespace)); err != nil || len(dbs.Items) == 0 {
				break
			}
			time.Sleep(time.Second)
		}
		// An operator that cannot finish them (it is the thing being
		// tested, after all) must not block the next run.
		for i := range dbs.Items {
			db := &dbs.Items[i]
			if len(db.Finalizers) > 0 {
				patch := client.MergeFrom(db.DeepCopy())
				db.Finalizers = nil
				s.kube.Patch(ctx(t, time.Minute), db, patch)
			}
		}
	}
	runErr(s.cfg.helm, "--kubeconfig", s.cfg.kubeconfig, "uninstall", s.cfg.release, "--namespace", s.cfg.namespace, "--wait", "--timeout", "2m")
	if err := s.kube.Delete(ctx(t, time.Minute), &ns); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "namespace "+s.cfg.namespace+" to be gone", func() (bool, string) {
		err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Name: s.cfg.namespace}, &ns)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("phase %s, err %v", ns.Status.Phase, err)
	})
}

// waitLeader waits until an operator Pod holds the leader-election Lease.
func (s *suite) waitLeader(t *testing.T) string {
	t.Helper()
	var holder string
	eventually(t, 3*time.Minute, "an operator to hold the leader-election Lease", func() (bool, string) {
		out, err := runErr(s.cfg.kubectl, "--kubeconfig", s.cfg.kubeconfig, "-n", s.cfg.namespace, "get", "lease", "shale-operator.shale.rocks", "-o", "jsonpath={.spec.holderIdentity}")
		holder = strings.TrimSpace(out)
		if err != nil || holder == "" {
			return false, out
		}
		// The holder is POD_NAME_<uuid>: it must be a running operator Pod.
		podName, _, _ := strings.Cut(holder, "_")
		p := s.pod(t, podName)
		return p != nil && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning, "held by " + holder
	})
	return holder
}

// objectStoreEndpoint is the demo MinIO's URL inside the cluster.
func (s *suite) objectStoreEndpoint() string {
	return fmt.Sprintf("http://minio.%s:9000", s.cfg.namespace)
}

func (s *suite) createObjectStore(t *testing.T) {
	store := &shalev1.ObjectStore{
		ObjectMeta: metav1.ObjectMeta{Name: objectStoreName, Namespace: s.cfg.namespace},
		Spec: shalev1.ObjectStoreSpec{
			Endpoint:    s.objectStoreEndpoint(),
			Credentials: &shalev1.SecretReference{Name: "shale-objectstore"},
			Hot:         shalev1.BucketLocation{Bucket: "shale", Prefix: "dbs"},
			Cold:        &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: "shale-cold"}},
		},
	}
	if err := s.kube.Create(ctx(t, time.Minute), store); err != nil {
		t.Fatalf("creating ObjectStore: %v", err)
	}
	eventually(t, 3*time.Minute, "ObjectStore minio to be Reachable", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(store), store); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(store.Status.Conditions, shalev1.ConditionReachable)
		if c == nil {
			return false, "no Reachable condition yet"
		}
		return c.Status == metav1.ConditionTrue, fmt.Sprintf("%s: %s: %s", c.Status, c.Reason, c.Message)
	})
}

// createRocksDB creates a small database for the tests.
func (s *suite) createRocksDB(t *testing.T, name string, policy shalev1.ReclaimPolicy) *shalev1.RocksDB {
	t.Helper()
	return s.createRocksDBWith(t, name, policy, nil)
}

// createRocksDBWith is createRocksDB with edit applied to the spec first.
func (s *suite) createRocksDBWith(t *testing.T, name string, policy shalev1.ReclaimPolicy, edit func(*shalev1.RocksDB)) *shalev1.RocksDB {
	t.Helper()
	q := resource.MustParse
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.namespace},
		Spec: shalev1.RocksDBSpec{
			Clients:        e2eClients(),
			ObjectStoreRef: shalev1.ObjectStoreReference{Name: objectStoreName},
			ReclaimPolicy:  policy,
			Primary: shalev1.PrimarySpec{
				CacheSize:      ptrTo(q("256Mi")),
				BlockCacheSize: ptrTo(q("32Mi")),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
				},
			},
		},
	}
	if edit != nil {
		edit(db)
	}
	if err := s.kube.Create(ctx(t, time.Minute), db); err != nil {
		t.Fatalf("creating RocksDB %s: %v", name, err)
	}
	return db
}

func ptrTo[T any](v T) *T { return &v }

// events lists the Events about an object (by kind and name) in the
// namespace.
func (s *suite) events(t *testing.T, kind, name string) []corev1.Event {
	t.Helper()
	var evs corev1.EventList
	if err := s.kube.List(ctx(t, time.Minute), &evs, client.InNamespace(s.cfg.namespace)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func eventsWith(evs []corev1.Event, reason string, uid types.UID) []corev1.Event {
	var out []corev1.Event
	for _, e := range evs {
		if e.Reason == reason && (uid == "" || e.InvolvedObject.UID == uid) {
			out = append(out, e)
		}
	}
	return out
}
