package shalefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Regression tests for the fencing holes an adversarial run found (issue
// 7). Each drives the FileSystem's hooks directly, as RocksDB would, so the
// interleaving is exact.

func openWith(t *testing.T, cfg Config) *Owner {
	t.Helper()
	if cfg.Lease == 0 {
		cfg.Lease = 100 * time.Millisecond
	}
	if cfg.DeleteGrace == 0 {
		cfg.DeleteGrace = time.Hour
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(t.TempDir(), "cache")
	}
	f, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// appendLocal appends to a file in f's cache directory, as RocksDB's
// writable file does before a sync, and returns the new size.
func appendLocal(t *testing.T, f *Owner, name string, b []byte) int64 {
	t.Helper()
	fh, err := os.OpenFile(f.localPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write(b); err != nil {
		t.Fatal(err)
	}
	fi, _ := fh.Stat()
	return fi.Size()
}

// Violation 3 (and the second half of 1): a deposed owner A, not yet aware,
// creates a new log after B's listing; its first segment reaches the store
// and its epoch check then finds B. The write's outcome is unknown (not
// "fenced"), and the log is never replayed: not by B, which never listed
// it, and not by C after B crashed, which must ignore it and trash it.
func TestLateLogOfDeposedOwnerNeverReplayed(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour})
		b := openWith(t, Config{Store: store, Epoch: 2})

		const late = "000041.log"
		if err := a.Create(late); err != nil {
			t.Fatal(err)
		}
		err = a.Sync(late, appendLocal(t, a, late, []byte("a write B never saw")), "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) || !a.WriteOutcomeUnknown() {
			t.Fatalf("sync of a first segment that raced the takeover: %v; want an outcome-unknown error", err)
		}
		if _, err := store.Stat(context.Background(), layout.SegmentKey(late, 1, 1)); err != nil {
			t.Fatalf("the test needs A's segment in the store: %v", err)
		}
		if _, ok := b.Stat(late); ok {
			t.Fatalf("B lists %s, created after its takeover", late)
		}
		b.Stop() // B crashes before its own log numbers pass 41

		c := openWith(t, Config{Store: store, Epoch: 3})
		if _, ok := c.Stat(late); ok {
			t.Fatalf("C would replay %s of epoch 1, written after epoch 2 took over", late)
		}
		if _, err := store.Stat(context.Background(), layout.TrashKey(late, 1)); err != nil {
			t.Fatalf("C did not trash the ignored log version: %v", err)
		}
	})
}

// A segment upload whose reply is lost is found in its slot by the retry:
// our own bytes, adopted, not a seal (the owner must not fence itself). A
// sync that gives up instead (every attempt failed; the last one lands
// later) stops the owner (issue 22, item 2): it uploads nothing more, and
// the next owner reads the late segment as part of the log.
func TestLateOwnSegmentIsNotAFence(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		raw, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		const name = "000007.log"
		var dropPuts, dropReply atomic.Bool
		hooked := &storetest.Hooked{Store: raw,
			BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
				if dropPuts.Load() && strings.HasPrefix(key, name+"/") {
					return retryLater(errors.New("connection reset (test)"))
				}
				return nil
			},
			AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
				if err == nil && strings.HasPrefix(key, name+"/") && dropReply.CompareAndSwap(true, false) {
					return retryLater(errors.New("reply lost (test)"))
				}
				return err
			}}
		a := openWith(t, Config{Store: hooked, Epoch: 1, RetryFor: 300 * time.Millisecond})
		if err := a.Create(name); err != nil {
			t.Fatal(err)
		}
		first := bytes.Repeat([]byte("x"), 100)
		dropReply.Store(true)
		if err := a.Sync(name, appendLocal(t, a, name, first), "wal"); err != nil {
			t.Fatalf("sync whose first reply was lost: %v", err)
		}
		if err := a.FenceError(); err != nil {
			t.Fatalf("the owner fenced itself on its own segment: %v", err)
		}

		second := bytes.Repeat([]byte("y"), 50)
		dropPuts.Store(true)
		err = a.Sync(name, appendLocal(t, a, name, second), "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) || a.FenceError() == nil {
			t.Fatalf("sync with every upload failing: %v; want the owner stopped, outcome unknown", err)
		}
		// The abandoned request arrives after all.
		if _, err := raw.Put(context.Background(), layout.SegmentKey(name, 1, 2), bytes.NewReader(second), int64(len(second)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		dropPuts.Store(false)
		if err := a.Sync(name, appendLocal(t, a, name, []byte("zzz")), "wal"); err == nil {
			t.Fatal("a stopped owner synced")
		}
		a.Stop()
		b := openWith(t, Config{Store: raw, Epoch: 2})
		if err := b.Fetch(name, "open"); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(b.localPath(name))
		if want := append(first, second...); !bytes.Equal(got, want) {
			t.Fatalf("log reads back as %d bytes %q..., want %d", len(got), got[:min(len(got), 8)], len(want))
		}
	})
}

