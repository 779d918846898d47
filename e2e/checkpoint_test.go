//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepCheckpoint: a Checkpoint resource is taken by the database's
// primary (Ready, with the sequence number and tables the primary
// reported, listed by the primary itself), outlives writes that overwrite
// what it holds, and deleting the resource deletes it in the database.
func stepCheckpoint(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	callFresh(t, addr, "50 writes before the checkpoint", func(c context.Context, kv kvv1.KVClient) error {
		for i := range 50 {
			if _, err := kv.Put(c, putReq(fmt.Sprintf("e2e/ckpt/%02d", i), "before")); err != nil {
				return err
			}
		}
		return nil
	})
	ck := &shalev1.Checkpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-before", Namespace: s.cfg.namespace},
		Spec:       shalev1.CheckpointSpec{Database: s.db, Expires: &metav1.Duration{Duration: 24 * time.Hour}},
	}
	if err := s.kube.Create(ctx(t, time.Minute), ck); err != nil {
		t.Fatalf("creating Checkpoint %s: %v", ck.Name, err)
	}
	eventually(t, 3*time.Minute, "Checkpoint "+ck.Name+" to be Ready", func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(ck), ck); err != nil {
			return false, err.Error()
		}
		return ck.Status.Phase == shalev1.CheckpointReady, fmt.Sprintf("phase %q: %s", ck.Status.Phase, ck.Status.Message)
	})
	if ck.Status.Sequence < 50 || ck.Status.Tables < 1 || ck.Status.ID == "" {
		t.Fatalf("Checkpoint %s is Ready with sequence %d, %d tables, id %q: want the 50 writes before it (sequence ≥ 50), a table, an id", ck.Name, ck.Status.Sequence, ck.Status.Tables, ck.Status.ID)
	}
	listed := func() (*kvv1.CheckpointInfo, error) {
		var found *kvv1.CheckpointInfo
		var err error
		callFresh(t, addr, "ListCheckpoints", func(c context.Context, kv kvv1.KVClient) error {
			r, e := kv.ListCheckpoints(c, &kvv1.ListCheckpointsRequest{})
			if e != nil {
				return e
			}
			found = nil
			for _, i := range r.Checkpoints {
				if i.Name == ck.Name {
					found = i
				}
			}
			return nil
		})
		return found, err
	}
	got, _ := listed()
	if got == nil || got.Id != ck.Status.ID || int64(got.Sequence) != ck.Status.Sequence || got.RequestId != string(ck.UID) {
		t.Fatalf("the primary lists %v for Checkpoint %s (status id %s, sequence %d, uid %s)", got, ck.Name, ck.Status.ID, ck.Status.Sequence, ck.UID)
	}
	callFresh(t, addr, "50 overwrites after the checkpoint", func(c context.Context, kv kvv1.KVClient) error {
		for i := range 50 {
			if _, err := kv.Put(c, putReq(fmt.Sprintf("e2e/ckpt/%02d", i), "after")); err != nil {
				return err
			}
		}
		_, err := kv.Flush(c, &kvv1.FlushRequest{})
		return err
	})
	if got, _ := listed(); got == nil || got.Id != ck.Status.ID {
		t.Fatalf("Checkpoint %s is no longer listed by the primary after later writes: %v", ck.Name, got)
	}
	t.Logf("Checkpoint %s: Ready at sequence %d with %d tables (%d bytes), listed by the primary", ck.Name, ck.Status.Sequence, ck.Status.Tables, ck.Status.Bytes)

	if err := s.kube.Delete(ctx(t, time.Minute), ck); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "Checkpoint "+ck.Name+" to be gone", func() (bool, string) {
		err := s.kube.Get(ctx(t, time.Minute), client.ObjectKeyFromObject(ck), &shalev1.Checkpoint{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if got, _ := listed(); got != nil {
		t.Fatalf("the Checkpoint resource is gone but the primary still lists %v", got)
	}
}
