package objstore

import (
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestCredentialSourcesOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  S3Config
		want []credSource
	}{
		{"none", S3Config{}, nil},
		{"static", S3Config{AccessKeyID: "k", SecretAccessKey: "s"}, []credSource{sourceStatic}},
		{"half static still counts (and is refused by check)", S3Config{SecretAccessKey: "s"}, []credSource{sourceStatic}},
		{"files", S3Config{CredentialsDir: "/creds"}, []credSource{sourceFiles}},
		{"files before static", S3Config{CredentialsDir: "/creds", AccessKeyID: "k", SecretAccessKey: "s"}, []credSource{sourceFiles, sourceStatic}},
		{"static before web identity", S3Config{AccessKeyID: "k", SecretAccessKey: "s", WebIdentityTokenFile: "/t"}, []credSource{sourceStatic, sourceWebIdentity}},
		{"role ARN alone is no source", S3Config{RoleARN: "arn:aws:iam::1:role/r"}, nil},
		{"web identity before instance role", S3Config{WebIdentityTokenFile: "/t", RoleARN: "arn", InstanceRole: true}, []credSource{sourceWebIdentity, sourceInstanceRole}},
		{"instance role", S3Config{InstanceRole: true}, []credSource{sourceInstanceRole}},
		{"web identity from a function", S3Config{WebIdentityToken: func() (string, error) { return "t", nil }}, []credSource{sourceWebIdentity}},
		{"all four", S3Config{CredentialsDir: "/c", AccessKeyID: "k", SecretAccessKey: "s", WebIdentityTokenFile: "/t", InstanceRole: true},
			[]credSource{sourceFiles, sourceStatic, sourceWebIdentity, sourceInstanceRole}},
	} {
		if got := credentialSources(tc.cfg); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: credentialSources = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAuthRetry(t *testing.T) {
	for _, tc := range []struct {
		attempt    int
		code       string
		before, at uint64
		want       bool
	}{
		{0, "InvalidAccessKeyId", 1, 2, true},    // rotated: the new key is worth one try
		{0, "SignatureDoesNotMatch", 1, 2, true}, // a new secret for the same key
		{0, "ExpiredToken", 3, 4, true},          // a session token renewed
		{0, "AccessDenied", 1, 2, true},          // a HEAD refused (no code in the answer)
		{0, "InvalidAccessKeyId", 1, 1, false},   // the same keys again: refused again
		{1, "InvalidAccessKeyId", 1, 2, false},   // only once
		{0, "PreconditionFailed", 1, 2, false},   // an answer about the object: never
		{0, "NoSuchKey", 1, 2, false},
		{0, "SlowDown", 1, 2, false}, // transient: minio-go's own retries
		{0, "", 1, 2, false},         // no answer (network)
	} {
		if got := authRetry(tc.attempt, tc.code, tc.before, tc.at); got != tc.want {
			t.Errorf("authRetry(%d, %q, %d, %d) = %v, want %v", tc.attempt, tc.code, tc.before, tc.at, got, tc.want)
		}
	}
}

func TestSTSEndpoint(t *testing.T) {
	for _, tc := range []struct{ configured, endpoint, region, want string }{
		{"https://sts.example.com/", "https://s3.eu-west-1.amazonaws.com", "eu-west-1", "https://sts.example.com"},
		{"", "https://s3.eu-west-1.amazonaws.com", "eu-west-1", "https://sts.eu-west-1.amazonaws.com"},
		{"", "https://s3.cn-north-1.amazonaws.com.cn", "cn-north-1", "https://sts.cn-north-1.amazonaws.com.cn"},
		{"", "http://minio.shale:9000", "us-east-1", "http://minio.shale:9000"}, // MinIO serves STS on its S3 port
	} {
		u, _ := url.Parse(tc.endpoint)
		if got := stsEndpoint(tc.configured, u, tc.region); got != tc.want {
			t.Errorf("stsEndpoint(%q, %s, %s) = %s, want %s", tc.configured, tc.endpoint, tc.region, got, tc.want)
		}
	}
}

// writeCreds replaces the credential files in dir the way the kubelet
// updates a Secret volume: new files, then one rename.
func writeCreds(t *testing.T, dir, access, secret string) {
	t.Helper()
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "new")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{CredentialsFileAccessKeyID: access, CredentialsFileSecretAccessKey: secret + "\n"} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
}

