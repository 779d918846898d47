package primary

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/kvload"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// loadMessage packs n pairs prefix/000..., one Load message.
func loadMessage(prefix string, n int) *kvv1.LoadRequest {
	var packed []byte
	for i := 0; i < n; i++ {
		packed = kvload.AppendPacked(packed, []byte(fmt.Sprintf("%s/%03d", prefix, i)), []byte("v"))
	}
	return &kvv1.LoadRequest{Packed: packed, Sync: true}
}

// waitKey waits until o serves key (a Load message is applied after
// the stream received it).
func waitKey(t *testing.T, o *owner, key string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := o.kv.Get(context.Background(), &kvv1.GetRequest{Key: []byte(key)})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not applied a minute after it was sent: %v", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 22, item 4: a Load stream on a primary deposed mid-stream. Its
// applied messages went to the memtable, and may have reached the store
// with another write's sync before the new owner sealed the WAL: once any
// was applied, the load ends UNAVAILABLE (outcome unknown) with the count
// applied, in the message and the trailer; FAILED_PRECONDITION ("fenced",
// nothing applied, ever) only for a load of which nothing was applied.
func TestLoadDeposedMidStream(t *testing.T) { storetest.ForEachBackend(t, testLoadDeposedMidStream) }

func testLoadDeposedMidStream(t *testing.T, be storetest.Location) {
	db := be.NewURL(t)
	a := mustOwner(t, db, 1)
	ctx := context.Background()

	started, err := a.kv.Load(ctx) // a message applied before the takeover
	if err != nil {
		t.Fatal(err)
	}
	if err := started.Send(loadMessage("m1", 100)); err != nil {
		t.Fatal(err)
	}
	waitKey(t, a, "m1/099")
	idle, err := a.kv.Load(ctx) // open, nothing sent yet
	if err != nil {
		t.Fatal(err)
	}

	mustOwner(t, db, 2) // epoch 2 takes over the store
	for deadline := time.Now().Add(time.Minute); a.srv.fs.FenceError() == nil; {
		a.kv.Get(ctx, &kvv1.GetRequest{Key: []byte("m1/000")}) // confirms the lease: A learns of epoch 2
		if time.Now().After(deadline) {
			t.Fatal("A did not learn of epoch 2 in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The next message of the started load meets the fence.
	started.Send(loadMessage("m2", 10))
	_, err = started.CloseAndRecv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "outcome unknown") ||
		!strings.Contains(err.Error(), "1 message of this load (100 pairs) had been applied") {
		t.Fatalf("a load deposed after its first message was applied: %v, want UNAVAILABLE, outcome unknown, 1 message (100 pairs) applied", err)
	}
	checkTrailer(t, started, 1, 100)

	// Loads of which nothing was applied are fenced: nothing of them will
	// ever be in the database.
	fresh, err := a.kv.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]kvv1.KV_LoadClient{"opened before the fence": idle, "opened after it": fresh} {
		s.Send(loadMessage("m3", 10))
		_, err := s.CloseAndRecv()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fenced: epoch 1 superseded by 2") {
			t.Errorf("a load %s, nothing of it applied: %v, want FAILED_PRECONDITION fenced", name, err)
		}
	}
}

// checkTrailer checks that a failed load's trailer says how much of it was
// applied.
func checkTrailer(t *testing.T, s grpc.ClientStream, messages, pairs int) {
	t.Helper()
	md := s.Trailer()
	want := metadata.Pairs(kvload.TrailerAppliedMessages, fmt.Sprint(messages), kvload.TrailerAppliedPairs, fmt.Sprint(pairs))
	for k, v := range want {
		if got := md.Get(k); len(got) != 1 || got[0] != v[0] {
			t.Errorf("trailer %s = %q, want %q (trailer %v)", k, got, v[0], md)
		}
	}
}
