//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

// stepSecurity: what an application without the right credentials meets,
// from Pods in the cluster as an attacker would run them; and the
// database's certificates renewed under a write load with no failover
// and no failed write.
func stepSecurity(t *testing.T, s *suite) {
	rw := fmt.Sprintf("%s-rw:%d", s.db, kvPort)
	secret := s.db + "-client-" + e2eClient
	ca := clientDir + "/ca.crt"

	// No identity at all: plaintext does not get through the handshake,
	// TLS without a certificate or token is UNAUTHENTICATED.
	for _, tc := range []struct {
		name string
		args []string
		want []string // one of them in the output
	}{
		{"plaintext-client", []string{"kv", "status", "--addr", rw}, []string{"closed a plaintext connection", "cannot reach"}},
		{"no-cert-client", []string{"kv", "status", "--addr", rw, "--tls-ca", ca}, []string{"the server requires authentication"}},
	} {
		ok, _, logs := s.runClientPod(t, tc.name, s.db, secret, []string{"version"}, tc.args)
		if ok || !containsAny(logs, tc.want) {
			t.Fatalf("%s: a Pod with no client identity got: ok=%v, %s; want a failure saying %q", tc.name, ok, logs, tc.want)
		}
		t.Logf("%s refused: %s", tc.name, lastLine(logs))
	}

	// The database's NetworkPolicy exists and admits the client label on
	// the KV port (kind's CNI here does not enforce policies: the objects
	// are what can be checked; envtest checks every rule).
	var np networkingv1.NetworkPolicy
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: s.db + "-ingress"}, &np); err != nil {
		t.Fatalf("NetworkPolicy %s-ingress: %v", s.db, err)
	}
	if !admitsLabel(&np, shalev1.LabelClient, s.db) {
		t.Fatalf("NetworkPolicy %s-ingress does not admit Pods labelled %s=%s: %+v", s.db, shalev1.LabelClient, s.db, np.Spec.Ingress)
	}

	// A read identity reads and cannot write.
	db := s.rocksDB(t, s.db)
	if !hasClient(db, "reader") {
		db.Spec.Clients = append(db.Spec.Clients, shalev1.ClientSpec{Name: "reader", Role: "read"})
		if err := s.kube.Update(ctx(t, time.Minute), db); err != nil {
			t.Fatal(err)
		}
	}
	readerSecret := s.db + "-client-reader"
	if _, err := s.secretDir(readerSecret); err != nil {
		t.Fatal(err)
	}
	// A new client is admitted once kubelet has refreshed the access list
	// in the database's Pods (its sync period: about a minute).
	start := time.Now()
	eventually(t, 4*time.Minute, "the new read client to be admitted", func() (bool, string) {
		ok, _, logs := s.runClientPod(t, "reader-client", s.db, readerSecret, []string{"version"},
			[]string{"kv", "status", "--config", clientConfigFile, "--addr", rw})
		return ok, lastLine(logs)
	})
	t.Logf("the read client was admitted %s after it was added", time.Since(start).Round(time.Second))
	ok, _, logs := s.runClientPod(t, "reader-client", s.db, readerSecret,
		[]string{"kv", "status", "--config", clientConfigFile, "--addr", rw},
		[]string{"kv", "put", "e2e/security/by-reader", "x", "--config", clientConfigFile, "--addr", rw})
	if ok || !strings.Contains(logs, "PermissionDenied") || !strings.Contains(logs, "needs role write") {
		t.Fatalf("a read client's Put: ok=%v, %s; want PermissionDenied naming role write", ok, logs)
	}
	t.Logf("a read client read and was refused a Put: %s", lastLine(logs))

	// Certificates renewed under a write load: no failover, no failed write.
	addr := s.rwAddr(t)
	before := s.rocksDB(t, s.db)
	oldSerial := serverSerial(t, addr)
	w := s.startWriter(t, addr, "e2e/security/rotation")
	eventually(t, time.Minute, "the writer to be acknowledged 50 times", func() (bool, string) {
		n, errs := w.counts()
		return n >= 50, fmt.Sprintf("%d acknowledged, %d failed", n, errs)
	})
	mark := time.Now().UTC().Format(time.RFC3339Nano)
	patch := client.MergeFrom(before.DeepCopy())
	cur := before.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[shalev1.AnnotationRenewCertificates] = mark
	if err := s.kube.Patch(ctx(t, time.Minute), cur, patch); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var newSerial string
	// kubelet refreshes mounted Secrets on its sync period (about a minute).
	eventually(t, 4*time.Minute, "new connections to get a renewed certificate", func() (bool, string) {
		var err error
		if newSerial, err = trySerial(addr); err != nil {
			return false, err.Error()
		}
		return newSerial != oldSerial, "serial " + newSerial
	})
	took := time.Since(start)
	acked, _ := w.counts()
	eventually(t, time.Minute, "50 more acknowledged writes after the renewal", func() (bool, string) {
		n, errs := w.counts()
		return n >= acked+50, fmt.Sprintf("%d acknowledged, %d failed", n, errs)
	})
	w.halt()
	n, errs := w.counts()
	if errs > 0 {
		t.Fatalf("%d of %d writes failed while the certificates were renewed (last: %v)", errs, n+errs, w.lastErr())
	}
	after := s.rocksDB(t, s.db)
	if after.Status.Epoch != before.Status.Epoch || after.Status.Failovers != before.Status.Failovers {
		t.Fatalf("renewing certificates cost a failover: epoch %d → %d, failovers %d → %d", before.Status.Epoch, after.Status.Epoch, before.Status.Failovers, after.Status.Failovers)
	}
	forgetSecret(secret)
	t.Logf("certificates renewed (serial %s → %s) %s after the annotation; %d synced writes meanwhile, none failed, epoch %d kept",
		short(oldSerial), short(newSerial), took.Round(time.Second), n, after.Status.Epoch)
	s.verifyLedger(t, addr)
}

