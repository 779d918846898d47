package shalefs

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// FenceStatus is who owns a database, as recorded in its store.
type FenceStatus struct {
	Epoch    uint64    `json:"epoch"` // 0: never opened
	TakenAt  time.Time `json:"takenAt,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	Released bool      `json:"released"` // the owner shut down cleanly
	Epochs   int       `json:"epochsTaken"`
}

// ReadFenceStatus reads the highest epoch claim of the database in store.
func ReadFenceStatus(ctx context.Context, store objstore.Store) (FenceStatus, error) {
	var st FenceStatus
	err := store.List(ctx, layout.EpochPrefix, func(o objstore.ObjectInfo) error {
		if e, ok := layout.ParseEpochKey(o.Key); ok {
			st.Epochs++
			st.Epoch = max(st.Epoch, e)
		}
		return nil
	})
	if err != nil || st.Epoch == 0 {
		return st, err
	}
	r, _, err := store.Get(ctx, layout.EpochKey(st.Epoch), 0, -1)
	if err != nil {
		return st, err
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return st, err
	}
	if c, err := layout.ParseEpochClaim(b); err == nil {
		st.TakenAt, st.Owner = c.TakenAt, c.Owner
	}
	_, err = store.Stat(ctx, layout.ReleasedKey(st.Epoch))
	switch {
	case err == nil:
		st.Released = true
	case !errors.Is(err, objstore.ErrNotFound):
		return st, err
	}
	return st, nil
}
