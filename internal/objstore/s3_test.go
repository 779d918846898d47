package objstore_test

import (
	"fmt"
	"testing"

	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// The conformance suite against the pinned MinIO server: one server, one
// bucket per test, and a prefix so the store is rooted below the bucket.
func TestS3Conformance(t *testing.T) {
	srv := miniotest.Start(t)
	n := 0
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) objstore.Store {
			n++
			bucket := fmt.Sprintf("suite-%d", n)
			srv.CreateBucket(t, bucket)
			s, err := objstore.OpenS3("s3://"+bucket+"/db/root", srv.S3Config())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
