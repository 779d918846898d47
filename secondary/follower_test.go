package secondary

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// A follower (DB::OpenAsFollower, --follower) opens on the reader
// FileSystem, which links the leader's tables into its directory by name,
// serves what the primary flushed, follows a compaction (links to the new
// table, drops the old ones), and reads no WAL: a write the primary has
// not flushed is not visible on it.
func TestFollowerServesFlushedWrites(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		p := startPrimary(t, db, 1)
		defer p.Stop(time.Second)
		pkv := client(t, p.Addr())
		want := map[string]string{}
		put := func(from, to int) {
			for i := from; i < to; i++ {
				k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
				if _, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true}); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
		}
		flush := func() {
			if _, err := pkv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		put(0, 50)
		flush()
		s, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage:         shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "follower")},
			CatchupInterval: 50 * time.Millisecond, Primary: p.Addr(), Follower: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop(time.Second)
		skv := client(t, s.Addr())
		waitVisible(t, skv, want)

		put(50, 100)
		flush()
		if _, err := pkv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		put(100, 110) // in the WAL only
		unflushed := map[string]string{}
		for i := 100; i < 110; i++ {
			k := fmt.Sprintf("k%04d", i)
			unflushed[k] = want[k]
			delete(want, k)
		}
		waitVisible(t, skv, want)
		// The follower applied the flush's MANIFEST edit; had it read the
		// WAL (as a secondary does), the later writes would show.
		for k := range unflushed {
			_, err := skv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(k)})
			if status.Code(err) != codes.NotFound {
				t.Fatalf("%s on the follower before the primary flushed it: %v, want NOT_FOUND (if RocksDB's follower now reads WALs, revisit docs/secondary.md, \"Followers\")", k, err)
			}
		}
		flush()
		for k, v := range unflushed {
			want[k] = v
		}
		waitVisible(t, skv, want)
	})
}
