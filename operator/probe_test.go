package operator

import (
	"context"
	"io"
	"strings"
	"testing"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// ignoresConditions is a store that accepts conditional puts but ignores
// their conditions, as some S3-compatible services do.
type ignoresConditions struct{ objstore.Store }

func (s ignoresConditions) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	opts.IfNoneMatch, opts.IfMatch = false, ""
	return s.Store.Put(ctx, key, r, size, opts)
}

func TestProbeStore(t *testing.T) {
	ctx := context.Background()
	fs, err := objstore.OpenFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if reason, err := probeStore(ctx, fs); err != nil {
		t.Fatalf("file store: %s: %v", reason, err)
	}
	// The probe is gone.
	if err := fs.List(ctx, "", func(o objstore.ObjectInfo) error {
		t.Errorf("left behind: %s", o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	reason, err := probeStore(ctx, ignoresConditions{fs})
	if reason != shalev1.ReasonNoConditionalWrites || err == nil || !strings.Contains(err.Error(), "does not honour conditional writes") {
		t.Errorf("store ignoring If-None-Match: %s, %v; want %s", reason, err, shalev1.ReasonNoConditionalWrites)
	}
}
