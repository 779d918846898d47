package kvserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/pki"
)

// testPKI is a CA in a directory, issuing certificates into files.
type testPKI struct {
	t   *testing.T
	dir string
	ca  *pki.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	p.write("ca.crt", certPEM)
	return p
}

func (p *testPKI) write(name string, b []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue makes a certificate for id (a server's names localhost and
// 127.0.0.1) and returns its files.
func (p *testPKI) issue(name string, id auth.Identity) auth.TLSFiles {
	p.t.Helper()
	server := id.Kind == auth.KindPrimary || id.Kind == auth.KindSecondary
	l := pki.Leaf{CommonName: name, URIs: []*url.URL{id.URI()}, Server: server, Client: true, Validity: time.Hour}
	if id.Kind == auth.KindPrimary {
		l.URIs = append(l.URIs, &url.URL{Scheme: "file", Path: "/db/" + id.Name})
	}
	if server {
		l.DNSNames, l.IPs = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	c, k, err := p.ca.Issue(l, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	return auth.TLSFiles{Cert: p.write(name+".crt", c), Key: p.write(name+".key", k), CA: filepath.Join(p.dir, "ca.crt")}
}

func (p *testPKI) caOnly() auth.TLSFiles { return auth.TLSFiles{CA: filepath.Join(p.dir, "ca.crt")} }

// Identities of database ns/orders and its neighbours.
var (
	ordersPrimary   = auth.Identity{Namespace: "ns", Kind: auth.KindPrimary, Name: "orders"}
	ordersSecondary = auth.Identity{Namespace: "ns", Kind: auth.KindSecondary, Name: "orders"}
	ordersReader    = auth.Identity{Namespace: "ns", Kind: auth.KindClient, Name: "orders", Client: "reader"}
	ordersWriter    = auth.Identity{Namespace: "ns", Kind: auth.KindClient, Name: "orders", Client: "writer"}
	ordersAdmin     = auth.Identity{Namespace: "ns", Kind: auth.KindClient, Name: "orders", Client: "admin"}
	// Same CA, same client name, another database.
	usersWriter = auth.Identity{Namespace: "ns", Kind: auth.KindClient, Name: "users", Client: "writer"}
)

const testToken = "s3cret-token-of-the-tokens-client"

var testAccess = `{"clients": [
  {"name": "reader", "role": "read"},
  {"name": "writer", "role": "write"},
  {"name": "admin", "role": "admin"},
  {"name": "tokens", "role": "write", "tokenSHA256s": ["` + auth.TokenDigest(testToken) + `"]}
]}`

// served is a KV endpoint over a real RocksDB.
type served struct {
	ep  *Endpoint
	reg *prometheus.Registry
}

// serve starts an endpoint on listen with sec (nil: plaintext).
func serve(t *testing.T, listen string, sec *auth.Secured) *served {
	t.Helper()
	return serveInfo(t, listen, sec, func(*engine.DB) Info { return Info{Role: kvv1.Role_ROLE_PRIMARY, DB: "file:///db/orders"} })
}

// serveInfo is serve with the Info info gives for the database.
func serveInfo(t *testing.T, listen string, sec *auth.Secured, info func(*engine.DB) Info) *served {
	t.Helper()
	db, err := engine.Open(t.TempDir(), engine.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ep, err := Listen(listen, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ep.Serve(New(db, DefaultLimits(), info(db)), reg, DefaultLimits(), sec,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { ep.Stop(time.Second); db.Close() })
	return &served{ep: ep, reg: reg}
}

// serveSecured starts a TLS endpoint as ns/orders's primary with
// testAccess as its access file (at the returned path).
func serveSecured(t *testing.T, p *testPKI) (*served, string) {
	t.Helper()
	access := p.write("access.json", []byte(testAccess))
	sec, err := Secure(auth.ServerConfig{TLS: p.issue("primary", ordersPrimary), AccessFile: access}, "127.0.0.1:0", auth.KindPrimary, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, "127.0.0.1:0", sec), access
}

func connect(t *testing.T, addr string, c auth.ClientConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := c.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func put(kv kvv1.KVClient) error {
	_, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v")})
	return err
}

func get(kv kvv1.KVClient) error {
	_, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte("k")})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

func flush(kv kvv1.KVClient) error {
	_, err := kv.Flush(context.Background(), &kvv1.FlushRequest{})
	return err
}

// Who may do what on a secured KV server: no identity is
// UNAUTHENTICATED, a role too weak is PERMISSION_DENIED naming the role
// needed, a certificate of another database (same CA) is worth nothing,
// and health needs no identity.
func TestGuardedEndpoint(t *testing.T) {
	p := newTestPKI(t)
	s, _ := serveSecured(t, p)
	addr := s.ep.Addr()
	tokenFile := p.write("token", []byte(testToken+"\n"))
	wrongToken := p.write("wrong-token", []byte("not-a-token\n"))
	for _, tc := range []struct {
		name   string
		client auth.ClientConfig
		call   func(kvv1.KVClient) error
		code   codes.Code
		msg    string // in the error's message
	}{
		{"no certificate, no token: get", auth.ClientConfig{TLS: p.caOnly()}, get, codes.Unauthenticated, "no client certificate and no bearer token"},
		{"no certificate, no token: put", auth.ClientConfig{TLS: p.caOnly()}, put, codes.Unauthenticated, "no client certificate and no bearer token"},
		{"unknown token", auth.ClientConfig{TLS: p.caOnly(), TokenFile: wrongToken}, get, codes.Unauthenticated, "bearer token not recognised"},
		{"reader gets", auth.ClientConfig{TLS: p.issue("reader", ordersReader)}, get, codes.OK, ""},
		{"reader cannot put", auth.ClientConfig{TLS: p.issue("reader", ordersReader)}, put, codes.PermissionDenied, "Put needs role write"},
		{"writer puts", auth.ClientConfig{TLS: p.issue("writer", ordersWriter)}, put, codes.OK, ""},
		{"writer cannot flush", auth.ClientConfig{TLS: p.issue("writer", ordersWriter)}, flush, codes.PermissionDenied, "Flush needs role admin"},
		{"admin flushes", auth.ClientConfig{TLS: p.issue("admin", ordersAdmin)}, flush, codes.OK, ""},
		{"token client puts", auth.ClientConfig{TLS: p.caOnly(), TokenFile: tokenFile}, put, codes.OK, ""},
		{"token client cannot flush", auth.ClientConfig{TLS: p.caOnly(), TokenFile: tokenFile}, flush, codes.PermissionDenied, "Flush needs role admin"},
		{"secondary of the database reads", auth.ClientConfig{TLS: p.issue("secondary", ordersSecondary)}, get, codes.OK, ""},
		{"secondary of the database cannot put", auth.ClientConfig{TLS: p.issue("secondary", ordersSecondary)}, put, codes.PermissionDenied, "needs role write"},
		{"writer of another database, same CA", auth.ClientConfig{TLS: p.issue("users-writer", usersWriter)}, get, codes.PermissionDenied, "has role none; Get needs role read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(kvv1.NewKVClient(connect(t, addr, tc.client)))
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v; want %s with %q", err, tc.code, tc.msg)
			}
		})
	}
	// Health needs no identity (readiness probes), only the CA.
	r, err := healthpb.NewHealthClient(connect(t, addr, auth.ClientConfig{TLS: p.caOnly()})).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without an identity: %v %v", r, err)
	}
	// A plaintext client gets nothing, not even health.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := get(kvv1.NewKVClient(conn)); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client: %v", err)
	}
	// A token is never sent in the clear: refused before dialling.
	if _, err := (auth.ClientConfig{TokenFile: tokenFile}).DialOptions(); err == nil || !strings.Contains(err.Error(), "--token-file needs TLS") {
		t.Fatalf("token over plaintext: %v", err)
	}
}

// Refused calls are counted like any other (the guard runs after the
// metrics interceptor): an attack shows on the dashboards.
func TestRefusedCallsCounted(t *testing.T) {
	p := newTestPKI(t)
	s, _ := serveSecured(t, p)
	put(kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.caOnly()})))
	put(kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue("reader", ordersReader)})))
	for _, code := range []string{"Unauthenticated", "PermissionDenied"} {
		if n := handled(t, s.reg, "Put", code); n != 1 {
			t.Errorf("grpc_server_handled_total{grpc_method=Put,grpc_code=%s} = %v, want 1", code, n)
		}
	}
}

