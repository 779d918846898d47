package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/pki"
)

// The file names of `shale admin ca` and `shale admin cert`: those of a
// kubernetes.io/tls Secret with its CA, so the same files work mounted
// from the operator's Secrets and made by hand.
const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
	certFile   = "tls.crt"
	keyFile    = "tls.key"
)

func newAdminCACmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "ca",
		Short: "Make a certificate authority for standalone servers",
		Args:  cobra.ArbitraryArgs,
		RunE:  runGroup,
	}
	var out, name string
	var validity time.Duration
	create := &cobra.Command{
		Use:   "create --out DIR",
		Short: "Make a new CA: DIR/ca.crt (give it to every server and client) and DIR/ca.key (keep it secret)",
		Long: `Create makes a self-signed certificate authority (ECDSA P-256) in --out:
ca.crt, the bundle servers and clients verify each other against (--tls-ca),
and ca.key, its private key, which ` + "`shale admin cert issue`" + ` signs with. Keep
ca.key off the servers. An existing ca.key is never overwritten.
In Kubernetes the operator runs its own CA; this is for servers run by hand.`,
		Example: `  shale admin ca create --out ./pki/ca`,
		Args:    exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if out == "" {
				return usageErrorf("admin ca create: --out is required (a directory for ca.crt and ca.key)")
			}
			if _, err := os.Stat(filepath.Join(out, caKeyFile)); err == nil {
				return fmt.Errorf("admin ca create: %s already exists: a new CA would invalidate every certificate it issued; choose another --out", filepath.Join(out, caKeyFile))
			}
			certPEM, keyPEM, err := pki.NewCA(name, time.Now(), validity)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			if err := writeFileAtomic(filepath.Join(out, caKeyFile), keyPEM, 0o600); err != nil {
				return err
			}
			if err := writeFileAtomic(filepath.Join(out, caCertFile), certPEM, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "wrote %s and %s (valid until %s)\n", filepath.Join(out, caCertFile), filepath.Join(out, caKeyFile),
				time.Now().Add(validity).UTC().Format(time.RFC3339))
			return nil
		},
	}
	create.Flags().StringVar(&out, "out", "", "`directory` to write ca.crt and ca.key to (required; created if missing)")
	create.Flags().StringVar(&name, "name", "Shale CA", "the CA certificate's common `name`")
	create.Flags().Var(newDuration(&validity, 10*365*24*time.Hour), "validity", "how long the CA is valid")
	create.MarkFlagDirname("out")
	noFileCompletion(create, "name", "validity")
	c.AddCommand(create)
	return c
}

// certRequest is what `shale admin cert issue` was asked for.
type certRequest struct {
	kind, namespace, name, client, db string
	dns                               []string
	ips                               []net.IP
	validity                          time.Duration
}

