package objstore

import "testing"

// CopiesServerSide says when CopyAcross is one CopyObject: a backup takes
// a copy's checksum from the stream otherwise.
func TestCopiesServerSide(t *testing.T) {
	s3 := func(url, endpoint string) Store {
		s, err := OpenS3(url, S3Config{Endpoint: endpoint, AccessKeyID: "k", SecretAccessKey: "s"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	file, err := OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := s3("s3://bucket-a/x", "http://127.0.0.1:9000"), s3("s3://bucket-b/y", "http://127.0.0.1:9000")
	far := s3("s3://bucket-a/x", "http://127.0.0.2:9000")
	for _, tc := range []struct {
		name     string
		src, dst Store
		want     bool
	}{
		{"two buckets, one endpoint", a, b, true},
		{"two endpoints", a, far, false},
		{"file to s3", file, a, false},
		{"s3 to file", a, file, false},
	} {
		if got := CopiesServerSide(tc.src, tc.dst); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
