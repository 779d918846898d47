package operator

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

// secret waits for Secret ns/name.
func (h *harness) secret(ns, name string) *corev1.Secret {
	h.t.Helper()
	var s corev1.Secret
	eventually(h.t, "Secret "+name, func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
		return err == nil, fmt.Sprint(err)
	})
	return &s
}

// waitSecretGone waits until Secret ns/name does not exist.
func (h *harness) waitSecretGone(ns, name string) {
	h.t.Helper()
	eventually(h.t, "Secret "+name+" gone", func() (bool, string) {
		err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// mountSecret writes a Secret's keys into a new directory, as the kubelet
// mounts it, and returns the directory.
func (h *harness) mountSecret(s *corev1.Secret) string {
	h.t.Helper()
	dir := h.t.TempDir()
	for k, v := range s.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			h.t.Fatal(err)
		}
	}
	return dir
}

// leafOf parses the certificate of a Secret.
func leafOf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertificate(s.Data[keyTLSCert])
	if err != nil {
		t.Fatalf("Secret %s: %v", s.Name, err)
	}
	return c
}

// verifyLeaf checks a Secret's certificate against its own ca.crt, as a
// server named dnsName (if any) and as a client.
func verifyLeaf(t *testing.T, s *corev1.Secret, dnsName string) *x509.Certificate {
	t.Helper()
	c := leafOf(t, s)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[keyCA]) {
		t.Fatalf("Secret %s: no CA in ca.crt", s.Name)
	}
	if dnsName != "" {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("Secret %s as server %s: %v", s.Name, dnsName, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("Secret %s as a client: %v", s.Name, err)
	}
	return c
}

// guardedStatus answers Status behind the real guard and records who
// asked; SetTiering changes the cold_after Status reports, and is
// recorded.
type guardedStatus struct {
	kvv1.UnimplementedKVServer
	st     *kvv1.StatusResponse
	mu     sync.Mutex
	caller []auth.Identity
	sets   []tieringCall
}

// tieringCall is one SetTiering: who asked for what.
type tieringCall struct {
	id        auth.Identity
	coldAfter time.Duration
}

func (g *guardedStatus) Status(ctx context.Context, _ *kvv1.StatusRequest) (*kvv1.StatusResponse, error) {
	id, _ := auth.FromContext(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.caller = append(g.caller, id)
	return proto.Clone(g.st).(*kvv1.StatusResponse), nil
}

func (g *guardedStatus) SetTiering(ctx context.Context, r *kvv1.SetTieringRequest) (*kvv1.SetTieringResponse, error) {
	id, _ := auth.FromContext(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.st.ColdAfter
	g.sets = append(g.sets, tieringCall{id, r.GetColdAfter().AsDuration()})
	g.st.ColdAfter = nil
	if r.GetColdAfter().AsDuration() > 0 {
		g.st.ColdAfter = r.ColdAfter
	}
	return &kvv1.SetTieringResponse{Previous: prev, ColdAfter: r.ColdAfter}, nil
}

func (g *guardedStatus) tieringCalls() []tieringCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sets)
}

func (g *guardedStatus) callers() []auth.Identity {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.caller)
}

// guardedKV serves Status on lis as a Shale KV server in a Pod would:
// with the certificate of Secret ns/certSecret and the access list of
// ns/accessSecret, mounted, behind auth's guard.
func (h *harness) guardedKV(lis net.Listener, ns, certSecret, accessSecret string, st *kvv1.StatusResponse) *guardedStatus {
	h.t.Helper()
	g := &guardedStatus{st: st}
	h.serveGuarded(lis, ns, certSecret, accessSecret, g)
	return g
}

// serveGuarded serves kv on lis behind the real guard, with the
// certificate and access list of the named Secrets.
func (h *harness) serveGuarded(lis net.Listener, ns, certSecret, accessSecret string, kv kvv1.KVServer) {
	h.t.Helper()
	h.serveGuardedServer(lis, ns, certSecret, accessSecret, kv)
}

