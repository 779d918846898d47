//go:build linux

package shalefs

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
)

// opens counts the opens of one file (inotify): a follower's catch-up
// thread opens the reader's CURRENT at the start of every catch-up, so two
// opens mean one whole catch-up ran in between.
type opens struct{ fd int }

func watchOpens(t *testing.T, path string) *opens {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return &opens{fd}
}

// wait returns after n more opens, or fails the test after a minute.
func (o *opens) wait(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	deadline := time.Now().Add(time.Minute)
	for n > 0 {
		fds := []unix.PollFd{{Fd: int32(o.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the follower ran no catch-up in a minute")
			}
			continue
		}
		k, err := unix.Read(o.fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_OPEN != 0 {
				n--
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// A follower (DB::OpenAsFollower) reads the MANIFEST's local copy on its
// own thread, concurrently with Refresh: a flush's edit it reads names a
// table the view must hold already, or RocksDB counts the table missing
// for good and its version never advances past the flush. The refresh is
// held between installing the view and growing the MANIFEST while the
// follower catches up; the flushed keys must then show.
func TestFollowerSeesTablesBeforeTheirEdits(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		for _, hinted := range []bool{false, true} {
			t.Run(fmt.Sprintf("hinted=%v", hinted), func(t *testing.T) {
				testFollowerSeesTables(t, loc, hinted)
			})
		}
	})
}

func testFollowerSeesTables(t *testing.T, loc storetest.Location, hinted bool) {
	store, err := objstore.Open(loc.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(t.TempDir(), "primary")
	f1, err := Open(ctx, Config{Store: store, CacheDir: c1, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Stop()
	d1 := openDB(t, f1, c1)
	defer d1.Close()
	put := func(from, to int) {
		for i := from; i < to; i++ {
			if err := d1.Put([]byte(fmt.Sprintf("k%04d", i)), []byte(fmt.Sprintf("v%d", i)), true); err != nil {
				t.Fatal(err)
			}
		}
		if err := d1.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	put(0, 10)

	c2 := filepath.Join(t.TempDir(), "follower")
	r, err := OpenReader(ctx, Config{Store: store, CacheDir: c2})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	o := engine.DefaultOptions()
	o.FileSystem = r
	o.SecondaryDir = c2 + "-rocksdb"
	o.FollowerRefresh = 5 * time.Millisecond
	d2, err := engine.Open(c2, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if _, ok, err := d2.Get([]byte("k0009")); !ok || err != nil {
		t.Fatalf("k0009 on the follower at open: %v %v", ok, err)
	}

	put(10, 20)
	held := 0
	r.beforeGrow = func(logs []string) {
		if !slices.ContainsFunc(logs, isManifest) {
			return
		}
		t.Logf("held before growing %v", logs)
		held++
		// Watched from now on: only the follower's catch-ups while held.
		watchOpens(t, filepath.Join(c2, "CURRENT")).wait(t, 2)
	}
	if hinted {
		err = r.RefreshHinted(ctx, hintOf(f1))
	} else {
		err = r.Refresh(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if held == 0 {
		t.Fatal("the refresh grew no MANIFEST: the test holds nothing")
	}
	r.beforeGrow = nil
	deadline := time.Now().Add(time.Minute)
	for {
		_, ok, err := d2.Get([]byte("k0019"))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("k0019 not visible on the follower a minute after the flush's edit reached it: it read the edit before the view held the new table")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
