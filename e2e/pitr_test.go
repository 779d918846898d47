//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// storeClockSlack is how far after the target a write's request may have
// started and still be in a point-in-time restore: MinIO dates objects to
// the millisecond, and the archive dates a write by its object's store
// time (RFC 0011 step 25). The kind node and this process share one
// kernel clock.
const storeClockSlack = time.Millisecond

// timedWrite is one write of the PITR step's writer: its key and value,
// when its request started, and when (if) it was acknowledged.
type timedWrite struct {
	key, value string
	start, ack time.Time
	ok         bool
}

// stepPITR (issue 27): a RocksDB with reclaimPolicy Delete and the
// continuous archive on (spec.backup.archive) to a second bucket of the
// demo MinIO, a ScheduledBackup every minute there, and a writer. Once a
// scheduled Backup completed and the writer went on, a target time T (a
// whole second, as targetTime holds it); the writer goes on past T. The
// RocksDB is deleted and its directory is gone from the store; a new
// RocksDB with bootstrap.recovery {backup: latest, targetTime: T} becomes
// Ready and holds every write acknowledged before T, with its value, and
// no write whose request started after T.
func stepPITR(t *testing.T, s *suite) {
	const (
		bucketName = "shale-pitr"
		storeName  = "pitr-backups"
		source     = "e2e-pitr"
		restored   = "e2e-pitr-restored"
		schedule   = "e2e-pitr"
	)
	mc := s.minio(t)
	if err := mc.MakeBucket(ctx(t, time.Minute), bucketName, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		if exists, eerr := mc.BucketExists(ctx(t, time.Minute), bucketName); eerr != nil || !exists {
			t.Fatalf("creating bucket %s: %v", bucketName, err)
		}
	}
	s.recreate(t, &shalev1.ObjectStore{
		ObjectMeta: metav1.ObjectMeta{Name: storeName, Namespace: s.cfg.namespace},
		Spec: shalev1.ObjectStoreSpec{
			Endpoint:    s.objectStoreEndpoint(),
			Credentials: &shalev1.SecretReference{Name: "shale-objectstore"},
			Hot:         shalev1.BucketLocation{Bucket: bucketName, Prefix: "shale"},
		},
	})

	// The source, archiving from its first primary on.
	s.createRocksDBWith(t, source, shalev1.ReclaimDelete, func(db *shalev1.RocksDB) {
		db.Spec.Backup = &shalev1.DatabaseBackupSpec{Archive: &shalev1.ArchiveSpec{BackupStore: storeName}}
	})
	src := s.waitReady(t, source, 1, 10*time.Minute)
	if p := s.pod(t, src.Status.CurrentPrimary); p == nil || !slices.Contains(p.Spec.Containers[0].Args, "--archive-to") {
		t.Fatalf("the primary of %s runs without --archive-to", source)
	}
	dbID := path.Base(src.Status.StoragePath)

	// The writer: one sync write at a time, each with its start and ack.
	addr := s.serviceProxy(t, source+"-rw", kvPort)
	var (
		mu     sync.Mutex
		writes []timedWrite
	)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var conn *grpc.ClientConn
		defer func() {
			if conn != nil {
				conn.Close()
			}
		}()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if conn == nil {
				var err error
				if conn, err = newConn(addr); err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			w := timedWrite{key: fmt.Sprintf("e2e/pitr/%09d", i)}
			w.value = w.key + "-v"
			c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			w.start = time.Now()
			_, err := kvv1.NewKVClient(conn).Put(c, putReq(w.key, w.value))
			w.ack, w.ok = time.Now(), err == nil
			cancel()
			mu.Lock()
			writes = append(writes, w)
			mu.Unlock()
			if err != nil {
				conn.Close()
				conn = nil
			}
		}
	}()
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}
	t.Cleanup(halt)
	acksAfter := func(at time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, w := range writes {
			if w.ok && w.ack.After(at) {
				n++
			}
		}
		return n
	}

	sb := &shalev1.ScheduledBackup{
		ObjectMeta: metav1.ObjectMeta{Name: schedule, Namespace: s.cfg.namespace},
		Spec:       shalev1.ScheduledBackupSpec{Schedule: "* * * * *", Database: source, BackupStore: storeName},
	}
	s.recreate(t, sb)
	eventually(t, 6*time.Minute, "a Completed scheduled Backup of "+source, func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(sb), sb); err != nil {
			return false, err.Error()
		}
		return sb.Status.LastSuccessfulTime != nil, fmt.Sprintf("%+v", sb.Status)
	})
	// The window has a start once the operator read the archive.
	eventually(t, 3*time.Minute, "status.archive of "+source+" with a window", func() (bool, string) {
		src = s.rocksDB(t, source)
		a := src.Status.Archive
		return a != nil && a.RecoverableFrom != nil && a.Database == dbID, fmt.Sprintf("%+v", a)
	})
	t.Logf("archive of %s: from %s (backup %s), caught up at %v", source, src.Status.Archive.RecoverableFrom.UTC().Format(time.RFC3339), src.Status.Archive.RecoverableFromBackup, src.Status.Archive.CaughtUpAt)

	// T: a whole second after more acknowledged writes, then more.
	base := time.Now()
	eventually(t, 2*time.Minute, "writes after the backup", func() (bool, string) {
		n := acksAfter(base)
		return n >= 30, fmt.Sprintf("%d acknowledged", n)
	})
	target := time.Now().Truncate(time.Second).Add(time.Second)
	eventually(t, 2*time.Minute, "writes after the target", func() (bool, string) {
		n := acksAfter(target.Add(time.Second))
		return n >= 30, fmt.Sprintf("%d acknowledged a second after %s", n, target.Format(time.RFC3339))
	})
	// The archive reached T (the operator's status: read once a minute).
	eventually(t, 4*time.Minute, "the archive of "+source+" past the target", func() (bool, string) {
		a := s.rocksDB(t, source).Status.Archive
		return a != nil && a.CaughtUpAt != nil && a.CaughtUpAt.After(target), fmt.Sprintf("%+v", a)
	})
	halt()

	// The source goes: the schedule (suspended first, and its running
	// Backup finished: a backup's pin would hold tables of the directory),
	// then the RocksDB and its directory.
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(sb), sb); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(sb.DeepCopy())
	sb.Spec.Suspend = true
	if err := s.kube.Patch(ctx(t, time.Minute), sb, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "no Backup of "+source+" running", func() (bool, string) {
		var bs shalev1.BackupList
		if err := s.kube.List(ctx(t, time.Minute), &bs, client.InNamespace(s.cfg.namespace)); err != nil {
			return false, err.Error()
		}
		var busy []string
		for _, b := range bs.Items {
			if b.Spec.Database == source && (b.Status.Phase == "" || b.Status.Phase == shalev1.BackupPending || b.Status.Phase == shalev1.BackupRunning) {
				busy = append(busy, b.Name+"="+string(b.Status.Phase))
			}
		}
		return len(busy) == 0, strings.Join(busy, " ")
	})
	if err := s.kube.Delete(ctx(t, time.Minute), sb); err != nil {
		t.Fatal(err)
	}
	s.deleteRocksDB(t, src, false)
	eventually(t, 5*time.Minute, "the directory of "+source+" gone from the store", func() (bool, string) {
		keys := listKeys(t, mc, src.Status.StoragePath+"/")
		return len(keys) == 0, fmt.Sprintf("%d objects left, e.g. %v", len(keys), first(keys, 3))
	})

	// Restored to T.
	tt := metav1.NewTime(target)
	s.createRocksDBWith(t, restored, shalev1.ReclaimDelete, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap = &shalev1.BootstrapSpec{Recovery: &shalev1.RecoverySource{BackupStore: storeName, Database: dbID, Backup: "latest", TargetTime: &tt}}
	})
	// A refusal (the operator's or the restore's) fails the step at once,
	// with its message.
	eventually(t, 10*time.Minute, "RocksDB "+restored+" Ready or refused", func() (bool, string) {
		d := s.rocksDB(t, restored)
		if c := meta.FindStatusCondition(d.Status.Conditions, shalev1.ConditionPrimaryAvailable); c != nil && c.Reason == shalev1.ReasonBootstrapRefused {
			t.Fatalf("the restore to %s was refused: %s", target.Format(time.RFC3339), c.Message)
		}
		return isReady(d), describe(d)
	})
	rdb := s.waitReady(t, restored, 1, time.Minute)
	if r := rdb.Status.Recovery; r == nil || r.Target != "time "+target.UTC().Format(time.RFC3339) {
		t.Fatalf("RocksDB %s status.recovery %+v, want the target %s", restored, r, target.UTC().Format(time.RFC3339))
	}
	s.expectEvent(t, "RocksDB", restored, rdb.UID, "BootstrapRestoring", "to time "+target.UTC().Format(time.RFC3339))

	mu.Lock()
	all := slices.Clone(writes)
	mu.Unlock()
	var before, after []timedWrite
	for _, w := range all {
		switch {
		case w.ok && w.ack.Before(target):
			before = append(before, w)
		case w.start.After(target.Add(storeClockSlack)):
			after = append(after, w)
		}
	}
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%d writes acknowledged before %s and %d started after it: want some of each", len(before), target, len(after))
	}
	raddr := s.serviceProxy(t, restored+"-rw", kvPort)
	var lost, wrong, extra []string
	for chunk := range slices.Chunk(before, 500) {
		keys := make([]string, len(chunk))
		for i, w := range chunk {
			keys[i] = w.key
		}
		for i, r := range multiGet(t, raddr, keys) {
			switch {
			case !r.Found:
				lost = append(lost, chunk[i].key)
			case string(r.Value) != chunk[i].value:
				wrong = append(wrong, fmt.Sprintf("%s=%q", chunk[i].key, r.Value))
			}
		}
	}
	for chunk := range slices.Chunk(after, 500) {
		keys := make([]string, len(chunk))
		for i, w := range chunk {
			keys[i] = w.key
		}
		for i, r := range multiGet(t, raddr, keys) {
			if r.Found {
				extra = append(extra, fmt.Sprintf("%s (started %s)", chunk[i].key, chunk[i].start.UTC().Format(time.RFC3339Nano)))
			}
		}
	}
	if len(lost)+len(wrong)+len(extra) > 0 {
		t.Fatalf("restored to %s: %d of %d writes acknowledged before it are missing (%v), %d have another value (%v), and %d of %d started after it are there (%s)",
			target.Format(time.RFC3339), len(lost), len(before), first(lost, 10), len(wrong), first(wrong, 10), len(extra), len(after), strings.Join(first(extra, 10), ", "))
	}
	t.Logf("RocksDB %s restored to %s: all %d writes acknowledged before it are there, none of the %d started after it (%d writes in all)",
		restored, target.Format(time.RFC3339), len(before), len(after), len(all))
	s.deleteRocksDB(t, rdb, false)
}
