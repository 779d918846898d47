package compactor_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// Issue 22, item 5: a result is checked before RocksDB sees it, whoever
// sent it. A forger that can reach the scheduler but has no store
// credentials takes a job and reports no outputs, or a failure status; a
// worker reports only some of its outputs. Each time the primary compacts
// locally (counted), and every key reads back, also from the store after
// a restart.

// forgeOne leases one job from the scheduler as a worker would, and
// reports what forge makes of it: no store access, only the network.
func forgeOne(t *testing.T, sched string, forge func(j *compactorv1.Job) []byte) <-chan *compactorv1.Job {
	t.Helper()
	conn, err := grpc.NewClient(sched, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := compactorv1.NewCompactorClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan *compactorv1.Job, 1)
	go func() {
		for ctx.Err() == nil {
			r, err := c.Lease(ctx, &compactorv1.LeaseRequest{Worker: "forger", Slots: 1, WaitMillis: 500})
			if err != nil || r.Job == nil {
				continue
			}
			j := r.Job
			resp, err := c.Complete(ctx, &compactorv1.CompleteRequest{Worker: "forger", Job: &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt}, Result: forge(j)})
			if err != nil || !resp.Accepted {
				t.Errorf("the scheduler refused the forged report: %v %v", resp, err)
			}
			done <- j
			return
		}
	}()
	return done
}

// forgedResult is a CompactionServiceResult with no outputs and the given
// status, in this attempt's directory: what anyone can write by hand.
func forgedResult(t *testing.T, j *compactorv1.Job, code int, message string) []byte {
	t.Helper()
	level, _, err := rocksshim.CompactionField(j.Input, "output_level")
	if err != nil {
		t.Error(err)
	}
	dir := "/forged/" + strings.TrimSuffix(layout.JobDir(j.JobId, j.Attempt), "/")
	s := fmt.Sprintf("status={code=%d;subcode=0;severity=0;message=%X;};output_files=;output_level=%s;output_path=%X;"+
		"num_output_records=0;total_bytes=0;bytes_read=0;bytes_written=0;", code, message, level, dir)
	res := append([]byte{1, 0, 0, 0}, s...)
	// RocksDB reads it: what the primary refuses is the content, not the form.
	if r, err := rocksshim.ParseCompactionResult(res); err != nil || len(r.Files) != 0 || r.Status.Code != code {
		t.Errorf("the forged result does not parse as intended: %+v %v", r, err)
	}
	return res
}

// loadKeys writes n distinct keys in two flushes, the even ones and then
// the odd ones: two level-0 tables whose key ranges overlap, so that a
// compaction rewrites them (it would move tables that do not overlap).
func loadKeys(t *testing.T, kv kvv1.KVClient, m model, n int) {
	t.Helper()
	ctx := context.Background()
	for odd := 0; odd < 2; odd++ {
		var muts []*kvv1.Mutation
		for i := odd; i < n; i += 2 {
			k, v := fmt.Sprintf("key%06d", i), fmt.Sprintf("value-%d-%s", i, strings.Repeat("v", i%50))
			muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}})
			m[k] = v
			if len(muts) == 500 || i+2 >= n {
				if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
					t.Fatal(err)
				}
				muts = nil
			}
		}
		if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
}

// forgedJob waits for the forger's job.
func forgedJob(t *testing.T, forged <-chan *compactorv1.Job) {
	t.Helper()
	select {
	case <-forged:
	case <-time.After(waitDeadline):
		t.Fatal("no compaction job reached the forger")
	}
}

// checkAfterRestart stops p and checks the model on the next owner, from
// an empty cache: what the store holds.
func checkAfterRestart(t *testing.T, p *testPrimary, db, sched string, epoch uint64, m model) {
	t.Helper()
	p.stop()
	p2 := startPrimary(t, remoteConfig(db, sched, epoch))
	checkModel(t, p2.kv, m)
	checkNoBackgroundErrors(t, p2.kv)
}

