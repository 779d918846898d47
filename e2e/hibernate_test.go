//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/kubectlshale"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// stepHibernate: hibernation and fencing by hand (RFC 0014) of the main
// database, through the plugin. Hibernated: no Pod of it runs, phase
// Hibernated, and for 30 s nothing in its directory changes (MinIO's
// request counters are per bucket, shared with the operator's checks and
// other databases, so reads are not counted here: only writes, as the
// objects' names and ETags). Resumed: Ready at a later epoch, every key of
// the suite's ledger read back. Fenced: no primary, the fence's epoch
// claimed and released in the store, writes refused, the secondaries still
// serving every acknowledged key. Unfenced: Ready, every key.
func stepHibernate(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	withSecondaries := db.Spec.Secondaries.Replicas == secondaryReplicas
	if withSecondaries {
		s.verifyLedgerOnSecondaries(t, s.secondaryAddrs(t))
	}
	failovers := db.Status.Failovers
	mc := s.minio(t)
	dir := db.Status.StoragePath + "/"

	// Hibernate.
	epoch := db.Status.Epoch
	plugin(t, s, "hibernate", s.db, "--wait", "5m")
	db = s.rocksDB(t, s.db)
	if h := db.Status.Hold; h == nil || h.Phase != shalev1.HoldHeld || db.Status.Phase != shalev1.PhaseHibernated {
		t.Fatalf("after kubectl shale hibernate: %s, hold %+v", describe(db), db.Status.Hold)
	}
	s.waitNoPods(t, s.db)
	released := exists(t, mc, dir+layout.ReleasedKey(uint64(db.Status.Hold.Epoch)))
	if !released {
		t.Errorf("hibernated at epoch %d without its release in the store", db.Status.Hold.Epoch)
	}
	before := objectVersions(t, mc, dir)
	start := time.Now()
	eventually(t, time.Minute, "30 s of hibernation with no Pod", func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db}); err != nil {
			return false, err.Error()
		}
		if len(pods.Items) > 0 {
			t.Fatalf("a Pod of the hibernated database: %s (%s)", pods.Items[0].Name, pods.Items[0].Status.Phase)
		}
		return time.Since(start) >= 30*time.Second, fmt.Sprintf("%s so far", time.Since(start).Round(time.Second))
	})
	if after := objectVersions(t, mc, dir); after != before {
		t.Errorf("the hibernated database's directory changed in 30 s:\nbefore: %d bytes of listing\nafter: %d bytes", len(before), len(after))
	}
	t.Logf("hibernated at epoch %d (from %d): no Pod and no object written for 30 s", db.Status.Hold.Epoch, epoch)

	// Resume.
	plugin(t, s, "resume", s.db, "--wait", "5m")
	db = s.waitReady(t, s.db, epoch+1, 3*time.Minute)
	s.expectEvent(t, "RocksDB", s.db, db.UID, "Resumed")
	s.verifyLedger(t, addr)
	t.Logf("resumed at epoch %d", db.Status.Epoch)

	// Fence.
	epoch = db.Status.Epoch
	plugin(t, s, "fence", s.db, "--wait", "5m")
	db = s.rocksDB(t, s.db)
	if h := db.Status.Hold; h == nil || h.Phase != shalev1.HoldHeld || db.Status.Phase != shalev1.PhaseFenced || h.Epoch <= epoch {
		t.Fatalf("after kubectl shale fence: %s, hold %+v", describe(db), db.Status.Hold)
	}
	fenceEpoch := db.Status.Hold.Epoch
	if !exists(t, mc, dir+layout.ReleasedKey(uint64(fenceEpoch))) {
		t.Errorf("the fence of epoch %d left no release in the store", fenceEpoch)
	}
	s.expectEvent(t, "RocksDB", s.db, db.UID, shalev1.ReasonFenced)
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RolePrimary}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			t.Errorf("a primary runs while fenced: %s", p.Name)
		}
	}
	if withSecondaries {
		// The secondaries keep serving what was acknowledged.
		for name, a := range s.secondaryAddrs(t) {
			t.Logf("secondary %s while fenced:", name)
			s.verifyLedger(t, a)
		}
	}

	// Unfence.
	plugin(t, s, "unfence", s.db, "--wait", "5m")
	db = s.waitReady(t, s.db, fenceEpoch+1, 3*time.Minute)
	s.verifyLedger(t, addr)
	if db.Status.Failovers != failovers {
		t.Errorf("status.failovers went from %d to %d: a hibernation or a fence counted as a failover", failovers, db.Status.Failovers)
	}
	t.Logf("fenced at epoch %d, unfenced: Ready at epoch %d with every acknowledged write", fenceEpoch, db.Status.Epoch)
}

// plugin runs `kubectl shale ARGS` against the suite's cluster.
func plugin(t *testing.T, s *suite, args ...string) string {
	t.Helper()
	cmd := kubectlshale.NewCommand(func() (kubectlshale.Target, error) {
		return kubectlshale.Target{Config: s.rest, Namespace: s.cfg.namespace}, nil
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx(t, 6*time.Minute)); err != nil {
		t.Fatalf("kubectl shale %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("kubectl shale %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// objectVersions lists a directory's objects with their ETags and sizes,
// sorted: two equal listings mean nothing was written or deleted there.
func objectVersions(t *testing.T, mc *minio.Client, prefix string) string {
	t.Helper()
	var lines []string
	for o := range mc.ListObjects(ctx(t, time.Minute), hotBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("listing %s/%s: %v", hotBucket, prefix, o.Err)
		}
		lines = append(lines, fmt.Sprintf("%s %s %d", o.Key, o.ETag, o.Size))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