// A CURRENT update whose reply is lost, followed by a failed read-back, is
// retried; it never fences an owner that no newer epoch superseded.
func TestCurrentLostReplyDoesNotFence(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		raw, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		var loseReply, failGet atomic.Bool
		hooked := &storetest.Hooked{Store: raw,
			AfterPut: func(key string, _ int64, _ objstore.PutOptions, err error) error {
				if key == "CURRENT" && err == nil && loseReply.CompareAndSwap(true, false) {
					return retryLater(errors.New("reply lost (test)"))
				}
				return err
			},
			BeforeGet: func(key string) error {
				if key == "CURRENT" && failGet.CompareAndSwap(true, false) {
					return retryLater(errors.New("read-back failed (test)"))
				}
				return nil
			}}
		a := openWith(t, Config{Store: hooked, Epoch: 1})
		setCurrent := func(manifest string) error {
			src := "000009.dbtmp"
			os.WriteFile(a.localPath(src), []byte(manifest+"\n"), 0o644)
			return a.Rename(src, "CURRENT")
		}
		if err := setCurrent("MANIFEST-000001"); err != nil {
			t.Fatal(err)
		}
		loseReply.Store(true)
		failGet.Store(true)
		if err := setCurrent("MANIFEST-000002"); err != nil {
			t.Fatalf("CURRENT update after a lost reply: %v", err)
		}
		if err := a.FenceError(); err != nil {
			t.Fatalf("fenced with no newer owner: %v", err)
		}
		if err := setCurrent("MANIFEST-000003"); err != nil {
			t.Fatalf("next CURRENT update: %v", err)
		}
		r, _, err := raw.Get(context.Background(), "CURRENT", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var buf bytes.Buffer
		buf.ReadFrom(r)
		if !strings.HasPrefix(buf.String(), "MANIFEST-000003\n") {
			t.Fatalf("CURRENT is %q", buf.String())
		}
	})
}

// A new owner waits out the previous owner's lease when it is longer than
// its own (a rollout from a long lease to a short one).
func TestNewOwnerWaitsOutLongerOldLease(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := openWith(t, Config{Store: store, Epoch: 1, Lease: 1500 * time.Millisecond})
	_ = a
	start := time.Now()
	b := openWith(t, Config{Store: store, Epoch: 2, Lease: 50 * time.Millisecond})
	// A's reads may go on until 1.5s (+ its margin) after B's claim.
	if waited := time.Since(start); waited < 1800*time.Millisecond {
		t.Fatalf("B served %v after taking over from an owner with a 1.5s lease (+0.3s margin)", waited)
	}
	if b.TakenAt().Before(start) {
		t.Fatal("clock")
	}
}