// attackScheduler replays, against a running pool, the attacks that once
// worked on an unauthenticated scheduler: a client posing as a worker
// takes and completes jobs, posts a forged failure, and submits a job for
// a database that is not its own. Each must be refused.
func (s *suite) attackScheduler(t *testing.T, pool, db string) {
	t.Helper()
	addr := s.serviceProxy(t, pool+"-scheduler", shalev1.SchedulerPort)
	dir, err := s.secretDir(db + "-client-" + e2eClient)
	if err != nil {
		t.Fatal(err)
	}
	files := auth.TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for _, who := range []struct {
		name string
		cfg  auth.ClientConfig
		code codes.Code
	}{
		{"no certificate", auth.ClientConfig{TLS: auth.TLSFiles{CA: files.CA}, ServerName: pool + "-scheduler"}, codes.Unauthenticated},
		{"a client's certificate", auth.ClientConfig{TLS: files, ServerName: pool + "-scheduler"}, codes.PermissionDenied},
	} {
		opts, err := who.cfg.DialOptions()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		cc := compactorv1.NewCompactorClient(conn)
		c := ctx(t, time.Minute)
		check := func(what string, err error) {
			t.Helper()
			if status.Code(err) != who.code {
				t.Fatalf("%s: %s: %v, want %s", who.name, what, err, who.code)
			}
		}
		_, err = cc.Lease(c, &compactorv1.LeaseRequest{Worker: "attacker", Slots: 1, WaitMillis: 100})
		check("Lease", err)
		_, err = cc.Complete(c, &compactorv1.CompleteRequest{Worker: "attacker"})
		check("Complete", err)
		_, err = cc.Fail(c, &compactorv1.FailRequest{Worker: "attacker", Error: "Corruption: forged"})
		check("Fail", err)
		stream, err := cc.Compact(c, &compactorv1.CompactRequest{Db: "s3://shale/victim", JobId: "forged"})
		if err == nil {
			_, err = stream.Recv()
		}
		check("Compact for another database", err)
		conn.Close()
	}
	t.Logf("the scheduler of %s refused Lease, Complete, Fail and a foreign Compact from callers without a worker or primary identity", pool)
}

// serverSerial is the serial of the certificate a new connection to addr gets.
func serverSerial(t *testing.T, addr string) string {
	t.Helper()
	serial, err := trySerial(addr)
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

func trySerial(addr string) (string, error) {
	cfg, err := clientConfig(addr)
	if err != nil {
		return "", err
	}
	opts, err := cfg.DialOptions()
	if err != nil {
		return "", err
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var p peer.Peer
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kvv1.NewKVClient(conn).Status(c, &kvv1.StatusRequest{}, grpc.Peer(&p)); err != nil {
		return "", fmt.Errorf("Status through %s: %w", addr, err)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 || ti.State.Version != tls.VersionTLS13 {
		return "", fmt.Errorf("%s: no TLS 1.3 peer certificate", addr)
	}
	return ti.State.PeerCertificates[0].SerialNumber.Text(16), nil
}

func hasClient(db *shalev1.RocksDB, name string) bool {
	for _, c := range db.Spec.Clients {
		if c.Name == name {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// admitsLabel says whether some ingress rule of np admits Pods of its
// namespace labelled key=value.
func admitsLabel(np *networkingv1.NetworkPolicy, key, value string) bool {
	for _, r := range np.Spec.Ingress {
		for _, p := range r.From {
			if p.PodSelector != nil && p.NamespaceSelector == nil && p.PodSelector.MatchLabels[key] == value {
				return true
			}
		}
	}
	return false
}
