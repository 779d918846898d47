package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/shale-rocks/shale/internal/auth"
)

// serverSecurityFlags registers a server's TLS flags (--tls-cert,
// --tls-key, --tls-ca, --insecure) and, for a KV server, --access-file.
func serverSecurityFlags(c *cobra.Command, s *auth.ServerConfig, kv bool) {
	fs := c.Flags()
	fs.StringVar(&s.TLS.Cert, "tls-cert", "", "PEM `file` of this server's certificate (its identity: `shale admin cert issue`); re-read when it changes")
	fs.StringVar(&s.TLS.Key, "tls-key", "", "PEM `file` of the certificate's private key")
	fs.StringVar(&s.TLS.CA, "tls-ca", "", "PEM `file` of the CA bundle client certificates are verified against")
	fs.BoolVar(&s.Insecure, "insecure", false, "serve plaintext with no authentication on an address other machines can reach (without TLS, only loopback addresses are allowed)")
	if kv {
		fs.StringVar(&s.AccessFile, "access-file", "", "JSON `file` of the database's clients, their roles and token digests (docs/security.md); re-read when it changes")
	}
}

// clientConfigFile is a client config file (--config, $SHALE_CONFIG), so
// that users do not repeat the connection flags. Relative paths are
// relative to the file's directory; flags given on the command line win.
type clientConfigFile struct {
	Addr       string `json:"addr,omitempty"`
	TLSCA      string `json:"tlsCA,omitempty"`
	TLSCert    string `json:"tlsCert,omitempty"`
	TLSKey     string `json:"tlsKey,omitempty"`
	TokenFile  string `json:"tokenFile,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// parseClientConfig parses a client config file read from path; unknown
// keys are errors (a misspelt tlsCa would otherwise silently mean
// plaintext).
func parseClientConfig(path string, b []byte) (*clientConfigFile, error) {
	var f clientConfigFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		// The YAML goes through JSON: say what was wrong, not how.
		msg := err.Error()
		for _, p := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		return nil, fmt.Errorf("client config %s: %s (keys: addr, tlsCA, tlsCert, tlsKey, tokenFile, serverName)", path, msg)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&f.TLSCA, &f.TLSCert, &f.TLSKey, &f.TokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &f, nil
}

// clientFlags are the connection flags of a client command: TLS files, a
// token file, the server name to verify, and a config file naming them.
type clientFlags struct {
	fs                                           *pflag.FlagSet
	addrFlag                                     string
	ca, cert, key, tokenFile, serverName, config string
}

// addClientFlags registers the connection flags on fs beside the
// command's address flag addrFlag (which a config file's addr fills in
// when not given).
func addClientFlags(c *cobra.Command, fs *pflag.FlagSet, addrFlag string) *clientFlags {
	cf := &clientFlags{fs: fs, addrFlag: addrFlag}
	fs.StringVar(&cf.ca, "tls-ca", "", "PEM `file` of the CA bundle to verify the server against (turns TLS on)")
	fs.StringVar(&cf.cert, "tls-cert", "", "PEM `file` of this client's certificate (its identity), with --tls-key")
	fs.StringVar(&cf.key, "tls-key", "", "PEM `file` of the client certificate's private key")
	fs.StringVar(&cf.tokenFile, "token-file", "", "`file` holding a bearer token, for clients without a certificate (needs --tls-ca)")
	fs.StringVar(&cf.serverName, "tls-server-name", "", "`name` to verify the server's certificate for, instead of the --"+addrFlag+" host")
	fs.StringVar(&cf.config, "config", "", "client config `file` (YAML: addr, tlsCA, tlsCert, tlsKey, tokenFile, serverName); flags win (default $SHALE_CONFIG)")
	noFileCompletion(c, "tls-server-name")
	return cf
}

// resolve merges the config file into the flags: the security settings,
// and *addr unless the address flag was given.
func (cf *clientFlags) resolve(addr *string) (auth.ClientConfig, error) {
	c := auth.ClientConfig{TLS: auth.TLSFiles{CA: cf.ca, Cert: cf.cert, Key: cf.key}, TokenFile: cf.tokenFile, ServerName: cf.serverName}
	path, name := cf.config, "--config"
	if !cf.fs.Changed("config") {
		path, name = os.Getenv("SHALE_CONFIG"), "$SHALE_CONFIG"
	}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	f, err := parseClientConfig(path, b)
	if err != nil {
		return c, err
	}
	set := func(flag string, dst *string, v string) {
		if !cf.fs.Changed(flag) && v != "" {
			*dst = v
		}
	}
	set(cf.addrFlag, addr, f.Addr)
	set("tls-ca", &c.TLS.CA, f.TLSCA)
	set("tls-cert", &c.TLS.Cert, f.TLSCert)
	set("tls-key", &c.TLS.Key, f.TLSKey)
	set("token-file", &c.TokenFile, f.TokenFile)
	set("tls-server-name", &c.ServerName, f.ServerName)
	return c, nil
}

// dialOptions resolves the flags and returns the gRPC options to dial
// *addr with.
func (cf *clientFlags) dialOptions(addr *string) ([]grpc.DialOption, auth.ClientConfig, error) {
	c, err := cf.resolve(addr)
	if err != nil {
		return nil, c, err
	}
	opts, err := c.DialOptions()
	return opts, c, err
}

// describeConnError explains the errors of a secured connection, or
// returns nil for the caller to describe err: a server that wants an
// identity, a TLS handshake that failed, and a plaintext client talking to
// a TLS server.
func describeConnError(addr string, c auth.ClientConfig, err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return nil
	}
	msg := st.Message()
	switch st.Code() {
	case codes.Unauthenticated:
		if !c.TLS.Enabled() {
			return fmt.Errorf("the server requires authentication: %s (connect with TLS: --tls-ca with --tls-cert and --tls-key, or with --token-file; or a client config file, --config or $SHALE_CONFIG)", msg)
		}
		return fmt.Errorf("the server requires authentication: %s", msg)
	case codes.Unavailable:
		switch {
		case strings.Contains(msg, "x509: certificate is valid for"):
			return fmt.Errorf("TLS handshake with %s failed: %s (give --tls-server-name with a name the certificate is valid for)", addr, msg)
		case strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "tls: "):
			if !c.TLS.Enabled() {
				return nil
			}
			return fmt.Errorf("TLS handshake with %s failed: %s (is --tls-ca the server's CA, and does the server serve TLS?)", addr, msg)
		case !c.TLS.Enabled() && (strings.Contains(msg, "server preface") || strings.Contains(msg, "EOF")):
			return fmt.Errorf("%s closed a plaintext connection: %s (if it serves TLS, connect with --tls-ca and a certificate or --token-file)", addr, msg)
		}
	}
	return nil
}
