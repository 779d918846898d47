package shalefs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Leases on a clock that stops (issue 22, item 3): Go's monotonic clock
// does not advance while the machine is suspended, so an owner resumed
// after a long suspension took its last confirmation for a recent one.
// Each test suspends an owner with a jumpClock (core_clock_test.go): the time
// its clock says passed at once, as CLOCK_BOOTTIME does on resume.

// waitOwnerRecord waits until _shale/owner announces epoch.
func waitOwnerRecord(t *testing.T, store objstore.Store, epoch uint64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var rec layout.OwnerEpochRecord
		var b []byte
		r, _, err := store.Get(context.Background(), layout.OwnerKey, 0, -1)
		if err == nil {
			b, err = io.ReadAll(r)
			r.Close()
		}
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.Epoch >= epoch {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the owner record does not announce epoch %d a minute later (%s, %v)", epoch, b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An owner suspended for longer than its read lease confirms its
// ownership before it serves a read, and is refused once a newer owner
// has announced itself, even though a newer owner's lease wait has not
// ended (a suspended owner cannot know how long it was away).
func TestSuspendedOwnerReconfirmsReads(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		clock := newJumpClock()
		var confirms atomic.Int64
		a := openWith(t, Config{Store: store, Epoch: 1, Lease: time.Hour, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, Clock: clock,
			Observe: func(r Request) {
				if r.Activity == "foreground_read" {
					confirms.Add(1)
				}
			}})
		if err := a.ReadAllowed(); err != nil || confirms.Load() != 0 {
			t.Fatalf("a read right after the open: %v after %d confirmations, want allowed without one", err, confirms.Load())
		}
		clock.suspend(2 * time.Hour)
		if err := a.ReadAllowed(); err != nil {
			t.Fatalf("a read after a suspension, no newer owner: %v", err)
		}
		if confirms.Load() == 0 {
			t.Fatal("a read 2h after the last confirmation (the machine was suspended; the lease is 1h) was served without confirming the ownership")
		}

		// B takes over while A is suspended again; B's open then waits out
		// A's hour-long lease (it is cancelled at the end).
		ctx, cancel := context.WithCancel(context.Background())
		opened := make(chan error, 1)
		go func() {
			b, err := Open(ctx, Config{Store: store, Epoch: 2, Lease: 100 * time.Millisecond, CacheDir: filepath.Join(t.TempDir(), "b")})
			if err == nil {
				b.Stop()
			}
			opened <- err
		}()
		defer func() { cancel(); <-opened }()
		waitOwnerRecord(t, store, 2)
		clock.suspend(2 * time.Hour)
		err = a.ReadAllowed()
		var fe *ErrFenced
		if !errors.As(err, &fe) || fe.By != 2 {
			t.Fatalf("a read on A resumed after epoch 2 took over: %v, want fenced by 2 (a stale read otherwise)", err)
		}
	})
}

// An owner suspended for longer than AckFresh confirms its ownership
// before it acknowledges a synced write. Meanwhile a new owner sealed its
// WAL, deleted it and, 3×AckFresh later, the seal: the slot is free, the
// segment lands, and the write must not be acknowledged (it is in no
// owner's database).
func TestSuspendedOwnerConfirmsBeforeAck(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		clockA, clockB := newJumpClock(), newJumpClock()
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: time.Hour, Clock: clockA})
		const wal = "000005.log"
		if err := a.Create(wal); err != nil {
			t.Fatal(err)
		}
		n := appendLocal(t, a, wal, []byte("acknowledged"))
		if err := a.Sync(wal, n, "wal"); err != nil {
			t.Fatal(err)
		}
		// A is suspended for 4 hours. Meanwhile B takes over, seals A's
		// WAL and deletes it; 3×AckFresh (3h) later its seal goes too.
		b := openWith(t, Config{Store: store, Epoch: 2, DeleteGrace: 50 * time.Millisecond, Clock: clockB})
		if _, ok := b.Stat(wal); !ok {
			t.Fatal("B did not list A's WAL")
		}
		if err := b.Delete(wal); err != nil {
			t.Fatal(err)
		}
		clockB.suspend(4 * time.Hour) // B's clock counts the 4 hours
		gone := func() bool {
			objs := 0
			store.List(context.Background(), layout.LogVersionPrefix(wal, 1), func(objstore.ObjectInfo) error { objs++; return nil })
			n, _ := count(t, store, layout.TrashPrefix)
			return objs == 0 && n == 0
		}
		for deadline := time.Now().Add(time.Minute); !gone(); {
			if time.Now().After(deadline) {
				t.Fatal("B did not delete A's WAL, its seal and its trash marker")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// A resumes and appends to its WAL: the slot is free, the upload lands.
		clockA.suspend(4 * time.Hour)
		n = appendLocal(t, a, wal, []byte(" after the suspension"))
		err = a.Sync(wal, n, "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) {
			t.Fatalf("a synced write 4h after the last confirmation (AckFresh 1h), into a slot whose seal was deleted: %v, want outcome unknown (never acknowledged)", err)
		}
		if a.FenceError() == nil {
			t.Fatal("A is not fenced")
		}
	})
}

// A reader (a secondary) suspended for longer than its lease's TTL
// refuses reads: the primary may have deleted the files its view uses.
func TestSuspendedReaderRefusesReads(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(t.TempDir(), "primary")
	f1 := openWith(t, Config{Store: store, CacheDir: c1, Epoch: 1})
	d1 := openDB(t, f1, c1)
	defer d1.Close()
	if err := d1.Put([]byte("k"), []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	clock := newJumpClock()
	r, err := OpenReader(ctx, Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "secondary"), ReaderTTL: time.Hour, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r.CaughtUp()
	if err := r.ReadAllowed(); err != nil {
		t.Fatalf("a reader that just renewed its lease: %v", err)
	}
	clock.suspend(2 * time.Hour)
	if err := r.ReadAllowed(); err == nil {
		t.Fatal("a reader suspended for 2h (lease TTL 1h) allows reads; the primary may have deleted what it reads")
	}
}
