package kvserver

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
)

// Deferred is the KV service of a standby (RFC 0012): served from the
// start, so that health checks answer while the standby warms and waits,
// it answers every call UNAVAILABLE ("standby: not the primary yet;
// retry") until Set hands it the real service, then delegates to it. A
// standby's StepDown is FAILED_PRECONDITION: it owns no epoch.
type Deferred struct {
	kvv1.UnimplementedKVServer
	cur atomic.Pointer[kvv1.KVServer]
}

// Set makes the real service answer from now on.
func (d *Deferred) Set(svc kvv1.KVServer) { d.cur.Store(&svc) }

func (d *Deferred) get() (kvv1.KVServer, error) {
	if p := d.cur.Load(); p != nil {
		return *p, nil
	}
	return nil, status.Error(codes.Unavailable, "standby: not the primary yet (it takes over when the current primary steps down); retry")
}

func (d *Deferred) Put(ctx context.Context, r *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Put(ctx, r)
}

func (d *Deferred) Get(ctx context.Context, r *kvv1.GetRequest) (*kvv1.GetResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, r)
}

func (d *Deferred) Delete(ctx context.Context, r *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Delete(ctx, r)
}

func (d *Deferred) Write(ctx context.Context, r *kvv1.WriteRequest) (*kvv1.WriteResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Write(ctx, r)
}

func (d *Deferred) MultiGet(ctx context.Context, r *kvv1.MultiGetRequest) (*kvv1.MultiGetResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.MultiGet(ctx, r)
}

func (d *Deferred) Scan(r *kvv1.ScanRequest, st grpc.ServerStreamingServer[kvv1.ScanResponse]) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.Scan(r, st)
}

func (d *Deferred) Flush(ctx context.Context, r *kvv1.FlushRequest) (*kvv1.FlushResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Flush(ctx, r)
}

func (d *Deferred) Compact(ctx context.Context, r *kvv1.CompactRequest) (*kvv1.CompactResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Compact(ctx, r)
}

func (d *Deferred) Status(ctx context.Context, r *kvv1.StatusRequest) (*kvv1.StatusResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Status(ctx, r)
}

func (d *Deferred) Watch(r *kvv1.WatchRequest, st grpc.ServerStreamingServer[kvv1.WatchEvent]) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.Watch(r, st)
}

func (d *Deferred) Load(st grpc.ClientStreamingServer[kvv1.LoadRequest, kvv1.LoadResponse]) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.Load(st)
}

func (d *Deferred) Ingest(st grpc.ClientStreamingServer[kvv1.IngestRequest, kvv1.IngestResponse]) error {
	s, err := d.get()
	if err != nil {
		return err
	}
	return s.Ingest(st)
}

func (d *Deferred) SetTiering(ctx context.Context, r *kvv1.SetTieringRequest) (*kvv1.SetTieringResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.SetTiering(ctx, r)
}

func (d *Deferred) Checkpoint(ctx context.Context, r *kvv1.CheckpointRequest) (*kvv1.CheckpointResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.Checkpoint(ctx, r)
}

func (d *Deferred) ListCheckpoints(ctx context.Context, r *kvv1.ListCheckpointsRequest) (*kvv1.ListCheckpointsResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.ListCheckpoints(ctx, r)
}

func (d *Deferred) DeleteCheckpoint(ctx context.Context, r *kvv1.DeleteCheckpointRequest) (*kvv1.DeleteCheckpointResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, err
	}
	return s.DeleteCheckpoint(ctx, r)
}

func (d *Deferred) StepDown(ctx context.Context, r *kvv1.StepDownRequest) (*kvv1.StepDownResponse, error) {
	s, err := d.get()
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "not the owner of epoch %d: this is a standby, waiting to take over", r.Epoch)
	}
	return s.StepDown(ctx, r)
}