// A deposed owner that has not noticed yet deletes a file after the new
// owner listed it as live (RocksDB on the old owner compacted it away): its
// trash pass confirms its ownership before deleting anything, is fenced,
// and the new owner's file stays.
func TestDeposedOwnerDoesNotEmptyNewOwnersTrash(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, DeleteGrace: 100 * time.Millisecond})
	const table = "000012.sst"
	if err := a.Create(table); err != nil {
		t.Fatal(err)
	}
	appendLocal(t, a, table, []byte("table bytes"))
	if err := a.Close(table, 11, "flush"); err != nil {
		t.Fatal(err)
	}
	b := openWith(t, Config{Store: store, Epoch: 2, DeleteGrace: time.Hour})
	if _, ok := b.Stat(table); !ok {
		t.Fatal("the new owner did not list the table")
	}
	if err := a.Delete(table); err != nil {
		t.Fatal(err)
	}
	// A's trash loop waits the grace, then confirms before deleting: that
	// confirmation fences A.
	deadline := time.Now().Add(30 * time.Second)
	for a.FenceError() == nil {
		if time.Now().After(deadline) {
			t.Fatal("A's trash loop never confirmed its ownership")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.Stop() // no pass of A's loop is still running
	if _, err := store.Stat(context.Background(), layout.ObjectKey(table, 1)); err != nil {
		t.Fatalf("the deposed owner deleted a table its successor lists as live: %v", err)
	}
}

// A cached table is reused after a restart only if it is the version the
// store serves: a same-sized copy of another epoch's table of that name
// must be dropped, not read.
func TestCacheKeepsOnlyTheLiveVersion(t *testing.T) {
	store, err := objstore.OpenFile(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	a := openWith(t, Config{Store: store, Epoch: 1, CacheDir: cache})
	const table = "000012.sst"
	a.Create(table)
	appendLocal(t, a, table, []byte("AAAA"))
	if err := a.Close(table, 4, "flush"); err != nil {
		t.Fatal(err)
	}
	a.Stop()
	// Another owner's table of the same name and size (an owner that had
	// not seen epoch 1's).
	if _, err := store.Put(context.Background(), layout.ObjectKey(table, 2), strings.NewReader("BBBB"), 4, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b := openWith(t, Config{Store: store, Epoch: 3, CacheDir: cache})
	if got, err := os.ReadFile(b.localPath(table)); err == nil {
		t.Fatalf("epoch 1's cached copy %q survived; the store serves epoch 2's", got)
	}
	if err := b.OpenTable(table, "open"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(b.localPath(table)); string(got) != "BBBB" {
		t.Fatalf("table reads %q, want epoch 2's BBBB", got)
	}
}

// Seals go with their log, 3×AckFresh of its writer after its trash: a
// zombie that then writes to the log finds its slot free, but it has not
// confirmed its ownership within AckFresh, so it confirms before it
// acknowledges, is fenced, and reports the write's outcome unknown; the
// write is in no owner's database.
func TestZombieWriteAfterSealDeletedIsNotAcknowledged(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		const ack = 100 * time.Millisecond
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: ack})
		const wal = "000005.log"
		if err := a.Create(wal); err != nil {
			t.Fatal(err)
		}
		n := appendLocal(t, a, wal, []byte("acknowledged"))
		if err := a.Sync(wal, n, "wal"); err != nil {
			t.Fatal(err)
		}
		// B seals A's WAL, then deletes it (as after its recovery's flush).
		b := openWith(t, Config{Store: store, Epoch: 2, DeleteGrace: 50 * time.Millisecond, AckFresh: ack})
		if _, ok := b.Stat(wal); !ok {
			t.Fatal("B did not list A's WAL")
		}
		if err := b.Delete(wal); err != nil {
			t.Fatal(err)
		}
		gone := func() bool {
			objs := 0
			store.List(context.Background(), layout.LogVersionPrefix(wal, 1), func(objstore.ObjectInfo) error { objs++; return nil })
			return objs == 0
		}
		noMarkers := func() bool { n, _ := count(t, store, layout.TrashPrefix); return n == 0 }
		for deadline := time.Now().Add(time.Minute); !gone() || !noMarkers(); {
			if time.Now().After(deadline) {
				t.Fatal("the deleted WAL, its seal or its trash marker is still in the store a minute later")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// A, blind, appends to its WAL: the slot is free, the upload lands.
		n = appendLocal(t, a, wal, []byte(" zombie write"))
		err = a.Sync(wal, n, "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) {
			t.Fatalf("the zombie's write after its seal was deleted: %v, want outcome unknown", err)
		}
		if a.FenceError() == nil {
			t.Fatal("the zombie is not fenced")
		}
	})
}

// count counts the objects under prefix.
func count(t *testing.T, store objstore.Store, prefix string) (int, error) {
	t.Helper()
	n := 0
	err := store.List(context.Background(), prefix, func(objstore.ObjectInfo) error { n++; return nil })
	return n, err
}

// Issue 22, item 6: a sync whose first segment landed but whose
// confirmation failed (a store error, not a fence) must not leave the
// segment counted as stored: a later sync of the same bytes would find
// "nothing new" and acknowledge them unconfirmed. Here B took over before
// A created the log, so B never lists it: acknowledging would lose the
// write. The later sync must not succeed: A stopped at the failure (item
// 2), so it answers outcome unknown.
func TestSyncAfterFailedConfirmationConfirmsAgain(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		var failOwner atomic.Bool
		hooked := &storetest.Hooked{Store: store, BeforeGet: func(key string) error {
			if key == layout.OwnerKey && failOwner.Load() {
				return errors.New("injected: owner record unreadable")
			}
			return nil
		}}
		a := openWith(t, Config{Store: hooked, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, RetryFor: 100 * time.Millisecond})
		openWith(t, Config{Store: store, Epoch: 2})

		const late = "000009.log"
		if err := a.Create(late); err != nil {
			t.Fatal(err)
		}
		size := appendLocal(t, a, late, []byte("a write B never lists"))
		failOwner.Store(true)
		if err := a.Sync(late, size, "wal"); err == nil || definitelyNotStored(err) {
			t.Fatalf("sync whose confirmation failed: %v; want an error with the outcome unknown", err)
		}
		if _, err := store.Stat(context.Background(), layout.SegmentKey(late, 1, 1)); err != nil {
			t.Fatalf("the test needs A's segment in the store: %v", err)
		}
		failOwner.Store(false)
		err = a.Sync(late, size, "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) || !a.WriteOutcomeUnknown() {
			t.Fatalf("second sync of the same bytes: %v; want outcome unknown (B exists and never listed the log)", err)
		}
		if tails, _ := a.Tails(); len(tails) != 0 {
			t.Fatalf("A announces %+v to readers: a segment never cleared for acknowledgement", tails)
		}
	})
}

