package operator

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/pki"
)

func testCA(t *testing.T, now time.Time) *pki.CA {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test", now, 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// When a Secret's certificate is issued again: pki.Renewal's reasons, a
// key that is not the certificate's, and a renewal the owner's annotation
// asks for, once per value.
func TestRenewalDecision(t *testing.T) {
	now := time.Now()
	ca, other := testCA(t, now), testCA(t, now)
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod"}}
	leaf := secondaryLeaf(db, "cluster.local", 3*time.Hour)
	data := func(c *pki.CA, l pki.Leaf) map[string][]byte {
		certPEM, keyPEM, err := c.Issue(l, now)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{keyTLSCert: certPEM, keyTLSKey: keyPEM}
	}
	fresh := data(ca, leaf)
	swapped := map[string][]byte{keyTLSCert: fresh[keyTLSCert], keyTLSKey: data(ca, leaf)[keyTLSKey]}
	for _, tc := range []struct {
		name                  string
		data                  map[string][]byte
		renewedFor, requested string
		at                    time.Time
		want                  string // "" keep; else a part of the reason
	}{
		{"fresh", fresh, "", "", now, ""},
		{"missing", map[string][]byte{}, "", "", now, "no certificate"},
		{"due", fresh, "", "", now.Add(2 * time.Hour), "due for renewal"},
		{"another CA", data(other, leaf), "", "", now, "not signed by the current CA"},
		{"other names", data(ca, secondaryLeaf(&shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "test"}}, "cluster.local", 3*time.Hour)), "", "", now, "changed"},
		{"key of another certificate", swapped, "", "", now, "the key does not match"},
		{"requested", fresh, "", "2026-11-25", now, "renewal requested (shale.rocks/renew-certificates: 2026-11-25)"},
		{"requested again", fresh, "2026-11-25", "2026-11-26", now, "renewal requested"},
		{"request handled", fresh, "2026-11-25", "2026-11-25", now, ""},
		{"request removed", fresh, "2026-11-25", "", now, ""},
	} {
		got := renewal(tc.data, tc.renewedFor, ca, leaf, tc.requested, tc.at)
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: renewal %q, want %q", tc.name, got, tc.want)
		}
	}
}

// What each certificate names and may do.
func TestLeaves(t *testing.T) {
	now := time.Now()
	ca := testCA(t, now)
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod"}}
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "prod"}}
	primary, err := primaryLeaf(db, "s3://data/dbs/prod/orders-0a1b", "example.org", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		leaf     pki.Leaf
		id       auth.Identity
		dns      []string
		server   bool
		verifyAs string
	}{
		{"primary", primary, auth.Identity{Namespace: "prod", Kind: auth.KindPrimary, Name: "orders", Database: "s3://data/dbs/prod/orders-0a1b", Via: "certificate"},
			[]string{"orders-rw", "orders-rw.prod", "orders-rw.prod.svc", "orders-rw.prod.svc.example.org", "localhost"}, true, "orders-rw.prod.svc"},
		{"secondary", secondaryLeaf(db, "cluster.local", time.Hour), auth.Identity{Namespace: "prod", Kind: auth.KindSecondary, Name: "orders", Via: "certificate"},
			[]string{"orders-ro", "orders-ro.prod", "orders-ro.prod.svc", "orders-ro.prod.svc.cluster.local", "localhost"}, true, "orders-ro.prod.svc"},
		{"client", dbClientLeaf(db, "app", time.Hour), auth.Identity{Namespace: "prod", Kind: auth.KindClient, Name: "orders", Client: "app", Via: "certificate"}, nil, false, ""},
		{"scheduler", schedulerLeaf(pool, "cluster.local", time.Hour), auth.Identity{Namespace: "prod", Kind: auth.KindScheduler, Name: "pool", Via: "certificate"},
			[]string{"pool-scheduler", "pool-scheduler.prod", "pool-scheduler.prod.svc", "pool-scheduler.prod.svc.cluster.local", "localhost"}, true, "pool-scheduler.prod.svc"},
		{"worker", workerLeaf(pool, time.Hour), auth.Identity{Namespace: "prod", Kind: auth.KindWorker, Name: "pool", Via: "certificate"}, nil, false, ""},
		{"operator", operatorLeaf(auth.Identity{Namespace: "shale-system", Kind: auth.KindOperator}, time.Hour), auth.Identity{Namespace: "shale-system", Kind: auth.KindOperator, Via: "certificate"}, nil, false, ""},
	} {
		certPEM, _, err := ca.Issue(tc.leaf, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c, _ := pki.ParseCertificate(certPEM)
		id, err := auth.FromCertificate(c)
		if err != nil || id != tc.id {
			t.Errorf("%s: identity %+v (%v), want %+v", tc.name, id, err, tc.id)
		}
		if !slices.Equal(c.DNSNames, tc.dns) {
			t.Errorf("%s: DNS names %v, want %v", tc.name, c.DNSNames, tc.dns)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: as a client: %v", tc.name, err)
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.verifyAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if (err == nil) != tc.server {
			t.Errorf("%s: as a server named %q: %v, want server=%v", tc.name, tc.verifyAs, err, tc.server)
		}
		if tc.server {
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
				t.Errorf("%s: as 127.0.0.1 (the exec probe): %v", tc.name, err)
			}
		}
	}
}

