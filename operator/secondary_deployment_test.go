package operator

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func secondaryFixture() (*shalev1.RocksDB, *shalev1.ObjectStore) {
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod", UID: "0a1b2c3d-0000-4000-8000-00000000abcd"},
		Spec:       shalev1.RocksDBSpec{Secondaries: shalev1.SecondariesSpec{Replicas: 2}},
		Status:     shalev1.RocksDBStatus{StoragePath: "dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd", Epoch: 3, CurrentPrimary: "orders-primary-3"},
	}
	store := &shalev1.ObjectStore{Spec: shalev1.ObjectStoreSpec{
		Endpoint:    "http://minio:9000",
		Credentials: &shalev1.SecretReference{Name: "creds"},
		Hot:         shalev1.BucketLocation{Bucket: "data", Prefix: "dbs"},
	}}
	return db, store
}

// The Deployment's Pods run `shale secondary` with exactly these flags:
// the fixed ones, then one per field set (sizes in bytes, durations as Go
// durations), with the primary's image, pull policy, key limit and read
// timeout.
func TestSecondaryDeploymentArgs(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	fixed := []string{
		"secondary",
		"--db", "s3://data/dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd",
		"--listen", ":7071",
		"--metrics-listen", ":9091",
		"--cache-dir", "/var/cache/shale",
		"--primary", "orders-rw.prod.svc:7070",
		"--id", "$(POD_NAME)",
	}
	// Last, TLS: the files of the mounted Secrets, or --insecure.
	tlsArgs := []string{"--tls-cert", "/etc/shale/tls/tls.crt", "--tls-key", "/etc/shale/tls/tls.key", "--tls-ca", "/etc/shale/tls/ca.crt", "--access-file", "/etc/shale/access/access.json"}
	for _, tc := range []struct {
		name      string
		mutate    func(*shalev1.RocksDB)
		wantArgs  []string // after the fixed ones
		wantImage string
		wantPull  corev1.PullPolicy
		tlsOff    bool
	}{
		{"defaults", func(*shalev1.RocksDB) {}, nil, "default:image", corev1.PullIfNotPresent, false},
		{"secondaries fields", func(db *shalev1.RocksDB) {
			s := &db.Spec.Secondaries
			s.CacheSize, s.BlockCacheSize = q("2Gi"), q("64Mi")
			s.CatchupInterval, s.LeaseTTL = d(500*time.Millisecond), d(10*time.Second)
		}, []string{"--cache-size", "2147483648", "--block-cache-size", "67108864", "--catchup-interval", "500ms", "--lease-ttl", "10s"}, "default:image", corev1.PullIfNotPresent, false},
		{"from the primary", func(db *shalev1.RocksDB) {
			p := &db.Spec.Primary
			p.Image, p.ImagePullPolicy = "registry.example/shale:1", corev1.PullAlways
			p.MaxKeySize, p.ReadTimeout = q("1Ki"), d(3*time.Second)
			// Primary-only settings stay with the primary.
			p.CacheSize, p.Lease, p.DeleteGrace = q("1Gi"), d(time.Second), d(time.Minute)
		}, []string{"--max-key-size", "1024", "--read-timeout", "3s"}, "registry.example/shale:1", corev1.PullAlways, false},
		{"zero cache is unbounded, not unset", func(db *shalev1.RocksDB) {
			db.Spec.Secondaries.CacheSize = q("0")
		}, []string{"--cache-size", "0"}, "default:image", corev1.PullIfNotPresent, false},
		{"TLS off", func(db *shalev1.RocksDB) {
			db.Spec.TLS = &shalev1.TLSSpec{Enabled: ptr.To(false)}
		}, nil, "default:image", corev1.PullIfNotPresent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, store := secondaryFixture()
			tc.mutate(db)
			dep := secondaryDeployment(db, store, "default:image")
			c := dep.Spec.Template.Spec.Containers[0]
			want := append(slices.Clone(fixed), tc.wantArgs...)
			if tc.tlsOff {
				want = append(want, "--insecure")
			} else {
				want = append(want, tlsArgs...)
			}
			if !slices.Equal(c.Args, want) {
				t.Errorf("args\n got %q\nwant %q", c.Args, want)
			}
			if c.Image != tc.wantImage || c.ImagePullPolicy != tc.wantPull {
				t.Errorf("image %s %s, want %s %s", c.Image, c.ImagePullPolicy, tc.wantImage, tc.wantPull)
			}
		})
	}
}

