package shalefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// RFC 0013 at the FileSystem: WAL syncs return once queued; uploads land
// in any order and are cleared strictly in order (the watermark, the
// stored size); a failure in the middle stops the owner, every later
// ticket is outcome unknown, and the next owner seals the hole.
func TestPipelineTickets(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		raw, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		const name = "000007.log"
		slot := func(seq uint64) string { return layout.SegmentKey(name, 1, seq) }
		var mu sync.Mutex
		hold := map[string]chan struct{}{} // key -> closed to let it go
		fail := map[string]bool{}
		landed := make(chan string, 16)
		hooked := &storetest.Hooked{Store: raw,
			BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
				mu.Lock()
				ch, f := hold[key], fail[key]
				mu.Unlock()
				if ch != nil {
					<-ch
				}
				if f {
					return errors.New("injected: this upload fails for good")
				}
				return nil
			},
			AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
				if err == nil && strings.HasPrefix(key, name+"/") {
					landed <- key
				}
				return err
			}}
		a := openWith(t, Config{Store: hooked, Epoch: 1, WALPipelineDepth: 3, RetryFor: 300 * time.Millisecond})
		var lets []func()
		let := func(key string) func() {
			ch := make(chan struct{})
			mu.Lock()
			hold[key] = ch
			mu.Unlock()
			var once sync.Once
			f := func() { once.Do(func() { close(ch) }) }
			lets = append(lets, f)
			return f
		}
		t.Cleanup(func() {
			for _, f := range lets {
				f()
			}
		})
		if err := a.Create(name); err != nil {
			t.Fatal(err)
		}
		segs := [][]byte{[]byte("one"), []byte("two-2"), []byte("three-33"), []byte("four-444"), []byte("five-5555"), []byte("six")}
		sync := func(i int) uint64 {
			t.Helper()
			if err := a.Sync(name, appendLocal(t, a, name, segs[i]), "wal"); err != nil {
				t.Fatalf("sync %d: %v", i+1, err)
			}
			return a.Ticket()
		}
		t1 := sync(0)
		if err := a.WaitDurable(t1); err != nil {
			t.Fatal(err)
		}
		<-landed
		// Slot 2 is held; 3 and 4 land before it.
		release2 := let(slot(2))
		t2 := sync(1)
		sync(2)
		t4 := sync(3)
		for range 2 {
			if k := waitForKey(t, landed); k == slot(2) {
				t.Fatal("the held upload landed")
			}
		}
		if d := a.Durable(); d != t1 || t2 != t1+1 {
			t.Fatalf("watermark %d with slot 2 held (tickets %d, %d); want %d", d, t1, t2, t1)
		}
		st := a.files[name]
		st.mu.Lock()
		size := st.size
		st.mu.Unlock()
		if size != int64(len(segs[0])) {
			t.Fatalf("stored size %d with slot 2 held; want %d (only what is cleared, in order)", size, len(segs[0]))
		}
		release2()
		if err := a.WaitDurable(t4); err != nil {
			t.Fatal(err)
		}
		<-landed

		// Slot 5 fails for good while slot 6 lands.
		mu.Lock()
		fail[slot(5)] = true
		mu.Unlock()
		release5 := let(slot(5))
		t5 := sync(4)
		t6 := sync(5)
		if k := waitForKey(t, landed); k != slot(6) {
			t.Fatalf("landed %s; want slot 6", k)
		}
		release5()
		for _, tk := range []uint64{t5, t6} {
			var unknown *ErrOutcomeUnknown
			if err := a.WaitDurable(tk); !errors.As(err, &unknown) {
				t.Fatalf("ticket %d after slot 5 failed: %v; want outcome unknown", tk, err)
			}
		}
		if a.FenceError() == nil || !a.WriteOutcomeUnknown() {
			t.Fatal("the owner went on after a failed upload")
		}
		if err := a.drain(); err == nil {
			t.Fatal("drain after a failed upload: nil")
		}
		if err := a.WaitDurable(t4); err != nil {
			t.Fatalf("a ticket before the failure: %v", err)
		}
		a.Stop()

		// The next owner seals slot 5 and replays slots 1-4.
		b := openWith(t, Config{Store: raw, Epoch: 2})
		if err := b.Fetch(name, "open"); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(b.localPath(name))
		if want := bytes.Join(segs[:4], nil); !bytes.Equal(got, want) {
			t.Fatalf("the next owner's log: %q; want %q", got, want)
		}
		seal, _, err := raw.Get(context.Background(), slot(5), 0, -1)
		if err != nil {
			t.Fatalf("slot 5 after the takeover: %v", err)
		}
		defer seal.Close()
		var buf bytes.Buffer
		buf.ReadFrom(seal)
		if buf.Len() != 0 {
			t.Fatalf("slot 5 holds %d bytes; want the new owner's seal", buf.Len())
		}
	})
}

func waitForKey(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case k := <-ch:
		return k
	case <-time.After(time.Minute):
		t.Fatal("timed out waiting for an upload to land")
		return ""
	}
}

func TestPipelineDepthOutOfRange(t *testing.T) {
	for _, d := range []int{-1, MaxWALPipelineDepth + 1} {
		_, err := Open(context.Background(), Config{Store: nil, CacheDir: t.TempDir(), WALPipelineDepth: d})
		if err == nil || !strings.Contains(err.Error(), "--wal-pipeline-depth") || !strings.Contains(err.Error(), "want 1") {
			t.Errorf("depth %d: %v; want an error naming --wal-pipeline-depth and its range", d, err)
		}
	}
}
