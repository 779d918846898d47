package primary

import (
	"context"
	"fmt"

	"github.com/shale-rocks/shale/internal/shalefs"
)

// checkpoints is the primary's checkpoint service (kvserver.Checkpoints):
// the storage layer's catalog with the engine's flush at one sequence
// number (docs/rfcs/0010-checkpoints-and-clones.md, steps 1-7).
type checkpoints struct{ s *Server }

// CreateCheckpoint holds RocksDB's file deletions for the whole create
// (step 2) and releases them whatever happened (step 7).
func (c checkpoints) CreateCheckpoint(ctx context.Context, req shalefs.CheckpointRequest) (shalefs.CheckpointInfo, error) {
	return c.s.Checkpoint(ctx, req)
}

func (c checkpoints) ListCheckpoints(context.Context) ([]shalefs.CheckpointInfo, error) {
	return c.s.fs.Checkpoints(), nil
}

func (c checkpoints) DeleteCheckpoint(ctx context.Context, name string) error {
	return c.s.fs.DeleteCheckpoint(ctx, name)
}

// Checkpoint creates a checkpoint of the running primary.
func (s *Server) Checkpoint(ctx context.Context, req shalefs.CheckpointRequest) (_ shalefs.CheckpointInfo, err error) {
	abort := s.fs.FenceError
	if h := s.checkpointWaited; h != nil {
		abort = func() error { h(); return s.fs.FenceError() }
	}
	capture := func(ctx context.Context) (shalefs.CheckpointCapture, error) {
		st, err := s.db.CaptureCheckpoint(ctx, abort)
		if err != nil {
			if ferr := s.fs.FenceError(); ferr != nil {
				return shalefs.CheckpointCapture{}, ferr // a flush met the new owner's seal
			}
			return shalefs.CheckpointCapture{}, err
		}
		return shalefs.CheckpointCapture{Sequence: st.Sequence, Manifest: st.Manifest, ManifestSize: int64(st.ManifestSize), Tables: st.Tables}, nil
	}
	release, err := s.db.HoldDeletes()
	if err != nil {
		return shalefs.CheckpointInfo{}, fmt.Errorf("hold file deletions: %w", err)
	}
	defer func() {
		// The checkpoint's answer stands either way; a failure here only
		// keeps obsolete files longer (until the database closes).
		if rerr := release(); rerr != nil && s.cfg.Logger != nil {
			s.cfg.Logger.Error("re-enable file deletions after a checkpoint", "checkpoint", req.Name, "err", rerr)
		}
	}()
	return s.fs.CreateCheckpoint(ctx, req, capture)
}

// ListCheckpoints lists the live checkpoints.
func (s *Server) ListCheckpoints() []shalefs.CheckpointInfo { return s.fs.Checkpoints() }

// DeleteCheckpoint deletes a checkpoint by name.
func (s *Server) DeleteCheckpoint(ctx context.Context, name string) error {
	return s.fs.DeleteCheckpoint(ctx, name)
}
