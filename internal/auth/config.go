package auth

import (
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ServerConfig is how a server secures its gRPC port: TLS with client
// authentication, or plaintext with none (Insecure, or a loopback-only
// listener such as `shale dev`'s).
type ServerConfig struct {
	TLS        TLSFiles
	AccessFile string // clients and tokens of the database (KV servers)
	Insecure   bool   // plaintext on a non-loopback address, no authentication
}

// Check refuses a plaintext listener that others can reach unless
// Insecure says so, and TLS flags that contradict Insecure.
func (c ServerConfig) Check(listen string) error {
	if c.Insecure && c.TLS.Enabled() {
		return errors.New("--insecure serves plaintext: drop it, or drop --tls-cert/--tls-key/--tls-ca")
	}
	if !c.TLS.Enabled() && !c.Insecure && !IsLoopback(listen) {
		return fmt.Errorf("--listen %s is reachable from other machines but has no TLS: give --tls-cert, --tls-key and --tls-ca (the operator does), listen on 127.0.0.1, or pass --insecure to serve plaintext with no authentication", listen)
	}
	if c.AccessFile != "" && !c.TLS.Enabled() {
		return errors.New("--access-file needs TLS (--tls-cert, --tls-key, --tls-ca): tokens and client certificates are only checked over TLS")
	}
	return nil
}

// Plaintext says the server runs without TLS and authentication.
func (c ServerConfig) Plaintext() bool { return !c.TLS.Enabled() }

// Secured is a server's TLS identity and guard; nil for plaintext.
type Secured struct {
	TLS   *TLS
	Guard *Guard
}

// Secure loads the files of c (nil, nil for plaintext). authorize nil
// means the KV rules.
func Secure(c ServerConfig, authorize func(self, id Identity, method string) error) (*Secured, error) {
	if c.Plaintext() {
		return nil, nil
	}
	if c.TLS.Cert == "" {
		return nil, errors.New("a TLS server needs --tls-cert and --tls-key")
	}
	t, err := LoadTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	self, err := t.Identity()
	if err != nil {
		return nil, fmt.Errorf("server certificate %s: %w (issue it for this server: `shale admin cert`)", c.TLS.Cert, err)
	}
	g := &Guard{Self: self, Authorize: authorize}
	if c.AccessFile != "" {
		if g.Access, err = LoadAccessFile(c.AccessFile); err != nil {
			return nil, err
		}
	}
	return &Secured{TLS: t, Guard: g}, nil
}

// ServerOption is the transport credentials option (nil-safe: plaintext).
func (s *Secured) ServerOption() grpc.ServerOption {
	if s == nil {
		return grpc.EmptyServerOption{}
	}
	return grpc.Creds(s.TLS.ServerCredentials())
}

// UnaryInterceptors are the guard's interceptors (none for plaintext).
func (s *Secured) UnaryInterceptors() []grpc.UnaryServerInterceptor {
	if s == nil {
		return nil
	}
	return []grpc.UnaryServerInterceptor{s.Guard.Unary()}
}

// StreamInterceptors are the guard's interceptors (none for plaintext).
func (s *Secured) StreamInterceptors() []grpc.StreamServerInterceptor {
	if s == nil {
		return nil
	}
	return []grpc.StreamServerInterceptor{s.Guard.Stream()}
}

// ClientConfig is how a client connects: TLS verified against a CA
// bundle, with a certificate and/or a bearer token; or plaintext when
// no TLS file is named.
type ClientConfig struct {
	TLS        TLSFiles
	TokenFile  string
	ServerName string // verify the server as this name instead of the address dialled
}

// DialOptions are the gRPC options for c.
func (c ClientConfig) DialOptions() ([]grpc.DialOption, error) {
	if !c.TLS.Enabled() {
		if c.TokenFile != "" {
			return nil, errors.New("--token-file needs TLS: give --tls-ca (a token never crosses the network in the clear)")
		}
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	t, err := LoadTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(t.ClientCredentials(c.ServerName))}
	if c.TokenFile != "" {
		tc, err := TokenCredentials(c.TokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tc))
	}
	return opts, nil
}

// Dial connects to addr with c's options and extra ones.
func (c ClientConfig) Dial(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts, err := c.DialOptions()
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, append(opts, extra...)...)
}

// IsLoopback says whether a listen address is reachable only from this
// machine (127.0.0.0/8, ::1, localhost). ":7070" listens everywhere.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
