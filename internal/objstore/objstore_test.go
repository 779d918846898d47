package objstore

import (
	"os"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "file:///var/lib/shale/db", want: "file:///var/lib/shale/db"},
		{in: "file:///var/lib/shale/db/", want: "file:///var/lib/shale/db"},
		{in: "/tmp/x/../db", want: "file:///tmp/db"},
		{in: "file://relative/db", err: "absolute path"},
		{in: "file:relative", err: "absolute path"},
		{in: "relative/db", err: "no scheme"},
		{in: "", err: "empty"},

		{in: "s3://shale-db", want: "s3://shale-db"},
		{in: "s3://shale-db/", want: "s3://shale-db"},
		{in: "s3://shale-db/prod/orders", want: "s3://shale-db/prod/orders"},
		{in: "s3://shale-db/prod/orders/", want: "s3://shale-db/prod/orders"},
		{in: "s3://my.bucket-1/x", want: "s3://my.bucket-1/x"},
		{in: "s3://abc/a.b/c-d_e", want: "s3://abc/a.b/c-d_e"},
		{in: "s3:///prefix", err: "no bucket"},
		{in: "s3://", err: "no bucket"},
		{in: "s3://ab/x", err: "3 to 63 characters"},
		{in: "s3://" + strings.Repeat("b", 64), err: "3 to 63 characters"},
		{in: "s3://Shale/x", err: "lower-case"},
		{in: "s3://sh_ale/x", err: "lower-case"},
		{in: "s3://-shale/x", err: "start and end"},
		{in: "s3://shale./x", err: "start and end"},
		{in: "s3://sha..le/x", err: `".."`},
		{in: "s3://shale/a//b", err: "prefix"},
		{in: "s3://shale/a/../b", err: "prefix"},
		{in: "s3://shale/./b", err: "prefix"},
		{in: "s3://shale/x?versionId=1", err: "no query"},
		{in: "s3://shale/x?", err: "no query"},
		{in: "s3://shale/x#frag", err: "no fragment"},
		{in: "s3://key:secret@shale/x", err: "AWS_ACCESS_KEY_ID"},
		{in: "s3://shale:9000/x", err: "AWS_ENDPOINT_URL"},
		{in: "s3:shale/x", err: "two slashes"},
	} {
		u, err := ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %v, want error containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || u.String() != tc.want {
			t.Errorf("ParseURL(%q) = %v, %v; want %s", tc.in, u, err, tc.want)
		}
	}
	if _, err := Open("gs://bucket/x"); err == nil || !strings.Contains(err.Error(), "unsupported scheme") || !strings.Contains(err.Error(), "s3://BUCKET/PREFIX") {
		t.Fatalf("Open(gs://) = %v", err)
	}
}

func TestOpenS3Config(t *testing.T) {
	full := S3Config{Endpoint: "http://127.0.0.1:9000", AccessKeyID: "k", SecretAccessKey: "s"}
	tempDir := t.TempDir()
	tempFile := tempDir + "/file"
	if err := os.WriteFile(tempFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*S3Config)
		err  string
	}{
		{"ok", func(*S3Config) {}, ""},
		{"https", func(c *S3Config) { c.Endpoint = "https://s3.eu-west-1.amazonaws.com" }, ""},
		{"no endpoint", func(c *S3Config) { c.Endpoint = "" }, "set AWS_ENDPOINT_URL"},
		{"no scheme", func(c *S3Config) { c.Endpoint = "127.0.0.1:9000" }, "want http://HOST"},
		{"ftp", func(c *S3Config) { c.Endpoint = "ftp://host" }, "want http://HOST"},
		{"path", func(c *S3Config) { c.Endpoint = "http://host:9000/bucket" }, "bucket goes in the store URL"},
		{"no key", func(c *S3Config) { c.AccessKeyID = "" }, "set AWS_ACCESS_KEY_ID"},
		{"no secret", func(c *S3Config) { c.SecretAccessKey = "" }, "set AWS_SECRET_ACCESS_KEY"},
		{"no credentials", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey = "", "" }, "no S3 credentials for http://127.0.0.1:9000: set SHALE_S3_CREDENTIALS_DIR"},
		{"no credentials, every way named", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey = "", "" }, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_WEB_IDENTITY_TOKEN_FILE (web identity, with AWS_ROLE_ARN), or SHALE_S3_INSTANCE_ROLE=true"},
		{"credentials dir only", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey, c.CredentialsDir = "", "", tempDir }, ""},
		{"credentials dir missing", func(c *S3Config) { c.CredentialsDir = tempDir + "/nope" }, "S3 credentials directory (SHALE_S3_CREDENTIALS_DIR)"},
		{"credentials dir a file", func(c *S3Config) { c.CredentialsDir = tempFile }, "is not a directory"},
		{"web identity only", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey, c.WebIdentityTokenFile = "", "", "/token" }, ""},
		{"instance role only", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey, c.InstanceRole = "", "", true }, ""},
		{"small parts", func(c *S3Config) { c.PartSize = 1 << 20 }, "5 MiB"},
	} {
		cfg := full
		tc.edit(&cfg)
		s, err := OpenS3("s3://shale-db/prod", cfg)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if s.URL() != "s3://shale-db/prod" || s.Bucket() != "shale-db" || s.Prefix() != "prod/" {
				t.Errorf("%s: store %s bucket %q prefix %q", tc.name, s.URL(), s.Bucket(), s.Prefix())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: OpenS3 = %v, want error containing %q", tc.name, err, tc.err)
		}
	}
	if _, err := OpenS3("file:///x", full); err == nil {
		t.Error("OpenS3 accepted a file URL")
	}
	if s, err := OpenS3("s3://shale-db", full); err != nil || s.Prefix() != "" || s.URL() != "s3://shale-db" {
		t.Errorf("bucket root: %v, %v", s, err)
	}
}

