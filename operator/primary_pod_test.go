package operator

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Every spec.primary field reaches `shale primary` as its flag, in a form
// the flag parses (sizes as plain bytes, durations as Go durations).
func TestPrimaryPodFlags(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod", UID: "0a1b2c3d-0000-4000-8000-00000000abcd"},
		Spec: shalev1.RocksDBSpec{Compaction: shalev1.CompactionSpec{
			Mode: shalev1.CompactionRemote, CompactorPoolRef: &shalev1.CompactorPoolReference{Name: "pool"}, Priority: 40, QueueTimeout: d(time.Minute),
		}, Primary: shalev1.PrimarySpec{
			Image: "registry.example/shale:1", ImagePullPolicy: corev1.PullAlways,
			Lease: d(1500 * time.Millisecond), DeleteGrace: d(30 * time.Minute), ReadTimeout: d(10 * time.Second),
			WriteTimeout: d(time.Minute), RetryFor: d(5 * time.Minute),
			CacheSize: q("2Gi"), BlockCacheSize: q("64Mi"), MaxKeySize: q("1Ki"), MaxValueSize: q("1M"), MaxBatchSize: q("2Mi"),
		}},
		Status: shalev1.RocksDBStatus{StoragePath: "dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd"},
	}
	db.Spec.Tuning = &shalev1.TuningSpec{DataBlockIndexType: "BinaryAndHash", DataBlockHashTableUtilRatio: "0.5",
		UnorderedWrite: true, AsyncIO: true, OptimizeMultigetForIO: true, GroupCommitWindow: d(5 * time.Millisecond), RocksDBHistograms: true}
	store := &shalev1.ObjectStore{Spec: shalev1.ObjectStoreSpec{
		Endpoint: "https://s3.example.com", Region: "eu-west-1",
		Credentials:    &shalev1.SecretReference{Name: "creds"},
		Hot:            shalev1.BucketLocation{Bucket: "data", Prefix: "dbs"},
		StorageClasses: shalev1.StorageClasses{WAL: "EXPRESS_ONEZONE", SST: "STANDARD_IA"},
	}}
	pod := primaryPod(db, store, 7, "default:image")
	c := pod.Spec.Containers[0]
	args := " " + strings.Join(c.Args, " ") + " "
	for _, want := range []string{
		" primary ", " --db s3://data/dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd ", " --epoch 7 ",
		" --cache-size 2147483648 ", " --block-cache-size 67108864 ", " --max-key-size 1024 ", " --max-value-size 1000000 ",
		" --max-batch-size 2097152 ", " --lease 1.5s ", " --delete-grace 30m0s ", " --read-timeout 10s ", " --write-timeout 1m0s ",
		" --retry-for 5m0s ", " --wal-storage-class EXPRESS_ONEZONE ", " --sst-storage-class STANDARD_IA ",
		" --compaction remote ", " --compaction-scheduler pool-scheduler.prod.svc:7080 ", " --compaction-priority 40 ", " --compaction-queue-timeout 1m0s ",
		" --data-block-index binary-and-hash ", " --data-block-hash-ratio 0.5 ", " --unordered-write ", " --async-io ",
		" --optimize-multiget-for-io ", " --group-commit-window 5ms ", " --rocksdb-histograms ",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--pipelined-write") {
		t.Errorf("args %q have --pipelined-write, which the spec leaves off", args)
	}
	if c.Image != "registry.example/shale:1" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	}
	names := []string{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		if e.Name == "AWS_REGION" && e.Value != "eu-west-1" {
			t.Errorf("AWS_REGION = %q", e.Value)
		}
	}
	for _, want := range []string{"AWS_ENDPOINT_URL", "AWS_REGION"} {
		if !slices.Contains(names, want) {
			t.Errorf("env %v lacks %s", names, want)
		}
	}
	wantSecretAccess(t, "primary", pod.Spec, c, "creds")
	if pod.Name != "orders-primary-7" || pod.Labels[shalev1.LabelEpoch] != "7" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod %s labels %v restart %s", pod.Name, pod.Labels, pod.Spec.RestartPolicy)
	}

	// Unset fields are left to shale primary's defaults.
	bare := primaryPod(&shalev1.RocksDB{ObjectMeta: db.ObjectMeta, Status: db.Status}, &shalev1.ObjectStore{Spec: shalev1.ObjectStoreSpec{
		Endpoint: "http://minio:9000", Credentials: &shalev1.SecretReference{Name: "creds"}, Hot: shalev1.BucketLocation{Bucket: "data"},
	}}, 1, "default:image")
	bc := bare.Spec.Containers[0]
	if got := strings.Join(bc.Args, " "); strings.Contains(got, "--lease") || strings.Contains(got, "--cache-size") || strings.Contains(got, "storage-class") || strings.Contains(got, "--compaction") {
		t.Errorf("bare args %q set flags the spec does not", got)
	}
	if bc.Image != "default:image" || bc.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("bare image %s %s", bc.Image, bc.ImagePullPolicy)
	}
	for _, e := range bc.Env {
		if e.Name == "AWS_REGION" {
			t.Errorf("AWS_REGION set without a region")
		}
	}
}

