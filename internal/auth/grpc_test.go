package auth

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/pki"
)

// certDir issues a certificate for id from ca into a new directory and
// returns its TLSFiles.
func certDir(t *testing.T, ca *pki.CA, caPEM []byte, id Identity, extraURIs ...string) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	writeCert(t, ca, caPEM, dir, id, extraURIs...)
	return TLSFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
}

func writeCert(t *testing.T, ca *pki.CA, caPEM []byte, dir string, id Identity, extraURIs ...string) {
	t.Helper()
	uris := []*url.URL{id.URI()}
	for _, u := range extraURIs {
		uris = append(uris, mustURL(u))
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{CommonName: string(id.Kind), URIs: uris, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Written the way kubelet updates a mounted Secret: new files, then
	// an atomic rename over the old names.
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": caPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

type kvStub struct{ kvv1.UnimplementedKVServer }

func (kvStub) Get(ctx context.Context, _ *kvv1.GetRequest) (*kvv1.GetResponse, error) {
	id, _ := FromContext(ctx)
	_ = id
	return &kvv1.GetResponse{Value: []byte(id.String())}, nil
}

// guardedServer serves health and a KV stub behind a Guard; the guard's
// refusals come before the stub, whose Unimplemented answers mean "let through".
func guardedServer(t *testing.T, files TLSFiles, access string) string {
	t.Helper()
	sec, err := Secure(ServerConfig{TLS: files, AccessFile: access}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(sec.ServerOption(), grpc.ChainUnaryInterceptor(sec.UnaryInterceptors()...), grpc.ChainStreamInterceptor(sec.StreamInterceptors()...))
	kvv1.RegisterKVServer(s, kvStub{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string, cfg ClientConfig) kvv1.KVClient {
	t.Helper()
	return kvv1.NewKVClient(connOf(t, addr, cfg))
}

func newCA(t *testing.T) (*pki.CA, []byte) {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca, certPEM
}

func TestGuardOverTLS(t *testing.T) {
	ca, caPEM := newCA(t)
	server := certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, "s3://b/ns/db")
	accessPath := filepath.Join(t.TempDir(), "access.json")
	os.WriteFile(accessPath, []byte(`{"clients":[{"name":"app","role":"write","tokenSHA256s":["`+TokenDigest("tok-app")+`"]},{"name":"ro","role":"read"}]}`), 0o600)
	addr := guardedServer(t, server, accessPath)
	ctx := context.Background()

	caOnly := TLSFiles{CA: server.CA}
	tokenPath := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenPath, []byte("tok-app\n"), 0o600)
	badToken := filepath.Join(t.TempDir(), "token")
	os.WriteFile(badToken, []byte("guess"), 0o600)
	for _, tc := range []struct {
		name    string
		cfg     ClientConfig
		method  func(kvv1.KVClient) error
		code    codes.Code
		message string
	}{
		{"no identity reads", ClientConfig{TLS: caOnly}, get, codes.Unauthenticated, "no client certificate"},
		{"wrong token", ClientConfig{TLS: caOnly, TokenFile: badToken}, get, codes.Unauthenticated, "not recognised"},
		{"token client writes", ClientConfig{TLS: caOnly, TokenFile: tokenPath}, put, codes.Unimplemented, ""},
		{"token client flushes", ClientConfig{TLS: caOnly, TokenFile: tokenPath}, flush, codes.PermissionDenied, "needs role admin"},
		{"read client reads", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "ro"})}, get, codes.OK, ""},
		{"read client writes", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "ro"})}, put, codes.PermissionDenied, "needs role write"},
		{"unlisted client", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "eve"})}, get, codes.PermissionDenied, "has role none"},
		{"client of another database", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "other", Client: "app"})}, get, codes.PermissionDenied, ""},
		{"secondary watches", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})}, watch, codes.Unimplemented, ""},
		{"secondary writes", ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})}, put, codes.PermissionDenied, ""},
		{"anyone checks health", ClientConfig{TLS: caOnly}, nil, codes.OK, ""},
	} {
		kv := dial(t, addr, tc.cfg)
		var err error
		if tc.method == nil {
			_, err = healthpb.NewHealthClient(connOf(t, addr, tc.cfg)).Check(ctx, &healthpb.HealthCheckRequest{})
		} else {
			err = tc.method(kv)
		}
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.message) {
			t.Errorf("%s: %v, want %s containing %q", tc.name, err, tc.code, tc.message)
		}
	}

	// A certificate from another CA does not get through the handshake.
	other, otherPEM := newCA(t)
	stranger := certDir(t, other, otherPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"})
	stranger.CA = server.CA
	if err := get(dial(t, addr, ClientConfig{TLS: stranger})); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Unauthenticated {
		t.Errorf("certificate of another CA: %v", err)
	}

	// Plaintext clients cannot talk to a TLS server, and a token is never
	// sent in the clear.
	if err := get(dial(t, addr, ClientConfig{})); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext client: %v", err)
	}
	if _, err := (ClientConfig{TokenFile: tokenPath}).DialOptions(); err == nil || !strings.Contains(err.Error(), "needs TLS") {
		t.Errorf("token without TLS: %v", err)
	}
}

