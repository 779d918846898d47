package compactor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/secondary"
)

// TestRemoteCompactionOnTieredDB (issue 25): a primary with a cold tier,
// --cold-after 5s and remote compaction, a scheduler and a worker; 250,000
// puts, a flush and a full compaction. Compactions complete on the worker
// (those not into the last level: RocksDB 9.11 cannot install a remote
// compaction's outputs per key, docs/compaction.md), old data ends in the
// cold tier and recent data stays hot, and every key reads back from the
// primary and from a secondary.
func TestRemoteCompactionOnTieredDB(t *testing.T) {
	dir := t.TempDir()
	db, coldDB := "file://"+filepath.Join(dir, "hot"), "file://"+filepath.Join(dir, "cold")
	const coldAfter = 5 * time.Second
	sched := startScheduler(t, compactor.SchedulerConfig{})
	// The worker's view of the cold tier, counted: it reads, never writes.
	var coldSeenP atomic.Pointer[storetest.Counting]
	w := startWorker(t, sched.Addr(), "w1", func(c *compactor.WorkerConfig) {
		c.OpenStore = func(u string) (objstore.Store, error) {
			s, err := objstore.Open(u)
			if err == nil && u == coldDB {
				c := storetest.NewCounting(s)
				coldSeenP.Store(c)
				return c, nil
			}
			return s, err
		}
	})
	cfg := remoteConfig(db, sched.Addr(), 1)
	cfg.ColdDB = coldDB
	cfg.Engine.ColdAfter = coldAfter
	cfg.MetricsListen = "127.0.0.1:0"
	p := startPrimary(t, cfg)
	ctx := context.Background()

	const total, recent = 250_000, 25_000
	key := func(i int) string { return fmt.Sprintf("key%07d", i) }
	value := func(i int) string { return fmt.Sprintf("value-%07d-%080d", i, i) }
	flush := func() {
		t.Helper()
		if _, err := p.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// Rounds of 25,000 puts, each flushed: level 0 fills and RocksDB
	// compacts on its own as a loaded database does.
	put := func(from, to int) {
		t.Helper()
		var muts []*kvv1.Mutation
		for i := from; i < to; i++ {
			muts = append(muts, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(key(i)), Value: []byte(value(i))}}})
			if len(muts) == 1000 || i == to-1 {
				if _, err := p.kv.Write(ctx, &kvv1.WriteRequest{Mutations: muts}); err != nil {
					t.Fatal(err)
				}
				muts = nil
			}
			if (i+1)%25_000 == 0 || i == to-1 {
				flush()
			}
		}
	}
	put(0, total-recent)
	oldWritten := time.Now()
	// RocksDB ages keys by samples it takes every coldAfter/100 (at least
	// 1 s): keep writing a little until the old keys are coldAfter old.
	for i := 0; time.Since(oldWritten) < coldAfter+1200*time.Millisecond; i++ {
		if _, err := p.kv.Put(ctx, &kvv1.PutRequest{Key: []byte("trickle"), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	put(total-recent, total)
	recentWritten := time.Now()
	if _, err := p.kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	compacted := time.Now()
	st := sched.Snapshot()
	t.Logf("scheduler: %v; primary fallbacks %v; compactions kept local %v", st.Total, p.Compactor().Fallbacks(), p.Compactor().KeptLocal())
	if st.Total.Completed < 1 {
		t.Fatalf("no compaction completed on the worker (scheduler %v, fallbacks %v)", st.Total, p.Compactor().Fallbacks())
	}
	if n := counter(t, w.Gatherer(), "shale_compactor_worker_jobs_total", "outcome", "completed"); n < 1 {
		t.Fatalf("the worker completed %v jobs", n)
	}
	for reason, n := range p.Compactor().Fallbacks() {
		if n != 0 {
			t.Fatalf("%v compactions fell back (%s)", n, reason)
		}
	}
	checkNoBackgroundErrors(t, p.kv)
	coldSeen := coldSeenP.Load()
	if coldSeen == nil {
		t.Fatal("the worker never opened the cold tier")
	}
	for op, n := range coldSeen.Counts() {
		if op != "get" && op != "stat" && op != "list" && n > 0 {
			t.Fatalf("the worker sent %d %s requests to the cold tier: %s", n, op, coldSeen.Summary())
		}
	}
	if compacted.Sub(recentWritten) < coldAfter {
		cold := metricValue(t, p.MetricsAddr(), `shale_tier_files{tier="cold"}`)
		hot := metricValue(t, p.MetricsAddr(), `shale_tier_files{tier="hot"}`)
		t.Logf("tiers: %v cold tables, %v hot ones", cold, hot)
		if cold < 1 || hot < 1 {
			t.Fatalf("after the compaction: %v cold tables, %v hot ones; want both tiers in use", cold, hot)
		}
	} else {
		t.Log("the recent keys aged before the compaction ended (slow machine): the hot/cold split is not checked")
	}

	check := func(who string, kv kvv1.KVClient) {
		t.Helper()
		for i := 0; i < total; i += 1000 {
			keys := make([][]byte, 0, 1000)
			for j := i; j < i+1000 && j < total; j++ {
				keys = append(keys, []byte(key(j)))
			}
			r, err := kv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: keys})
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			for j, v := range r.Results {
				if !v.Found || string(v.Value) != value(i+j) {
					t.Fatalf("%s: %s = %.30q (found %v), want %.30q", who, keys[j], v.Value, v.Found, value(i+j))
				}
			}
		}
	}
	check("primary", p.kv)
	s, err := secondary.Start(secondary.Config{DB: db, ColdDB: coldDB, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(dir, "secondary")}, CatchupInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	skv := dialKV(t, s.Addr())
	last := []byte(key(total - 1))
	waitFor(t, "the secondary to see the last key", func() bool {
		r, err := skv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: [][]byte{last}})
		return err == nil && r.Results[0].Found
	})
	check("secondary", skv)
}

// metricValue returns one series of a /metrics page (-1: absent).
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func dialKV(t *testing.T, addr string) kvv1.KVClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kvv1.NewKVClient(conn)
}
