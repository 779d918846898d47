package objstore

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// The standard client variables S3ConfigFromEnv reads.
const (
	EnvEndpoint        = "AWS_ENDPOINT_URL"
	EnvEndpointS3      = "AWS_ENDPOINT_URL_S3" // wins over AWS_ENDPOINT_URL, as in the AWS SDKs
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
	EnvRegion          = "AWS_REGION"
	EnvDefaultRegion   = "AWS_DEFAULT_REGION" // used when AWS_REGION is unset

	// EnvChecksum sets S3Config.Checksum: crc32c (the default) or none.
	EnvChecksum = "SHALE_S3_CHECKSUM"

	// DefaultRegion is the region requests are signed for when none is set.
	DefaultRegion = "us-east-1"
)

// S3Config says how to reach an S3-compatible service. OpenS3 uses it as
// given: build it with S3ConfigFromEnv and let flags override fields.
type S3Config struct {
	// Endpoint is the service URL, e.g. http://127.0.0.1:9000 or
	// https://s3.eu-west-1.amazonaws.com; its scheme decides TLS. Custom
	// endpoints (MinIO, ...) are addressed path-style
	// (ENDPOINT/BUCKET/KEY), Amazon's virtual-host style.
	Endpoint string
	Region   string // "" means DefaultRegion

	// Credentials come from the first of these sources that yields keys,
	// in this order (see credentialSources); at least one must be set.
	//
	// CredentialsDir is a directory with the files accessKeyID and
	// secretAccessKey (and optionally sessionToken): a Kubernetes Secret
	// mounted as a volume. They are read again when they change (looked
	// at no more than every CredentialsCheckInterval) and when the store
	// refuses a request's credentials, so a rotated Secret is picked up
	// without a restart.
	CredentialsDir string
	// Static keys.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string // optional
	// Web identity: a token file (a projected ServiceAccount token)
	// exchanged for credentials at STSEndpoint ("" means AWS's regional
	// STS for an AWS endpoint, else Endpoint) for the role RoleARN.
	WebIdentityTokenFile string
	// WebIdentityToken, if set, gives the token instead of a file (the
	// operator asks the API server for a ServiceAccount's tokens), and
	// WebIdentityName names its identity in logs and errors.
	WebIdentityToken func() (string, error)
	WebIdentityName  string
	RoleARN          string
	RoleSessionName  string // optional
	STSEndpoint      string
	// InstanceRole: the instance's role (EC2 metadata) or the container's
	// (ECS, EKS Pod Identity: AWS_CONTAINER_CREDENTIALS_*).
	InstanceRole bool

	// CredentialsCheckInterval bounds how often the files in
	// CredentialsDir are checked for changes; 0 means 5 s.
	CredentialsCheckInterval time.Duration
	// Logger receives one line naming the source of the credentials
	// (never their values), and one when they change; nil means
	// slog.Default().
	Logger *slog.Logger

	// MaxAttempts bounds the attempts of one idempotent request (GET,
	// HEAD, LIST, DELETE, unconditional PUT and copy) on transient
	// failures; 0 means 3. Conditional puts are attempted once: see
	// IsRetryable.
	MaxAttempts int
	// PartSize is the part size of multipart uploads, which puts larger
	// than it (or of unknown size) use; 0 means the client's default
	// (16 MiB). S3 requires at least 5 MiB. A conditional put of unknown
	// size that fits one part is a single PUT.
	PartSize uint64
	// Transport carries the requests; nil means a default HTTP transport.
	Transport http.RoundTripper

	// Checksum is what every upload carries for the store to verify the
	// bytes it received: "" or ChecksumCRC32C (the default) sends a
	// CRC32C with each object and part (a header, or a trailer when the
	// body cannot be read twice); ChecksumNone sends none, for an
	// S3-compatible store that refuses checksums. Over plain
	// HTTP the payload is signed (SHA-256 per chunk) either way; over TLS
	// with ChecksumNone, parts carry an MD5 instead. Set by
	// SHALE_S3_CHECKSUM.
	Checksum string
}

// The values of S3Config.Checksum (and SHALE_S3_CHECKSUM).
const (
	ChecksumCRC32C = "crc32c"
	ChecksumNone   = "none"
)

// checksums reports whether uploads carry a CRC32C.
func (c S3Config) checksums() bool { return c.Checksum != ChecksumNone }

// S3ConfigFromEnv reads the standard AWS client variables, and
// SHALE_S3_CREDENTIALS_DIR, SHALE_S3_INSTANCE_ROLE and SHALE_S3_CHECKSUM.
func S3ConfigFromEnv() S3Config {
	instanceRole, _ := strconv.ParseBool(os.Getenv(EnvInstanceRole))
	c := S3Config{
		Endpoint:             os.Getenv(EnvEndpointS3),
		CredentialsDir:       os.Getenv(EnvCredentialsDir),
		AccessKeyID:          os.Getenv(EnvAccessKeyID),
		SecretAccessKey:      os.Getenv(EnvSecretAccessKey),
		SessionToken:         os.Getenv(EnvSessionToken),
		WebIdentityTokenFile: os.Getenv(EnvWebIdentityTokenFile),
		RoleARN:              os.Getenv(EnvRoleARN),
		RoleSessionName:      os.Getenv(EnvRoleSessionName),
		STSEndpoint:          os.Getenv(EnvEndpointSTS),
		InstanceRole: instanceRole || os.Getenv(EnvContainerCredentialsFullURI) != "" ||
			os.Getenv(EnvContainerCredentialsRelativeURI) != "",
		Region:   os.Getenv(EnvRegion),
		Checksum: strings.ToLower(strings.TrimSpace(os.Getenv(EnvChecksum))),
	}
	if c.Endpoint == "" {
		c.Endpoint = os.Getenv(EnvEndpoint)
	}
	if c.Region == "" {
		c.Region = os.Getenv(EnvDefaultRegion)
	}
	return c
}

const minPartSize = 5 << 20

// check validates the configuration and returns the endpoint URL.
func (c S3Config) check() (*url.URL, error) {
	if c.Endpoint == "" {
		return nil, fmt.Errorf("no S3 endpoint: set %s (e.g. http://127.0.0.1:9000 for a local MinIO, https://s3.REGION.amazonaws.com for AWS)", EnvEndpoint)
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("S3 endpoint %q (%s): want http://HOST[:PORT] or https://HOST[:PORT]", c.Endpoint, EnvEndpoint)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("S3 endpoint %q (%s): only a scheme, host and port are allowed; the bucket goes in the store URL (s3://BUCKET/PREFIX)", c.Endpoint, EnvEndpoint)
	}
	if err := c.checkCredentials(); err != nil {
		return nil, err
	}
	if c.MaxAttempts < 0 {
		return nil, errors.New("S3 MaxAttempts must not be negative")
	}
	if c.PartSize != 0 && c.PartSize < minPartSize {
		return nil, fmt.Errorf("S3 part size %d is below the 5 MiB minimum", c.PartSize)
	}
	switch c.Checksum {
	case "", ChecksumCRC32C, ChecksumNone:
	default:
		return nil, fmt.Errorf("S3 checksum %q (%s): want %s (the default: a CRC32C with every upload) or %s (none, for a store that refuses checksum trailers)",
			c.Checksum, EnvChecksum, ChecksumCRC32C, ChecksumNone)
	}
	return u, nil
}