// TestForgedNoOutputsFallsBack: the attack of issue 22 — a job of a
// database with 20,001 keys answered with zero outputs.
func TestForgedNoOutputsFallsBack(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		sched := startScheduler(t, compactor.SchedulerConfig{})
		p := startPrimary(t, remoteConfig(db, sched.Addr(), 1))
		m := model{}
		loadKeys(t, p.kv, m, 20001)
		forged := forgeOne(t, sched.Addr(), func(j *compactorv1.Job) []byte { return forgedResult(t, j, 0, "") })
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		forgedJob(t, forged)
		if n := p.Compactor().Fallbacks()[compactor.ReasonBadResult]; n != 1 {
			t.Fatalf("fallbacks %v: want the empty result refused (bad_result)", p.Compactor().Fallbacks())
		}
		checkModel(t, p.kv, m)
		checkNoBackgroundErrors(t, p.kv)
		checkAfterRestart(t, p, db, sched.Addr(), 2, m)
	})
}

// TestForgedFailureStatusFallsBack: a result whose status says Corruption
// was a background error that stopped every write until a restart.
func TestForgedFailureStatusFallsBack(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		sched := startScheduler(t, compactor.SchedulerConfig{})
		p := startPrimary(t, remoteConfig(db, sched.Addr(), 1))
		m := model{}
		loadKeys(t, p.kv, m, 5000)
		forged := forgeOne(t, sched.Addr(), func(j *compactorv1.Job) []byte { return forgedResult(t, j, 2, "forged") })
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		forgedJob(t, forged)
		if n := p.Compactor().Fallbacks()[compactor.ReasonFailed]; n != 1 {
			t.Fatalf("fallbacks %v: want the failed result compacted locally (job_failed)", p.Compactor().Fallbacks())
		}
		checkNoBackgroundErrors(t, p.kv)
		// Writes go on.
		loadKeys(t, p.kv, m, 100)
		checkModel(t, p.kv, m)
		checkAfterRestart(t, p, db, sched.Addr(), 2, m)
	})
}

// dropLastOutput removes the last output from a serialized result's
// output_files (a vector of structs, "{{{…}}:{{…}}}") and returns it with
// the dropped output's name.
func dropLastOutput(t *testing.T, res []byte) ([]byte, string) {
	t.Helper()
	const field = "output_files={"
	i := bytes.Index(res, []byte(field))
	if i < 0 {
		t.Fatalf("no output_files in %q", res)
	}
	start := i + len(field) - 1 // the vector's opening brace
	depth, last := 0, -1
	end := -1
	for k := start; k < len(res) && end < 0; k++ {
		switch res[k] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				end = k
			}
		case ':':
			if depth == 1 {
				last = k
			}
		}
	}
	if end < 0 || last < 0 {
		t.Fatalf("output_files of %q has fewer than two outputs", res)
	}
	dropped := string(res[last+1 : end])
	out := append(append([]byte{}, res[:last]...), res[end:]...)
	r, err := rocksshim.ParseCompactionResult(out)
	if err != nil {
		t.Fatalf("result without its last output: %v", err)
	}
	all, _ := rocksshim.ParseCompactionResult(res)
	name := all.Files[len(all.Files)-1].Name
	if len(r.Files) != len(all.Files)-1 || !strings.Contains(dropped, fmt.Sprintf("%X", name)) {
		t.Fatalf("dropping %q left %d of %d outputs", dropped, len(r.Files), len(all.Files))
	}
	return out, name
}