// Everything but the arguments: names, labels, selector, env (credentials
// only as secretKeyRefs), ports, probe, security, cache volume.
func TestSecondaryDeploymentShape(t *testing.T) {
	db, store := secondaryFixture()
	store.Spec.Region = "eu-west-1"
	db.Spec.Secondaries.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	dep := secondaryDeployment(db, store, "default:image")
	if dep.Name != "orders-secondary" || dep.Namespace != "prod" || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("Deployment %s/%s replicas %v", dep.Namespace, dep.Name, dep.Spec.Replicas)
	}
	wantSel := map[string]string{shalev1.LabelRocksDB: "orders", shalev1.LabelRole: shalev1.RoleSecondary}
	if got := dep.Spec.Selector.MatchLabels; !maps.Equal(got, wantSel) {
		t.Errorf("selector %v, want %v", got, wantSel)
	}
	pl := dep.Spec.Template.Labels
	for k, v := range wantSel {
		if pl[k] != v {
			t.Errorf("Pod labels %v lack %s=%s", pl, k, v)
		}
	}
	if pl[shalev1.LabelAppManagedBy] != shalev1.ManagedBy || dep.Labels[shalev1.LabelAppManagedBy] != shalev1.ManagedBy {
		t.Errorf("Pod labels %v, Deployment labels %v: want %s=%s on both (the operator's caches select on it)", pl, dep.Labels, shalev1.LabelAppManagedBy, shalev1.ManagedBy)
	}
	if _, ok := pl[shalev1.LabelEpoch]; ok {
		t.Errorf("Pod labels %v carry an epoch", pl)
	}
	if !maps.Equal(readOnlyService(db).Spec.Selector, wantSel) {
		t.Errorf("NAME-ro selector %v, want %v", readOnlyService(db).Spec.Selector, wantSel)
	}

	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME = %+v, want the downward API's metadata.name", e)
	}
	if env["AWS_ENDPOINT_URL"].Value != "http://minio:9000" || env["AWS_REGION"].Value != "eu-west-1" {
		t.Errorf("endpoint %+v region %+v", env["AWS_ENDPOINT_URL"], env["AWS_REGION"])
	}
	wantSecretAccess(t, "secondary", spec, c, "creds")
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports[portNameKV] != 7071 || ports[portNameMet] != 9091 {
		t.Errorf("container ports %v", ports)
	}
	svc := readOnlyService(db)
	if svc.Name != "orders-ro" || svc.Spec.Ports[0].Port != 7070 || svc.Spec.Ports[0].TargetPort.StrVal != portNameKV {
		t.Errorf("Service %s ports %+v, want 7070 to the container port named %s", svc.Name, svc.Spec.Ports, portNameKV)
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"shale", "health", "--addr", "127.0.0.1:7071", "--tls-ca", "/etc/shale/tls/ca.crt", "--tls-server-name", "localhost"}) {
		t.Errorf("readiness probe %+v, want `shale health` with TLS on 7071", p)
	}
	if spec.RestartPolicy != "" && spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %s: a Deployment needs Always", spec.RestartPolicy)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != runAsUser {
		t.Errorf("pod security context %+v", sc)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v", sc)
	}
	// The cache, the certificate, the access list, and the store's
	// credentials (wantSecretAccess above).
	if len(spec.Volumes) != 4 || spec.Volumes[0].EmptyDir == nil || len(c.VolumeMounts) != 4 || c.VolumeMounts[0].MountPath != cacheDir {
		t.Errorf("volumes %+v mounts %+v, want an emptyDir at %s, the certificate, the access list and the credentials", spec.Volumes, c.VolumeMounts, cacheDir)
	} else {
		checkSecretMount(t, spec, c, "tls", "orders-secondary-tls", "/etc/shale/tls")
		checkSecretMount(t, spec, c, "access", "orders-access", "/etc/shale/access")
	}
	if !c.Resources.Requests.Memory().Equal(resource.MustParse("1Gi")) {
		t.Errorf("resources %+v", c.Resources)
	}
}