// Issue 22, item 1: while B has raised the owner record but not yet
// recorded its takeover (it waits out A's lease), deposed A creates a new
// log and stores its first segment; A's confirmation finds B, so the write
// is outcome unknown, and B, which listed the store before the log
// existed, never replays it. A reader must never serve that segment: not
// while B is taking over (before the fix it admitted A's new log, as A's
// was the last completed takeover), and not after (then the write would
// go from found to not found).
func TestReaderDuringTakeoverServesOnlyDurable(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ca := filepath.Join(t.TempDir(), "a")
		a := openWith(t, Config{Store: store, Epoch: 1, CacheDir: ca, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour})
		da := openDB(t, a, ca)
		if err := da.Put([]byte("before"), []byte("durable"), true); err != nil {
			t.Fatal(err)
		}
		r, err := OpenReader(ctx, Config{Store: store, CacheDir: filepath.Join(t.TempDir(), "r")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)

		// B takes over; its opened record is held.
		held, release := make(chan struct{}), make(chan struct{})
		hooked := &storetest.Hooked{Store: store, BeforePut: func(key string, _ int64, _ objstore.PutOptions) error {
			if key == layout.OpenedKey(2) {
				close(held)
				<-release
			}
			return nil
		}}
		bc := make(chan error, 1)
		go func() {
			b, err := Open(ctx, Config{Store: hooked, Epoch: 2, CacheDir: filepath.Join(t.TempDir(), "b"), Lease: 100 * time.Millisecond, DeleteGrace: time.Hour})
			if err == nil {
				t.Cleanup(b.Stop)
			}
			bc <- err
		}()
		<-held

		const late = "000099.log"
		if err := a.Create(late); err != nil {
			t.Fatal(err)
		}
		err = a.Sync(late, appendLocal(t, a, late, []byte("never durable")), "wal")
		var unknown *ErrOutcomeUnknown
		if !errors.As(err, &unknown) {
			t.Fatalf("A's first segment after B's raise: %v; want outcome unknown", err)
		}
		if _, err := store.Stat(ctx, layout.SegmentKey(late, 1, 1)); err != nil {
			t.Fatalf("the test needs A's segment in the store: %v", err)
		}
		err = r.Refresh(ctx)
		if _, ok := r.Stat(late); ok {
			t.Fatalf("the reader admitted %s, a log A created after B's listing (refresh: %v)", late, err)
		}
		if !errors.Is(err, ErrTakeoverInProgress) {
			t.Fatalf("refresh during the takeover: %v; want ErrTakeoverInProgress", err)
		}

		close(release)
		if err := <-bc; err != nil {
			t.Fatal(err)
		}
		if err := r.Refresh(ctx); err != nil {
			t.Fatalf("refresh after the takeover: %v", err)
		}
		if _, ok := r.Stat(late); ok {
			t.Fatalf("the reader admitted %s after B's takeover, which never replays it", late)
		}
	})
}

