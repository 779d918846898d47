package shalefs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

func openSecondary(t *testing.T, r *FS, cache string) *engine.DB {
	t.Helper()
	o := engine.DefaultOptions()
	o.FileSystem = r
	o.SecondaryDir = filepath.Join(filepath.Dir(cache), filepath.Base(cache)+"-secondary")
	d, err := engine.Open(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// catchUp refreshes the reader and the secondary until every key of want
// reads back with its value (or the deadline passes).
func catchUp(t *testing.T, r *FS, d *engine.DB, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := r.Refresh(context.Background())
		if err == nil {
			err = d.TryCatchUp()
		}
		missing := ""
		if err == nil {
			for k, v := range want {
				got, ok, gerr := d.Get([]byte(k))
				if gerr != nil || !ok || string(got) != v {
					missing = fmt.Sprintf("%s: %q %v %v", k, got, ok, gerr)
					break
				}
			}
		}
		if err == nil && missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary did not catch up in a minute: %v %s", err, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A secondary on a reader follows a primary's synced writes, flushes,
// compactions and folded logs, from an empty cache directory.
func TestReaderFollowsPrimary(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		c1 := filepath.Join(t.TempDir(), "primary")
		f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1, Lease: 100 * time.Millisecond, FoldSegments: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer f1.Stop()
		d1 := openDB(t, f1, c1)
		defer d1.Close()
		want := map[string]string{}
		put := func(from, to int) {
			for i := from; i < to; i++ {
				k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
				if err := d1.Put([]byte(k), []byte(v), true); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
		}
		put(0, 100)
		if err := d1.Flush(); err != nil {
			t.Fatal(err)
		}
		put(100, 150)

		c2 := filepath.Join(t.TempDir(), "secondary")
		r, err := OpenReader(ctx, Config{Store: store, CacheDir: c2})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		d2 := openSecondary(t, r, c2)
		catchUp(t, r, d2, want)

		// More synced writes (folded as they go), a flush and a compaction.
		put(150, 300)
		catchUp(t, r, d2, want)
		if err := d1.Flush(); err != nil {
			t.Fatal(err)
		}
		put(300, 320)
		if err := d1.Compact(nil, nil); err != nil {
			t.Fatal(err)
		}
		put(320, 340)
		catchUp(t, r, d2, want)

		if err := r.Create("000999.sst"); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("create on a reader: %v, want ErrReadOnly", err)
		}
	})
}
