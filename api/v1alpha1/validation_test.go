package v1alpha1_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
)

// The CRDs as generated (config/crd/bases) and the samples as shipped
// (config/samples), against a real kube-apiserver: the CEL rules accept
// the samples and refuse bad specs with their own messages.

const (
	crdDir     = "../../config/crd/bases"
	samplesDir = "../../config/samples/"
)

func start(t *testing.T) (*testenv.Env, context.Context) {
	t.Helper()
	env := testenv.Start(t, testenv.WithCRDDirs(crdDir), testenv.WithScheme(shalev1.AddToScheme))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return env, ctx
}

func samples(t *testing.T, env *testenv.Env) (*corev1.Secret, *shalev1.ObjectStore, *shalev1.RocksDB) {
	t.Helper()
	var (
		sec *corev1.Secret
		os  *shalev1.ObjectStore
		db  *shalev1.RocksDB
	)
	for _, o := range env.Objects(t, samplesDir+"objectstore-secret.yaml", samplesDir+"shale_v1alpha1_objectstore.yaml", samplesDir+"shale_v1alpha1_rocksdb.yaml") {
		switch o := o.(type) {
		case *corev1.Secret:
			sec = o
		case *shalev1.ObjectStore:
			os = o
		case *shalev1.RocksDB:
			db = o
		}
	}
	if sec == nil || os == nil || db == nil {
		t.Fatalf("samples: want a Secret, an ObjectStore and a RocksDB")
	}
	return sec, os, db
}

// wantInvalid checks that err is the API server's Invalid answer and
// carries msg.
func wantInvalid(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want refused with %q", what, msg)
		return
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: got %v, want Invalid with %q", what, err, msg)
		return
	}
	t.Logf("%s: %v", what, err)
}

