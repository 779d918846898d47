package primary

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// Issue 22, item 2: a WAL segment lands but its reply is lost, and reading
// it back fails until the retries run out; then the store heals. The
// write failed inside RocksDB (never applied there) but is in the store,
// so secondaries and the next owner have it. Before the fix RocksDB 7.8.3
// resumed on its own and the primary served the key as absent while the
// store held it. Now the primary stops (it serves nothing more and
// acknowledges nothing more) and the next owner recovers the write.
func TestOutcomeUnknownSyncStopsThePrimary(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		hs := hookedStore(t, db)
		var mu sync.Mutex
		drop, lost := false, ""
		hs.AfterPut = func(key string, size int64, _ objstore.PutOptions, err error) error {
			mu.Lock()
			defer mu.Unlock()
			if err == nil && drop && size > 0 && strings.Contains(key, ".log/") {
				drop, lost = false, key
				return errors.New("injected: the reply to this PUT was lost")
			}
			return err
		}
		hs.BeforeGet = func(key string) error {
			mu.Lock()
			defer mu.Unlock()
			if key == lost {
				return errors.New("injected: the store cannot read this object yet")
			}
			return nil
		}
		sc := blindOwner(1)
		sc.Store, sc.RetryFor = hs, 300*time.Millisecond
		a, err := startOwnerWith(t, db, sc)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		put := func(k string) error {
			_, err := a.kv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte("v"), Sync: true})
			return err
		}
		if err := put("before"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		drop = true
		mu.Unlock()
		if err := put("lost-reply"); status.Code(err) != codes.Unavailable {
			t.Fatalf("a synced put whose segment landed unconfirmed: %v; want UNAVAILABLE (outcome unknown)", err)
		}
		mu.Lock()
		healed := lost
		lost = ""
		mu.Unlock()
		if healed == "" {
			t.Fatal("the test needs a WAL segment whose reply was lost")
		}
		// The store holds the write. The primary must never say it does
		// not, and must not acknowledge more writes on a database that
		// lacks it (RocksDB would resume and flush without it).
		deadline := time.Now().Add(5 * time.Second)
		for a.srv.fs.FenceError() == nil && time.Now().Before(deadline) {
			_, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("lost-reply")})
			if status.Code(err) == codes.NotFound {
				t.Fatal("the primary serves lost-reply as absent while the store holds it")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if a.srv.fs.FenceError() == nil {
			t.Fatal("the primary went on after a sync whose outcome is unknown")
		}
		if _, err := a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("lost-reply")}); status.Code(err) == codes.NotFound || err == nil {
			t.Fatalf("the stopped primary served a read: %v", err)
		}
		if err := put("after"); err == nil {
			t.Fatal("the stopped primary acknowledged a write")
		}
		a.stop()

		b := mustOwner(t, db, 2)
		for _, k := range []string{"before", "lost-reply"} {
			if _, err := getRetrying(b.kv, k); err != nil {
				t.Fatalf("%s on the next owner: %v", k, err)
			}
		}
		if _, err := getRetrying(b.kv, "after"); status.Code(err) != codes.NotFound {
			t.Fatalf("after, refused by the stopped primary, on the next owner: %v", err)
		}
	})
}