func handled(t *testing.T, reg *prometheus.Registry, method, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.Metric {
			if label(m, "grpc_method") == method && label(m, "grpc_code") == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// A client removed from the access file is refused once the file
// changes, without a restart; a token removed likewise.
func TestAccessFileChangeRevokes(t *testing.T) {
	p := newTestPKI(t)
	s, access := serveSecured(t, p)
	writer := kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue("writer", ordersWriter)}))
	tokens := kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.caOnly(), TokenFile: p.write("token", []byte(testToken))}))
	for _, kv := range []kvv1.KVClient{writer, tokens} {
		if err := put(kv); err != nil {
			t.Fatalf("before the change: %v", err)
		}
	}
	// As kubelet updates a mounted Secret: a new file swapped in.
	tmp := access + ".new"
	if err := os.WriteFile(tmp, []byte(`{"clients": [{"name": "reader", "role": "read"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, access); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the writer refused", func() bool { return status.Code(put(writer)) == codes.PermissionDenied })
	waitFor(t, "the token refused", func() bool { return status.Code(put(tokens)) == codes.Unauthenticated })
}

// waitFor polls cond (the access file is re-read at most once a second).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Reflection describes the API: a secured server gives it to admin
// clients only; a plaintext one serves it only on loopback (shale dev),
// never on an address others reach.
func TestReflection(t *testing.T) {
	list := func(conn *grpc.ClientConn) error {
		st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err != nil {
			return err
		}
		if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		// On io.EOF the server already ended the stream (a refusal comes
		// before it reads anything): Recv returns its status.
		r, err := st.Recv()
		if err != nil {
			return err
		}
		for _, s := range r.GetListServicesResponse().GetService() {
			if s.Name == "shale.kv.v1.KV" {
				return nil
			}
		}
		t.Errorf("reflection lists %v, not shale.kv.v1.KV", r)
		return nil
	}
	p := newTestPKI(t)
	s, _ := serveSecured(t, p)
	if err := list(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue("reader", ordersReader)})); status.Code(err) != codes.PermissionDenied ||
		!strings.Contains(err.Error(), "needs role admin") {
		t.Errorf("reflection for a read client: %v; want PermissionDenied naming admin", err)
	}
	if err := list(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue("admin", ordersAdmin)})); err != nil {
		t.Errorf("reflection for an admin client: %v", err)
	}

	plain := insecure.NewCredentials()
	loop := serve(t, "127.0.0.1:0", nil)
	conn, err := grpc.NewClient(loop.ep.Addr(), grpc.WithTransportCredentials(plain))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := list(conn); err != nil {
		t.Errorf("reflection on a loopback plaintext listener: %v", err)
	}

	// --insecure on all interfaces: dialled here through loopback.
	open := serve(t, "0.0.0.0:0", nil)
	_, port, _ := net.SplitHostPort(open.ep.Addr())
	conn2, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(plain))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if err := list(conn2); status.Code(err) != codes.Unimplemented {
		t.Errorf("reflection on a plaintext listener others reach: %v; want Unimplemented", err)
	}
	if err := get(kvv1.NewKVClient(conn2)); err != nil {
		t.Errorf("KV on the insecure listener: %v", err)
	}
}

func TestServeReflection(t *testing.T) {
	for _, tc := range []struct {
		secured bool
		addr    string
		want    bool
	}{
		{true, "0.0.0.0:7070", true}, // the guard asks for admin
		{true, "127.0.0.1:7070", true},
		{false, "127.0.0.1:7070", true}, // shale dev
		{false, "[::1]:7070", true},
		{false, "0.0.0.0:7070", false}, // --insecure
		{false, "[::]:7070", false},
		{false, "10.1.2.3:7070", false},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := serveReflection(tc.secured, a); got != tc.want {
			t.Errorf("serveReflection(%v, %s) = %v, want %v", tc.secured, tc.addr, got, tc.want)
		}
	}
}

// A KV server's certificate must be issued to a server of its kind, and a
// plaintext listener others can reach needs Insecure.
func TestSecureRefusals(t *testing.T) {
	p := newTestPKI(t)
	for _, tc := range []struct {
		name   string
		cfg    auth.ServerConfig
		listen string
		kind   auth.Kind
		want   string
	}{
		{"plaintext on all interfaces", auth.ServerConfig{}, ":7070", auth.KindPrimary, "--listen :7070 is reachable from other machines but has no TLS"},
		{"a client's certificate", auth.ServerConfig{TLS: p.issue("writer", ordersWriter)}, ":7070", auth.KindPrimary, "is issued to shale://ns/client/orders/writer, not to a primary"},
		{"a primary's certificate on a secondary", auth.ServerConfig{TLS: p.issue("primary", ordersPrimary)}, ":7070", auth.KindSecondary, "not to a secondary"},
		{"access file without TLS", auth.ServerConfig{AccessFile: "/x"}, "127.0.0.1:7070", auth.KindPrimary, "--access-file needs TLS"},
	} {
		if _, err := Secure(tc.cfg, tc.listen, tc.kind, slog.Default()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
	for _, ok := range []struct {
		cfg    auth.ServerConfig
		listen string
	}{
		{auth.ServerConfig{}, "127.0.0.1:0"},
		{auth.ServerConfig{Insecure: true}, ":7070"},
	} {
		if sec, err := Secure(ok.cfg, ok.listen, auth.KindPrimary, slog.Default()); err != nil || sec != nil {
			t.Errorf("plaintext %+v on %s: %v %v", ok.cfg, ok.listen, sec, err)
		}
	}
}

// The hot unary methods, served by handlers of their own, are counted
// under their names like every other method, and answer as the service
// does (a missing key is NOT_FOUND, counted so).
func TestHotMethodsCounted(t *testing.T) {
	s := serve(t, "127.0.0.1:0", nil)
	kv := kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{}))
	ctx := context.Background()
	if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if r, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte("k")}); err != nil || string(r.Value) != "v" {
		t.Fatalf("get: %v %v", r, err)
	}
	if _, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte("missing")}); status.Code(err) != codes.NotFound || status.Convert(err).Message() != `key "missing" not found` {
		t.Fatalf("get of a missing key: %v", err)
	}
	if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte("w"), Value: []byte("x")}}}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := kv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: [][]byte{[]byte("k"), []byte("w")}}); err != nil || len(r.Results) != 2 || !r.Results[1].Found {
		t.Fatalf("multiget: %v %v", r, err)
	}
	if _, err := kv.Delete(ctx, &kvv1.DeleteRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, code string
		n            float64
	}{{"Put", "OK", 1}, {"Get", "OK", 1}, {"Get", "NotFound", 1}, {"Write", "OK", 1}, {"MultiGet", "OK", 1}, {"Delete", "OK", 1}} {
		if n := handled(t, s.reg, c.method, c.code); n != c.n {
			t.Errorf("grpc_server_handled_total{grpc_method=%s,grpc_code=%s} = %v, want %v", c.method, c.code, n, c.n)
		}
	}
}