// TestDroppedOutputFallsBack: a worker reports only some of its outputs,
// so a key range of the inputs is in none of the reported ones. The
// database is first compacted into many tables of the last level (a
// genuine remote compaction); then a compaction that rewrites all of
// them loses its last output on the way.
func TestDroppedOutputFallsBack(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		sched := startScheduler(t, compactor.SchedulerConfig{})
		var forge, forged atomic.Bool
		var dropped atomic.Value
		startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
			compactor.SetBeforeComplete(c, func(j *compactorv1.Job, req *compactorv1.CompleteRequest) {
				if !forge.Load() || len(req.Outputs) < 2 || !forged.CompareAndSwap(false, true) {
					return
				}
				res, name := dropLastOutput(t, req.Result)
				req.Result = res
				var kept []*compactorv1.OutputFile
				for _, o := range req.Outputs {
					if o.Name != name {
						kept = append(kept, o)
					}
				}
				req.Outputs = kept
				dropped.Store(name)
			})
		})
		cfg := remoteConfig(db, sched.Addr(), 1)
		cfg.Engine.TargetFileSizeBytes = 64 << 10
		p := startPrimary(t, cfg)
		m := model{}
		loadKeys(t, p.kv, m, 20001)
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		if n := fallbacks(p); n != 0 || sched.Snapshot().Total.Completed == 0 {
			t.Fatalf("the genuine compaction: fallbacks %v, completed %d", p.Compactor().Fallbacks(), sched.Snapshot().Total.Completed)
		}
		// A level-0 table spanning every key: the next full compaction
		// rewrites every table of the last level.
		for _, k := range []string{"key000000", "key020000"} {
			if _, err := p.kv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(k), Value: []byte("again")}); err != nil {
				t.Fatal(err)
			}
			m[k] = "again"
		}
		if _, err := p.kv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
		forge.Store(true)
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		if !forged.Load() {
			t.Fatalf("no compaction had two outputs to drop one of (levels %v)", dbStatus(t, p.kv).Stats.FilesPerLevel)
		}
		t.Logf("dropped output %v", dropped.Load())
		if n := p.Compactor().Fallbacks()[compactor.ReasonBadResult]; n != 1 {
			t.Fatalf("fallbacks %v: want the result without its last output refused (bad_result)", p.Compactor().Fallbacks())
		}
		checkModel(t, p.kv, m)
		checkNoBackgroundErrors(t, p.kv)
		checkAfterRestart(t, p, db, sched.Addr(), 2, m)
	})
}

// TestMismatchedUniqueIDFallsBack: a result whose unique id is not its
// table's. RocksDB checks the id when it opens the installed table, after
// Wait said success: a mismatch was a background error. The
// outputs the worker uploaded are removed (issue 23).
func TestMismatchedUniqueIDFallsBack(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		db := loc.NewURL(t)
		sched := startScheduler(t, compactor.SchedulerConfig{})
		var forged atomic.Bool
		startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
			compactor.SetBeforeComplete(c, func(j *compactorv1.Job, req *compactorv1.CompleteRequest) {
				if len(req.Outputs) == 0 || !forged.CompareAndSwap(false, true) {
					return
				}
				m := uniqueIDRE.FindSubmatchIndex(req.Result)
				if m == nil {
					t.Errorf("no unique_id in %q", req.Result)
					return
				}
				res := append([]byte{}, req.Result[:m[2]]...)
				res = append(res, "12345"...)
				req.Result = append(res, req.Result[m[3]:]...)
			})
		})
		p := startPrimary(t, remoteConfig(db, sched.Addr(), 1))
		m := model{}
		loadKeys(t, p.kv, m, 5000)
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		if !forged.Load() {
			t.Fatal("no result to alter")
		}
		if n := p.Compactor().Fallbacks()[compactor.ReasonBadResult]; n != 1 {
			t.Fatalf("fallbacks %v: want the result with another id refused (bad_result)", p.Compactor().Fallbacks())
		}
		// The refused outputs are removed by the primary now, not left for
		// the sweep (every 10 minutes).
		waitFor(t, "the refused job's outputs removed", func() bool { return len(storeKeys(t, db, "_shale/compactions/")) == 0 })
		checkNoBackgroundErrors(t, p.kv)
		loadKeys(t, p.kv, m, 100)
		checkModel(t, p.kv, m)
		checkAfterRestart(t, p, db, sched.Addr(), 2, m)
	})
}

// uniqueIDRE finds the second word of the first output's unique id.
var uniqueIDRE = regexp.MustCompile(`unique_id=[0-9]+:([0-9]+)`)
