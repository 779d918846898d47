// Package pki is Shale's small certificate authority: it makes the CA the
// operator keeps in a Secret, issues the leaf certificates of primaries,
// secondaries, compactors and clients from it, and decides when one must
// be issued again. Keys are ECDSA P-256; everything is PEM.
//
// Identities travel in URI subject alternative names (see internal/auth);
// this package does not interpret them.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"time"
)

// CA is a certificate authority that can sign.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     crypto.Signer
}

// NewCA makes a self-signed CA valid from now for validity.
func NewCA(name string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Shale"}},
		NotBefore:             now.Add(-time.Minute), // tolerate clocks a little behind
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// LoadCA parses a CA certificate and its key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate is not a CA (basic constraints)")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, nil
}

// Leaf says what a leaf certificate names and may be used for.
type Leaf struct {
	CommonName string
	URIs       []*url.URL
	DNSNames   []string
	IPs        []net.IP
	Server     bool // may serve TLS
	Client     bool // may authenticate as a TLS client
	Validity   time.Duration
}

// Issue signs a new key pair for l, valid from now.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	if !l.Server && !l.Client {
		return nil, nil, errors.New("a leaf must be a server or a client certificate")
	}
	if l.Validity <= 0 {
		return nil, nil, errors.New("a leaf needs a validity")
	}
	notAfter := now.Add(l.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter // a leaf never outlives its CA
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	var usage []x509.ExtKeyUsage
	if l.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial(),
		Subject:        pkix.Name{CommonName: l.CommonName, Organization: []string{"Shale"}},
		NotBefore:      now.Add(-Backdate(l.Validity)),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		URIs:           l.URIs,
		DNSNames:       l.DNSNames,
		IPAddresses:    l.IPs,
		AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// Backdate is how far before its issue a leaf of this validity is valid
// from: a minute, to tolerate clocks a little behind, but never more than
// a tenth of the validity, so that a short-lived certificate is renewed
// about when its validity says (at two thirds of it), not a minute late.
func Backdate(validity time.Duration) time.Duration {
	return min(time.Minute, validity/10)
}

// RenewAt is when a certificate should be replaced: two thirds into its
// lifetime, so a renewal has a third of it to reach every Pod (kubelet
// refreshes mounted Secrets within about a minute).
func RenewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life * 2 / 3)
}

// Renewal says whether the leaf in certPEM must be issued again, and why:
// it is missing or unreadable, not signed by ca, past RenewAt, or names
// other identities, hosts or usages than want. "" means keep it.
func Renewal(certPEM []byte, ca *CA, want Leaf, now time.Time) string {
	if len(certPEM) == 0 {
		return "no certificate yet"
	}
	c, err := ParseCertificate(certPEM)
	if err != nil {
		return "unreadable certificate: " + err.Error()
	}
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		return "not signed by the current CA"
	}
	if !now.Before(RenewAt(c)) {
		return fmt.Sprintf("due for renewal (expires %s)", c.NotAfter.UTC().Format(time.RFC3339))
	}
	if c.Subject.CommonName != want.CommonName {
		return "common name changed"
	}
	if !slices.EqualFunc(c.URIs, want.URIs, func(a, b *url.URL) bool { return a.String() == b.String() }) {
		return "identity changed"
	}
	if !slices.Equal(c.DNSNames, want.DNSNames) {
		return "DNS names changed"
	}
	if !slices.EqualFunc(c.IPAddresses, want.IPs, net.IP.Equal) {
		return "IP addresses changed"
	}
	if slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) != want.Server ||
		slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) != want.Client {
		return "key usage changed"
	}
	return ""
}

// ParseCertificate parses the first CERTIFICATE block of a PEM file.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PEM CERTIFICATE block")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

// ParseKey parses a PKCS#8, EC or PKCS#1 private key in PEM.
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, errors.New("PKCS#8 key cannot sign")
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("unsupported private key (PEM %q)", b.Type)
}

// AppendBundle appends the certificates of extra to bundle, skipping any
// already there: CA bundles keep the previous CA while a new one rolls out.
func AppendBundle(bundle, extra []byte) []byte {
	out := bytes.Clone(bundle)
	for rest := extra; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return out
		}
		enc := pem.EncodeToMemory(b)
		if !bytes.Contains(out, enc) {
			if len(out) > 0 && out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			out = append(out, enc...)
		}
	}
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := pub.ECDH()
	sum := sha256.Sum256(b.Bytes())
	return sum[:20]
}
