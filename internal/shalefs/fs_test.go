package shalefs

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
)

func openFS(t *testing.T, store objstore.Store, epoch uint64, cache string) *FS {
	t.Helper()
	f, err := Open(context.Background(), Config{Store: store, CacheDir: cache, Epoch: epoch, Lease: 200 * time.Millisecond, DeleteGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

func openDB(t *testing.T, f *FS, cache string) *engine.DB {
	t.Helper()
	o := engine.DefaultOptions()
	o.FileSystem = f
	d, err := engine.Open(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWriteCloseReopenFromEmptyCache(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	cache1 := filepath.Join(t.TempDir(), "cache1")
	f1 := openFS(t, store, 1, cache1)
	d := openDB(t, f1, cache1)
	for i := 0; i < 2000; i++ {
		if err := d.Put([]byte(fmt.Sprintf("k%05d", i)), []byte(fmt.Sprintf("v%d", i)), i%10 == 0); err != nil {
			t.Fatal(err)
		}
		if i == 1000 {
			if err := d.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.Close()
	f1.Stop()
	var keys []string
	store.List(context.Background(), "", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil })
	t.Logf("store: %s", strings.Join(keys, " "))

	cache2 := filepath.Join(t.TempDir(), "cache2")
	f2 := openFS(t, store, 2, cache2)
	d2 := openDB(t, f2, cache2)
	defer d2.Close()
	for i := 0; i < 2000; i++ {
		v, ok, err := d2.Get([]byte(fmt.Sprintf("k%05d", i)))
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%05d after reopen: %q %v %v", i, v, ok, err)
		}
	}
}
