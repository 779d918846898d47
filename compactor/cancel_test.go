package compactor_test

import (
	"context"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
)

// queuedPrimary starts a primary whose remote compactions wait in the
// queue of a scheduler with no worker (and a queue timeout far beyond
// the test), and has a full compaction waiting there.
func queuedPrimary(t *testing.T, db string, sched *compactor.SchedulerServer) (*testPrimary, model, chan error) {
	t.Helper()
	cfg := remoteConfig(db, sched.Addr(), 1)
	cfg.Compaction.QueueTimeout = time.Hour
	p := startPrimary(t, cfg)
	m := model{}
	load(t, p.kv, m, rand.New(rand.NewSource(7)), 2, 1000)
	compacted := make(chan error, 1)
	go func() {
		_, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{})
		compacted <- err
	}()
	waitFor(t, "a compaction queued at the scheduler", func() bool { return sched.Snapshot().Total.Queued >= 1 })
	return p, m, compacted
}

// A primary that closes while its compaction waits for a worker: RocksDB
// cancels the waiting job (CancelAwaitingJobs), the client ends it at the
// scheduler, which drops it from its queue, and the close completes; the
// next owner reads every key.
func TestClosingPrimaryCancelsQueuedJobs(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	sched := startScheduler(t, compactor.SchedulerConfig{})
	p, m, _ := queuedPrimary(t, db, sched)
	c := p.Compactor()
	stopped := make(chan struct{})
	go func() {
		p.stop()
		close(stopped)
	}()
	waitFor(t, "the primary to stop", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	if n := c.Fallbacks()[compactor.ReasonCanceled]; n < 1 {
		t.Fatalf("fallbacks %v: want the waiting compaction cancelled by the close", c.Fallbacks())
	}
	waitFor(t, "the scheduler to drop the job", func() bool {
		st := sched.Snapshot().Total
		return st.Queued == 0 && st.Cancelled >= 1
	})
	p2 := startPrimary(t, remoteConfig(db, sched.Addr(), 2))
	checkModel(t, p2.kv, m)
}

// A primary deposed while its compaction waits for a worker cancels the
// job at the scheduler at once (it could never install it), without
// waiting for its queue timeout or its own stop, and its compaction ends.
func TestFencedPrimaryCancelsQueuedJobs(t *testing.T) {
	db := "file://" + filepath.Join(t.TempDir(), "db")
	sched := startScheduler(t, compactor.SchedulerConfig{})
	a, m, compacted := queuedPrimary(t, db, sched)
	bCfg := remoteConfig(db, sched.Addr(), 2)
	bCfg.CompactionMode = "local"
	b := startPrimary(t, bCfg)
	// A learns it was deposed at its next write to the store.
	waitFor(t, "A to be fenced", func() bool {
		_, err := a.kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte("after"), Value: []byte("b"), Sync: true})
		return err != nil
	})
	waitFor(t, "A's queued job to be cancelled at the scheduler", func() bool {
		st := sched.Snapshot().Total
		return st.Queued == 0 && st.Cancelled >= 1
	})
	select {
	case <-compacted:
	case <-time.After(waitDeadline):
		t.Fatal("A's compaction still waits after the fence")
	}
	if n := a.Compactor().Fallbacks()[compactor.ReasonFenced]; n < 1 {
		t.Fatalf("A's fallbacks %v: want the waiting compaction ended by the fence", a.Compactor().Fallbacks())
	}
	checkModel(t, b.kv, m)
}
