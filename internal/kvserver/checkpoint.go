package kvserver

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Checkpoints (docs/checkpoints.md; docs/rfcs/0010-checkpoints-and-clones.md).

const notPrimary = "checkpoints are created and deleted by the primary: send this to the primary (the <name>-rw Service, or the address of `shale primary`)"

func checkpointInfo(c shalefs.CheckpointInfo) *kvv1.CheckpointInfo {
	out := &kvv1.CheckpointInfo{Name: c.Name, Id: c.ID, RequestId: c.RequestID, Epoch: c.Epoch, Sequence: c.Sequence,
		Created: timestamppb.New(c.CreatedAt), Tables: uint64(c.Tables), Bytes: uint64(c.Bytes)}
	if !c.Expires.IsZero() {
		out.Expires = timestamppb.New(c.Expires)
	}
	return out
}

// checkpointError maps a checkpoint failure: FAILED_PRECONDITION only
// when the checkpoint is in no catalog, ever (the fence was known, or the
// catalog entry met a seal); UNAVAILABLE "outcome unknown" when the entry
// may have landed; UNAVAILABLE "not created" for anything before it.
func checkpointError(ctx context.Context, err error) error {
	var unknown interface{ OutcomeUnknown() bool }
	var fenced interface{ Fenced() bool }
	switch {
	case errors.As(err, &unknown) && unknown.OutcomeUnknown():
		var cu *shalefs.ErrCheckpointOutcomeUnknown
		if errors.As(err, &cu) {
			return status.Error(codes.Unavailable, err.Error())
		}
		return status.Errorf(codes.Unavailable, "checkpoint outcome unknown (it may have been created; retry with the same request id to find out): %v", err)
	case errors.As(err, &fenced) && fenced.Fenced():
		return status.Errorf(codes.FailedPrecondition, "this primary was deposed: the checkpoint was not created (send it to the new primary): %v", err)
	case errors.Is(err, shalefs.ErrCheckpointInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, shalefs.ErrCheckpointExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, shalefs.ErrCheckpointNotFound):
		return status.Error(codes.NotFound, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}

// Checkpoint implements KV.
func (s *Server) Checkpoint(ctx context.Context, r *kvv1.CheckpointRequest) (*kvv1.CheckpointResponse, error) {
	if s.info.Checkpoints == nil || s.info.Role != kvv1.Role_ROLE_PRIMARY {
		return nil, status.Error(codes.FailedPrecondition, notPrimary)
	}
	req := shalefs.CheckpointRequest{Name: r.Name, RequestID: r.RequestId}
	if r.Expires != nil {
		if err := r.Expires.CheckValid(); err != nil {
			return nil, invalid("expires: %v", err)
		}
		req.Expires = r.Expires.AsTime()
		if !req.Expires.After(time.Now()) {
			return nil, invalid("expires %s is not in the future: give a later time, or none for a checkpoint that never expires", req.Expires.UTC().Format(time.RFC3339))
		}
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	c, err := s.info.Checkpoints.CreateCheckpoint(ctx, req)
	if err != nil {
		return nil, checkpointError(ctx, err)
	}
	return &kvv1.CheckpointResponse{Checkpoint: checkpointInfo(c)}, nil
}

// ListCheckpoints implements KV.
func (s *Server) ListCheckpoints(ctx context.Context, _ *kvv1.ListCheckpointsRequest) (*kvv1.ListCheckpointsResponse, error) {
	if s.info.Checkpoints == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server does not list checkpoints: ask the primary (the <name>-rw Service, or the address of `shale primary`), or run `shale admin checkpoint list --db URL`")
	}
	if err := s.canRead(); err != nil {
		return nil, err
	}
	cs, err := s.info.Checkpoints.ListCheckpoints(ctx)
	if err != nil {
		return nil, checkpointError(ctx, err)
	}
	out := &kvv1.ListCheckpointsResponse{}
	for _, c := range cs {
		out.Checkpoints = append(out.Checkpoints, checkpointInfo(c))
	}
	return out, nil
}

// DeleteCheckpoint implements KV.
func (s *Server) DeleteCheckpoint(ctx context.Context, r *kvv1.DeleteCheckpointRequest) (*kvv1.DeleteCheckpointResponse, error) {
	if s.info.Checkpoints == nil || s.info.Role != kvv1.Role_ROLE_PRIMARY {
		return nil, status.Error(codes.FailedPrecondition, notPrimary)
	}
	if r.Name == "" {
		return nil, invalid("name is empty: give the checkpoint's name (list them with `shale admin checkpoint list`)")
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.info.Checkpoints.DeleteCheckpoint(ctx, r.Name); err != nil {
		return nil, checkpointError(ctx, err)
	}
	return &kvv1.DeleteCheckpointResponse{}, nil
}
