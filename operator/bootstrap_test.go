package operator

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestDecideBootstrap(t *testing.T) {
	const (
		cluster  = "c0ffee00-0000-4000-8000-000000000000"
		oldUID   = types.UID("0a1b2c3d-0000-4000-8000-00000000abcd")
		selfUID  = types.UID("11111111-0000-4000-8000-000000000001")
		otherUID = types.UID("22222222-0000-4000-8000-000000000002")
		retained = "dbs/ns/orders-" + string(oldUID)
	)
	adopter := func(p string) *shalev1.RocksDB {
		return &shalev1.RocksDB{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders2", UID: selfUID},
			Spec:       shalev1.RocksDBSpec{Bootstrap: &shalev1.BootstrapSpec{FromExistingPath: &shalev1.ExistingPathSource{Path: p}}},
		}
	}
	rocksdb := func(name string, uid types.UID, storagePath string, deleting bool) shalev1.RocksDB {
		d := shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid}}
		d.Status.StoragePath = storagePath
		if deleting {
			now := metav1.Now()
			d.DeletionTimestamp = &now
		}
		return d
	}
	base := func(mod func(*bootstrapInput)) bootstrapInput {
		in := bootstrapInput{
			DB: adopter(retained), Prefix: "dbs", Store: "minio", Cluster: cluster,
			RocksDBs:   []shalev1.RocksDB{rocksdb("orders2", selfUID, "", false), rocksdb("invoices", otherUID, "dbs/ns/invoices-"+string(otherUID), false)},
			Record:     &dirOwnerRecord{Cluster: cluster, Namespace: "ns", Name: "orders", UID: oldUID, ReclaimPolicy: shalev1.ReclaimRetain},
			HasCurrent: true, Claims: 3,
		}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	adoptedBy := func(name string, uid types.UID) func(*bootstrapInput) {
		return func(in *bootstrapInput) { in.Record.AdoptedBy = &recordRef{Name: name, UID: uid} }
	}
	for _, tc := range []struct {
		name string
		in   bootstrapInput
		// want is a part of the refusal ("" = adopt).
		want string
	}{
		{"adopt", base(nil), ""},
		{"adopt-trailing-slash", base(func(in *bootstrapInput) { in.DB = adopter(retained + "/") }), ""},
		{"adopt-relative-to-prefix", base(func(in *bootstrapInput) { in.DB = adopter("ns/orders-" + string(oldUID)) }), ""},
		{"adopt-no-prefix", base(func(in *bootstrapInput) { in.Prefix, in.DB = "", adopter("ns/orders-"+string(oldUID)) }), ""},
		// A claim of this adopter's that did not reach status: resumed.
		{"adopt-own-claim", base(adoptedBy("orders2", selfUID)), ""},
		// An earlier adopter, deleted (with Retain): adopted again.
		{"adopt-after-adopter-gone", base(adoptedBy("orders3", "33333333-0000-4000-8000-000000000003")), ""},

		{"not-a-dir", base(func(in *bootstrapInput) { in.DB = adopter("dbs/ns") }), "is not NAME-UID"},
		{"one-segment", base(func(in *bootstrapInput) { in.DB = adopter("orders-" + string(oldUID)) }), "is not a database directory under the ObjectStore's prefix \"dbs\""},
		{"too-deep", base(func(in *bootstrapInput) { in.DB = adopter(retained + "/sub") }), "is not a database directory"},
		{"other-prefix", base(func(in *bootstrapInput) { in.DB = adopter("other/ns/orders-" + string(oldUID)) }), "is not a database directory"},
		{"not-name-uid", base(func(in *bootstrapInput) { in.DB = adopter("dbs/ns/orders") }), "is not NAME-UID"},
		{"bad-namespace", base(func(in *bootstrapInput) { in.DB = adopter("dbs/NS/orders-" + string(oldUID)) }), "is not a namespace name"},
		{"other-namespace", base(func(in *bootstrapInput) { in.DB = adopter("dbs/prod/orders-" + string(oldUID)) }), "belongs to namespace prod: a RocksDB adopts only a directory of its own namespace (ns)"},
		{"own-directory", base(func(in *bootstrapInput) { in.DB = adopter("dbs/ns/orders2-" + string(selfUID)) }), "is this RocksDB's own"},
		{"owner-exists", base(func(in *bootstrapInput) {
			in.RocksDBs = append(in.RocksDBs, rocksdb("orders", oldUID, retained, false))
		}), "belongs to RocksDB orders, which exists"},
		{"owner-being-deleted", base(func(in *bootstrapInput) {
			in.RocksDBs = append(in.RocksDBs, rocksdb("orders", oldUID, retained, true))
		}), "which is being deleted: wait until it is gone"},
		{"served-by-another", base(func(in *bootstrapInput) {
			in.RocksDBs = append(in.RocksDBs, rocksdb("orders3", "33333333-0000-4000-8000-000000000003", retained, false))
		}), "is served by RocksDB orders3"},
		{"adopted-by-live", base(adoptedBy("invoices", otherUID)), "was adopted by RocksDB invoices, which exists"},
		{"no-record", base(func(in *bootstrapInput) { in.Record = nil }), "has no owner record (ns/orders-" + string(oldUID) + ".owner.json)"},
		{"unreadable-record", base(func(in *bootstrapInput) { in.Record, in.RecordErr = nil, errors.New("bad JSON") }), "cannot be read (bad JSON)"},
		{"foreign-cluster", base(func(in *bootstrapInput) { in.Record.Cluster = "elsewhere" }), "says another cluster (elsewhere) created it"},
		{"record-other-uid", base(func(in *bootstrapInput) { in.Record.UID = otherUID }), "its owner record is for ns/orders " + string(otherUID)},
		{"record-other-name", base(func(in *bootstrapInput) { in.Record.Name = "invoices" }), "its owner record is for ns/invoices"},
		{"record-delete", base(func(in *bootstrapInput) { in.Record.ReclaimPolicy = shalev1.ReclaimDelete }), "says reclaimPolicy Delete, not Retain"},
		{"no-current", base(func(in *bootstrapInput) { in.HasCurrent = false }), "holds no CURRENT"},
		{"being-deleted", base(func(in *bootstrapInput) { in.Deleting = true }), "is being deleted"},
		{"no-claim", base(func(in *bootstrapInput) { in.Claims = 0 }), "holds no epoch claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, problem := decideBootstrap(tc.in)
			if tc.want == "" {
				if problem != "" {
					t.Fatalf("refused: %s", problem)
				}
				if target.StoragePath != retained || target.Name != "orders" || target.UID != oldUID || target.recordKey() != "ns/orders-"+string(oldUID)+".owner.json" {
					if !(tc.in.Prefix == "" && target.StoragePath == "ns/orders-"+string(oldUID)) {
						t.Errorf("target %+v", target)
					}
				}
				return
			}
			if !strings.Contains(problem, tc.want) {
				t.Errorf("problem %q, want it to say %q", problem, tc.want)
			}
		})
	}
}

