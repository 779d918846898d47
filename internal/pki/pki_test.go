package pki

import (
	"crypto/x509"
	"net"
	"net/url"
	"testing"
	"time"
)

func testCA(t *testing.T, now time.Time) *CA {
	t.Helper()
	certPEM, keyPEM, err := NewCA("test CA", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestIssueVerifies(t *testing.T) {
	now := time.Now()
	ca := testCA(t, now)
	id, _ := url.Parse("shale://ns/primary/db")
	leaf := Leaf{CommonName: "db", URIs: []*url.URL{id}, DNSNames: []string{"db-rw"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true, Validity: time.Hour}
	certPEM, keyPEM, err := ca.Issue(leaf, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: "db-rw", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
	if _, err := ParseKey(keyPEM); err != nil {
		t.Fatal(err)
	}
	if got := Renewal(certPEM, ca, leaf, now); got != "" {
		t.Errorf("fresh certificate: renewal %q", got)
	}
}

func TestLeafNeverOutlivesCA(t *testing.T) {
	now := time.Now()
	ca := testCA(t, now)
	certPEM, _, err := ca.Issue(Leaf{CommonName: "x", Client: true, Validity: 1000 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseCertificate(certPEM)
	if c.NotAfter.After(ca.Cert.NotAfter) {
		t.Fatalf("leaf expires %v after its CA %v", c.NotAfter, ca.Cert.NotAfter)
	}
}

func TestLoadCARefusesMismatchedKey(t *testing.T) {
	now := time.Now()
	c1, _, _ := NewCA("a", now, time.Hour)
	_, k2, _ := NewCA("b", now, time.Hour)
	if _, err := LoadCA(c1, k2); err == nil {
		t.Fatal("a CA with another CA's key loaded")
	}
}

func TestRenewal(t *testing.T) {
	now := time.Now()
	ca := testCA(t, now)
	other := testCA(t, now)
	id, _ := url.Parse("shale://ns/secondary/db")
	id2, _ := url.Parse("shale://ns/secondary/db2")
	want := Leaf{CommonName: "db", URIs: []*url.URL{id}, DNSNames: []string{"db-ro"}, Server: true, Client: true, Validity: 3 * time.Hour}
	issued, _, err := ca.Issue(want, now)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _, _ := other.Issue(want, now)
	moved := want
	moved.URIs = []*url.URL{id2}
	renamed := want
	renamed.DNSNames = []string{"db-ro", "db-ro.ns"}
	clientOnly := want
	clientOnly.Server = false
	for _, tc := range []struct {
		name  string
		cert  []byte
		want  Leaf
		at    time.Time
		renew bool
	}{
		{"missing", nil, want, now, true},
		{"garbage", []byte("not pem"), want, now, true},
		{"fresh", issued, want, now, false},
		{"just before two thirds", issued, want, now.Add(2*time.Hour - 2*time.Minute), false},
		{"at two thirds", issued, want, now.Add(2 * time.Hour), true},
		{"expired", issued, want, now.Add(4 * time.Hour), true},
		{"other CA", foreign, want, now, true},
		{"identity changed", issued, moved, now, true},
		{"DNS names changed", issued, renamed, now, true},
		{"usage changed", issued, clientOnly, now, true},
	} {
		got := Renewal(tc.cert, ca, tc.want, tc.at)
		if (got != "") != tc.renew {
			t.Errorf("%s: Renewal = %q, want renew=%v", tc.name, got, tc.renew)
		}
	}
}

func TestAppendBundle(t *testing.T) {
	now := time.Now()
	a, _, _ := NewCA("a", now, time.Hour)
	b, _, _ := NewCA("b", now, time.Hour)
	ab := AppendBundle(a, b)
	if got := AppendBundle(ab, b); string(got) != string(ab) {
		t.Error("appending a certificate already in the bundle changed it")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ab) {
		t.Fatal("bundle does not parse")
	}
	if n := len(pool.Subjects()); n != 2 { //nolint:staticcheck // counting is all we need
		t.Fatalf("bundle has %d certificates, want 2", n)
	}
}

// A short-lived leaf is renewed about two thirds into the validity asked
// for: the minute of backdating (for clocks a little behind) does not
// stretch a 3-second certificate to 63 seconds.
func TestRenewAtFollowsValidity(t *testing.T) {
	now := time.Now()
	ca := testCA(t, now)
	for _, tc := range []struct {
		validity time.Duration
		backdate time.Duration
	}{
		{3 * time.Second, 300 * time.Millisecond},
		{10 * time.Minute, time.Minute},
		{10 * time.Hour, time.Minute},
	} {
		certPEM, _, err := ca.Issue(Leaf{CommonName: "x", Client: true, Validity: tc.validity}, now)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := ParseCertificate(certPEM)
		if got := now.Sub(c.NotBefore); got < tc.backdate-time.Second || got > tc.backdate+time.Second {
			t.Errorf("validity %v: valid from %v before issue, want %v", tc.validity, got, tc.backdate)
		}
		life := tc.validity + tc.backdate
		want := now.Add(-tc.backdate).Add(life * 2 / 3)
		if d := RenewAt(c).Sub(want); d < -time.Second || d > time.Second {
			t.Errorf("validity %v: renew at %v, want %v", tc.validity, RenewAt(c), want)
		}
	}
}