// The gap below a seal, with two successors (found by the log-protocol
// model, docs/rfcs/0001-log-protocol-model.md): B's stride loses slots 2
// and 3 to A and wins slot 5, and B stops (crashes) before filling slot 4.
// C lists slots 1-3 and the seal in 5. It took the log as sealed, so A,
// blind, stored slot 4 and acknowledged it, and C never had it. Now C
// fills the slots between the log's end and its seal.
func TestSuccessorFillsGapBelowEarlierSeal(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const wal = "000028.log"
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour, AckFresh: time.Hour})
		if err := a.Create(wal); err != nil {
			t.Fatal(err)
		}
		w := &logWriter{t: t, f: a, name: wal}
		write := w.write
		if err := write(1); err != nil {
			t.Fatal(err)
		}

		// B lists slot 1; its first seal is held while A writes 2 and 3;
		// its fill of slot 4 never goes out (B dies there).
		held, release := make(chan struct{}), make(chan struct{})
		bctx, crash := context.WithCancel(ctx)
		bStore := &storetest.Hooked{Store: store, BeforePut: func(key string, size int64, _ objstore.PutOptions) error {
			switch {
			case size != 0:
			case key == layout.SegmentKey(wal, 1, 2):
				close(held)
				<-release
			case key == layout.SegmentKey(wal, 1, 4):
				crash()
				return bctx.Err()
			}
			return nil
		}}
		bc := make(chan error, 1)
		go func() {
			f, err := Open(bctx, Config{Store: bStore, Epoch: 2, CacheDir: filepath.Join(t.TempDir(), "b"), Lease: 100 * time.Millisecond, DeleteGrace: time.Hour})
			if err == nil {
				f.Stop()
			}
			bc <- err
		}()
		<-held
		for i := 2; i <= 3; i++ {
			if err := write(i); err != nil {
				t.Fatal(err)
			}
		}
		close(release)
		if err := <-bc; err == nil {
			t.Fatal("B opened; the test needs it to die before filling slot 4")
		}
		if _, err := store.Stat(ctx, layout.SegmentKey(wal, 1, 5)); err != nil {
			t.Fatalf("the test needs B's seal in slot 5: %v", err)
		}

		c := openWith(t, Config{Store: store, Epoch: 3})
		werr := write(4)
		if err := c.Fetch(wal, "open"); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(c.cfg.CacheDir, wal))
		if err != nil || !bytes.Equal(got, w.acked) {
			t.Fatalf("C recovered %q (%v); A acknowledged %q (its write to slot 4: %v)", got, err, w.acked, werr)
		}
		if werr == nil || !definitelyNotStored(werr) {
			t.Fatalf("A's write after C's takeover: %v; want fenced", werr)
		}
	})
}

// A store that loses the database under its owner (a wiped bucket; seen in
// make e2e when MinIO restarted without its volume) must stop the owner at
// its next confirmation: before, a missing owner record fell back to the
// claims, found none above ours, and the owner went on acknowledging
// writes into a store that held no database.
func TestOwnerStopsWhenTheStoreLostTheDatabase(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		store, err := objstore.Open(loc.NewURL(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		a := openWith(t, Config{Store: store, Epoch: 1, ConfirmEvery: time.Hour, IdleConfirmEvery: time.Hour})
		var keys []string
		if err := store.List(ctx, "", func(o objstore.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := store.DeleteMany(ctx, keys); err != nil {
			t.Fatal(err)
		}
		err = a.confirm(ctx, ActLease)
		var fe *ErrFenced
		if !errors.As(err, &fe) || fe.Cause == "" || a.FenceError() == nil {
			t.Fatalf("confirmation on a wiped store: %v; want the owner stopped", err)
		}
		if err := a.ReadAllowed(); err == nil {
			t.Fatal("the owner of a wiped store serves reads")
		}
	})
}