// leaf turns the request into the identity and certificate to issue, or
// says which flag is wrong.
func (r certRequest) leaf() (auth.Identity, pki.Leaf, error) {
	id := auth.Identity{Namespace: r.namespace, Kind: auth.Kind(r.kind), Name: r.name, Client: r.client}
	var server bool
	switch id.Kind {
	case auth.KindPrimary, auth.KindSecondary, auth.KindScheduler:
		server = true
	case auth.KindClient, auth.KindWorker, auth.KindOperator:
	default:
		return id, pki.Leaf{}, fmt.Errorf("--kind %q: want client, primary, secondary, scheduler, worker or operator", r.kind)
	}
	switch {
	case r.namespace == "":
		return id, pki.Leaf{}, errors.New("--namespace must not be empty")
	case id.Kind == auth.KindOperator && r.name != "":
		return id, pki.Leaf{}, errors.New("--name: an operator identity names no database or pool")
	case id.Kind != auth.KindOperator && r.name == "":
		return id, pki.Leaf{}, fmt.Errorf("--kind %s needs --name: the %s", r.kind, map[bool]string{true: "compactor pool", false: "database (the RocksDB resource's name)"}[id.Kind == auth.KindScheduler || id.Kind == auth.KindWorker])
	case id.Kind == auth.KindClient && r.client == "":
		return id, pki.Leaf{}, errors.New("--kind client needs --client: the client's name, as the access file lists it")
	case id.Kind != auth.KindClient && r.client != "":
		return id, pki.Leaf{}, errors.New("--client is for --kind client only")
	case id.Kind == auth.KindPrimary && r.db == "":
		return id, pki.Leaf{}, errors.New("--kind primary needs --db: the database URL it serves (the only one it may submit compactions for)")
	case id.Kind != auth.KindPrimary && r.db != "":
		return id, pki.Leaf{}, errors.New("--db is for --kind primary only")
	}
	uri := id.URI()
	if _, err := auth.ParseURI(uri); err != nil {
		return id, pki.Leaf{}, fmt.Errorf("--namespace, --name and --client must be single path segments: %w", err)
	}
	l := pki.Leaf{CommonName: uri.String(), URIs: []*url.URL{uri}, DNSNames: r.dns, IPs: r.ips, Server: server, Client: true, Validity: r.validity}
	if id.Kind == auth.KindPrimary {
		u, err := objstore.ParseURL(r.db)
		if err != nil {
			return id, pki.Leaf{}, fmt.Errorf("--db: %w", err)
		}
		du, err := url.Parse(u.String())
		if err != nil {
			return id, pki.Leaf{}, fmt.Errorf("--db: %w", err)
		}
		l.URIs = append(l.URIs, du)
		id.Database = u.String()
	}
	if server {
		// Local health probes (`shale health --addr 127.0.0.1:...`)
		// verify the server by these.
		if !slices.Contains(l.DNSNames, "localhost") {
			l.DNSNames = append(slices.Clone(l.DNSNames), "localhost")
		}
		if !slices.ContainsFunc(l.IPs, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
			l.IPs = append(slices.Clone(l.IPs), net.IPv4(127, 0, 0, 1))
		}
	}
	return id, l, nil
}

func newAdminCertCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "cert",
		Short: "Issue certificates for standalone servers and clients",
		Args:  cobra.ArbitraryArgs,
		RunE:  runGroup,
	}
	var r certRequest
	var caDir, out string
	issue := &cobra.Command{
		Use:   "issue --ca DIR --kind KIND --name NAME --out DIR",
		Short: "Issue a certificate: DIR/tls.crt, DIR/tls.key and a copy of the CA's ca.crt",
		Long: `Issue signs a new key pair with the CA in --ca (made by ` + "`shale admin ca create`" + `)
and writes tls.crt, tls.key and ca.crt to --out, the files --tls-cert,
--tls-key and --tls-ca name. The certificate's identity is a URI
shale://NAMESPACE/KIND/NAME[/CLIENT]:

  client     an application of database --name, called --client in the
             database's access file (which gives it its role)
  primary    the primary of database --name serving --db URL
  secondary  a read replica of database --name
  scheduler  the scheduler of compactor pool --name
  worker     a worker of compactor pool --name
  operator   the operator (no --name)

Server certificates (primary, secondary, scheduler) name localhost and
127.0.0.1 besides --dns and --ip, so that local health probes verify them;
clients connecting by another name need it in --dns (or --tls-server-name).
Existing files in --out are replaced atomically, one by one: running servers
pick up the new certificate at their next handshake (rotation).`,
		Example: `  shale admin cert issue --ca ./pki/ca --kind primary --name orders --db s3://my-bucket/orders --dns db.example.com --out ./pki/primary
  shale admin cert issue --ca ./pki/ca --kind client --name orders --client billing --out ./pki/billing`,
		Args: exactArgs(),
		RunE: func(c *cobra.Command, _ []string) error {
			if caDir == "" || out == "" || r.kind == "" {
				return usageErrorf("admin cert issue: --ca, --kind and --out are required")
			}
			id, leaf, err := r.leaf()
			if err != nil {
				return usageErrorf("admin cert issue: %v", err)
			}
			caCert, err := os.ReadFile(filepath.Join(caDir, caCertFile))
			if err != nil {
				return fmt.Errorf("--ca: %w (make a CA with `shale admin ca create --out DIR`)", err)
			}
			caKey, err := os.ReadFile(filepath.Join(caDir, caKeyFile))
			if err != nil {
				return fmt.Errorf("--ca: %w (make a CA with `shale admin ca create --out DIR`)", err)
			}
			ca, err := pki.LoadCA(caCert, caKey)
			if err != nil {
				return fmt.Errorf("--ca %s: %w", caDir, err)
			}
			certPEM, keyPEM, err := ca.Issue(leaf, time.Now())
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			// The key first: a server that reads the new certificate with
			// the old key fails that reload and retries (auth.TLS).
			for _, f := range []struct {
				name string
				data []byte
				mode os.FileMode
			}{{keyFile, keyPEM, 0o600}, {certFile, certPEM, 0o644}, {caCertFile, caCert, 0o644}} {
				if err := writeFileAtomic(filepath.Join(out, f.name), f.data, f.mode); err != nil {
					return err
				}
			}
			cert, _ := pki.ParseCertificate(certPEM)
			fmt.Fprintf(c.OutOrStdout(), "wrote %s, %s and %s: %s, serial %x, valid until %s\n",
				filepath.Join(out, certFile), filepath.Join(out, keyFile), filepath.Join(out, caCertFile), id.URI(), cert.SerialNumber, cert.NotAfter.UTC().Format(time.RFC3339))
			return nil
		},
	}
	fs := issue.Flags()
	fs.StringVar(&caDir, "ca", "", "`directory` of the CA (ca.crt and ca.key; required)")
	fs.StringVar(&r.kind, "kind", "", "what the certificate is for: client, primary, secondary, scheduler, worker or operator (required)")
	fs.StringVar(&r.namespace, "namespace", "default", "the Kubernetes `namespace` of the identity (any name for standalone servers; all must agree)")
	fs.StringVar(&r.name, "name", "", "the database (client, primary, secondary) or compactor pool (scheduler, worker) `name`")
	fs.StringVar(&r.client, "client", "", "the client's `name` in the access file (--kind client)")
	fs.StringVar(&r.db, "db", "", "the database `URL` the primary serves (--kind primary)")
	fs.StringSliceVar(&r.dns, "dns", nil, "DNS `names` the server is reached by (comma-separated)")
	fs.IPSliceVar(&r.ips, "ip", nil, "IP `addresses` the server is reached by (comma-separated)")
	fs.Var(newDuration(&r.validity, 90*24*time.Hour), "validity", "how long the certificate is valid (at most as long as the CA)")
	fs.StringVar(&out, "out", "", "`directory` to write tls.crt, tls.key and ca.crt to (required; created if missing)")
	issue.MarkFlagDirname("ca")
	issue.MarkFlagDirname("out")
	issue.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]cobra.Completion{"client", "primary", "secondary", "scheduler", "worker", "operator"}, cobra.ShellCompDirectiveNoFileComp))
	noFileCompletion(issue, "namespace", "name", "client", "db", "dns", "ip", "validity")
	c.AddCommand(issue)
	return c
}

func newAdminTokenCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "token [--out FILE]",
		Short: "Make a random bearer token and print its digest for the access file",
		Long: `Token makes a random bearer token (256 bits) for a client that cannot hold a
certificate, and prints it with its SHA-256 digest, which goes in the
client's tokenSHA256s in the server's access file (the file never holds the
token itself). With --out the token goes to FILE (mode 0600) instead of
stdout. The client then connects with --tls-ca and --token-file.`,
		Example: `  shale admin token --out ./billing.token
  shale kv --tls-ca ca.crt --token-file ./billing.token get hello`,
		Args: exactArgs(),
	}
	output := addOutputFlags(c)
	c.Flags().StringVar(&out, "out", "", "`file` to write the token to instead of printing it")
	c.RunE = func(c *cobra.Command, _ []string) error {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		tok := base64.RawURLEncoding.EncodeToString(b)
		if out != "" {
			if err := writeFileAtomic(out, []byte(tok+"\n"), 0o600); err != nil {
				return err
			}
		}
		w := c.OutOrStdout()
		shown := tok
		if out != "" {
			shown = ""
		}
		if output() == outputJSON {
			return printJSON(w, struct {
				Token       string `json:"token,omitempty"`
				File        string `json:"file,omitempty"`
				TokenSHA256 string `json:"tokenSHA256"`
			}{shown, out, auth.TokenDigest(tok)})
		}
		if out != "" {
			fmt.Fprintf(w, "token written to %s\n", out)
		} else {
			fmt.Fprintf(w, "token:       %s\n", tok)
		}
		fmt.Fprintf(w, "tokenSHA256: %s\n", auth.TokenDigest(tok))
		return nil
	}
	return c
}

// writeFileAtomic replaces path with data: a reader sees the old file or
// the new one, never a part (a server re-reading its certificate).
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename: nothing there
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