// TestDecideBootstrapClone: the checks of spec.bootstrap.fromCheckpoint
// and cloneFrom (decideBootstrap's clone half).
func TestDecideBootstrapClone(t *testing.T) {
	const (
		parentUID = types.UID("0a1b2c3d-0000-4000-8000-00000000abcd")
		selfUID   = types.UID("11111111-0000-4000-8000-000000000001")
		parentDir = "dbs/ns/orders-" + string(parentUID)
	)
	created := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	clone := func(b shalev1.BootstrapSpec) *shalev1.RocksDB {
		return &shalev1.RocksDB{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders-test", UID: selfUID},
			Spec:       shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "minio"}, Bootstrap: &b},
		}
	}
	fromCk := clone(shalev1.BootstrapSpec{FromCheckpoint: &shalev1.CheckpointSource{Database: "orders", Name: "c1"}})
	fromNew := clone(shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders"}})
	parent := func() shalev1.RocksDB {
		p := shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", UID: parentUID, CreationTimestamp: created},
			Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "minio"}}}
		p.Status.StoragePath = parentDir
		p.Status.Conditions = []metav1.Condition{{Type: shalev1.ConditionReady, Status: metav1.ConditionTrue, Reason: shalev1.ReasonPrimaryReady}}
		return p
	}
	checkpoint := func() *shalev1.Checkpoint {
		return &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1", CreationTimestamp: metav1.NewTime(created.Add(time.Hour))},
			Spec: shalev1.CheckpointSpec{Database: "orders"}, Status: shalev1.CheckpointStatus{Phase: shalev1.CheckpointReady}}
	}
	base := func(db *shalev1.RocksDB, mod func(*bootstrapInput)) bootstrapInput {
		in := bootstrapInput{DB: db.DeepCopy(), Prefix: "dbs", Store: "minio", Cluster: "cluster-a", RocksDBs: []shalev1.RocksDB{parent(), *db.DeepCopy()}, Checkpoint: checkpoint(),
			ParentRecord: &dirOwnerRecord{Cluster: "cluster-a", Namespace: "ns", Name: "orders", UID: parentUID, ReclaimPolicy: shalev1.ReclaimDelete}}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	onParent := func(f func(*shalev1.RocksDB)) func(*bootstrapInput) {
		return func(in *bootstrapInput) { f(&in.RocksDBs[0]) }
	}
	// Parents in another ObjectStore, aws, at https://s3.example.com; the
	// clone's is minio, with Secret minio-keys.
	secret := func(name string) shalev1.ObjectStoreSpec {
		return shalev1.ObjectStoreSpec{Credentials: &shalev1.SecretReference{Name: name}}
	}
	sa := func(name string) shalev1.ObjectStoreSpec { return shalev1.ObjectStoreSpec{ServiceAccountName: name} }
	role := func() shalev1.ObjectStoreSpec { return shalev1.ObjectStoreSpec{InstanceRole: true} }
	otherStore := func(db *shalev1.RocksDB, spec shalev1.ObjectStoreSpec, mod func(*bootstrapInput)) bootstrapInput {
		return base(db, func(in *bootstrapInput) {
			in.RocksDBs[0].Spec.ObjectStoreRef.Name = "aws"
			spec.Endpoint, spec.Hot = "https://s3.example.com", shalev1.BucketLocation{Bucket: "other", Prefix: "dbs"}
			in.ParentStore = &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "aws"}, Spec: spec}
			in.StoreSpec = &shalev1.ObjectStore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "minio"}, Spec: shalev1.ObjectStoreSpec{
				Endpoint: "http://minio:9000", Credentials: &shalev1.SecretReference{Name: "minio-keys"}}}
			if mod != nil {
				mod(in)
			}
		})
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		in   bootstrapInput
		// want is a part of the refusal ("" = clone).
		want string
	}{
		{"from-checkpoint", base(fromCk, nil), ""},
		{"clone-from", base(fromNew, nil), ""},
		// cloneFrom needs no Checkpoint resource.
		{"clone-from-no-checkpoint-resource", base(fromNew, func(in *bootstrapInput) { in.Checkpoint = nil }), ""},
		// fromCheckpoint reads the store only: the parent need not be Ready.
		{"from-checkpoint-parent-not-ready", base(fromCk, onParent(func(p *shalev1.RocksDB) { p.Status.Conditions = nil })), ""},
		// A check resumed after status.clone was written: same parent.
		{"clone-from-resumed", base(fromNew, func(in *bootstrapInput) {
			in.DB.Status.Clone = &shalev1.CloneStatus{Database: "orders", UID: parentUID}
		}), ""},

		{"itself", base(clone(shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: "orders-test"}}), nil), "spec.bootstrap.cloneFrom.database names this RocksDB itself"},
		{"no-parent", base(fromNew, func(in *bootstrapInput) { in.RocksDBs = in.RocksDBs[1:] }), "RocksDB orders (spec.bootstrap.cloneFrom.database) does not exist in namespace ns"},
		{"parent-other-namespace", base(fromCk, onParent(func(p *shalev1.RocksDB) { p.Namespace = "prod" })), "does not exist in namespace ns"},
		{"parent-recreated", base(fromNew, func(in *bootstrapInput) {
			in.DB.Status.Clone = &shalev1.CloneStatus{Database: "orders", UID: "99999999-0000-4000-8000-000000000009"}
		}), "it was deleted and created again"},
		{"parent-deleting", base(fromNew, onParent(func(p *shalev1.RocksDB) { p.DeletionTimestamp = &now })), "RocksDB orders is being deleted"},
		{"parent-deleting-from-checkpoint", base(fromCk, onParent(func(p *shalev1.RocksDB) { p.DeletionTimestamp = &now })), "RocksDB orders is being deleted"},
		// A parent in another ObjectStore is copied (RFC 0010 step 20):
		// its endpoint, and its Secret for the clone's Pod to mount.
		{"parent-other-store", otherStore(fromCk, secret("aws-keys"), nil), ""},
		{"parent-other-store-clone-from", otherStore(fromNew, secret("aws-keys"), nil), ""},
		{"parent-other-store-same-service-account", otherStore(fromCk, sa("shale"), func(in *bootstrapInput) {
			in.StoreSpec.Spec.Credentials, in.StoreSpec.Spec.ServiceAccountName = nil, "shale"
		}), ""},
		{"parent-other-store-same-instance-role", otherStore(fromCk, role(), func(in *bootstrapInput) { in.StoreSpec.Spec.Credentials, in.StoreSpec.Spec.InstanceRole = nil, true }), ""},
		{"parent-other-store-missing", otherStore(fromCk, secret("aws-keys"), func(in *bootstrapInput) { in.ParentStore = nil }), "ObjectStore aws (RocksDB orders's) does not exist: waiting for it"},
		{"parent-other-store-other-service-account", otherStore(fromCk, sa("reader"), nil), "ObjectStore aws (the parent's) takes its credentials from ServiceAccount reader, and this RocksDB's ObjectStore minio from Secret minio-keys: a Pod runs as one ServiceAccount"},
		// The clone's store names a Secret first: its Pod does not run as the ServiceAccount.
		{"parent-other-store-service-account-shadowed", otherStore(fromCk, sa("shale"), func(in *bootstrapInput) { in.StoreSpec.Spec.ServiceAccountName = "shale" }), "takes its credentials from ServiceAccount shale, and this RocksDB's ObjectStore minio from Secret minio-keys"},
		{"parent-other-store-instance-role", otherStore(fromCk, role(), nil), "ObjectStore aws (the parent's) takes its credentials from the instance role, and this RocksDB's ObjectStore minio from Secret minio-keys"},
		{"parent-other-store-cold-endpoint", otherStore(fromCk, secret("aws-keys"), func(in *bootstrapInput) {
			in.ParentStore.Spec.Cold = &shalev1.ColdTier{BucketLocation: shalev1.BucketLocation{Bucket: "cold"}, Endpoint: "https://cold.example.com"}
		}), "ObjectStore aws keeps its cold tier on another endpoint (https://cold.example.com)"},
		{"parent-no-path", base(fromNew, onParent(func(p *shalev1.RocksDB) { p.Status.StoragePath = "" })), "has no storage directory yet"},
		{"parent-adopted", base(fromCk, onParent(func(p *shalev1.RocksDB) { p.Status.StoragePath = "dbs/ns/old-" + string(selfUID) })), "it adopted a retained directory"},
		{"parent-not-ready", base(fromNew, onParent(func(p *shalev1.RocksDB) {
			p.Status.Conditions = []metav1.Condition{{Type: shalev1.ConditionReady, Status: metav1.ConditionFalse, Message: "primary orders-primary-2 (epoch 2) is starting"}}
		})), "RocksDB orders is not Ready (primary orders-primary-2 (epoch 2) is starting)"},
		{"parent-no-conditions", base(fromNew, onParent(func(p *shalev1.RocksDB) { p.Status.Conditions = nil })), "is not Ready (no Ready condition yet)"},
		{"no-checkpoint", base(fromCk, func(in *bootstrapInput) { in.Checkpoint = nil }), "Checkpoint c1 does not exist in namespace ns: create it (spec.database: orders)"},
		{"checkpoint-of-other", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.Spec.Database = "invoices" }), "Checkpoint c1 is of RocksDB invoices, not orders"},
		{"checkpoint-of-earlier-parent", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.CreationTimestamp = metav1.NewTime(created.Add(-time.Hour)) }), "taken of an earlier database of that name"},
		{"checkpoint-deleting", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.DeletionTimestamp = &now }), "Checkpoint c1 is being deleted"},
		{"checkpoint-pending", base(fromCk, func(in *bootstrapInput) {
			in.Checkpoint.Status = shalev1.CheckpointStatus{Phase: shalev1.CheckpointPending, Message: "waiting for a ready primary"}
		}), "Checkpoint c1 is Pending, not Ready (waiting for a ready primary)"},
		{"checkpoint-new", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.Status = shalev1.CheckpointStatus{} }), "Checkpoint c1 is Pending, not Ready"},
		{"checkpoint-failed", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.Status.Phase = shalev1.CheckpointFailed }), "Checkpoint c1 is Failed, not Ready"},
		{"checkpoint-expired", base(fromCk, func(in *bootstrapInput) { in.Checkpoint.Status.Phase = shalev1.CheckpointExpired }), "Checkpoint c1 is Expired, not Ready"},

		// The parent's owner record (RFC 0010 step 22), for both sources.
		{"parent-record-retain", base(fromCk, func(in *bootstrapInput) { in.ParentRecord.ReclaimPolicy = shalev1.ReclaimRetain }), ""},
		{"parent-no-record", base(fromNew, func(in *bootstrapInput) { in.ParentRecord = nil }), "the directory " + parentDir + " of RocksDB orders has no owner record (ns/orders-" + string(parentUID) + ".owner.json)"},
		{"parent-no-record-from-checkpoint", base(fromCk, func(in *bootstrapInput) { in.ParentRecord = nil }), "has no owner record"},
		{"parent-record-unreadable", base(fromCk, func(in *bootstrapInput) {
			in.ParentRecord, in.ParentRecordErr = nil, errors.New("invalid character 'x'")
		}),
			"its owner record ns/orders-" + string(parentUID) + ".owner.json cannot be read (invalid character 'x')"},
		{"parent-record-other-cluster", base(fromNew, func(in *bootstrapInput) { in.ParentRecord.Cluster = "cluster-b" }),
			"says another cluster (cluster-b; this one is cluster-a) created it"},
		{"parent-record-other-cluster-from-checkpoint", base(fromCk, func(in *bootstrapInput) { in.ParentRecord.Cluster = "cluster-b" }), "says another cluster (cluster-b"},
		{"parent-record-other-uid", base(fromNew, func(in *bootstrapInput) { in.ParentRecord.UID = "99999999-0000-4000-8000-000000000009" }),
			"is for ns/orders (UID 99999999-0000-4000-8000-000000000009), not RocksDB orders (UID " + string(parentUID) + ")"},
		{"parent-record-other-name", base(fromCk, func(in *bootstrapInput) { in.ParentRecord.Name = "invoices" }), "is for ns/invoices"},
		{"parent-record-other-namespace", base(fromCk, func(in *bootstrapInput) { in.ParentRecord.Namespace = "prod" }), "is for prod/orders"},
		{"parent-record-adopted", base(fromNew, func(in *bootstrapInput) {
			in.ParentRecord.AdoptedBy = &recordRef{Name: "orders-back", UID: "22222222-0000-4000-8000-000000000002"}
		}), "says RocksDB orders-back (UID 22222222-0000-4000-8000-000000000002) adopted it"},
		// Refusals of decideClone come first (no record read for them).
		{"no-parent-no-record", base(fromNew, func(in *bootstrapInput) { in.RocksDBs, in.ParentRecord = in.RocksDBs[1:], nil }), "does not exist in namespace ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, problem := decideBootstrap(tc.in)
			if tc.want != "" {
				if !strings.Contains(problem, tc.want) {
					t.Errorf("problem %q, want it to say %q", problem, tc.want)
				}
				return
			}
			if problem != "" {
				t.Fatalf("refused: %s", problem)
			}
			want := cloneSource{Parent: "orders", ParentUID: parentUID, ParentPath: parentDir, Checkpoint: "c1"}
			if tc.in.DB.Spec.Bootstrap.CloneFrom != nil {
				want.Checkpoint, want.Request = "clone-"+string(selfUID), true
			}
			if ps := tc.in.ParentStore; ps != nil {
				want.ObjectStore, want.Endpoint = "aws", "https://s3.example.com"
				if ps.Spec.Credentials != nil {
					want.CredentialsSecret = ps.Spec.Credentials.Name
				}
			}
			if plan.Clone == nil || *plan.Clone != want {
				t.Errorf("plan %+v, want %+v", plan.Clone, want)
			}
		})
	}
}

