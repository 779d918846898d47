package operator

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

// checkpointStandIn answers the checkpoint RPCs for a primary Pod (envtest
// runs none; the primary's own implementation is tested in its package),
// behind the real guard, with the semantics of the KV contract: a name
// taken by another request id is ALREADY_EXISTS, the same request id gets
// its checkpoint back, a missing one NOT_FOUND on delete. lose makes the
// next create land but its reply be lost (UNAVAILABLE, outcome unknown);
// refuse makes creates answer that code without creating.
type checkpointStandIn struct {
	guardedStatus
	cmu     sync.Mutex
	seq     uint64
	cps     map[string]*kvv1.CheckpointInfo
	lose    int
	refuse  codes.Code
	creates []checkpointCall
	deletes []string
	down    bool // ListCheckpoints and DeleteCheckpoint fail UNAVAILABLE
}

type checkpointCall struct {
	id  auth.Identity
	req *kvv1.CheckpointRequest
}

func (s *checkpointStandIn) Checkpoint(ctx context.Context, r *kvv1.CheckpointRequest) (*kvv1.CheckpointResponse, error) {
	id, _ := auth.FromContext(ctx)
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.creates = append(s.creates, checkpointCall{id, proto.Clone(r).(*kvv1.CheckpointRequest)})
	if s.refuse != codes.OK {
		return nil, status.Error(s.refuse, "this primary was deposed by epoch 2")
	}
	if c, ok := s.cps[r.Name]; ok {
		if c.RequestId != r.RequestId {
			return nil, status.Errorf(codes.AlreadyExists, "checkpoint %s exists", r.Name)
		}
		return &kvv1.CheckpointResponse{Checkpoint: proto.Clone(c).(*kvv1.CheckpointInfo)}, nil
	}
	s.seq += 1000
	c := &kvv1.CheckpointInfo{Name: r.Name, Id: fmt.Sprintf("1-%d", s.seq), RequestId: r.RequestId, Epoch: 1, Sequence: s.seq,
		Created: timestamppb.Now(), Expires: r.Expires, Tables: 7, Bytes: 7 << 20}
	s.cps[r.Name] = c
	if s.lose > 0 {
		s.lose--
		return nil, status.Error(codes.Unavailable, "outcome unknown: the catalog append's reply was lost")
	}
	return &kvv1.CheckpointResponse{Checkpoint: proto.Clone(c).(*kvv1.CheckpointInfo)}, nil
}

func (s *checkpointStandIn) ListCheckpoints(context.Context, *kvv1.ListCheckpointsRequest) (*kvv1.ListCheckpointsResponse, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.down {
		return nil, status.Error(codes.Unavailable, "the primary is down (test)")
	}
	resp := &kvv1.ListCheckpointsResponse{}
	for _, c := range s.cps {
		resp.Checkpoints = append(resp.Checkpoints, proto.Clone(c).(*kvv1.CheckpointInfo))
	}
	return resp, nil
}

func (s *checkpointStandIn) DeleteCheckpoint(ctx context.Context, r *kvv1.DeleteCheckpointRequest) (*kvv1.DeleteCheckpointResponse, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.deletes = append(s.deletes, r.Name)
	if s.down {
		return nil, status.Error(codes.Unavailable, "the primary is down (test)")
	}
	if _, ok := s.cps[r.Name]; !ok {
		return nil, status.Errorf(codes.NotFound, "no checkpoint %s", r.Name)
	}
	delete(s.cps, r.Name)
	return &kvv1.DeleteCheckpointResponse{}, nil
}

func (s *checkpointStandIn) has(name string) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	_, ok := s.cps[name]
	return ok
}