// serveGuardedServer is serveGuarded, returning the server.
func (h *harness) serveGuardedServer(lis net.Listener, ns, certSecret, accessSecret string, kv kvv1.KVServer) *grpc.Server {
	h.t.Helper()
	dir := h.mountSecret(h.secret(ns, certSecret))
	cfg := auth.ServerConfig{TLS: auth.TLSFiles{Cert: filepath.Join(dir, keyTLSCert), Key: filepath.Join(dir, keyTLSKey), CA: filepath.Join(dir, keyCA)}}
	if accessSecret != "" {
		cfg.AccessFile = filepath.Join(h.mountSecret(h.secret(ns, accessSecret)), keyAccess)
	}
	sec, err := auth.Secure(cfg, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := grpc.NewServer(sec.ServerOption(), grpc.ChainUnaryInterceptor(sec.UnaryInterceptors()...), grpc.ChainStreamInterceptor(sec.StreamInterceptors()...))
	kvv1.RegisterKVServer(srv, kv)
	go srv.Serve(lis)
	h.t.Cleanup(srv.Stop)
	return srv
}

// testCertificates: the CA, a database's certificates and client
// credentials, revocation, the renewal annotation, and TLS off.
func testCertificates(h *harness) {
	t := h.t

	// The CA: made at start in the operator's namespace, labelled so the
	// operator sees it change.
	var caSec corev1.Secret
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: operatorNS, Name: "shale-ca"}, &caSec); err != nil {
		t.Fatalf("the CA Secret: %v", err)
	}
	ca, err := pki.LoadCA(caSec.Data["ca.crt"], caSec.Data["ca.key"])
	if err != nil {
		t.Fatalf("the CA Secret: %v", err)
	}
	if caSec.Labels[shalev1.LabelAppManagedBy] != shalev1.ManagedBy {
		t.Errorf("CA Secret labels %v", caSec.Labels)
	}

	ns := h.namespace("certs")
	sec, store, db := h.samples(ns)
	db.Spec.Clients = []shalev1.ClientSpec{{Name: "app", Role: "write"}, {Name: "reports", Role: "read"}}
	h.create(sec, store, db)

	// The primary mounts its certificate and the access list, names them
	// in its flags, and is probed over TLS.
	pod := h.waitPod(ns, "orders-primary-1")
	c := pod.Spec.Containers[0]
	checkSecretMount(t, pod.Spec, c, "tls", "orders-primary-tls", "/etc/shale/tls")
	checkSecretMount(t, pod.Spec, c, "access", "orders-access", "/etc/shale/access")
	args := " " + strings.Join(c.Args, " ") + " "
	for _, want := range []string{" --tls-cert /etc/shale/tls/tls.crt ", " --tls-key /etc/shale/tls/tls.key ", " --tls-ca /etc/shale/tls/ca.crt ", " --access-file /etc/shale/access/access.json "} {
		if !strings.Contains(args, want) {
			t.Errorf("primary args %q lack %q", args, want)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"shale", "health", "--addr", "127.0.0.1:7070", "--tls-ca", "/etc/shale/tls/ca.crt", "--tls-server-name", "localhost"}) {
		t.Errorf("primary readiness probe %+v", p)
	}

	// Its certificate names the primary and the database URL it serves,
	// and the Service's names; it verifies against ca.crt, which holds
	// the operator's CA.
	db = h.db(ns, "orders")
	dbURL := store.DatabaseURL(db.Status.StoragePath)
	ps := h.secret(ns, "orders-primary-tls")
	if ps.Type != corev1.SecretTypeTLS || !metav1.IsControlledBy(ps, db) {
		t.Errorf("orders-primary-tls: type %s owners %v", ps.Type, ps.OwnerReferences)
	}
	if !strings.Contains(string(ps.Data[keyCA]), strings.TrimSpace(string(ca.CertPEM))) {
		t.Errorf("orders-primary-tls ca.crt does not hold the operator's CA")
	}
	pc := verifyLeaf(t, ps, "orders-rw.certs.svc")
	if id, err := auth.FromCertificate(pc); err != nil || id.Kind != auth.KindPrimary || id.Namespace != ns || id.Name != "orders" || id.Database != dbURL {
		t.Errorf("primary identity %+v (%v), want shale://certs/primary/orders for %s", id, err, dbURL)
	}
	if !slices.Contains(pc.DNSNames, "localhost") || !slices.ContainsFunc(pc.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("primary certificate names %v %v: the exec probe needs localhost and 127.0.0.1", pc.DNSNames, pc.IPAddresses)
	}
	ss := h.secret(ns, "orders-secondary-tls")
	if id, err := auth.FromCertificate(verifyLeaf(t, ss, "orders-ro.certs.svc")); err != nil || id.Kind != auth.KindSecondary || id.Name != "orders" {
		t.Errorf("secondary identity %+v (%v)", id, err)
	}

	// A client's Secret: client.yaml for `shale kv --config`, a client
	// certificate naming it, a token whose digest the access list has with
	// its role.
	cs := h.secret(ns, "orders-client-app")
	if !metav1.IsControlledBy(cs, db) {
		t.Errorf("orders-client-app owners %v", cs.OwnerReferences)
	}
	var cfg map[string]string
	if err := yaml.UnmarshalStrict(cs.Data[keyClientConfig], &cfg); err != nil || cfg["addr"] != "orders-rw.certs.svc:7070" || cfg["tlsCA"] != "ca.crt" || cfg["tlsCert"] != "tls.crt" || cfg["tlsKey"] != "tls.key" {
		t.Errorf("client.yaml %v (%v)", cfg, err)
	}
	cc := verifyLeaf(t, cs, "")
	if id, err := auth.FromCertificate(cc); err != nil || id.Kind != auth.KindClient || id.Namespace != ns || id.Name != "orders" || id.Client != "app" {
		t.Errorf("client identity %+v (%v)", id, err)
	}
	if !slices.Equal(cc.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate usages %v, want client only", cc.ExtKeyUsage)
	}
	token := string(cs.Data[keyToken])
	if len(token) < 40 {
		t.Errorf("token %q: want 32 random bytes", token)
	}
	accessOf := func() *auth.AccessList {
		t.Helper()
		var s corev1.Secret
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: "orders-access"}, &s); err != nil {
			t.Fatal(err)
		}
		a, err := auth.ParseAccessList(s.Data[keyAccess])
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	h.secret(ns, "orders-access")
	a := accessOf()
	if a.Role("app") != auth.RoleWrite || a.Role("reports") != auth.RoleRead {
		t.Errorf("access list roles: app %v reports %v", a.Role("app"), a.Role("reports"))
	}
	if name, ok := a.TokenClient(token); !ok || name != "app" {
		t.Errorf("the app's token is not in the access list (%q %v)", name, ok)
	}

	// And they work: a server with the primary's Secrets lets the client
	// in by its certificate and by its token, and refuses what its role
	// does not allow.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.guardedKV(lis, ns, "orders-primary-tls", "orders-access", &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY})
	appDir := h.mountSecret(cs)
	reportsDir := h.mountSecret(h.secret(ns, "orders-client-reports"))
	files := func(dir string) auth.TLSFiles {
		return auth.TLSFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
	}
	for _, tc := range []struct {
		name string
		cfg  auth.ClientConfig
		put  codes.Code
	}{
		{"certificate", auth.ClientConfig{TLS: files(appDir), ServerName: "orders-rw.certs.svc"}, codes.Unimplemented},
		{"token", auth.ClientConfig{TLS: auth.TLSFiles{CA: filepath.Join(appDir, "ca.crt")}, TokenFile: filepath.Join(appDir, "token"), ServerName: "orders-rw.certs.svc"}, codes.Unimplemented},
		{"read role", auth.ClientConfig{TLS: files(reportsDir), ServerName: "orders-rw.certs.svc"}, codes.PermissionDenied},
	} {
		conn, err := tc.cfg.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		kv := kvv1.NewKVClient(conn)
		if _, err := kv.Status(h.ctx, &kvv1.StatusRequest{}); err != nil {
			t.Errorf("%s: Status: %v", tc.name, err)
		}
		// Put gets past the guard to the stub (Unimplemented) or not.
		if _, err := kv.Put(h.ctx, &kvv1.PutRequest{Key: []byte("k")}); status.Code(err) != tc.put {
			t.Errorf("%s: Put: %v, want %s", tc.name, err, tc.put)
		}
		conn.Close()
	}

	// Removing a client revokes it: out of the access list, Secret gone.
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) { db.Spec.Clients = db.Spec.Clients[:1] })
	h.waitSecretGone(ns, "orders-client-reports")
	if a := accessOf(); a.Role("reports") != auth.RoleNone || a.Role("app") != auth.RoleWrite {
		t.Errorf("after removing reports: roles reports %v app %v", a.Role("reports"), a.Role("app"))
	}
	h.waitEvent(ns, "orders", eventClientRevoked)

	// The annotation renews every certificate, once, with no new primary;
	// tokens stay.
	primarySerial, clientSerial := leafOf(t, h.secret(ns, "orders-primary-tls")).SerialNumber, leafOf(t, cs).SerialNumber
	primaryUID := h.waitPod(ns, "orders-primary-1").UID
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		if db.Annotations == nil {
			db.Annotations = map[string]string{}
		}
		db.Annotations[shalev1.AnnotationRenewCertificates] = "first"
	})
	for _, name := range []string{"orders-primary-tls", "orders-secondary-tls", "orders-client-app"} {
		eventually(t, name+" renewed", func() (bool, string) {
			s := h.secret(ns, name)
			return s.Annotations[shalev1.AnnotationRenewedFor] == "first", fmt.Sprintf("annotations %v", s.Annotations)
		})
	}
	renewed := h.secret(ns, "orders-primary-tls")
	if leafOf(t, renewed).SerialNumber.Cmp(primarySerial) == 0 {
		t.Errorf("orders-primary-tls: same serial after the renewal")
	}
	verifyLeaf(t, renewed, "orders-rw.certs.svc")
	app := h.secret(ns, "orders-client-app")
	if leafOf(t, app).SerialNumber.Cmp(clientSerial) == 0 || string(app.Data[keyToken]) != token {
		t.Errorf("orders-client-app: want a new certificate and the same token")
	}
	h.waitEvent(ns, "orders", eventCertificateRenewed)
	// Once: a later reconcile (a new client) leaves the others alone, and
	// the new client's Secret counts as issued under the request.
	serialAfter := leafOf(t, renewed).SerialNumber
	h.updateDB(ns, "orders", func(db *shalev1.RocksDB) {
		db.Spec.Clients = append(db.Spec.Clients, shalev1.ClientSpec{Name: "late", Role: "admin"})
	})
	if late := h.secret(ns, "orders-client-late"); late.Annotations[shalev1.AnnotationRenewedFor] != "first" {
		t.Errorf("orders-client-late annotations %v", late.Annotations)
	}
	eventually(t, "late in the access list", func() (bool, string) { return accessOf().Role("late") == auth.RoleAdmin, "" })
	if s := leafOf(t, h.secret(ns, "orders-primary-tls")).SerialNumber; s.Cmp(serialAfter) != 0 {
		t.Errorf("orders-primary-tls issued again for a request already handled")
	}
	pods := h.primaries(ns, "orders")
	if p := h.waitPod(ns, "orders-primary-1"); len(pods) != 1 || p.UID != primaryUID || h.db(ns, "orders").Status.Epoch != 1 {
		t.Errorf("primaries %v after the renewal: want the same Pod, epoch 1", pods)
	}

	// TLS off: plaintext (--insecure), nothing mounted, no Secrets; and
	// clients are refused without TLS.
	plain := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"},
		Spec: shalev1.RocksDBSpec{ObjectStoreRef: db.Spec.ObjectStoreRef, TLS: &shalev1.TLSSpec{Enabled: ptr.To(false)}}}
	h.create(plain)
	pp := h.waitPod(ns, "plain-primary-1")
	pc0 := pp.Spec.Containers[0]
	if got := strings.Join(pc0.Args, " "); !strings.Contains(got, "--insecure") || strings.Contains(got, "--tls-") {
		t.Errorf("plain primary args %q", got)
	}
	if len(pp.Spec.Volumes) != 2 || hasVolume(pp.Spec.Volumes, "tls") || pc0.ReadinessProbe == nil || pc0.ReadinessProbe.GRPC == nil {
		t.Errorf("plain primary volumes %+v probe %+v", pp.Spec.Volumes, pc0.ReadinessProbe)
	}
	h.waitDB(ns, "plain", "CertificatesReady TLSDisabled", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonTLSDisabled), ""
	})
	var secs corev1.SecretList
	if err := h.c.List(h.ctx, &secs, client.InNamespace(ns), client.MatchingLabels{shalev1.LabelRocksDB: "plain"}); err != nil || len(secs.Items) != 0 {
		t.Errorf("Secrets of a database without TLS: %d (%v)", len(secs.Items), err)
	}
	err = h.c.Patch(h.ctx, &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"clients":[{"name":"app","role":"read"}]}}`)))
	if err == nil || !strings.Contains(err.Error(), "spec.clients need TLS") {
		t.Errorf("clients without TLS: %v, want the CEL message", err)
	}
	h.waitDB(ns, "orders", "CertificatesReady", func(db *shalev1.RocksDB) (bool, string) {
		return condIs(db, shalev1.ConditionCertificatesReady, metav1.ConditionTrue, shalev1.ReasonCertificatesIssued), ""
	})
}

// statsOnly answers a scheduler's Stats behind the scheduler's rules.
type statsOnly struct {
	compactorv1.UnimplementedCompactorServer
	mu     sync.Mutex
	caller []auth.Identity
}

func (s *statsOnly) Stats(ctx context.Context, _ *compactorv1.StatsRequest) (*compactorv1.StatsResponse, error) {
	id, _ := auth.FromContext(ctx)
	s.mu.Lock()
	s.caller = append(s.caller, id)
	s.mu.Unlock()
	return &compactorv1.StatsResponse{Total: &compactorv1.Counters{Queued: 2}}, nil
}

// testCompactorPoolCertificates: a pool's scheduler and worker
// certificates, the Pods' mounts, the operator reading Stats over TLS
// with its own certificate, and the renewal annotation.
func testCompactorPoolCertificates(h *harness) {
	t := h.t
	ns := h.namespace("pool-certs")
	sec, store, _ := h.samples(ns)
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: shalev1.CompactorPoolSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: store.Name}}}
	h.create(sec, store, pool)

	ss := h.secret(ns, "pool-scheduler-tls")
	if id, err := auth.FromCertificate(verifyLeaf(t, ss, "pool-scheduler.pool-certs.svc")); err != nil || id.Kind != auth.KindScheduler || id.Name != "pool" {
		t.Errorf("scheduler identity %+v (%v)", id, err)
	}
	ws := h.secret(ns, "pool-worker-tls")
	wc := verifyLeaf(t, ws, "")
	if id, err := auth.FromCertificate(wc); err != nil || id.Kind != auth.KindWorker || id.Name != "pool" || slices.Contains(wc.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("worker identity %+v (%v), usages %v", id, err, wc.ExtKeyUsage)
	}
	sd := h.waitDeployment(ns, "pool-scheduler")
	checkSecretMount(t, sd.Spec.Template.Spec, sd.Spec.Template.Spec.Containers[0], "tls", "pool-scheduler-tls", "/etc/shale/tls")
	wd := h.waitDeployment(ns, "pool-worker")
	checkSecretMount(t, wd.Spec.Template.Spec, wd.Spec.Template.Spec.Containers[0], "tls", "pool-worker-tls", "/etc/shale/tls")

	// The operator reads Stats over TLS, as itself, past the scheduler's
	// rules.
	dir := h.mountSecret(ss)
	sc, err := auth.Secure(auth.ServerConfig{TLS: auth.TLSFiles{Cert: filepath.Join(dir, keyTLSCert), Key: filepath.Join(dir, keyTLSKey), CA: filepath.Join(dir, keyCA)}}, auth.RequireScheduler)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sc.ServerOption(), grpc.ChainUnaryInterceptor(sc.UnaryInterceptors()...))
	stats := &statsOnly{}
	compactorv1.RegisterCompactorServer(srv, stats)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	testSchedulers.Store(ns+"/pool", lis.Addr().String())
	defer testSchedulers.Delete(ns + "/pool")
	h.waitPool(ns, "pool", "SchedulerReachable over TLS", func(p *shalev1.CompactorPool) (bool, string) {
		c := p.Condition(shalev1.ConditionSchedulerReachable)
		return c != nil && c.Status == metav1.ConditionTrue && p.Status.QueueDepth == 2, fmt.Sprintf("%+v", c)
	})
	stats.mu.Lock()
	caller := stats.caller[0]
	stats.mu.Unlock()
	if caller.Kind != auth.KindOperator || caller.Namespace != operatorNS {
		t.Errorf("Stats caller %v, want the operator of %s", caller, operatorNS)
	}

	// The renewal annotation.
	serial := leafOf(t, ws).SerialNumber
	eventually(t, "annotate the pool", func() (bool, string) {
		p := h.pool(ns, "pool")
		p.Annotations = map[string]string{shalev1.AnnotationRenewCertificates: "now"}
		err := h.c.Update(h.ctx, p)
		return err == nil, fmt.Sprint(err)
	})
	eventually(t, "pool-worker-tls renewed", func() (bool, string) {
		s := h.secret(ns, "pool-worker-tls")
		return s.Annotations[shalev1.AnnotationRenewedFor] == "now" && leafOf(t, s).SerialNumber.Cmp(serial) != 0, fmt.Sprintf("annotations %v", s.Annotations)
	})
	h.waitPool(ns, "pool", "CertificatesReady", func(p *shalev1.CompactorPool) (bool, string) {
		c := p.Condition(shalev1.ConditionCertificatesReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})
}

// TestOperatorCertificateRenewal: with a short --cert-validity the
// reconciler issues certificates again by itself, two thirds into their
// life, without touching the primary.
func TestOperatorCertificateRenewal(t *testing.T) {
	opts := testOptions()
	opts.CertValidity = 3 * time.Second
	h := startOperatorWith(t, opts)
	ns := h.namespace("renewal")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	pod := h.waitPod(ns, "orders-primary-1")
	first := leafOf(t, h.secret(ns, "orders-primary-tls"))
	if life := first.NotAfter.Sub(first.NotBefore); life > 4*time.Second {
		t.Fatalf("certificate lives %v, want about --cert-validity 3s", life)
	}
	eventually(t, "a renewed orders-primary-tls", func() (bool, string) {
		c := leafOf(t, h.secret(ns, "orders-primary-tls"))
		return c.SerialNumber.Cmp(first.SerialNumber) != 0, "same serial"
	})
	renewed := leafOf(t, h.secret(ns, "orders-primary-tls"))
	if !renewed.NotBefore.After(first.NotBefore) {
		t.Errorf("renewed certificate valid from %v, the first from %v", renewed.NotBefore, first.NotBefore)
	}
	if p := h.waitPod(ns, "orders-primary-1"); p.UID != pod.UID || len(h.primaries(ns, "orders")) != 1 {
		t.Errorf("the primary was replaced by a renewal")
	}

	// The CA rotation of docs/operator.md: a new CA in ca-bundle.crt
	// reaches every ca.crt first; then the new CA in ca.crt and ca.key
	// signs every certificate.
	newCert, newKey, err := pki.NewCA("rotated", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.LoadCA(newCert, newKey)
	if err != nil {
		t.Fatal(err)
	}
	caKey := types.NamespacedName{Namespace: operatorNS, Name: "shale-ca"}
	updateCA := func(mutate func(data map[string][]byte)) {
		t.Helper()
		eventually(t, "update the CA Secret", func() (bool, string) {
			var s corev1.Secret
			if err := h.c.Get(h.ctx, caKey, &s); err != nil {
				return false, err.Error()
			}
			mutate(s.Data)
			err := h.c.Update(h.ctx, &s)
			return err == nil, fmt.Sprint(err)
		})
	}
	updateCA(func(d map[string][]byte) { d["ca-bundle.crt"] = pki.AppendBundle(d["ca.crt"], newCert) })
	eventually(t, "the new CA in orders-primary-tls's ca.crt", func() (bool, string) {
		s := h.secret(ns, "orders-primary-tls")
		return strings.Contains(string(s.Data[keyCA]), strings.TrimSpace(string(newCert))), "not yet"
	})
	updateCA(func(d map[string][]byte) { d["ca.crt"], d["ca.key"] = newCert, newKey })
	eventually(t, "orders-primary-tls signed by the new CA", func() (bool, string) {
		err := leafOf(t, h.secret(ns, "orders-primary-tls")).CheckSignatureFrom(newCA.Cert)
		return err == nil, fmt.Sprint(err)
	})
	verifyLeaf(t, h.secret(ns, "orders-primary-tls"), "orders-rw.renewal.svc")
}