// TestPrimaryPodCloneFlags: a clone's primaries get the clone flags (the
// parent's URL, the checkpoint, the clone's UID as clone id) until the
// database was ready once, then --existing and no clone flags (the CLI
// refuses both together).
func TestPrimaryPodCloneFlags(t *testing.T) {
	db := &shalev1.RocksDB{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-test", Namespace: "prod", UID: "11111111-0000-4000-8000-000000000001"},
		Spec:       shalev1.RocksDBSpec{Bootstrap: &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}}},
		Status: shalev1.RocksDBStatus{StoragePath: "dbs/prod/orders-test-11111111-0000-4000-8000-000000000001",
			Clone: &shalev1.CloneStatus{Database: "orders", UID: "0a1b2c3d-0000-4000-8000-00000000abcd", URL: "s3://data/dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd",
				Checkpoint: "clone-11111111-0000-4000-8000-000000000001"}},
	}
	store := &shalev1.ObjectStore{Spec: shalev1.ObjectStoreSpec{Endpoint: "https://s3.example.com", Hot: shalev1.BucketLocation{Bucket: "data", Prefix: "dbs"}}}
	for _, epoch := range []int64{1, 2} {
		args := " " + strings.Join(primaryPod(db, store, epoch, "img").Spec.Containers[0].Args, " ") + " "
		want := " --clone-from s3://data/dbs/prod/orders-0a1b2c3d-0000-4000-8000-00000000abcd --clone-checkpoint clone-11111111-0000-4000-8000-000000000001 --clone-id 11111111-0000-4000-8000-000000000001 "
		if !strings.Contains(args, want) || strings.Contains(args, "--existing") {
			t.Errorf("epoch %d before ready: args %q, want %q and no --existing", epoch, args, want)
		}
	}
	db.Status.Created = &shalev1.DatabaseLocation{Time: metav1.Now(), Endpoint: store.Spec.Endpoint, Bucket: "data"}
	args := " " + strings.Join(primaryPod(db, store, 3, "img").Spec.Containers[0].Args, " ") + " "
	if !strings.Contains(args, " --existing ") || strings.Contains(args, "--clone-") {
		t.Errorf("after ready: args %q, want --existing and no clone flags", args)
	}

	// A parent in another ObjectStore (RFC 0010 step 20): copied from its
	// endpoint, with its Secret mounted beside the clone's own.
	db.Status.Created = nil
	db.Status.Clone.ObjectStore, db.Status.Clone.Endpoint, db.Status.Clone.CredentialsSecret = "aws", "https://s3.eu-west-1.amazonaws.com", "aws-keys"
	pod := primaryPod(db, store, 1, "img")
	args = " " + strings.Join(pod.Spec.Containers[0].Args, " ") + " "
	want := " --clone-copy --clone-endpoint https://s3.eu-west-1.amazonaws.com --clone-credentials-dir /etc/shale/clone-credentials "
	if !strings.Contains(args, want) {
		t.Errorf("copied clone: args %q, want %q", args, want)
	}
	mounted := false
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "aws-keys" {
			for _, m := range pod.Spec.Containers[0].VolumeMounts {
				mounted = mounted || (m.Name == v.Name && m.MountPath == "/etc/shale/clone-credentials" && m.ReadOnly)
			}
		}
	}
	if !mounted {
		t.Errorf("copied clone: the parent's Secret aws-keys is not mounted read-only at /etc/shale/clone-credentials: %+v %+v", pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts)
	}
	db.Status.Created = &shalev1.DatabaseLocation{Time: metav1.Now(), Endpoint: store.Spec.Endpoint, Bucket: "data"}
	pod = primaryPod(db, store, 2, "img")
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "aws-keys" {
			t.Errorf("after ready: the parent's Secret is still mounted")
		}
	}
}
