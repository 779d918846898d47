package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// TLSFiles names the PEM files of a TLS identity: a certificate and its
// key (optional for a client that presents a token instead) and the CA
// bundle that peers are verified against.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled says whether any file is named.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// TLS is a TLS identity read from files and read again when they change
// (checked at most once a second, at a handshake), so a renewed
// certificate or CA bundle is used by the next connection while the
// open ones go on: no restart, no dropped connection.
type TLS struct {
	files   TLSFiles
	checked atomic.Int64
	mu      sync.Mutex
	stamps  [3]fileStamp
	cur     atomic.Pointer[tlsState]
	onErr   func(error)
	memory  bool // held in memory (NewTLSFromPEM): nothing to re-read
}

type tlsState struct {
	cert *tls.Certificate // nil: none (a token client)
	leaf *x509.Certificate
	pool *x509.CertPool
}

// LoadTLS reads the files; they must be valid now. A certificate needs
// its key; the CA bundle is required (every peer is verified).
func LoadTLS(f TLSFiles) (*TLS, error) {
	if f.CA == "" {
		return nil, errors.New("TLS needs a CA bundle to verify peers (--tls-ca)")
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a TLS certificate needs its key and a key its certificate (--tls-cert with --tls-key)")
	}
	t := &TLS{files: f}
	if err := t.reload(true); err != nil {
		return nil, err
	}
	t.checked.Store(time.Now().UnixNano())
	return t, nil
}

// OnReloadError sets what is told when changed files cannot be used (the
// previous identity stays in use).
func (t *TLS) OnReloadError(fn func(error)) { t.onErr = fn }

func (t *TLS) state() *tlsState {
	if t.memory {
		return t.cur.Load()
	}
	now := time.Now().UnixNano()
	if last := t.checked.Load(); now-last > int64(time.Second) && t.checked.CompareAndSwap(last, now) {
		if err := t.reload(false); err != nil && t.onErr != nil {
			t.onErr(err)
		}
	}
	return t.cur.Load()
}

func (t *TLS) reload(first bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var stamps [3]fileStamp
	for i, p := range []string{t.files.Cert, t.files.Key, t.files.CA} {
		if p == "" {
			continue
		}
		st, err := stampOf(p)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		stamps[i] = st
	}
	if !first && stamps == t.stamps {
		return nil
	}
	s := &tlsState{pool: x509.NewCertPool()}
	caPEM, err := os.ReadFile(t.files.CA)
	if err != nil {
		return fmt.Errorf("TLS CA bundle: %w", err)
	}
	if !s.pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("TLS CA bundle %s: no PEM certificate in it", t.files.CA)
	}
	if t.files.Cert != "" {
		c, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
		if err != nil {
			// kubelet swaps both files at once, but a reader can still
			// see one updated and not the other: the next check retries.
			return fmt.Errorf("TLS certificate %s and key %s: %w", t.files.Cert, t.files.Key, err)
		}
		s.cert = &c
		s.leaf = c.Leaf
	}
	t.cur.Store(s)
	t.stamps = stamps
	return nil
}

// Identity is the shale:// identity of the certificate (a server learns
// its namespace and database from its own certificate).
func (t *TLS) Identity() (Identity, error) {
	s := t.state()
	if s.leaf == nil {
		return Identity{}, errors.New("no TLS certificate (--tls-cert)")
	}
	return FromCertificate(s.leaf)
}

// Leaf is the certificate in use, or nil.
func (t *TLS) Leaf() *x509.Certificate { return t.state().leaf }

// ServerConfig is a server's TLS configuration: TLS 1.3, this identity's
// certificate, and client certificates verified against the CA bundle
// when given. A client without a certificate may still present a bearer
// token; the interceptor refuses calls that bring neither.
func (t *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s := t.state()
			if s.cert == nil {
				return nil, errors.New("server has no TLS certificate")
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*s.cert},
				ClientCAs:    s.pool,
				ClientAuth:   tls.VerifyClientCertIfGiven,
			}, nil
		},
	}
}

// ServerCredentials are gRPC server credentials from ServerConfig.
func (t *TLS) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(t.ServerConfig())
}

// ClientCredentials are gRPC client credentials that verify the server
// against the CA bundle (its name must match the address dialled, or
// serverName when given) and present this identity's certificate, each
// read afresh at every handshake.
func (t *TLS) ClientCredentials(serverName string) credentials.TransportCredentials {
	return &reloadingCreds{t: t, serverName: serverName}
}

type reloadingCreds struct {
	t          *TLS
	serverName string
}

func (c *reloadingCreds) config() *tls.Config {
	s := c.t.state()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.pool, ServerName: c.serverName}
	if s.cert != nil {
		cfg.Certificates = []tls.Certificate{*s.cert}
	}
	return cfg
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("client credentials cannot serve")
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3", ServerName: c.serverName}
}

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	return &reloadingCreds{t: c.t, serverName: c.serverName}
}

func (c *reloadingCreds) OverrideServerName(name string) error { c.serverName = name; return nil }