// The access list names every client of the spec with its role and its
// token's digest, never the token, and the servers' parser accepts it.
func TestAccessList(t *testing.T) {
	b, err := accessList([]shalev1.ClientSpec{{Name: "app", Role: "write"}, {Name: "reports", Role: "read"}, {Name: "new", Role: "admin"}},
		map[string]string{"app": "tok-app", "reports": "tok-reports"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "tok-") {
		t.Errorf("access list %s holds a token", b)
	}
	a, err := auth.ParseAccessList(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		client, token string
		role          auth.Role
	}{{"app", "tok-app", auth.RoleWrite}, {"reports", "tok-reports", auth.RoleRead}, {"new", "", auth.RoleAdmin}} {
		if r := a.Role(tc.client); r != tc.role {
			t.Errorf("%s: role %v, want %v", tc.client, r, tc.role)
		}
		if got, ok := a.TokenClient(tc.token); tc.token != "" && (!ok || got != tc.client) {
			t.Errorf("token of %s: %q %v", tc.client, got, ok)
		}
	}
	if empty, err := accessList(nil, nil); err != nil || strings.TrimSpace(string(empty)) != "{\n  \"clients\": []\n}" {
		t.Errorf("no clients: %q %v", empty, err)
	}
}

// client.yaml points at the database and at the Secret's own files by
// relative paths (resolved against its directory, wherever it is mounted).
func TestClientConfig(t *testing.T) {
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "prod"}}
	var cfg map[string]string
	if err := yaml.UnmarshalStrict([]byte(clientConfig(db, shalev1.ClientSpec{Name: "app", Role: "read"})), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"addr": "orders-rw.prod.svc:7070", "tlsCA": "ca.crt", "tlsCert": "tls.crt", "tlsKey": "tls.key"}
	if len(cfg) != len(want) {
		t.Errorf("client.yaml %v, want %v", cfg, want)
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("client.yaml %s = %q, want %q", k, cfg[k], v)
		}
	}
}

func TestRequeueBy(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		res  time.Duration
		at   time.Time
		want time.Duration
	}{
		{0, time.Time{}, 0},
		{30 * time.Second, time.Time{}, 30 * time.Second},
		{0, now.Add(time.Hour), time.Hour},
		{30 * time.Second, now.Add(time.Hour), 30 * time.Second},
		{time.Hour, now.Add(time.Minute), time.Minute},
		{0, now.Add(-time.Minute), time.Second}, // overdue: soon, not at once in a loop
	} {
		if got := requeueBy(tc.res, tc.at, now); got != tc.want {
			t.Errorf("requeueBy(%v, %v) = %v, want %v", tc.res, tc.at.Sub(now), got, tc.want)
		}
	}
}
