//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepBackup: a Backup of the main database into a second bucket of the
// demo MinIO (its own ObjectStore) completes, with the checkpoint the
// operator took for it deleted after; a RocksDB with
// spec.bootstrap.recovery from it becomes Ready and serves every key of
// the suite's ledger with the value acknowledged before the backup.
func stepBackup(t *testing.T, s *suite) {
	const (
		bucketName = "shale-backups"
		storeName  = "backups"
		restored   = "e2e-restored"
	)
	// A new name each run: a kept cluster's earlier backup stays in the
	// store (deletePolicy Retain), and an id is published once.
	backupName := fmt.Sprintf("e2e-backup-%d", time.Now().Unix())
	mc := s.minio(t)
	if err := mc.MakeBucket(ctx(t, time.Minute), bucketName, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		if exists, eerr := mc.BucketExists(ctx(t, time.Minute), bucketName); eerr != nil || !exists {
			t.Fatalf("creating bucket %s: %v", bucketName, err)
		}
	}
	store := &shalev1.ObjectStore{
		ObjectMeta: metav1.ObjectMeta{Name: storeName, Namespace: s.cfg.namespace},
		Spec: shalev1.ObjectStoreSpec{
			Endpoint:    s.objectStoreEndpoint(),
			Credentials: &shalev1.SecretReference{Name: "shale-objectstore"},
			Hot:         shalev1.BucketLocation{Bucket: bucketName, Prefix: "shale"},
		},
	}
	s.recreate(t, store)

	// The ledger as acknowledged before the backup (a few writes of its
	// own when the step runs alone).
	addr := s.rwAddr(t)
	callFresh(t, addr, "writes before the backup", func(c context.Context, kv kvv1.KVClient) error {
		for i := range 20 {
			key, v := fmt.Sprintf("e2e/backup/%02d", i), "before"
			if _, err := kv.Put(c, putReq(key, v)); err != nil {
				return err
			}
			s.ledger.ack(key, v)
		}
		return nil
	})
	s.ledger.mu.Lock()
	want := make(map[string]string, len(s.ledger.acked))
	for k, v := range s.ledger.acked {
		want[k] = v
	}
	s.ledger.mu.Unlock()

	b := &shalev1.Backup{
		ObjectMeta: metav1.ObjectMeta{Name: backupName, Namespace: s.cfg.namespace},
		Spec:       shalev1.BackupSpec{Database: s.db, BackupStore: storeName, Verify: true},
	}
	if err := s.kube.Create(ctx(t, time.Minute), b); err != nil {
		t.Fatalf("creating Backup %s: %v", backupName, err)
	}
	eventually(t, 10*time.Minute, "Backup "+backupName+" Completed and verified", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(b), b); err != nil {
			return false, err.Error()
		}
		st := b.Status
		if st.Phase == shalev1.BackupFailed {
			t.Fatalf("Backup %s Failed: %s: %s", backupName, st.Reason, st.Message)
		}
		if v := st.Verification; v != nil && v.Phase == "Failed" {
			t.Fatalf("Backup %s's verify failed: %s", backupName, v.Message)
		}
		return st.Phase == shalev1.BackupCompleted && st.CheckpointReleased && st.LastVerifiedRestore != nil,
			fmt.Sprintf("%s %s (verification %+v)", st.Phase, st.Message, st.Verification)
	})
	t.Logf("Backup %s: sequence %d, %d objects, %d bytes copied; verified (%d keys)", backupName, b.Status.Sequence, b.Status.Objects, b.Status.BytesCopied, b.Status.Verification.Keys)
	s.expectEvent(t, "Backup", backupName, b.UID, "BackupCompleted")
	if db := s.rocksDB(t, s.db); db.Status.LastBackup == nil || db.Status.LastBackup.Name != backupName {
		t.Fatalf("RocksDB %s status.lastBackup %+v, want %s", s.db, db.Status.LastBackup, backupName)
	}

	// Restore it into a new RocksDB; every key acknowledged before the
	// backup is there with its value.
	s.createRocksDBWith(t, restored, shalev1.ReclaimDelete, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap = &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: storeName, Database: b.Status.DatabaseID, Backup: backupName}}
	})
	rdb := s.waitReady(t, restored, 1, 10*time.Minute)
	if r := rdb.Status.Recovery; r == nil || r.Backup != backupName {
		t.Fatalf("RocksDB %s status.recovery %+v, want %s", restored, r, backupName)
	}
	s.expectEvent(t, "RocksDB", restored, rdb.UID, "BootstrapRestoring", backupName)
	raddr := s.serviceProxy(t, restored+"-rw", kvPort)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var lost, wrong []string
	for chunk := range slices.Chunk(keys, 500) {
		for i, r := range multiGet(t, raddr, chunk) {
			switch {
			case !r.Found:
				lost = append(lost, chunk[i])
			case string(r.Value) != want[chunk[i]]:
				wrong = append(wrong, fmt.Sprintf("%s=%q (acknowledged %q)", chunk[i], r.Value, want[chunk[i]]))
			}
		}
	}
	if len(lost)+len(wrong) > 0 {
		t.Fatalf("the restored database lacks %d of %d keys acknowledged before the backup (%v) and has %d with another value (%v)", len(lost), len(keys), first(lost, 10), len(wrong), first(wrong, 10))
	}
	t.Logf("RocksDB %s restored from %s: all %d keys acknowledged before the backup are there", restored, backupName, len(keys))
	s.deleteRocksDB(t, rdb, false)
}
