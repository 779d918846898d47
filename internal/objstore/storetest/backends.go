package storetest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/miniotest"
)

// Location is a store backend the data-plane tests run on: file:// and a
// real MinIO server.
type Location struct {
	Name string
	// NewURL returns the URL of a new, empty location.
	NewURL func(t *testing.T) string
	// MinIO is the server behind an s3:// location (nil for file://).
	MinIO *miniotest.Server
}

// ForEachBackend runs fn as a subtest per backend. The MinIO subtest starts
// the pinned server and points the AWS_* variables at it (so objstore.Open
// and child processes reach it).
func ForEachBackend(t *testing.T, fn func(t *testing.T, loc Location)) {
	t.Run("file", func(t *testing.T) {
		fn(t, Location{Name: "file", NewURL: func(t *testing.T) string {
			return "file://" + filepath.Join(t.TempDir(), "db")
		}})
	})
	t.Run("minio", func(t *testing.T) {
		srv := miniotest.Start(t)
		for _, kv := range srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		n := 0
		fn(t, Location{Name: "minio", MinIO: srv, NewURL: func(t *testing.T) string {
			n++
			bucket := fmt.Sprintf("db%d", n)
			srv.CreateBucket(t, bucket)
			return "s3://" + bucket + "/shale/db"
		}})
	})
}
