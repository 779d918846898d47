package objstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// Where S3 credentials come from, besides AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (S3ConfigFromEnv reads them all).
const (
	// EnvCredentialsDir names a directory with the files accessKeyID and
	// secretAccessKey (and optionally sessionToken), e.g. a Kubernetes
	// Secret mounted as a volume. A running process picks up new contents
	// (a rotated Secret) without a restart.
	EnvCredentialsDir = "SHALE_S3_CREDENTIALS_DIR"
	// EnvInstanceRole=true lets the process use the credentials of the
	// machine's or container's role: EC2 instance metadata (IMDSv2), or
	// the ECS / EKS Pod Identity endpoint that AWS_CONTAINER_CREDENTIALS_*
	// name. Opt-in, because asking the metadata address of a machine
	// that has none only times out.
	EnvInstanceRole = "SHALE_S3_INSTANCE_ROLE"
	// Web identity (EKS IAM roles for service accounts and alike): a
	// projected token file exchanged for credentials at STS
	// (AssumeRoleWithWebIdentity). The EKS webhook sets these variables.
	EnvWebIdentityTokenFile = "AWS_WEB_IDENTITY_TOKEN_FILE"
	EnvRoleARN              = "AWS_ROLE_ARN"
	EnvRoleSessionName      = "AWS_ROLE_SESSION_NAME"
	// EnvEndpointSTS is the STS endpoint for web identity; unset means
	// AWS's regional one for an AWS endpoint, else the S3 endpoint itself
	// (MinIO serves STS there).
	EnvEndpointSTS = "AWS_ENDPOINT_URL_STS"
	// The container-credentials variables (ECS, EKS Pod Identity); when
	// set, they imply InstanceRole.
	EnvContainerCredentialsFullURI     = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
	EnvContainerCredentialsRelativeURI = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"

	// The files of a credentials directory.
	CredentialsFileAccessKeyID     = "accessKeyID"
	CredentialsFileSecretAccessKey = "secretAccessKey"
	CredentialsFileSessionToken    = "sessionToken"

	// DefaultCredentialsCheckInterval is how often, at most, the files of a
	// credentials directory are checked for new contents.
	DefaultCredentialsCheckInterval = 5 * time.Second
)

// credSource is one place credentials may come from.
type credSource int

const (
	sourceFiles credSource = iota
	sourceStatic
	sourceWebIdentity
	sourceInstanceRole
)

// credentialSources lists the sources a configuration names, in the order
// they are tried: files (a mounted Secret, re-read when it changes), static
// keys (today's environment variables), web identity, the instance's or
// container's role. The first that yields keys is used; an earlier one
// wins because it is the more specific: a Secret mounted for this process
// beats keys in its environment, and both beat an identity the process
// merely runs under.
func credentialSources(c S3Config) []credSource {
	var out []credSource
	if c.CredentialsDir != "" {
		out = append(out, sourceFiles)
	}
	if c.AccessKeyID != "" || c.SecretAccessKey != "" {
		out = append(out, sourceStatic)
	}
	if c.WebIdentityTokenFile != "" || c.WebIdentityToken != nil {
		out = append(out, sourceWebIdentity)
	}
	if c.InstanceRole {
		out = append(out, sourceInstanceRole)
	}
	return out
}

// noCredentialsHelp says how to give a process credentials.
func noCredentialsHelp() string {
	return fmt.Sprintf("set %s (a directory with the files %s and %s, e.g. a mounted Secret), %s and %s, %s (web identity, with %s), or %s=true (the instance's or container's role)",
		EnvCredentialsDir, CredentialsFileAccessKeyID, CredentialsFileSecretAccessKey,
		EnvAccessKeyID, EnvSecretAccessKey, EnvWebIdentityTokenFile, EnvRoleARN, EnvInstanceRole)
}

