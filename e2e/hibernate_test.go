//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/signer"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/kubectlshale"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// stepHibernate: hibernation and fencing by hand (RFC 0014) of the main
// database, through the plugin. Hibernated: no Pod of it runs, phase
// Hibernated, and for E2E_HIBERNATE_IDLE (30 s) MinIO serves no request in its directory
// (MinIO's own request trace, through its admin API with the demo MinIO's
// root keys: any request on an object of the directory, or listing a
// prefix in it) and nothing there changes (names and ETags). Resumed:
// Ready at a later epoch, every key of the suite's ledger read back.
// Fenced: no primary, the fence's epoch released in the store, the
// secondaries still serving every acknowledged key. Unfenced: Ready, every
// key, no failover counted.
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
	trace := s.traceMinIO(t, dir)
	start := time.Now()
	idle := s.cfg.hibernateIdle
	eventually(t, idle+time.Minute, fmt.Sprintf("%s of hibernation with no Pod", idle), func() (bool, string) {
		var pods corev1.PodList
		if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace), client.MatchingLabels{shalev1.LabelRocksDB: s.db}); err != nil {
			return false, err.Error()
		}
		if r := running(pods.Items); len(r) > 0 {
			t.Fatalf("a Pod of the hibernated database: %s (%s)", r[0].Name, r[0].Status.Phase)
		}
		return time.Since(start) >= idle, fmt.Sprintf("%s so far", time.Since(start).Round(time.Second))
	})
	mine, others := trace.stop()
	if len(mine) > 0 {
		t.Errorf("MinIO served %d requests in the hibernated database's directory in %s: %v", len(mine), idle, first(mine, 10))
	}
	if after := objectVersions(t, mc, dir); after != before {
		t.Errorf("the hibernated database's directory changed in %s:\nbefore: %d bytes of listing\nafter: %d bytes", idle, len(before), len(after))
	}
	t.Logf("hibernated at epoch %d (from %d): no Pod and no request in its directory for %s (%d requests elsewhere in the store: other databases, the operator's checks)", db.Status.Hold.Epoch, epoch, idle, others)

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

// minioTrace follows MinIO's request trace and collects the requests in
// one directory of the hot bucket.
type minioTrace struct {
	mu     sync.Mutex
	mine   []string
	others int
	cancel func()
	done   chan struct{}
}

// traceMinIO subscribes to the demo MinIO's trace of S3 requests (its
// admin API, GET /minio/admin/v3/trace, signed with the root keys the
// chart gives it: the shale-objectstore Secret's) and collects, until
// stop, the requests on an object under dir or listing a prefix under it.
func (s *suite) traceMinIO(t *testing.T, dir string) *minioTrace {
	t.Helper()
	var sec corev1.Secret
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: "shale-objectstore"}, &sec); err != nil {
		t.Fatal(err)
	}
	addr := s.serviceProxy(t, "minio", 9000)
	c, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(c, http.MethodGet, "http://"+addr+"/minio/admin/v3/trace?s3=true", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	req = signer.SignV4(*req, string(sec.Data["AWS_ACCESS_KEY_ID"]), string(sec.Data["AWS_SECRET_ACCESS_KEY"]), "", "us-east-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("MinIO's trace: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		t.Fatalf("MinIO's trace: %s: %s", resp.Status, b)
	}
	m := &minioTrace{cancel: cancel, done: make(chan struct{})}
	inDir := "/" + hotBucket + "/" + dir
	go func() {
		defer close(m.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e struct {
				FuncName string `json:"funcname"`
				Path     string `json:"path"`
				HTTP     *struct {
					Request struct {
						RawQuery string `json:"rawquery"`
					} `json:"request"`
				} `json:"http"`
			}
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.FuncName == "" {
				continue // keep-alive blanks
			}
			prefix := ""
			if e.HTTP != nil {
				if q, err := url.ParseQuery(e.HTTP.Request.RawQuery); err == nil {
					prefix = q.Get("prefix")
				}
			}
			m.mu.Lock()
			if strings.HasPrefix(e.Path, inDir) || (e.Path == "/"+hotBucket+"/" && prefix != "" && strings.HasPrefix(prefix, dir)) {
				m.mine = append(m.mine, e.FuncName+" "+e.Path+" "+prefix)
			} else {
				m.others++
			}
			m.mu.Unlock()
		}
	}()
	return m
}

// emptySHA256 is the SHA-256 of an empty body, which MinIO's admin API
// wants in X-Amz-Content-Sha256.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// stop ends the trace and returns the requests in the directory and how
// many others it saw.
func (m *minioTrace) stop() ([]string, int) {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mine, m.others
}
