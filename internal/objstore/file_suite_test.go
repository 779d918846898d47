package objstore_test

import (
	"path/filepath"
	"testing"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

func TestFileConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) objstore.Store {
			s, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		UniqueETags: true,
	})
}
