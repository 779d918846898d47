package secondary

import (
	"context"
	"errors"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// readerCheckpoints lists the checkpoints of the database as its next
// owner would replay them (a few LISTs and GETs per call); creating and
// deleting is the primary's.
type readerCheckpoints struct{ store objstore.Store }

var errReadOnly = errors.New("read-only replica: checkpoints are created and deleted by the primary")

func (r readerCheckpoints) CreateCheckpoint(context.Context, shalefs.CheckpointRequest) (shalefs.CheckpointInfo, error) {
	return shalefs.CheckpointInfo{}, errReadOnly
}

func (r readerCheckpoints) ListCheckpoints(ctx context.Context) ([]shalefs.CheckpointInfo, error) {
	return shalefs.ReadCheckpoints(ctx, r.store)
}

func (r readerCheckpoints) DeleteCheckpoint(context.Context, string) error { return errReadOnly }

// holdCheckpoint renews the lease of a server fixed at a checkpoint, so
// the owner's trash loop keeps its tables (a deleted checkpoint's too)
// while it serves; it never catches up.
func (s *Server) holdCheckpoint() {
	defer s.wg.Done()
	for {
		s.ep.SetServing(s.fs.ReaderLeaseFresh())
		t := time.NewTimer(s.fs.ReaderTTL() / 4)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.fs.ReaderTTL()/2)
		if err := s.fs.RenewLease(ctx); err != nil {
			s.cfg.Logger.Warn("renew the checkpoint server's reader lease", "err", err)
		}
		cancel()
	}
}
