package kubectlshale

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/pki"
)

// memKV stands in for a Shale server behind the port-forward (envtest has
// no kubelet to forward to): a map, over real TLS that wants a client
// certificate from the database's CA.
type memKV struct {
	kvv1.UnimplementedKVServer
	mu sync.Mutex
	m  map[string]string
}

func (s *memKV) Get(_ context.Context, r *kvv1.GetRequest) (*kvv1.GetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(r.Key)]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	return &kvv1.GetResponse{Value: []byte(v)}, nil
}

func (s *memKV) Put(_ context.Context, r *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[string(r.Key)] = string(r.Value)
	return &kvv1.PutResponse{}, nil
}

func (s *memKV) Delete(_ context.Context, r *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, string(r.Key))
	return &kvv1.DeleteResponse{}, nil
}

func (s *memKV) Scan(r *kvv1.ScanRequest, stream grpc.ServerStreamingServer[kvv1.ScanResponse]) error {
	s.mu.Lock()
	var keys []string
	for k := range s.m {
		if strings.HasPrefix(k, string(r.Prefix)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var resp kvv1.ScanResponse
	for _, k := range keys {
		resp.Pairs = append(resp.Pairs, &kvv1.KeyValue{Key: []byte(k), Value: []byte(s.m[k])})
	}
	s.mu.Unlock()
	return stream.Send(&resp)
}

// TestKV: kubectl shale kv finds the primary's (or a ready secondary's)
// Pod and KV port, connects with the client Secret's certificate (the
// server verifies it against the database's CA and is verified as
// NAME-rw.NS.svc), and prints what shale kv prints; bad input and missing
// pieces get errors that say what to do.
func TestKV(t *testing.T) {
	const ns = "kv"
	env, db := sampleDB(t, ns, nil)
	ctx := context.Background()
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	db.Status = shalev1.RocksDBStatus{Phase: shalev1.PhaseReady, Epoch: 2, CurrentPrimary: db.PrimaryPodName(2)}
	must(c.Status().Update(ctx, db))

	// The database's CA, the primary's certificate, the client's Secret.
	now := time.Now()
	caPEM, caKey, err := pki.NewCA("test", now.Add(-time.Hour), 24*time.Hour)
	must(err)
	ca, err := pki.LoadCA(caPEM, caKey)
	must(err)
	srvCert, srvKey, err := ca.Issue(pki.Leaf{DNSNames: []string{db.ServiceName() + "." + ns + ".svc", db.ReadOnlyServiceName() + "." + ns + ".svc"}, Server: true, Validity: time.Hour}, now)
	must(err)
	id, _ := url.Parse("shale://" + ns + "/client/" + db.Name + "/app")
	cliCert, cliKey, err := ca.Issue(pki.Leaf{URIs: []*url.URL{id}, Client: true, Validity: time.Hour}, now)
	must(err)
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	must(err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	store := &memKV{m: map[string]string{}}
	// A verified client certificate, or else the client's token.
	const token = "tok-of-app"
	authn := func(ctx context.Context) error {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
				return nil
			}
		}
		if md, _ := metadata.FromIncomingContext(ctx); slices.Contains(md.Get("authorization"), "Bearer "+token) {
			return nil
		}
		return status.Error(codes.Unauthenticated, "the server requires authentication")
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS13})),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := authn(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := authn(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}))
	kvv1.RegisterKVServer(srv, store)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	var forwarded []string
	run := func(args ...string) (string, error) {
		cmd := NewCommand(func() (Target, error) {
			return Target{Config: env.Config, Namespace: ns, Forward: func(_ context.Context, pod *corev1.Pod, port int32) (string, func(), error) {
				forwarded = append(forwarded, pod.Name+":"+itoa(port))
				return lis.Addr().String(), func() {}, nil
			}}, nil
		})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	wantErr := func(want string, args ...string) {
		t.Helper()
		if _, got := run(args...); got == nil || !strings.Contains(got.Error(), want) {
			t.Errorf("%v: error %v, want one containing %q", args, got, want)
		}
	}

	// Bad input, before anything is read.
	wantErr(`unknown kv command "frob"`, "kv", db.Name, "--", "frob", "x")
	wantErr("kv get wants KEY, got 0 argument(s)", "kv", db.Name, "--", "get")
	wantErr("kv put wants KEY VALUE, got 1 argument(s)", "kv", db.Name, "--", "put", "k")
	wantErr("--prefix or --start/--end, not both", "kv", db.Name, "--", "scan", "--prefix", "a", "--start", "b")
	wantErr("a secondary serves reads only", "kv", db.Name, "--secondary", "--", "put", "k", "v")
	// No primary Pod, not Running, no Secret.
	wantErr("the primary Pod "+db.PrimaryPodName(2)+" of "+db.Name, "kv", db.Name, "--", "get", "k")
	primary := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.PrimaryPodName(2), Labels: db.PrimaryLabels(2)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "shale:test", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}, {Name: "grpc", ContainerPort: 7070}}}}}}
	must(c.Create(ctx, primary))
	wantErr("is Pending, not Running", "kv", db.Name, "--", "get", "k")
	primary.Status.Phase = corev1.PodRunning
	must(c.Status().Update(ctx, primary))
	wantErr("client Secret "+db.Name+"-client-app in namespace kv", "kv", db.Name, "--", "get", "k")
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-client-app"},
		Data: map[string][]byte{"ca.crt": caPEM, "tls.crt": cliCert, "tls.key": cliKey}}))
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-a-client"}, Data: map[string][]byte{"x": []byte("y")}}))
	wantErr("Secret not-a-client has no ca.crt", "kv", db.Name, "--client-secret", "not-a-client", "--", "get", "k")

	// The commands, through the primary's KV port.
	forwarded = nil
	for _, step := range []struct {
		args []string
		out  string
	}{
		{[]string{"put", "user/1", "ada"}, ""},
		{[]string{"put", "user/2", "grace"}, ""},
		{[]string{"put", "other", "x"}, ""},
		{[]string{"get", "user/1"}, "ada\n"},
		{[]string{"scan", "--prefix", "user/"}, "user/1\tada\nuser/2\tgrace\n"},
		{[]string{"scan", "--prefix", "user/", "--keys-only"}, "user/1\nuser/2\n"},
		{[]string{"delete", "user/1"}, ""},
	} {
		out, err := run(append([]string{"kv", db.Name, "--"}, step.args...)...)
		if err != nil || out != step.out {
			t.Errorf("kv %v: output %q, error %v; want %q", step.args, out, err, step.out)
		}
	}
	if store.m["user/2"] != "grace" {
		t.Errorf("the store holds %v after the puts", store.m)
	}
	wantErr(`key "user/1" not found`, "kv", db.Name, "--", "get", "user/1")
	if len(forwarded) == 0 || forwarded[0] != db.PrimaryPodName(2)+":7070" {
		t.Errorf("forwarded to %v, want the primary's KV port %s:7070", forwarded, db.PrimaryPodName(2))
	}

	// A secondary: only a ready one, on its own KV port.
	wantErr("has no ready secondary", "kv", db.Name, "--secondary", "--", "get", "user/2")
	sec := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: db.Name + "-secondary-x", Labels: db.SecondaryLabels()},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "shale", Image: "shale:test", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 7071}}}}}}
	must(c.Create(ctx, sec))
	sec.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	must(c.Status().Update(ctx, sec))
	forwarded = nil
	out, err := run("kv", db.Name, "--read-only", "--", "get", "user/2")
	if err != nil || out != "grace\n" || len(forwarded) != 1 || forwarded[0] != sec.Name+":7071" {
		t.Errorf("kv --read-only get: output %q, error %v, forwarded to %v; want grace from %s:7071", out, err, forwarded, sec.Name)
	}

	// A certificate the server does not trust is refused (the client
	// really presents the Secret's).
	other, otherKey, err := pki.NewCA("other", now.Add(-time.Hour), 24*time.Hour)
	must(err)
	oca, err := pki.LoadCA(other, otherKey)
	must(err)
	badCert, badKey, err := oca.Issue(pki.Leaf{URIs: []*url.URL{id}, Client: true, Validity: time.Hour}, now)
	must(err)
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"},
		Data: map[string][]byte{"ca.crt": caPEM, "tls.crt": badCert, "tls.key": badKey}}))
	if _, err := run("kv", db.Name, "--client-secret", "foreign", "--timeout", "5s", "--", "get", "user/2"); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}

	// A Secret with no certificate (cert-manager's before it issued one):
	// the token, over TLS; with neither, a clear refusal.
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "token-only"},
		Data: map[string][]byte{"ca.crt": caPEM, "token": []byte(token + "\n")}}))
	out, err = run("kv", db.Name, "--client-secret", "token-only", "--", "scan")
	if err != nil || out != "other\tx\nuser/2\tgrace\n" {
		t.Errorf("kv scan with a token: %q, %v", out, err)
	}
	must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca-only"}, Data: map[string][]byte{"ca.crt": caPEM}}))
	wantErr("Secret ca-only has neither tls.crt and tls.key nor token", "kv", db.Name, "--client-secret", "ca-only", "--", "get", "k")

	// Several clients: which one must be said.
	must(c.Get(ctx, client.ObjectKeyFromObject(db), db))
	db.Spec.Clients = append(db.Spec.Clients, shalev1.ClientSpec{Name: "reader", Role: "read"})
	must(c.Update(ctx, db))
	wantErr("has 2 clients: app (write), reader (read); choose one with --client", "kv", db.Name, "--", "get", "user/2")
	out, err = run("kv", db.Name, "--client", "app", "--", "get", "user/2")
	if err != nil || out != "grace\n" {
		t.Errorf("kv --client app get: %q, %v", out, err)
	}
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