func TestValidation(t *testing.T) {
	env, ctx := start(t)
	c := env.Client
	sec, store, db := samples(t, env)
	for _, o := range []client.Object{sec, store, db} {
		o.SetNamespace("default")
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("sample %s %s refused: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	got := &shalev1.RocksDB{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ReclaimPolicy != shalev1.ReclaimRetain {
		t.Errorf("reclaimPolicy = %q, want the sample's Retain", got.Spec.ReclaimPolicy)
	}

	t.Run("ObjectStoreCreate", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*shalev1.ObjectStoreSpec)
			msg    string
		}{
			{"endpoint-no-scheme", func(s *shalev1.ObjectStoreSpec) { s.Endpoint = "minio:9000" }, "endpoint must be http://HOST[:PORT]"},
			{"endpoint-path", func(s *shalev1.ObjectStoreSpec) { s.Endpoint = "http://minio:9000/shale" }, "the bucket goes in hot.bucket"},
			{"endpoint-user", func(s *shalev1.ObjectStoreSpec) { s.Endpoint = "https://key:secret@s3.example.com" }, "endpoint must be"},
			{"bucket-upper", func(s *shalev1.ObjectStoreSpec) { s.Hot.Bucket = "Shale_Data" }, "bucket must be 3 to 63 lower-case letters"},
			{"bucket-dots", func(s *shalev1.ObjectStoreSpec) { s.Hot.Bucket = "a..b" }, "bucket must be"},
			{"prefix-leading-slash", func(s *shalev1.ObjectStoreSpec) { s.Hot.Prefix = "/dbs" }, "prefix must be segments separated by '/'"},
			{"prefix-dotdot", func(s *shalev1.ObjectStoreSpec) { s.Hot.Prefix = "dbs/../other" }, "prefix must be segments"},
			{"prefix-empty-segment", func(s *shalev1.ObjectStoreSpec) { s.Hot.Prefix = "dbs//x" }, "prefix must be segments"},
			{"cold-endpoint", func(s *shalev1.ObjectStoreSpec) {
				s.Cold = &shalev1.ColdTier{Endpoint: "ftp://cold", BucketLocation: shalev1.BucketLocation{Bucket: "cold"}}
			}, "cold.endpoint must be"},
			{"storage-class", func(s *shalev1.ObjectStoreSpec) { s.StorageClasses.SST = "standard-ia" }, "storageClasses.sst must be an S3 storage class"},
			{"no-credentials", func(s *shalev1.ObjectStoreSpec) { s.Credentials.Name = "" }, "spec.credentials.name"},
			{"no-credential-source", func(s *shalev1.ObjectStoreSpec) { s.Credentials = nil }, "set exactly one of credentials (a Secret with the keys), serviceAccountName"},
			{"secret-and-service-account", func(s *shalev1.ObjectStoreSpec) { s.ServiceAccountName = "orders-s3" }, "set exactly one of credentials"},
			{"secret-and-instance-role", func(s *shalev1.ObjectStoreSpec) { s.InstanceRole = true }, "set exactly one of credentials"},
			{"service-account-and-instance-role", func(s *shalev1.ObjectStoreSpec) {
				s.Credentials, s.ServiceAccountName, s.InstanceRole = nil, "orders-s3", true
			}, "set exactly one of credentials"},
			{"service-account-name", func(s *shalev1.ObjectStoreSpec) { s.Credentials, s.ServiceAccountName = nil, "Orders_S3" }, "serviceAccountName must be a ServiceAccount name"},
			{"checksum-md5", func(s *shalev1.ObjectStoreSpec) { s.Checksum = "md5" }, `spec.checksum: Unsupported value: "md5"`},
		} {
			o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + tc.name, Namespace: "default"}, Spec: *store.Spec.DeepCopy()}
			tc.mutate(&o.Spec)
			wantInvalid(t, tc.name, c.Create(ctx, o), tc.msg)
		}
	})

	// Workload identity and instance roles instead of a Secret.
	t.Run("ObjectStoreCredentialSources", func(t *testing.T) {
		for name, mutate := range map[string]func(*shalev1.ObjectStoreSpec){
			"service-account": func(s *shalev1.ObjectStoreSpec) { s.Credentials, s.ServiceAccountName = nil, "orders-s3" },
			"instance-role":   func(s *shalev1.ObjectStoreSpec) { s.Credentials, s.InstanceRole = nil, true },
			"checksum-none":   func(s *shalev1.ObjectStoreSpec) { s.Checksum = "none" },
		} {
			o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "src-" + name, Namespace: "default"}, Spec: *store.Spec.DeepCopy()}
			mutate(&o.Spec)
			if err := c.Create(ctx, o); err != nil {
				t.Errorf("%s: refused: %v", name, err)
			}
		}
		// A store may move from a Secret to workload identity.
		cur := &shalev1.ObjectStore{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(store), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Credentials, cur.Spec.ServiceAccountName = nil, "orders-s3"
		if err := c.Update(ctx, cur); err != nil {
			t.Errorf("from a Secret to a ServiceAccount: %v", err)
		}
		cur.Spec.Credentials, cur.Spec.ServiceAccountName = store.Spec.Credentials.DeepCopy(), ""
		if err := c.Update(ctx, cur); err != nil {
			t.Errorf("back to the Secret: %v", err)
		}
	})

	t.Run("ObjectStoreUpdate", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*shalev1.ObjectStoreSpec)
			msg    string
		}{
			{"bucket", func(s *shalev1.ObjectStoreSpec) { s.Hot.Bucket = "elsewhere" }, "hot is immutable"},
			{"prefix", func(s *shalev1.ObjectStoreSpec) { s.Hot.Prefix = "other" }, "hot is immutable"},
		} {
			cur := &shalev1.ObjectStore{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(store), cur); err != nil {
				t.Fatal(err)
			}
			tc.mutate(&cur.Spec)
			wantInvalid(t, tc.name, c.Update(ctx, cur), tc.msg)
		}
		// The endpoint and credentials may change (a moved service, a
		// rotated key).
		cur := &shalev1.ObjectStore{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(store), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.Endpoint = "https://s3.example.com"
		cur.Spec.Credentials.Name = "rotated"
		if err := c.Update(ctx, cur); err != nil {
			t.Errorf("changing endpoint and credentials: %v", err)
		}
	})

	// While a RocksDB keeps data in the store (status.usedBy, kept by the
	// operator), the fields that say where the data is cannot change: a
	// primary pointed elsewhere would not find its database. The cold tier
	// only once a RocksDB uses it.
	t.Run("ObjectStoreInUse", func(t *testing.T) {
		o := &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Name: "in-use", Namespace: "default"}, Spec: *store.Spec.DeepCopy()}
		o.Spec.Region = "us-east-1"
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		setUsers := func(users ...shalev1.StoreUser) {
			t.Helper()
			cur := &shalev1.ObjectStore{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				t.Fatal(err)
			}
			cur.Status.UsedBy = users
			if err := c.Status().Update(ctx, cur); err != nil {
				t.Fatalf("status.usedBy %v: %v", users, err)
			}
		}
		update := func(mutate func(*shalev1.ObjectStoreSpec)) error {
			cur := &shalev1.ObjectStore{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				t.Fatal(err)
			}
			mutate(&cur.Spec)
			return c.Update(ctx, cur)
		}
		cold := shalev1.ColdTier{Endpoint: "http://cold:9000", BucketLocation: shalev1.BucketLocation{Bucket: "cold", Prefix: "dbs"}}
		setUsers(shalev1.StoreUser{Name: "orders"})
		for _, tc := range []struct {
			name   string
			mutate func(*shalev1.ObjectStoreSpec)
		}{
			{"endpoint", func(s *shalev1.ObjectStoreSpec) { s.Endpoint = "http://elsewhere:9000" }},
			{"region", func(s *shalev1.ObjectStoreSpec) { s.Region = "eu-west-1" }},
			{"region-removed", func(s *shalev1.ObjectStoreSpec) { s.Region = "" }},
		} {
			wantInvalid(t, "in use: "+tc.name, update(tc.mutate), "endpoint and region cannot change while RocksDBs keep data in this ObjectStore")
		}
		// Credentials and storage classes may change; a cold tier may be
		// added, and changed while no RocksDB uses it.
		if err := update(func(s *shalev1.ObjectStoreSpec) {
			s.Credentials.Name, s.StorageClasses.SST, s.Cold = "rotated", "STANDARD_IA", cold.DeepCopy()
		}); err != nil {
			t.Errorf("in use: credentials, storage class, a new cold tier: %v", err)
		}
		if err := update(func(s *shalev1.ObjectStoreSpec) { s.Cold.Bucket = "colder" }); err != nil {
			t.Errorf("in use, cold tier unused: changing it: %v", err)
		}
		setUsers(shalev1.StoreUser{Name: "orders"}, shalev1.StoreUser{Name: "events", ColdTier: true})
		for _, tc := range []struct {
			name   string
			mutate func(*shalev1.ObjectStoreSpec)
		}{
			{"cold-bucket", func(s *shalev1.ObjectStoreSpec) { s.Cold.Bucket = "coldest" }},
			{"cold-prefix", func(s *shalev1.ObjectStoreSpec) { s.Cold.Prefix = "" }},
			{"cold-endpoint", func(s *shalev1.ObjectStoreSpec) { s.Cold.Endpoint = "" }},
			{"cold-removed", func(s *shalev1.ObjectStoreSpec) { s.Cold = nil }},
		} {
			wantInvalid(t, "cold tier in use: "+tc.name, update(tc.mutate), "cold cannot change while RocksDBs keep tables in the cold tier")
		}
		// No user left: everything but hot may change again.
		setUsers()
		if err := update(func(s *shalev1.ObjectStoreSpec) { s.Endpoint, s.Region, s.Cold = "http://elsewhere:9000", "", nil }); err != nil {
			t.Errorf("not in use: moving it: %v", err)
		}
	})

	t.Run("RocksDBCreate", func(t *testing.T) {
		q := resource.MustParse
		d := func(s string) *metav1.Duration {
			// Durations the Go type cannot hold are sent as raw JSON below.
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatal(err)
			}
			return &metav1.Duration{Duration: v}
		}
		for _, tc := range []struct {
			name   string
			dbName string
			mutate func(*shalev1.RocksDBSpec)
			msg    string
		}{
			{"name-digit", "1orders", nil, "a RocksDB name must be at most 50"},
			{"name-dot", "orders.v2", nil, "start with a letter"},
			{"name-long", strings.Repeat("a", 51), nil, "at most 50"},
			{"lease-zero", "", func(s *shalev1.RocksDBSpec) { s.Primary.Lease = d("0s") }, "lease must be a duration from 100ms to 10m"},
			{"lease-long", "", func(s *shalev1.RocksDBSpec) { s.Primary.Lease = d("1h") }, "lease must be a duration from 100ms to 10m"},
			{"delete-grace-negative", "", func(s *shalev1.RocksDBSpec) { s.Primary.DeleteGrace = d("-1h") }, "deleteGrace must be a positive duration"},
			{"read-timeout-zero", "", func(s *shalev1.RocksDBSpec) { s.Primary.ReadTimeout = d("0s") }, "readTimeout must be a positive duration"},
			{"cache-negative", "", func(s *shalev1.RocksDBSpec) { v := q("-1Gi"); s.Primary.CacheSize = &v }, "cacheSize must be a non-negative size"},
			{"max-key-zero", "", func(s *shalev1.RocksDBSpec) { v := q("0"); s.Primary.MaxKeySize = &v }, "maxKeySize must be a positive size"},
			{"reclaim", "", func(s *shalev1.RocksDBSpec) { s.ReclaimPolicy = "Keep" }, `supported values: "Retain", "Delete"`},
			{"no-store", "", func(s *shalev1.RocksDBSpec) { s.ObjectStoreRef.Name = "" }, "spec.objectStoreRef.name"},
			{"secondaries-negative", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.Replicas = -1 }, "spec.secondaries.replicas in body should be greater than or equal to 0"},
			{"secondaries-many", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.Replicas = 17 }, "spec.secondaries.replicas in body should be less than or equal to 16"},
			{"secondaries-cache-negative", "", func(s *shalev1.RocksDBSpec) { v := q("-1"); s.Secondaries.CacheSize = &v }, "cacheSize must be a non-negative size"},
			{"secondaries-block-cache-negative", "", func(s *shalev1.RocksDBSpec) { v := q("-64Mi"); s.Secondaries.BlockCacheSize = &v }, "blockCacheSize must be a non-negative size"},
			{"catchup-short", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.CatchupInterval = d("1ms") }, "catchupInterval must be a duration from 10ms to 1m"},
			{"catchup-long", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.CatchupInterval = d("2m") }, "catchupInterval must be a duration from 10ms to 1m"},
			{"lease-ttl-short", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.LeaseTTL = d("500ms") }, "leaseTTL must be a duration from 1s to 1h"},
			{"lease-ttl-long", "", func(s *shalev1.RocksDBSpec) { s.Secondaries.LeaseTTL = d("2h") }, "leaseTTL must be a duration from 1s to 1h"},
			{"compaction-remote-no-pool", "", func(s *shalev1.RocksDBSpec) { s.Compaction.Mode = shalev1.CompactionRemote }, "compaction.mode Remote needs compaction.compactorPoolRef"},
			{"compaction-mode", "", func(s *shalev1.RocksDBSpec) { s.Compaction.Mode = "Elsewhere" }, `supported values: "Local", "Remote"`},
			{"compaction-priority", "", func(s *shalev1.RocksDBSpec) { s.Compaction.Priority = 101 }, "spec.compaction.priority in body should be less than or equal to 100"},
			{"compaction-queue-timeout", "", func(s *shalev1.RocksDBSpec) { s.Compaction.QueueTimeout = d("0s") }, "queueTimeout must be a positive duration"},
			{"compaction-pool-name", "", func(s *shalev1.RocksDBSpec) {
				s.Compaction = shalev1.CompactionSpec{Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{}}
			}, "spec.compaction.compactorPoolRef.name"},
			{"tuning-unordered-pipelined", "", func(s *shalev1.RocksDBSpec) {
				s.Tuning = &shalev1.TuningSpec{UnorderedWrite: true, PipelinedWrite: true}
			}, "unorderedWrite and pipelinedWrite cannot both be true"},
			{"tuning-index-type", "", func(s *shalev1.RocksDBSpec) { s.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "Hash"} }, `supported values: "Binary", "BinaryAndHash"`},
			{"tuning-ratio-without-hash", "", func(s *shalev1.RocksDBSpec) { s.Tuning = &shalev1.TuningSpec{DataBlockHashTableUtilRatio: "0.5"} }, "dataBlockHashTableUtilRatio needs dataBlockIndexType: BinaryAndHash"},
			{"tuning-ratio-zero", "", func(s *shalev1.RocksDBSpec) {
				s.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "BinaryAndHash", DataBlockHashTableUtilRatio: "0"}
			}, "dataBlockHashTableUtilRatio must be a decimal in (0, 1]"},
			{"tuning-ratio-big", "", func(s *shalev1.RocksDBSpec) {
				s.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "BinaryAndHash", DataBlockHashTableUtilRatio: "1.5"}
			}, "dataBlockHashTableUtilRatio must be a decimal in (0, 1]"},
			{"tuning-ratio-word", "", func(s *shalev1.RocksDBSpec) {
				s.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "BinaryAndHash", DataBlockHashTableUtilRatio: "most"}
			}, "dataBlockHashTableUtilRatio must be a decimal in (0, 1]"},
			{"tuning-group-commit-long", "", func(s *shalev1.RocksDBSpec) { s.Tuning = &shalev1.TuningSpec{GroupCommitWindow: d("1s")} }, "groupCommitWindow must be a duration from 0s to 100ms"},
			{"tuning-group-commit-negative", "", func(s *shalev1.RocksDBSpec) { s.Tuning = &shalev1.TuningSpec{GroupCommitWindow: d("-1ms")} }, "groupCommitWindow must be a duration from 0s to 100ms"},
			{"tuning-multiget-without-async", "", func(s *shalev1.RocksDBSpec) { s.Tuning = &shalev1.TuningSpec{OptimizeMultigetForIO: true} }, "optimizeMultigetForIO needs asyncIO: true"},
			{"clients-without-tls", "", func(s *shalev1.RocksDBSpec) {
				s.TLS = &shalev1.TLSSpec{Enabled: ptr.To(false)}
				s.Clients = []shalev1.ClientSpec{{Name: "app", Role: "write"}}
			}, "spec.clients need TLS"},
			{"client-role", "", func(s *shalev1.RocksDBSpec) { s.Clients = []shalev1.ClientSpec{{Name: "app", Role: "owner"}} }, `supported values: "read", "write", "admin"`},
			{"client-name", "", func(s *shalev1.RocksDBSpec) { s.Clients = []shalev1.ClientSpec{{Name: "App_1", Role: "read"}} }, "spec.clients[0].name in body should match"},
			{"client-twice", "", func(s *shalev1.RocksDBSpec) {
				s.Clients = []shalev1.ClientSpec{{Name: "app", Role: "read"}, {Name: "app", Role: "write"}}
			}, "Duplicate value"},
			{"network-policy-empty-peer", "", func(s *shalev1.RocksDBSpec) {
				s.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}, {}}
			}, "each peer needs a podSelector, a namespaceSelector or an ipBlock"},
			{"network-policy-ipblock-and-selector", "", func(s *shalev1.RocksDBSpec) {
				s.NetworkPolicy.Clients = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: &metav1.LabelSelector{}}}
			}, "a peer with an ipBlock cannot have selectors"},
		} {
			o := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: tc.dbName, Namespace: "default"}, Spec: *db.Spec.DeepCopy()}
			if o.Name == "" {
				o.Name = "bad-" + tc.name
			}
			if tc.mutate != nil {
				tc.mutate(&o.Spec)
			}
			wantInvalid(t, tc.name, c.Create(ctx, o), tc.msg)
		}
		// Strings the Go types cannot produce.
		for _, tc := range []struct{ name, section, field, value, msg string }{
			{"lease-no-unit", "primary", "lease", `"5"`, "lease must be a duration"},
			{"lease-word", "primary", "lease", `"soon"`, "lease must be a duration"},
			{"cache-word", "primary", "cacheSize", `"lots"`, "cacheSize"},
			{"catchup-no-unit", "secondaries", "catchupInterval", `"1"`, "catchupInterval must be a duration"},
			{"lease-ttl-word", "secondaries", "leaseTTL", `"long"`, "leaseTTL must be a duration"},
		} {
			raw := `{"apiVersion":"shale.rocks/v1alpha1","kind":"RocksDB","metadata":{"name":"raw-` + tc.name + `","namespace":"default"},` +
				`"spec":{"objectStoreRef":{"name":"minio"},"` + tc.section + `":{"` + tc.field + `":` + tc.value + `}}}`
			u := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "raw-" + tc.name, Namespace: "default"}}
			err := c.Patch(ctx, u, client.RawPatch("application/apply-patch+yaml", []byte(raw)), client.FieldOwner("test"), client.ForceOwnership)
			wantInvalid(t, tc.name, err, tc.msg)
		}
		// Every field at a valid value is accepted.
		full := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: "default"}, Spec: *db.Spec.DeepCopy()}
		p := &full.Spec.Primary
		p.Image, p.ImagePullPolicy = "shale.local/shale:dev", corev1.PullNever
		p.Lease, p.DeleteGrace, p.ReadTimeout, p.WriteTimeout, p.RetryFor = d("1.5s"), d("30m"), d("10s"), d("1m"), d("5m")
		for _, f := range []struct {
			p **resource.Quantity
			v string
		}{{&p.CacheSize, "0"}, {&p.BlockCacheSize, "64Mi"}, {&p.MaxKeySize, "1Ki"}, {&p.MaxValueSize, "1M"}, {&p.MaxBatchSize, "2Mi"}} {
			v := q(f.v)
			*f.p = &v
		}
		full.Spec.ReclaimPolicy = shalev1.ReclaimDelete
		full.Spec.TLS = &shalev1.TLSSpec{Enabled: ptr.To(true)}
		full.Spec.Clients = []shalev1.ClientSpec{{Name: "app", Role: "write"}, {Name: "reports", Role: "read"}, {Name: "ops-1", Role: "admin"}}
		full.Spec.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "BinaryAndHash", DataBlockHashTableUtilRatio: "0.75",
			UnorderedWrite: true, AsyncIO: true, OptimizeMultigetForIO: true}
		sec := &full.Spec.Secondaries
		sec.Replicas = 16
		sec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceEphemeralStorage: q("10Gi")}}
		sec.CacheSize, sec.BlockCacheSize = ptrQ(q("0")), ptrQ(q("64Mi"))
		sec.CatchupInterval, sec.LeaseTTL = d("500ms"), d("10s")
		if err := c.Create(ctx, full); err != nil {
			t.Errorf("a RocksDB with every field valid: %v", err)
		}
		// Each secondaries duration alone, against the other's default.
		for i, s := range []shalev1.SecondariesSpec{{Replicas: 1, CatchupInterval: d("1.5s")}, {LeaseTTL: d("20s")}, {CatchupInterval: d("10ms"), LeaseTTL: d("1s")}} {
			o := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "secondaries-" + strconv.Itoa(i), Namespace: "default"}, Spec: *db.Spec.DeepCopy()}
			o.Spec.Secondaries = s
			if err := c.Create(ctx, o); err != nil {
				t.Errorf("secondaries %+v: %v", s, err)
			}
		}
	})

	t.Run("RocksDBUpdate", func(t *testing.T) {
		cur := &shalev1.RocksDB{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(db), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.ObjectStoreRef.Name = "another"
		wantInvalid(t, "objectStoreRef", c.Update(ctx, cur), "objectStoreRef is immutable")

		// The reclaim policy may change.
		if err := c.Get(ctx, client.ObjectKeyFromObject(db), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.ReclaimPolicy = shalev1.ReclaimDelete
		if err := c.Update(ctx, cur); err != nil {
			t.Errorf("changing reclaimPolicy: %v", err)
		}

		// Status: the storage path is set once, the epoch never goes down.
		cur.Status.StoragePath = "dbs/default/orders-" + string(cur.UID)
		cur.Status.Epoch = 3
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Fatalf("first status: %v", err)
		}
		moved := cur.DeepCopy()
		moved.Status.StoragePath = "dbs/default/elsewhere"
		wantInvalid(t, "storagePath", c.Status().Update(ctx, moved), "status.storagePath is immutable once set")
		lower := cur.DeepCopy()
		lower.Status.Epoch = 2
		wantInvalid(t, "epoch", c.Status().Update(ctx, lower), "status.epoch never decreases")
		higher := cur.DeepCopy()
		higher.Status.Epoch = 4
		if err := c.Status().Update(ctx, higher); err != nil {
			t.Errorf("raising the epoch: %v", err)
		}
		// Where the database was created is recorded once.
		created := higher.DeepCopy()
		created.Status.Created = &shalev1.DatabaseLocation{Time: metav1.Now(), Endpoint: "http://minio:9000", Bucket: "shale"}
		if err := c.Status().Update(ctx, created); err != nil {
			t.Fatalf("status.created: %v", err)
		}
		moved = created.DeepCopy()
		moved.Status.Created.Endpoint = "http://elsewhere:9000"
		wantInvalid(t, "created", c.Status().Update(ctx, moved), "status.created is immutable once set")
		moved.Status.Created = nil
		wantInvalid(t, "created removed", c.Status().Update(ctx, moved), "status.created is immutable once set")
	})

	t.Run("CompactorPool", func(t *testing.T) {
		objs := env.Objects(t, samplesDir+"shale_v1alpha1_compactorpool.yaml")
		pool, ok := objs[0].(*shalev1.CompactorPool)
		if len(objs) != 1 || !ok {
			t.Fatalf("the CompactorPool sample holds %v", objs)
		}
		pool.Namespace = "default"
		if err := c.Create(ctx, pool); err != nil {
			t.Fatalf("sample CompactorPool refused: %v", err)
		}
		d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
		i := func(v int32) *int32 { return &v }
		for _, tc := range []struct {
			name   string
			mutate func(*shalev1.CompactorPool)
			msg    string
		}{
			{"name", func(p *shalev1.CompactorPool) { p.Name = "Pool.1" }, "a CompactorPool name must be at most 50"},
			{"min-above-max", func(p *shalev1.CompactorPool) { p.Spec.Workers.MinReplicas, p.Spec.Workers.MaxReplicas = i(5), 2 }, "workers.minReplicas must not exceed workers.maxReplicas"},
			{"min-negative", func(p *shalev1.CompactorPool) { p.Spec.Workers.MinReplicas = i(-1) }, "spec.workers.minReplicas in body should be greater than or equal to 0"},
			{"concurrency", func(p *shalev1.CompactorPool) { p.Spec.Workers.Concurrency = 65 }, "spec.workers.concurrency in body should be less than or equal to 64"},
			{"lease-ttl", func(p *shalev1.CompactorPool) { p.Spec.Scheduler.LeaseTTL = d(500 * time.Millisecond) }, "leaseTTL must be a duration from 1s to 10m"},
			{"job-timeout", func(p *shalev1.CompactorPool) { p.Spec.Workers.JobTimeout = d(0) }, "jobTimeout must be a positive duration"},
			{"no-store", func(p *shalev1.CompactorPool) { p.Spec.ObjectStoreRef.Name = "" }, "spec.objectStoreRef.name"},
			{"pull-policy", func(p *shalev1.CompactorPool) { p.Spec.ImagePullPolicy = "Sometimes" }, `supported values: "Always", "IfNotPresent", "Never"`},
		} {
			o := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + tc.name, Namespace: "default"}, Spec: *pool.Spec.DeepCopy()}
			tc.mutate(o)
			wantInvalid(t, tc.name, c.Create(ctx, o), tc.msg)
		}
		// Defaults: one to four workers of one slot.
		bare := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default"}, Spec: shalev1.CompactorPoolSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "minio"}}}
		if err := c.Create(ctx, bare); err != nil {
			t.Fatal(err)
		}
		if w := bare.Spec.Workers; w.MinReplicas == nil || *w.MinReplicas != 1 || w.MaxReplicas != 4 || w.Concurrency != 1 {
			t.Errorf("defaults: %+v", w)
		}
	})
}