// The files are read again once they change, looked at no more than once
// per interval; unchanged files are not read again.
func TestFileCredsReread(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	writeCreds(t, dir, "A", "secretA")
	now := time.Unix(1000, 0)
	p := newFileCreds(dir, 5*time.Second)
	p.now = func() time.Time { return now }

	v, err := p.Retrieve()
	if err != nil || v.AccessKeyID != "A" || v.SecretAccessKey != "secretA" || v.SessionToken != "" {
		t.Fatalf("Retrieve = %+v, %v", v, err)
	}
	now = now.Add(10 * time.Second)
	if p.IsExpired() {
		t.Fatal("unchanged files reported as changed")
	}

	writeCreds(t, dir, "B", "secretB")
	now = now.Add(time.Second)
	if p.IsExpired() {
		t.Fatal("files looked at again within the interval")
	}
	now = now.Add(5 * time.Second)
	if !p.IsExpired() {
		t.Fatal("new files not noticed after the interval")
	}
	if v, err = p.Retrieve(); err != nil || v.AccessKeyID != "B" || v.SecretAccessKey != "secretB" {
		t.Fatalf("Retrieve after the change = %+v, %v", v, err)
	}
	now = now.Add(time.Minute)
	if p.IsExpired() {
		t.Fatal("files just read reported as changed")
	}

	if err := os.WriteFile(filepath.Join(dir, CredentialsFileSessionToken), []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if !p.IsExpired() {
		t.Fatal("a new session token file not noticed")
	}
	if v, err = p.Retrieve(); err != nil || v.SessionToken != "tok" {
		t.Fatalf("Retrieve with a session token = %+v, %v", v, err)
	}

	os.Remove(filepath.Join(dir, CredentialsFileSecretAccessKey))
	if _, err := p.Retrieve(); err == nil || !strings.Contains(err.Error(), CredentialsFileSecretAccessKey) {
		t.Fatalf("Retrieve without the secret file: %v", err)
	}
}

// The chain uses the first source that yields keys, counts key changes,
// and names every source's reason when none does.
func TestCredChain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	ep, _ := url.Parse("http://127.0.0.1:9000")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := S3Config{Endpoint: ep.String(), CredentialsDir: dir, AccessKeyID: "envkey", SecretAccessKey: "envsecret"}
	c := newCredChain(ep.String(), cfg.providers(ep, DefaultRegion), quiet)
	creds := credentials.New(c)

	// No files yet: the static keys.
	v, err := creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID != "envkey" || !strings.HasPrefix(c.source(), "static keys") {
		t.Fatalf("without files: %+v, %v from %q", v, err, c.source())
	}
	if c.IsExpired() {
		t.Fatal("static keys expired")
	}
	gen := c.generation()

	// Files appear: a refusal makes the store read again (Expire), and
	// the files win.
	writeCreds(t, dir, "filekey", "filesecret")
	creds.Expire()
	if v, err = creds.GetWithContext(nil); err != nil || v.AccessKeyID != "filekey" || c.source() != "the files in "+dir {
		t.Fatalf("with files: %+v, %v from %q", v, err, c.source())
	}
	if c.generation() == gen {
		t.Fatal("new keys did not change the generation")
	}
	gen = c.generation()
	creds.Expire()
	if _, err = creds.GetWithContext(nil); err != nil || c.generation() != gen {
		t.Fatalf("the same keys read again changed the generation (%d to %d), %v", gen, c.generation(), err)
	}

	// Nothing yields keys: an error naming each source and its reason.
	c = newCredChain(ep.String(), S3Config{CredentialsDir: filepath.Join(dir, "missing"), WebIdentityTokenFile: filepath.Join(dir, "no-token")}.providers(ep, DefaultRegion), quiet)
	_, err = credentials.New(c).GetWithContext(nil)
	for _, want := range []string{"no S3 credentials for http://127.0.0.1:9000", "the files in " + dir, CredentialsFileAccessKeyID, "web identity (" + filepath.Join(dir, "no-token") + ")"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no source with keys: %v, want it to mention %q", err, want)
		}
	}
}