// The spec hash changes with what changes the Pods, and with nothing else:
// not with replicas, the epoch, the current primary or anything else in
// status, so neither scaling, a failover nor an operator restart rolls the
// secondaries.
func TestSecondarySpecHash(t *testing.T) {
	base := func() string {
		db, store := secondaryFixture()
		return secondaryDeployment(db, store, "default:image").Annotations[shalev1.AnnotationSpecHash]
	}
	h0 := base()
	if h0 == "" || h0 != base() {
		t.Fatalf("hash %q, then %q: want a stable, non-empty hash", h0, base())
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*shalev1.RocksDB, *shalev1.ObjectStore)
		changes bool
	}{
		{"replicas", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) { db.Spec.Secondaries.Replicas = 5 }, false},
		{"failover", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) {
			db.Status.Epoch, db.Status.CurrentPrimary, db.Status.Failovers = 4, "orders-primary-4", 1
			db.Status.Conditions = []metav1.Condition{{Type: shalev1.ConditionFailover, Status: metav1.ConditionTrue}}
		}, false},
		{"status secondaries", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) { db.Status.Secondaries = 2 }, false},
		{"reclaim policy", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) { db.Spec.ReclaimPolicy = shalev1.ReclaimDelete }, false},
		{"primary lease", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) {
			db.Spec.Primary.Lease = &metav1.Duration{Duration: time.Second}
		}, false},
		{"metadata", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) {
			db.Generation, db.ResourceVersion, db.Labels = 7, "12345", map[string]string{"team": "a"}
		}, false},
		{"image", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) { db.Spec.Primary.Image = "shale:2" }, true},
		{"catch-up interval", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) {
			db.Spec.Secondaries.CatchupInterval = &metav1.Duration{Duration: time.Second}
		}, true},
		{"resources", func(db *shalev1.RocksDB, _ *shalev1.ObjectStore) {
			db.Spec.Secondaries.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, true},
		{"endpoint", func(_ *shalev1.RocksDB, s *shalev1.ObjectStore) { s.Spec.Endpoint = "https://s3.example.com" }, true},
		{"credentials", func(_ *shalev1.RocksDB, s *shalev1.ObjectStore) { s.Spec.Credentials.Name = "rotated" }, true},
	} {
		db, store := secondaryFixture()
		tc.mutate(db, store)
		dep := secondaryDeployment(db, store, "default:image")
		if h := dep.Annotations[shalev1.AnnotationSpecHash]; (h != h0) != tc.changes {
			t.Errorf("%s: hash %s, base %s; want changed=%v", tc.name, h, h0, tc.changes)
		}
		if h := specHash(dep.Spec); h != dep.Annotations[shalev1.AnnotationSpecHash] {
			t.Errorf("%s: annotation %s is not the spec's hash %s", tc.name, dep.Annotations[shalev1.AnnotationSpecHash], h)
		}
	}
	// The template holds nothing from status but the storage path.
	db, store := secondaryFixture()
	b, _ := json.Marshal(secondaryDeployment(db, store, "default:image").Spec)
	if strings.Contains(string(b), "orders-primary-3") {
		t.Errorf("the Deployment spec depends on the current primary: %s", b)
	}
}

func TestObserveSecondaries(t *testing.T) {
	dep := func(gen, observed int64, replicas, updated, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-secondary", Generation: gen},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, ReadyReplicas: ready},
		}
	}
	deleting := dep(1, 1, 2, 2, 2)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name       string
		want       int32
		dep        *appsv1.Deployment
		wantReady  int32
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"none requested", 0, nil, 0, metav1.ConditionTrue, shalev1.ReasonNoSecondaries},
		{"none requested, old Deployment going", 0, deleting, 0, metav1.ConditionTrue, shalev1.ReasonNoSecondaries},
		{"no Deployment", 2, nil, 0, metav1.ConditionFalse, shalev1.ReasonSecondariesNotReady},
		{"just created", 2, dep(1, 0, 0, 0, 0), 0, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating},
		{"starting", 2, dep(1, 1, 2, 2, 0), 0, metav1.ConditionFalse, shalev1.ReasonSecondariesNotReady},
		{"one ready", 2, dep(1, 1, 2, 2, 1), 1, metav1.ConditionFalse, shalev1.ReasonSecondariesNotReady},
		{"all ready", 2, dep(1, 1, 2, 2, 2), 2, metav1.ConditionTrue, shalev1.ReasonSecondariesReady},
		{"scaled, not seen yet", 3, dep(2, 1, 2, 2, 2), 2, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating},
		{"rolling out, surge", 2, dep(2, 2, 3, 1, 3), 3, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating},
		{"scaling down", 1, dep(2, 2, 2, 2, 2), 2, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating},
		{"being deleted", 2, deleting, 2, metav1.ConditionFalse, shalev1.ReasonSecondariesUpdating},
	} {
		ready, status, reason, msg := observeSecondaries(tc.want, tc.dep)
		if ready != tc.wantReady || status != tc.wantStatus || reason != tc.wantReason || msg == "" {
			t.Errorf("%s: got %d %s %s (%q), want %d %s %s", tc.name, ready, status, reason, msg, tc.wantReady, tc.wantStatus, tc.wantReason)
		}
	}
}