// TestCheckpointResource: a Checkpoint against the operator on envtest,
// with a stand-in primary behind the real guard (the operator's own
// certificate must be let in to create and delete): Pending until the
// primary is ready; a lost reply retried with the same request id (one
// checkpoint); status, Events, finalizer; a name taken by someone else's
// checkpoint Failed and never deleted; a deposed primary retried; the
// finalizer deleting this Checkpoint's checkpoint; printer columns.
func TestCheckpointResource(t *testing.T) {
	h := startOperator(t)
	ns := h.namespace("checkpoints")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)
	h.waitPod(ns, "orders-primary-1")

	// Asked for before the database is ready: Pending, with the finalizer.
	ck := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "before-migration"},
		Spec: shalev1.CheckpointSpec{Database: "orders", Expires: &metav1.Duration{Duration: 24 * time.Hour}}}
	h.create(ck)
	ck = h.waitCheckpoint(ns, "before-migration", "Pending", func(c *shalev1.Checkpoint) bool {
		return c.Status.Phase == shalev1.CheckpointPending && strings.Contains(c.Status.Message, "waiting for a ready primary of RocksDB orders") &&
			controllerutil.ContainsFinalizer(c, shalev1.FinalizerCheckpoint)
	})
	if ck.Status.RequestedAt != nil {
		t.Errorf("requestedAt %v before any request", ck.Status.RequestedAt)
	}

	// The primary comes up; its first reply is lost after the create.
	ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
	if err != nil {
		t.Fatal(err)
	}
	kv := &checkpointStandIn{guardedStatus: guardedStatus{st: &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY}}, cps: map[string]*kvv1.CheckpointInfo{
		"taken": {Name: "taken", Id: "1-1", RequestId: "someone-else", Epoch: 1, Sequence: 1},
	}, lose: 1}
	h.serveGuarded(lis, ns, "orders-primary-tls", "orders-access", kv)
	pod := h.waitPod(ns, "orders-primary-1")
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	ck = h.waitCheckpoint(ns, "before-migration", "Ready", func(c *shalev1.Checkpoint) bool { return c.Status.Phase == shalev1.CheckpointReady })
	kv.cmu.Lock()
	creates := append([]checkpointCall(nil), kv.creates...)
	n := len(kv.cps)
	kv.cmu.Unlock()
	if len(creates) != 2 || n != 2 {
		t.Errorf("%d Checkpoint calls, %d checkpoints; want 2 calls (the lost reply retried) and one new checkpoint", len(creates), n-1)
	}
	for _, c := range creates {
		if c.id.Kind != auth.KindOperator || c.req.Name != "before-migration" || c.req.RequestId != string(ck.UID) || c.req.Expires == nil ||
			!c.req.Expires.AsTime().Equal(ck.Status.ExpiresAt.Time) {
			t.Errorf("call %+v by %+v: want the operator, the name, request id %s and expiry %v every time", c.req, c.id, ck.UID, ck.Status.ExpiresAt)
		}
	}
	st := ck.Status
	if st.ID != "1-1000" || st.Epoch != 1 || st.Sequence != 1000 || st.Tables != 7 || st.Bytes != 7<<20 || st.Time == nil || st.RequestedAt == nil ||
		st.ExpiresAt == nil || st.ExpiresAt.Sub(st.RequestedAt.Time).Round(time.Second) != 24*time.Hour || st.ObservedGeneration != ck.Generation ||
		!strings.Contains(st.Message, "created by primary orders-primary-1 (epoch 1) at sequence 1000") {
		t.Errorf("status %s", jsonString(st))
	}
	h.waitEvent(ns, "before-migration", eventCheckpointPending) // the lost reply
	h.waitEvent(ns, "before-migration", eventCheckpointCreated)

	// A name someone else's checkpoint has: Failed; deleting the
	// Checkpoint leaves that checkpoint alone.
	taken := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}, Spec: shalev1.CheckpointSpec{Database: "orders"}}
	h.create(taken)
	h.waitCheckpoint(ns, "taken", "Failed", func(c *shalev1.Checkpoint) bool {
		return c.Status.Phase == shalev1.CheckpointFailed && strings.Contains(c.Status.Message, "already has a checkpoint named taken")
	})
	h.waitEvent(ns, "taken", eventCheckpointFailed)
	h.deleteCheckpoint(ns, "taken")
	if !kv.has("taken") {
		t.Errorf("deleting a Failed Checkpoint deleted someone else's checkpoint of its name")
	}

	// A deposed primary: Pending, asked again until a primary owns the
	// database.
	kv.cmu.Lock()
	kv.refuse = codes.FailedPrecondition
	kv.cmu.Unlock()
	later := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}, Spec: shalev1.CheckpointSpec{Database: "orders"}}
	h.create(later)
	h.waitCheckpoint(ns, "later", "Pending (deposed)", func(c *shalev1.Checkpoint) bool {
		return c.Status.Phase == shalev1.CheckpointPending && strings.Contains(c.Status.Message, "no longer owns the database") && c.Status.RequestedAt != nil
	})
	if kv.has("later") {
		t.Errorf("a refused create left a checkpoint")
	}
	kv.cmu.Lock()
	kv.refuse = codes.OK
	kv.cmu.Unlock()
	h.waitCheckpoint(ns, "later", "Ready after the refusal", func(c *shalev1.Checkpoint) bool { return c.Status.Phase == shalev1.CheckpointReady })

	// Deleted: its checkpoint goes from the database, then the resource.
	h.deleteCheckpoint(ns, "before-migration")
	if kv.has("before-migration") {
		t.Errorf("checkpoint before-migration still in the database after its Checkpoint was deleted")
	}
	h.waitEvent(ns, "before-migration", eventCheckpointDeleted)

	// The printer columns.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := h.env.Client.Get(h.ctx, types.NamespacedName{Name: "checkpoints.shale.rocks"}, &crd); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		cols = append(cols, c.Name+"="+c.JSONPath)
	}
	want := "Database=.spec.database Phase=.status.phase Sequence=.status.sequence Tables=.status.tables Bytes=.status.bytes Expires=.status.expiresAt Age=.metadata.creationTimestamp"
	if got := strings.Join(cols, " "); got != want {
		t.Errorf("printer columns %s, want %s", got, want)
	}
}

func (h *harness) waitCheckpoint(ns, name, what string, cond func(*shalev1.Checkpoint) bool) *shalev1.Checkpoint {
	h.t.Helper()
	var ck *shalev1.Checkpoint
	eventually(h.t, "Checkpoint "+name+": "+what, func() (bool, string) {
		ck = &shalev1.Checkpoint{}
		if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: ns, Name: name}, ck); err != nil {
			return false, err.Error()
		}
		return cond(ck), fmt.Sprintf("status %s, finalizers %v", jsonString(ck.Status), ck.Finalizers)
	})
	return ck
}

// deleteCheckpoint deletes a Checkpoint and waits until it is gone.
func (h *harness) deleteCheckpoint(ns, name string) {
	h.t.Helper()
	ck := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := h.c.Delete(h.ctx, ck); err != nil {
		h.t.Fatal(err)
	}
	eventually(h.t, "Checkpoint "+name+" gone", func() (bool, string) {
		err := h.c.Get(h.ctx, client.ObjectKeyFromObject(ck), ck)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v, finalizers %v", err, ck.Finalizers)
	})
}
