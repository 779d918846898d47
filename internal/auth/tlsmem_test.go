package auth

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/pki"
)

// An identity held in memory (the operator's own) authenticates like one
// read from files, and SetPEM replaces it for the next connection.
func TestTLSFromPEM(t *testing.T) {
	ca, caPEM := newCA(t)
	server := certDir(t, ca, caPEM, Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"})
	addr := guardedServer(t, server, "")
	issue := func(id Identity) (certPEM, keyPEM []byte) {
		t.Helper()
		c, k, err := ca.Issue(pki.Leaf{CommonName: string(id.Kind), URIs: []*url.URL{id.URI()}, Client: true, Validity: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	dialMem := func(m *TLS) kvv1.KVClient {
		t.Helper()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(m.ClientCredentials("localhost")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return kvv1.NewKVClient(conn)
	}

	// A client of another database has no role here; the operator reads
	// Status (and nothing else).
	c, k := issue(Identity{Namespace: "ns", Kind: KindClient, Name: "other", Client: "app"})
	m, err := NewTLSFromPEM(c, k, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(dialMem(m)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("client of another database: %v, want PermissionDenied", err)
	}
	oc, ok := issue(Identity{Namespace: "operators", Kind: KindOperator})
	if err := m.SetPEM(oc, ok, caPEM); err != nil {
		t.Fatal(err)
	}
	// The stub serves no Status: Unimplemented means the guard let it through.
	if _, err := dialMem(m).Status(context.Background(), &kvv1.StatusRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("operator's Status after SetPEM: %v, want it past the guard", err)
	}
	if err := get(dialMem(m)); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator's Get: %v, want PermissionDenied (Status, SetTiering, StepDown and the checkpoint methods only)", err)
	}
	if id, err := m.Identity(); err != nil || id.Kind != KindOperator {
		t.Errorf("Identity() = %v, %v", id, err)
	}

	// Without a certificate it still verifies the server.
	anon, err := NewTLSFromPEM(nil, nil, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(dialMem(anon)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no certificate: %v, want Unauthenticated", err)
	}

	// Bad input is refused with the reason, and a file identity cannot be
	// overwritten from memory.
	if _, err := NewTLSFromPEM(c, k, []byte("x")); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Errorf("no CA: %v", err)
	}
	if _, err := NewTLSFromPEM(c, nil, caPEM); err == nil || !strings.Contains(err.Error(), "certificate and key") {
		t.Errorf("no key: %v", err)
	}
	files, err := LoadTLS(server)
	if err != nil {
		t.Fatal(err)
	}
	if err := files.SetPEM(c, k, caPEM); err == nil {
		t.Error("SetPEM on a file identity succeeded")
	}
}
