package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// NewTLSFromPEM is a TLS identity held in memory instead of files: the
// operator's own, which it issues itself and never writes anywhere. The
// certificate and key may be empty (verify servers only); the CA bundle
// may not. SetPEM replaces it; like a file identity, the new one is used
// from the next handshake on.
func NewTLSFromPEM(certPEM, keyPEM, caPEM []byte) (*TLS, error) {
	t := &TLS{memory: true}
	if err := t.SetPEM(certPEM, keyPEM, caPEM); err != nil {
		return nil, err
	}
	return t, nil
}

// SetPEM replaces an in-memory identity (NewTLSFromPEM); a TLS read from
// files refuses.
func (t *TLS) SetPEM(certPEM, keyPEM, caPEM []byte) error {
	if !t.memory {
		return errors.New("TLS: this identity is read from files, not set in memory")
	}
	s := &tlsState{pool: x509.NewCertPool()}
	if !s.pool.AppendCertsFromPEM(caPEM) {
		return errors.New("TLS CA bundle: no PEM certificate in it")
	}
	if len(certPEM) > 0 || len(keyPEM) > 0 {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return fmt.Errorf("TLS certificate and key: %w", err)
		}
		s.cert = &c
		s.leaf = c.Leaf
	}
	t.cur.Store(s)
	return nil
}
