package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shale-rocks/shale/internal/pki"
)

// clientCert issues a client certificate naming id and parses it.
func clientCert(t *testing.T, ca *pki.CA, id Identity) *x509.Certificate {
	t.Helper()
	certPEM, _, err := ca.Issue(pki.Leaf{CommonName: id.Client, URIs: []*url.URL{id.URI()}, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// peerWith is a call's context on a connection whose verified client
// certificate is c.
func peerWith(c *x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}}})
}

func cachedIDs(g *Guard) int {
	n := 0
	g.certIDs.Range(func(any, any) bool { n++; return true })
	return n
}

// The guard reads a connection's certificate once: later calls of the
// connection get the same identity from the cache, another connection's
// certificate its own, and an entry goes with its certificate (the
// connection closed), so the cache holds live connections only.
func TestGuardCachesCertificateIdentity(t *testing.T) {
	caPEM, keyPEM, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	reader := Identity{Namespace: "ns", Kind: KindClient, Name: "orders", Client: "reader", Via: "certificate"}
	writer := Identity{Namespace: "ns", Kind: KindClient, Name: "orders", Client: "writer", Via: "certificate"}
	g := &Guard{Self: Identity{Namespace: "ns", Kind: KindPrimary, Name: "orders"}}
	rc, wc := clientCert(t, ca, reader), clientCert(t, ca, writer)
	for i := 0; i < 3; i++ {
		for _, c := range []struct {
			cert *x509.Certificate
			want Identity
		}{{rc, reader}, {wc, writer}} {
			id, err := g.Identify(peerWith(c.cert))
			if err != nil || id != c.want {
				t.Fatalf("call %d: identity %v, %v; want %v", i, id, err, c.want)
			}
		}
	}
	if n := cachedIDs(g); n != 2 {
		t.Fatalf("%d cached identities after calls on 2 connections, want 2", n)
	}
	runtime.KeepAlive(rc)
	runtime.KeepAlive(wc)
	rc, wc = nil, nil
	for i := 0; i < 10000 && cachedIDs(g) > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := cachedIDs(g); n != 0 {
		t.Fatalf("%d cached identities after their certificates were collected, want 0", n)
	}
}
