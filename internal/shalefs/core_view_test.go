package shalefs

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// phantomPrefix lists one more top-level "directory" than the store has,
// as MinIO may for an object being deleted ("OPTIONS-004015.<epoch>/"
// appeared in make stress while the trash loop deleted that file).
type phantomPrefix struct {
	objstore.Store
	key string
}

func (p *phantomPrefix) ListDir(ctx context.Context, dir string, fn func(objstore.ObjectInfo) error) error {
	if dir == "" {
		if err := fn(objstore.ObjectInfo{Key: p.key}); err != nil {
			return err
		}
	}
	return p.Store.ListDir(ctx, dir, fn)
}

// A phantom prefix of a table name is not a table directory of the old
// layout: takeovers and readers go on. A real one (objects under it) is
// refused with ErrNotShale.
func TestPhantomTableDirIsNotLegacy(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		openWith(t, Config{Store: store, Epoch: 1}).Stop()
		phantom := &phantomPrefix{Store: store, key: "OPTIONS-000007.00000000000000000001/"}
		openWith(t, Config{Store: phantom, Epoch: 2}).Stop()

		real := "000012.sst/"
		if _, err := store.Put(ctx, real+"00000000000000000001", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, Config{Store: &phantomPrefix{Store: store, key: real}, Epoch: 3, CacheDir: t.TempDir()})
		if !errors.Is(err, ErrNotShale) {
			t.Fatalf("open with a table directory of the old layout: %v; want ErrNotShale", err)
		}
	})
}