func TestAccessFileRevokesWithoutRestart(t *testing.T) {
	ca, caPEM := newCA(t)
	server := certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})
	accessPath := filepath.Join(t.TempDir(), "access.json")
	os.WriteFile(accessPath, []byte(`{"clients":[{"name":"app","role":"read"}]}`), 0o600)
	addr := guardedServer(t, server, accessPath)
	kv := dial(t, addr, ClientConfig{TLS: certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"})})
	if err := get(kv); err != nil {
		t.Fatalf("listed client: %v", err)
	}
	tmp := accessPath + ".new"
	os.WriteFile(tmp, []byte(`{"clients":[]}`), 0o600)
	os.Rename(tmp, accessPath)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := get(kv)
		if status.Code(err) == codes.PermissionDenied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client still served 30 s after its removal: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCertificateRotationKeepsConnections(t *testing.T) {
	ca, caPEM := newCA(t)
	server := certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})
	accessPath := filepath.Join(t.TempDir(), "access.json")
	os.WriteFile(accessPath, []byte(`{"clients":[{"name":"app","role":"read"}]}`), 0o600)
	addr := guardedServer(t, server, accessPath)
	clientFiles := certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"})
	cfg := ClientConfig{TLS: clientFiles}
	old := connOf(t, addr, cfg)
	oldKV := kvv1.NewKVClient(old)
	first := serverSerial(t, oldKV)

	// Rotate the server's certificate: a new connection gets the new one,
	// the open one goes on working.
	writeCert(t, ca, caPEM, filepath.Dir(server.Cert), Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s := serverSerial(t, kvv1.NewKVClient(connOf(t, addr, cfg))); s != first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new connections still get the old certificate 30 s after rotation")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := get(oldKV); err != nil {
		t.Fatalf("connection opened before the rotation failed: %v", err)
	}

	// Rotate the client's certificate too: its next connection presents it.
	writeCert(t, ca, caPEM, filepath.Dir(clientFiles.Cert), Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"})
	if err := get(kvv1.NewKVClient(connOf(t, addr, cfg))); err != nil {
		t.Fatalf("client with a rotated certificate: %v", err)
	}
}

func connOf(t *testing.T, addr string, cfg ClientConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := cfg.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serverSerial makes a call and returns the serial of the certificate
// the server presented on that connection.
func serverSerial(t *testing.T, kv kvv1.KVClient) string {
	t.Helper()
	var p peer.Peer
	if _, err := kv.Get(context.Background(), &kvv1.GetRequest{}, grpc.Peer(&p)); err != nil {
		t.Fatal(err)
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 || ti.State.Version != tls.VersionTLS13 {
		t.Fatalf("no TLS 1.3 peer certificate: %+v", p.AuthInfo)
	}
	return ti.State.PeerCertificates[0].SerialNumber.String()
}

func get(kv kvv1.KVClient) error {
	_, err := kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte("k")})
	return err
}

func put(kv kvv1.KVClient) error {
	_, err := kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("k")})
	return err
}

func flush(kv kvv1.KVClient) error {
	_, err := kv.Flush(context.Background(), &kvv1.FlushRequest{})
	return err
}

func watch(kv kvv1.KVClient) error {
	s, err := kv.Watch(context.Background(), &kvv1.WatchRequest{})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}