func ptrQ(q resource.Quantity) *resource.Quantity { return &q }

// TestBootstrapImmutable: spec.bootstrap is set when a RocksDB is created
// or never, cannot change after, and its path is checked for shape.
func TestBootstrapImmutable(t *testing.T) {
	env, ctx := start(t)
	c := env.Client
	_, _, sample := samples(t, env)
	const retained = "dbs/default/orders-0b7c6a2e-8d0a-4a44-9d2e-4c1f6a0e5b11"
	newDB := func(name string, b *shalev1.BootstrapSpec) *shalev1.RocksDB {
		db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: *sample.Spec.DeepCopy()}
		db.Spec.Bootstrap = b
		return db
	}
	from := func(p string) *shalev1.BootstrapSpec {
		return &shalev1.BootstrapSpec{FromExistingPath: &shalev1.ExistingPathSource{Path: p}}
	}

	adopter := newDB("adopter", from(retained))
	if err := c.Create(ctx, adopter); err != nil {
		t.Fatalf("a RocksDB with bootstrap.fromExistingPath refused: %v", err)
	}
	plain := newDB("plain", nil)
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	update := func(db *shalev1.RocksDB, mutate func(*shalev1.RocksDB)) error {
		cur := &shalev1.RocksDB{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(db), cur); err != nil {
			t.Fatal(err)
		}
		mutate(cur)
		return c.Update(ctx, cur)
	}
	wantInvalid(t, "path changed", update(adopter, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap.FromExistingPath.Path = "dbs/default/orders-1b7c6a2e-8d0a-4a44-9d2e-4c1f6a0e5b11"
	}), "bootstrap is immutable")
	wantInvalid(t, "bootstrap removed", update(adopter, func(db *shalev1.RocksDB) { db.Spec.Bootstrap = nil }), "bootstrap is set when the RocksDB is created, or never")
	wantInvalid(t, "bootstrap added", update(plain, func(db *shalev1.RocksDB) { db.Spec.Bootstrap = from(retained) }), "bootstrap is set when the RocksDB is created, or never")
	clone := newDB("clone", &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}})
	if err := c.Create(ctx, clone); err != nil {
		t.Fatalf("a RocksDB with bootstrap.cloneFrom refused: %v", err)
	}
	fromCk := newDB("from-checkpoint", &shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}})
	if err := c.Create(ctx, fromCk); err != nil {
		t.Fatalf("a RocksDB with bootstrap.fromCheckpoint refused: %v", err)
	}
	wantInvalid(t, "cloneFrom changed", update(clone, func(db *shalev1.RocksDB) { db.Spec.Bootstrap.CloneFrom.Database = "invoices" }), "bootstrap is immutable")
	wantInvalid(t, "cloneFrom to fromCheckpoint", update(clone, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap = &shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}}
	}), "bootstrap is immutable")
	recovered := newDB("recovered", &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1", Backup: "latest"}})
	if err := c.Create(ctx, recovered); err != nil {
		t.Fatalf("a RocksDB with bootstrap.recovery refused: %v", err)
	}
	wantInvalid(t, "recovery backup changed", update(recovered, func(db *shalev1.RocksDB) { db.Spec.Bootstrap.Recovery.Backup = "b1" }), "bootstrap is immutable")
	wantInvalid(t, "fromCheckpoint name changed", update(fromCk, func(db *shalev1.RocksDB) { db.Spec.Bootstrap.FromCheckpoint.Name = "c2" }), "bootstrap is immutable")
	// The rest of the spec still changes.
	if err := update(adopter, func(db *shalev1.RocksDB) { db.Spec.ReclaimPolicy = shalev1.ReclaimDelete }); err != nil {
		t.Errorf("changing reclaimPolicy of an adopter: %v", err)
	}

	for _, tc := range []struct {
		name string
		b    *shalev1.BootstrapSpec
		msg  string
	}{
		{"no-source", &shalev1.BootstrapSpec{}, "bootstrap needs exactly one source"},
		{"two-sources", &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"},
			FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}}, "bootstrap needs exactly one source"},
		{"three-sources", &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}, FromExistingPath: &shalev1.ExistingPathSource{Path: retained},
			FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}}, "bootstrap needs exactly one source"},
		{"clone-no-database", &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{}}, "spec.bootstrap.cloneFrom.database"},
		{"checkpoint-no-name", &shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders"}}, "spec.bootstrap.fromCheckpoint.name"},
		{"recovery-and-clone", &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"},
			Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1", Backup: "latest"}}, "bootstrap needs exactly one source"},
		{"recovery-no-backup", &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1"}}, "spec.bootstrap.recovery.backup"},
		{"recovery-two-targets", &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1", Backup: "latest",
			TargetTime: &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, TargetSequence: ptr.To[int64](5)}}, "give targetTime or targetSequence, not both"},
		{"recovery-target-of-an-id", &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1", Backup: "b1",
			TargetSequence: ptr.To[int64](5)}}, "picks its base backup: set backup: latest"},
		{"recovery-sequence-zero", &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: "backups", Database: "orders-1", Backup: "latest",
			TargetSequence: ptr.To[int64](0)}}, "targetSequence"},
		{"empty-path", from(""), "spec.bootstrap.fromExistingPath.path"},
		{"leading-slash", from("/" + retained), "fromExistingPath.path must be the deleted RocksDB's status.storagePath"},
		{"url", from("s3://shale/" + retained), "fromExistingPath.path must be"},
		{"dotdot", from("dbs/../default/orders-x"), "fromExistingPath.path must be"},
	} {
		wantInvalid(t, tc.name, c.Create(ctx, newDB("bad-"+tc.name, tc.b)), tc.msg)
	}
}

