package protocol

import "testing"

func TestDecideCloneCopies(t *testing.T) {
	s3 := func(endpoint, bucket string, own bool) StoreLocation {
		return StoreLocation{Scheme: "s3", Endpoint: endpoint, Bucket: bucket, OwnCredentials: own}
	}
	file := StoreLocation{Scheme: "file", OwnCredentials: true}
	const a, b = "http://127.0.0.1:9000", "http://127.0.0.1:9001"
	for _, tc := range []struct {
		name          string
		clone, parent StoreLocation
		asked, want   bool
	}{
		{"same bucket", s3(a, "x", true), s3(a, "x", true), false, false},
		{"same bucket, endpoint spelled with a slash and upper case", s3(a, "x", true), s3("HTTP://127.0.0.1:9000/", "x", true), false, false},
		{"same bucket, asked", s3(a, "x", true), s3(a, "x", true), true, true},
		{"another bucket of the endpoint, own credentials: shared", s3(a, "x", true), s3(a, "y", true), false, false},
		{"another bucket, asked", s3(a, "x", true), s3(a, "y", true), true, true},
		{"another endpoint", s3(a, "x", true), s3(b, "x", true), false, true},
		{"same bucket, other credentials", s3(a, "x", true), s3(a, "x", false), false, true},
		{"file to file", file, file, false, false},
		{"file to file, asked", file, file, true, true},
		{"file parent, s3 clone", s3(a, "x", true), file, false, true},
		{"s3 parent, file clone", file, s3(a, "x", true), false, true},
	} {
		got, why := CloneCopies(tc.clone, tc.parent, tc.asked)
		if got != tc.want || why == "" {
			t.Errorf("%s: CloneCopies = %v (%q), want %v", tc.name, got, why, tc.want)
		}
	}
}
