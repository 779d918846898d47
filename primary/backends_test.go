package primary

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shale-rocks/shale/internal/miniotest"
)

// backend is a store the primary tests run on: file:// and a real MinIO.
type backend struct {
	name string
	// newDB returns the URL of a new, empty database location.
	newDB func(t *testing.T) string
	minio *miniotest.Server // nil for file://
}

// forEachBackend runs fn as a subtest on every backend. The MinIO subtest
// starts the pinned server and points the AWS_* variables at it.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("file", func(t *testing.T) {
		fn(t, backend{name: "file", newDB: func(t *testing.T) string {
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
		fn(t, backend{name: "minio", minio: srv, newDB: func(t *testing.T) string {
			n++
			bucket := fmt.Sprintf("db%d", n)
			srv.CreateBucket(t, bucket)
			return "s3://" + bucket + "/shale/db"
		}})
	})
}