// Backups and ScheduledBackups: names that are backup ids, an immutable
// Backup, a retention that says something, the samples accepted (and the
// point-in-time restore's).
func TestBackupValidation(t *testing.T) {
	env, ctx := start(t)
	c := env.Client
	for _, o := range env.Objects(t, samplesDir+"shale_v1alpha1_backup.yaml", samplesDir+"shale_v1alpha1_scheduledbackup.yaml", samplesDir+"shale_v1alpha1_rocksdb_restore.yaml") {
		o.SetNamespace("default")
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("sample %s refused: %v", o.GetName(), err)
		}
	}
	b := func(name string) *shalev1.Backup {
		return &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: shalev1.BackupSpec{Database: "orders", BackupStore: "backups"}}
	}
	wantInvalid(t, "long Backup name", c.Create(ctx, b(strings.Repeat("a", 57))), "a Backup name must be at most 56")
	wantInvalid(t, "Backup without store", c.Create(ctx, &shalev1.Backup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}, Spec: shalev1.BackupSpec{Database: "orders"}}), "spec.backupStore")
	ok := b("nightly-1")
	if err := c.Create(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if ok.Spec.DeletePolicy != shalev1.BackupRetain {
		t.Errorf("deletePolicy defaults to %q, want Retain", ok.Spec.DeletePolicy)
	}
	ok.Spec.Verify = true
	wantInvalid(t, "Backup spec changed", c.Update(ctx, ok), "a Backup's spec is immutable")
	sb := func(name string, r *shalev1.BackupRetention) *shalev1.ScheduledBackup {
		return &shalev1.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: shalev1.ScheduledBackupSpec{Schedule: "0 2 * * *", Database: "orders", BackupStore: "backups", Retention: r}}
	}
	wantInvalid(t, "empty retention", c.Create(ctx, sb("empty", &shalev1.BackupRetention{})), "retention needs keepLast and/or keepWithin")
	wantInvalid(t, "short keepWithin", c.Create(ctx, sb("short", &shalev1.BackupRetention{KeepWithin: &metav1.Duration{Duration: time.Second}})), "keepWithin must be a duration of at least 1m")
	wantInvalid(t, "long ScheduledBackup name", c.Create(ctx, sb(strings.Repeat("a", 41), nil)), "at most 40")
}
