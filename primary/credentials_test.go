package primary

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// A primary whose credentials come from files (the ObjectStore's Secret,
// mounted as a volume) keeps its ownership across key rotations: the store
// comes back with new keys, the files hold them, and the same primary goes
// on acknowledging synced writes, with no fence and no restart; the next
// owner finds every acknowledged write.
func TestKeyRotationKeepsOwnership(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "rotation")
	dir := filepath.Join(t.TempDir(), "s3-credentials")
	srv.WriteCredentials(t, dir)
	t.Setenv(objstore.EnvEndpoint, srv.Endpoint)
	t.Setenv(objstore.EnvRegion, miniotest.Region)
	t.Setenv(objstore.EnvAccessKeyID, "")
	t.Setenv(objstore.EnvSecretAccessKey, "")
	t.Setenv(objstore.EnvCredentialsDir, dir)
	db := "s3://rotation/db"
	a, err := startOwnerWith(t, db, shalefs.Config{Epoch: 1, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acked := map[string]bool{}
	put := func(k string) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := a.kv.Put(cctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(k), Sync: true})
		if err == nil {
			acked[k] = true
		}
		return err
	}
	for round := 0; round < 3; round++ {
		for i := 0; i < 50; i++ {
			if err := put(fmt.Sprintf("r%d/%03d", round, i)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		// Rotate: the old key stops working when the store comes back
		// with the new one, which the files already hold (the kubelet
		// updated the Secret volume) but the primary has not read yet.
		access, secret := miniotest.NewKeys()
		srv.Stop()
		miniotest.WriteCredentials(t, dir, access, secret)
		srv.RestartWithKeys(t, access, secret)
		if _, err := a.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatalf("round %d: flush after the rotation: %v", round, err)
		}
	}
	if err := put("last"); err != nil {
		t.Fatalf("a synced write after the rotations: %v", err)
	}
	select {
	case <-a.srv.fs.Fenced():
		t.Fatalf("the primary stopped: %v", a.srv.fs.FenceError())
	default:
	}
	a.stop()

	b := mustOwner(t, db, 2)
	for k := range acked {
		r, err := b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
		// UNAVAILABLE (a confirmation slower than b's 100 ms lease on a
		// busy machine) says nothing about the data: retry, as a client
		// would.
		for deadline := time.Now().Add(30 * time.Second); status.Code(err) == codes.Unavailable && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			r, err = b.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
		}
		if err != nil || string(r.Value) != k {
			t.Fatalf("acknowledged %s lost across the rotations: %v", k, err)
		}
	}
	t.Logf("%d acknowledged writes kept across 3 key rotations", len(acked))
}