// checkCredentials validates the credential settings: at least one
// source, and complete static keys.
func (c S3Config) checkCredentials() error {
	if len(credentialSources(c)) == 0 {
		return fmt.Errorf("no S3 credentials for %s: %s", c.Endpoint, noCredentialsHelp())
	}
	switch {
	case c.AccessKeyID != "" && c.SecretAccessKey == "":
		return fmt.Errorf("S3 credentials for %s: %s is set but not %s: set %s", c.Endpoint, EnvAccessKeyID, EnvSecretAccessKey, EnvSecretAccessKey)
	case c.AccessKeyID == "" && c.SecretAccessKey != "":
		return fmt.Errorf("S3 credentials for %s: %s is set but not %s: set %s", c.Endpoint, EnvSecretAccessKey, EnvAccessKeyID, EnvAccessKeyID)
	}
	if c.CredentialsDir != "" {
		fi, err := os.Stat(c.CredentialsDir)
		if err != nil {
			return fmt.Errorf("S3 credentials directory (%s): %v", EnvCredentialsDir, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("S3 credentials directory %s (%s) is not a directory: name the directory holding %s and %s", c.CredentialsDir, EnvCredentialsDir, CredentialsFileAccessKeyID, CredentialsFileSecretAccessKey)
		}
	}
	return nil
}

// namedProvider is a source with the name logs and errors give it.
type namedProvider struct {
	name string
	credentials.Provider
}

// providers builds the chain's providers for c, in credentialSources
// order. ep is the S3 endpoint.
func (c S3Config) providers(ep *url.URL, region string) []namedProvider {
	var out []namedProvider
	for _, src := range credentialSources(c) {
		switch src {
		case sourceFiles:
			out = append(out, namedProvider{"the files in " + c.CredentialsDir, newFileCreds(c.CredentialsDir, c.CredentialsCheckInterval)})
		case sourceStatic:
			out = append(out, namedProvider{"static keys (" + EnvAccessKeyID + ", " + EnvSecretAccessKey + ")", &credentials.Static{Value: credentials.Value{
				AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken, SignerType: credentials.SignatureV4,
			}}})
		case sourceWebIdentity:
			if get := c.WebIdentityToken; get != nil {
				name := "web identity"
				if c.WebIdentityName != "" {
					name += " as " + c.WebIdentityName
				}
				out = append(out, namedProvider{name, &credentials.STSWebIdentity{
					STSEndpoint: stsEndpoint(c.STSEndpoint, ep, region),
					RoleARN:     c.RoleARN,
					GetWebIDTokenExpiry: func() (*credentials.WebIdentityToken, error) {
						tok, err := get()
						if err != nil {
							return nil, err
						}
						return &credentials.WebIdentityToken{Token: tok}, nil
					},
				}})
				break
			}
			// minio-go's IAM provider exchanges the token (read again on
			// every refresh: the kubelet rotates projected tokens) at STS.
			iam := &credentials.IAM{Endpoint: stsEndpoint(c.STSEndpoint, ep, region), Region: region}
			iam.EKSIdentity.TokenFile = c.WebIdentityTokenFile
			iam.EKSIdentity.RoleARN = c.RoleARN
			iam.EKSIdentity.RoleSessionName = c.RoleSessionName
			out = append(out, namedProvider{"web identity (" + c.WebIdentityTokenFile + ")", iam})
		case sourceInstanceRole:
			// minio-go's IAM provider: the container endpoint when
			// AWS_CONTAINER_CREDENTIALS_* are set, else IMDS.
			out = append(out, namedProvider{"the instance's or container's role", &credentials.IAM{Region: region}})
		}
	}
	return out
}

// stsEndpoint is where web identity tokens are exchanged: the configured
// endpoint; AWS's regional STS for an AWS S3 endpoint; else the S3
// endpoint itself (MinIO answers STS requests there).
func stsEndpoint(configured string, ep *url.URL, region string) string {
	switch {
	case configured != "":
		return strings.TrimSuffix(configured, "/")
	case s3utils.IsAmazonEndpoint(*ep):
		if strings.HasPrefix(region, "cn-") {
			return "https://sts." + region + ".amazonaws.com.cn"
		}
		return "https://sts." + region + ".amazonaws.com"
	}
	return ep.Scheme + "://" + ep.Host
}

// fileCreds reads static keys from files that may be replaced while the
// process runs: a Secret volume, which the kubelet updates by swapping a
// symlink (..data) to a new directory. IsExpired reports a change once the
// files' identity (inode, size, modification time) differs from when they
// were read, checking at most once per interval, so minio-go reads them
// again before its next request.
type fileCreds struct {
	dir      string
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	stamp   string    // the files' identity when last read
	checked time.Time // when the files were last statted
}

func newFileCreds(dir string, interval time.Duration) *fileCreds {
	if interval <= 0 {
		interval = DefaultCredentialsCheckInterval
	}
	return &fileCreds{dir: dir, interval: interval, now: time.Now}
}

// fileStamp identifies the credential files as they are now: a new inode
// (an atomic swap), size or modification time means new contents.
func fileStamp(dir string) string {
	var b strings.Builder
	for _, name := range []string{CredentialsFileAccessKeyID, CredentialsFileSecretAccessKey, CredentialsFileSessionToken} {
		fi, err := os.Stat(filepath.Join(dir, name)) // follows the ..data symlink
		if err != nil {
			b.WriteString("-;")
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%d/%d/%d;", ino, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// RetrieveWithCredContext implements credentials.Provider.
func (p *fileCreds) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	// Stamp first: files swapped after the stamp are read now and read
	// again after the next check, never missed.
	stamp := fileStamp(p.dir)
	read := func(name string, required bool) (string, error) {
		b, err := os.ReadFile(filepath.Join(p.dir, name))
		if errors.Is(err, fs.ErrNotExist) && !required {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		v := strings.TrimSpace(string(b))
		if v == "" && required {
			return "", fmt.Errorf("%s is empty", filepath.Join(p.dir, name))
		}
		return v, nil
	}
	var v credentials.Value
	var err error
	if v.AccessKeyID, err = read(CredentialsFileAccessKeyID, true); err != nil {
		return credentials.Value{}, err
	}
	if v.SecretAccessKey, err = read(CredentialsFileSecretAccessKey, true); err != nil {
		return credentials.Value{}, err
	}
	if v.SessionToken, err = read(CredentialsFileSessionToken, false); err != nil {
		return credentials.Value{}, err
	}
	v.SignerType = credentials.SignatureV4
	p.mu.Lock()
	p.stamp, p.checked = stamp, p.now()
	p.mu.Unlock()
	return v, nil
}

// Retrieve implements credentials.Provider.
func (p *fileCreds) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

// IsExpired implements credentials.Provider: the files changed since they
// were read (looked at no more than once per interval).
func (p *fileCreds) IsExpired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if now.Sub(p.checked) < p.interval {
		return false
	}
	p.checked = now
	return fileStamp(p.dir) != p.stamp
}

// credChain tries its sources in order and uses the first that yields
// keys, like minio-go's credentials.Chain, but fails with every source's
// reason instead of falling back to anonymous requests, logs the source
// it uses, and counts the times the keys changed (generation), which
// decides whether a request refused for its credentials is worth repeating
// (authRetry).
type credChain struct {
	endpoint string
	sources  []namedProvider
	log      *slog.Logger

	cur  atomic.Int32      // index of the source in use; -1 before the first
	gen  atomic.Uint64     // how many times the keys changed after the first
	last credentials.Value // guarded by minio-go's Credentials lock
}

func newCredChain(endpoint string, sources []namedProvider, log *slog.Logger) *credChain {
	c := &credChain{endpoint: endpoint, sources: sources, log: log}
	c.cur.Store(-1)
	return c
}

// RetrieveWithCredContext implements credentials.Provider. minio-go calls
// it under its Credentials lock, one call at a time.
func (c *credChain) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	var errs []string
	for i, s := range c.sources {
		v, err := s.RetrieveWithCredContext(cc)
		if err == nil && (v.AccessKeyID == "" || v.SecretAccessKey == "") {
			err = errors.New("no keys")
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", s.name, err))
			continue
		}
		prev := c.cur.Swap(int32(i))
		// The first keys are no change: a request refused before any
		// keys were read was refused with these.
		changed := c.last.AccessKeyID != "" && (v.AccessKeyID != c.last.AccessKeyID ||
			v.SecretAccessKey != c.last.SecretAccessKey || v.SessionToken != c.last.SessionToken)
		c.last = v
		if changed {
			c.gen.Add(1)
		}
		switch {
		case prev != int32(i):
			// Never the keys themselves: only where they came from.
			c.log.Info("S3 credentials", "endpoint", c.endpoint, "source", s.name)
		case changed:
			c.log.Info("S3 credentials changed", "endpoint", c.endpoint, "source", s.name)
		}
		return v, nil
	}
	return credentials.Value{}, fmt.Errorf("no S3 credentials for %s: %s", c.endpoint, strings.Join(errs, "; "))
}

// Retrieve implements credentials.Provider.
func (c *credChain) Retrieve() (credentials.Value, error) { return c.RetrieveWithCredContext(nil) }

// IsExpired implements credentials.Provider: the source in use says so.
func (c *credChain) IsExpired() bool {
	i := c.cur.Load()
	if i < 0 {
		return true
	}
	return c.sources[i].IsExpired()
}

// generation counts the changes of the keys in use.
func (c *credChain) generation() uint64 { return c.gen.Load() }

// source names the source in use ("" before the first request).
func (c *credChain) source() string {
	i := c.cur.Load()
	if i < 0 {
		return ""
	}
	return c.sources[i].name
}

// refusedCredential reports whether an S3 error code says the request's
// credentials were refused: unknown or deactivated key, wrong secret,
// expired or invalid session token. AccessDenied is among them because S3
// answers a HEAD request (no body, no code) with a bare 403, whatever the
// reason.
func refusedCredential(code string) bool {
	switch code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
		"TokenRefreshRequired", "AccessDenied":
		return true
	}
	return false
}

// authRetry decides whether a request refused for its credentials is
// repeated: once (attempt 0 only), and only when the keys changed since
// the request was made (generation before and after reading the sources
// again). Keys that did not change would be refused again.
//
// Repeating is safe for every request, conditional puts and multipart
// completions included: S3 authenticates a request before it looks at the
// object, so a request refused for its credentials changed nothing, and
// its repetition cannot meet its own earlier write.
func authRetry(attempt int, code string, genBefore, genAfter uint64) bool {
	return attempt == 0 && refusedCredential(code) && genAfter != genBefore
}

// errorCode is the S3 error code of a minio-go error ("" if none).
func errorCode(err error) string {
	return minio.ToErrorResponse(err).Code
}
