package objstore

import (
	"strings"
	"testing"
)

// Every part carries a proof of its bytes the store checks, and an MD5
// only when it is the only one: over TLS the payload is unsigned.
func TestPartChecksOf(t *testing.T) {
	for _, tc := range []struct {
		secure, checksums bool
		want              partChecks
	}{
		{secure: true, checksums: true, want: partChecks{crc32c: true}},
		{secure: true, checksums: false, want: partChecks{md5: true}},    // nothing else over TLS
		{secure: false, checksums: true, want: partChecks{crc32c: true}}, // and signed
		{secure: false, checksums: false, want: partChecks{}},            // signed chunk by chunk
	} {
		if got := partChecksOf(tc.secure, tc.checksums); got != tc.want {
			t.Errorf("partChecksOf(secure=%v, checksums=%v) = %+v, want %+v", tc.secure, tc.checksums, got, tc.want)
		}
	}
}

// A store that refuses checksum trailers leads the user to
// SHALE_S3_CHECKSUM=none; a checksum that does not match does not.
func TestRefusesChecksums(t *testing.T) {
	for _, tc := range []struct {
		code, message string
		want          bool
	}{
		{"NotImplemented", "A header you provided implies functionality that is not implemented", true},
		{"InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD or a valid sha256 value.", true},
		{"InvalidRequest", "STREAMING-UNSIGNED-PAYLOAD-TRAILER is not supported", true},
		{"InvalidArgument", "Unsupported checksum algorithm CRC32C", true},
		{"InvalidArgument", "Invalid storage class", false},
		{"XAmzContentChecksumMismatch", "The provided 'x-amz-checksum' header does not match what was computed.", false},
		{"BadDigest", "The Content-Md5 you specified did not match what we received.", false},
		{"AccessDenied", "Access Denied", false},
		{"", "", false},
	} {
		if got := refusesChecksums(tc.code, tc.message); got != tc.want {
			t.Errorf("refusesChecksums(%q, %q) = %v, want %v", tc.code, tc.message, got, tc.want)
		}
	}
}

func TestS3ConfigChecksum(t *testing.T) {
	base := S3Config{Endpoint: "https://127.0.0.1:9000", AccessKeyID: "k", SecretAccessKey: "s"}
	for _, v := range []string{"", ChecksumCRC32C, ChecksumNone} {
		c := base
		c.Checksum = v
		if _, err := c.check(); err != nil {
			t.Errorf("checksum %q: %v", v, err)
		}
	}
	c := base
	c.Checksum = "md5"
	_, err := c.check()
	if err == nil || !strings.Contains(err.Error(), EnvChecksum) || !strings.Contains(err.Error(), ChecksumNone) {
		t.Errorf("checksum md5: %v (want an error naming %s and its values)", err, EnvChecksum)
	}
	t.Setenv(EnvChecksum, " None ")
	if got := S3ConfigFromEnv().Checksum; got != ChecksumNone {
		t.Errorf("%s=' None ': Checksum %q", EnvChecksum, got)
	}
}
