package operator

import (
	"errors"
	"strings"
	"testing"

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