func TestOpenS3FromEnv(t *testing.T) {
	for _, k := range []string{EnvEndpoint, EnvEndpointS3, EnvAccessKeyID, EnvSecretAccessKey, EnvSessionToken, EnvRegion, EnvDefaultRegion,
		EnvCredentialsDir, EnvInstanceRole, EnvWebIdentityTokenFile, EnvRoleARN, EnvRoleSessionName, EnvEndpointSTS,
		EnvContainerCredentialsFullURI, EnvContainerCredentialsRelativeURI} {
		t.Setenv(k, "")
	}
	if _, err := Open("s3://shale-db/x"); err == nil || !strings.Contains(err.Error(), "set AWS_ENDPOINT_URL") {
		t.Fatalf("Open without AWS_ENDPOINT_URL: %v", err)
	}
	t.Setenv(EnvEndpoint, "http://127.0.0.1:1")
	if _, err := Open("s3://shale-db/x"); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("Open without credentials: %v", err)
	}
	// Each other source, from its variables.
	dir := t.TempDir()
	for _, tc := range []struct {
		env  map[string]string
		want func(S3Config) bool
	}{
		{map[string]string{EnvCredentialsDir: dir}, func(c S3Config) bool { return c.CredentialsDir == dir }},
		{map[string]string{EnvWebIdentityTokenFile: "/t", EnvRoleARN: "arn:r", EnvRoleSessionName: "s", EnvEndpointSTS: "https://sts"}, func(c S3Config) bool {
			return c.WebIdentityTokenFile == "/t" && c.RoleARN == "arn:r" && c.RoleSessionName == "s" && c.STSEndpoint == "https://sts"
		}},
		{map[string]string{EnvInstanceRole: "true"}, func(c S3Config) bool { return c.InstanceRole }},
		{map[string]string{EnvContainerCredentialsFullURI: "http://169.254.170.23/v1/credentials"}, func(c S3Config) bool { return c.InstanceRole }},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		cfg := S3ConfigFromEnv()
		if !tc.want(cfg) {
			t.Errorf("env %v: config %+v", tc.env, cfg)
		}
		if _, err := Open("s3://shale-db/x"); err != nil {
			t.Errorf("env %v: Open: %v", tc.env, err)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
	t.Setenv(EnvAccessKeyID, "k")
	t.Setenv(EnvSecretAccessKey, "s")
	t.Setenv(EnvDefaultRegion, "eu-west-1")
	t.Setenv(EnvEndpointS3, "http://127.0.0.1:2")
	cfg := S3ConfigFromEnv()
	if cfg.Endpoint != "http://127.0.0.1:2" || cfg.Region != "eu-west-1" {
		t.Fatalf("config from env = %+v", cfg)
	}
	t.Setenv(EnvRegion, "eu-central-1")
	if cfg := S3ConfigFromEnv(); cfg.Region != "eu-central-1" {
		t.Fatalf("AWS_REGION did not win over AWS_DEFAULT_REGION: %+v", cfg)
	}
	s, err := Open("s3://shale-db/x/")
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() != "s3://shale-db/x" {
		t.Fatalf("URL = %s", s.URL())
	}
	if _, ok := LocalDir(s); ok {
		t.Fatal("an s3 store has a local dir")
	}
}