// TestOwnerRecordOf: an adopter keeps the adopted directory's record,
// naming itself; any other RocksDB its own.
func TestOwnerRecordOf(t *testing.T) {
	const oldUID = "0a1b2c3d-0000-4000-8000-00000000abcd"
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders2", UID: "11111111-0000-4000-8000-000000000001"}}
	db.Status.StoragePath = "dbs/ns/orders2-11111111-0000-4000-8000-000000000001"
	key, rec := ownerRecordOf(db, "c", shalev1.ReclaimDelete, metav1.Now().Time)
	if key != "ns/orders2-11111111-0000-4000-8000-000000000001.owner.json" || rec.Name != "orders2" || rec.UID != db.UID || rec.AdoptedBy != nil {
		t.Errorf("own directory: %s %+v", key, rec)
	}
	db.Status.StoragePath = "dbs/ns/orders-" + oldUID
	key, rec = ownerRecordOf(db, "c", shalev1.ReclaimDelete, metav1.Now().Time)
	if key != "ns/orders-"+oldUID+".owner.json" || rec.Name != "orders" || rec.UID != oldUID || rec.AdoptedBy == nil || *rec.AdoptedBy != (recordRef{Name: "orders2", UID: db.UID}) || rec.ReclaimPolicy != shalev1.ReclaimDelete {
		t.Errorf("adopted directory: %s %+v", key, rec)
	}
}
