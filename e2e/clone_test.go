//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepClone: a RocksDB with spec.bootstrap.cloneFrom the main database
// becomes Ready and serves every key the checkpoint step wrote (their last
// values, "after"), from the parent's tables (its pin is in the parent's
// directory; the checkpoint the operator made for it is deleted once it is
// ready); a write to the clone is not in the parent and a later write to
// the parent is not in the clone; the clone deleted with reclaimPolicy
// Delete leaves its own directory empty and the parent serving every key.
func stepClone(t *testing.T, s *suite) {
	mc := s.minio(t)
	parentAddr := s.rwAddr(t)
	parent := s.rocksDB(t, s.db)
	const name = "e2e-clone"

	// Every key of the checkpoint step, as the parent serves it now ("after"
	// once that step ran; written here when the step was focused alone).
	want := map[string]string{}
	callFresh(t, parentAddr, "the checkpoint step's keys read from "+s.db, func(c context.Context, kv kvv1.KVClient) error {
		for i := range 50 {
			key := fmt.Sprintf("e2e/ckpt/%02d", i)
			r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
			if status.Code(err) == codes.NotFound {
				if _, err := kv.Put(c, putReq(key, "after")); err != nil {
					return fmt.Errorf("put %s: %w", key, err)
				}
				want[key] = "after"
				continue
			}
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			want[key] = string(r.Value)
		}
		return nil
	})
	if want["e2e/ckpt/00"] != "after" {
		t.Fatalf("%s holds %q for e2e/ckpt/00, want \"after\" (the checkpoint step's last write)", s.db, want["e2e/ckpt/00"])
	}

	clone := s.createRocksDBWith(t, name, shalev1.ReclaimDelete, func(db *shalev1.RocksDB) {
		db.Spec.Bootstrap = &shalev1.BootstrapSpec{CloneFrom: &shalev1.CloneSource{Database: s.db}}
	})
	clone = s.waitReady(t, name, 1, 5*time.Minute)
	c := clone.Status.Clone
	if c == nil || c.Database != s.db || c.UID != parent.UID || c.Checkpoint != "clone-"+string(clone.UID) {
		t.Fatalf("RocksDB %s is Ready with status.clone %+v: want %s (UID %s) at checkpoint clone-%s", name, c, s.db, parent.UID, clone.UID)
	}
	if !strings.HasSuffix(clone.Status.StoragePath, "/"+clone.DirName()) {
		t.Fatalf("the clone's status.storagePath %q is not its own directory %s", clone.Status.StoragePath, clone.DirName())
	}
	s.expectEvent(t, "RocksDB", name, clone.UID, "BootstrapCloning", parent.Status.StoragePath)
	pin := parent.Status.StoragePath + "/_shale/pins/" + string(clone.UID)
	if !exists(t, mc, pin) {
		t.Fatalf("no pin %s in the parent's directory: the clone does not hold the tables it reads", pin)
	}

	addr := s.serviceProxy(t, name+"-rw", kvPort)
	callFresh(t, addr, "every key of the checkpoint step read through "+name, func(c context.Context, kv kvv1.KVClient) error {
		for key, v := range want {
			r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			if string(r.Value) != v {
				return fmt.Errorf("get %s: %q, want the parent's %q", key, r.Value, v)
			}
		}
		return nil
	})

	// The operator's checkpoint goes once the clone was ready (the pin
	// holds the tables).
	eventually(t, 2*time.Minute, "checkpoint "+c.Checkpoint+" deleted in "+s.db, func() (bool, string) {
		var names []string
		callFresh(t, parentAddr, "ListCheckpoints on "+s.db, func(ctx context.Context, kv kvv1.KVClient) error {
			r, err := kv.ListCheckpoints(ctx, &kvv1.ListCheckpointsRequest{})
			if err != nil {
				return err
			}
			names = names[:0]
			for _, i := range r.Checkpoints {
				names = append(names, i.Name)
			}
			return nil
		})
		for _, n := range names {
			if n == c.Checkpoint {
				return false, fmt.Sprintf("still listed: %v", names)
			}
		}
		return true, ""
	})
	s.expectEvent(t, "RocksDB", name, clone.UID, "BootstrapCheckpointDeleted")

	// Writes are isolated both ways.
	callFresh(t, addr, "a write to "+name, func(c context.Context, kv kvv1.KVClient) error {
		if _, err := kv.Put(c, putReq("e2e/clone/only-in-clone", "clone")); err != nil {
			return err
		}
		_, err := kv.Put(c, putReq("e2e/ckpt/00", "changed in the clone"))
		return err
	})
	callFresh(t, parentAddr, "a write to "+s.db+" after the clone", func(c context.Context, kv kvv1.KVClient) error {
		_, err := kv.Put(c, putReq("e2e/clone/only-in-parent", "parent"))
		return err
	})
	absent := func(addr, db, key string) {
		t.Helper()
		callFresh(t, addr, key+" absent from "+db, func(c context.Context, kv kvv1.KVClient) error {
			r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
			switch {
			case status.Code(err) == codes.NotFound:
				return nil
			case err != nil:
				return err
			}
			t.Fatalf("%s holds %s = %q, written to the other database: writes are not isolated", db, key, r.Value)
			return nil
		})
	}
	absent(parentAddr, s.db, "e2e/clone/only-in-clone")
	absent(addr, name, "e2e/clone/only-in-parent")
	callFresh(t, parentAddr, "e2e/ckpt/00 unchanged in "+s.db, func(c context.Context, kv kvv1.KVClient) error {
		r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte("e2e/ckpt/00")})
		if err != nil {
			return err
		}
		if string(r.Value) != want["e2e/ckpt/00"] {
			t.Fatalf("%s holds %q for e2e/ckpt/00 after the clone overwrote it: want %q", s.db, r.Value, want["e2e/ckpt/00"])
		}
		return nil
	})
	t.Logf("cloneFrom: %s Ready from %s's checkpoint %s, serving all %d keys from the parent's tables (pin %s); writes isolated both ways", name, s.db, c.Checkpoint, len(want), pin)

	// Deleted with reclaimPolicy Delete: its directory goes, the parent
	// keeps serving every key.
	s.deleteRocksDB(t, clone, false)
	if n := len(listKeys(t, mc, clone.Status.StoragePath+"/")); n != 0 {
		t.Fatalf("the clone went with reclaimPolicy Delete but %d objects are left in %s/", n, clone.Status.StoragePath)
	}
	callFresh(t, parentAddr, "every key of the checkpoint step still in "+s.db, func(c context.Context, kv kvv1.KVClient) error {
		for key, v := range want {
			r, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
			if err != nil {
				return fmt.Errorf("get %s: %w", key, err)
			}
			if string(r.Value) != v {
				return fmt.Errorf("get %s: %q, want %q", key, r.Value, v)
			}
		}
		return nil
	})
}
