package secondary

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

// metric returns the value of one series on a /metrics page (-1: absent).
func metric(t *testing.T, addr, series string) float64 {
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

// sumMetric adds up the series of a name whose labels include match.
func sumMetric(t *testing.T, addr, name, match string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var sum float64
	for _, m := range regexp.MustCompile(`(?m)^`+name+`\{([^}]*)\} (\S+)$`).FindAllSubmatch(body, -1) {
		if strings.Contains(string(m[1]), match) {
			v, _ := strconv.ParseFloat(string(m[2]), 64)
			sum += v
		}
	}
	return sum
}

// The tiering flags end to end on MinIO, two buckets: a primary started
// with --cold-db and a short --cold-after puts old data in the cold bucket
// after a compaction and keeps recent data hot (its metrics say so); a
// secondary with --cold-db reads every key; a primary restarted on an
// empty cache reads every key, the old ones from the cold bucket.
func TestTieredPrimaryAndSecondary(t *testing.T) {
	srv := miniotest.Start(t)
	srv.CreateBucket(t, "hot")
	srv.CreateBucket(t, "cold")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	const db, coldDB, coldAfter = "s3://hot/orders", "s3://cold/orders", 3 * time.Second
	startTiered := func(cache string) *primary.Server {
		t.Helper()
		eo := engine.DefaultOptions()
		eo.ColdAfter = coldAfter
		p, err := primary.Start(primary.Config{DB: db, ColdDB: coldDB, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: eo,
			Storage: shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: time.Hour, CacheDir: cache}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := startTiered(filepath.Join(t.TempDir(), "primary"))
	kv := client(t, p.Addr())
	ctx := context.Background()
	want := map[string]string{}
	put := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			k, v := fmt.Sprintf("k%04d-%s", i, prefix), fmt.Sprintf("%s-%d", prefix, i)
			if _, err := kv.Put(ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: i == n-1}); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	flush := func() {
		if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// RocksDB ages keys by samples it takes once a second (docs/tiering.md).
	waitSample := func(since time.Time) {
		for time.Since(since) < 1200*time.Millisecond {
			time.Sleep(50 * time.Millisecond)
		}
	}
	put("old", 500)
	oldWritten := time.Now()
	waitSample(oldWritten)
	flush()
	for i := 0; time.Since(oldWritten) < coldAfter+1200*time.Millisecond; i++ {
		kv.Put(ctx, &kvv1.PutRequest{Key: []byte("trickle"), Value: []byte(fmt.Sprint(i))})
		time.Sleep(50 * time.Millisecond)
	}
	put("new", 500)
	newWritten := time.Now()
	waitSample(newWritten)
	flush()
	if _, err := kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	if time.Since(newWritten) >= coldAfter {
		t.Skip("the machine is too slow for a 3s cold-after: the recent keys aged before the compaction")
	}
	cold := metric(t, p.MetricsAddr(), `shale_tier_files{tier="cold"}`)
	hot := metric(t, p.MetricsAddr(), `shale_tier_files{tier="hot"}`)
	if cold < 1 || hot < 1 {
		t.Fatalf("after a compaction: %v cold tables, %v hot ones; want both tiers in use", cold, hot)
	}
	if b := metric(t, p.MetricsAddr(), `shale_tier_bytes{tier="cold"}`); b <= 0 {
		t.Fatalf("shale_tier_bytes{tier=\"cold\"} = %v", b)
	}

	// A secondary given the cold tier reads every key.
	s, err := Start(Config{DB: db, ColdDB: coldDB, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "secondary")}, CatchupInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(time.Second)
	waitVisible(t, client(t, s.Addr()), want)
	if n := sumMetric(t, s.MetricsAddr(), "shale_tier_reads_total", `tier="cold"`); n == 0 {
		t.Fatal("the secondary read every key without reading the cold tier")
	}
	// Without the cold tier a secondary refuses to start, naming the flag.
	if _, err := Start(Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "secondary2")}}); err == nil || !strings.Contains(err.Error(), "--cold-db "+coldDB) {
		t.Fatalf("secondary without --cold-db: %v", err)
	}

	// A primary restarted on an empty cache reads every key.
	p.Stop(5 * time.Second)
	p = startTiered(filepath.Join(t.TempDir(), "primary2"))
	defer p.Stop(5 * time.Second)
	kv = client(t, p.Addr())
	for k, v := range want {
		r, err := kv.Get(ctx, &kvv1.GetRequest{Key: []byte(k)})
		if err != nil || string(r.Value) != v {
			t.Fatalf("restarted primary: %s = %q, %v; want %q", k, r.GetValue(), err, v)
		}
	}
	if n := sumMetric(t, p.MetricsAddr(), "shale_tier_reads_total", `tier="cold"`); n == 0 {
		t.Fatal("the restarted primary read every key without reading the cold tier")
	}
	if c := metric(t, p.MetricsAddr(), `shale_tier_files{tier="cold"}`); c < 1 {
		t.Fatalf("the restarted primary lists %v cold tables", c)
	}
}

// Bad tiering flags fail the start with the flag to fix.
func TestTieringFlagErrors(t *testing.T) {
	dir := t.TempDir()
	eo := engine.DefaultOptions()
	eo.ColdAfter = time.Hour
	for _, tc := range []struct {
		name string
		cfg  primary.Config
		want string
	}{
		{"cold-after without cold-db", primary.Config{DB: "file://" + dir + "/a", Engine: eo}, "--cold-after needs --cold-db"},
		{"cold-endpoint without cold-db", primary.Config{DB: "file://" + dir + "/b", ColdEndpoint: "http://127.0.0.1:1", Engine: engine.DefaultOptions()}, "--cold-endpoint needs --cold-db"},
		{"cold-endpoint on file://", primary.Config{DB: "file://" + dir + "/c", ColdDB: "file://" + dir + "/c-cold", ColdEndpoint: "http://127.0.0.1:1", Engine: eo}, "--cold-endpoint applies to s3://"},
		{"cold tier inside the database", primary.Config{DB: "file://" + dir + "/d", ColdDB: "file://" + dir + "/d/cold", Engine: eo}, "overlaps --db"},
	} {
		tc.cfg.Listen, tc.cfg.Limits = "127.0.0.1:0", kvserver.DefaultLimits()
		tc.cfg.Storage.CacheDir = filepath.Join(dir, "cache-"+strings.ReplaceAll(tc.name, " ", "-"))
		p, err := primary.Start(tc.cfg)
		if err == nil {
			p.Stop(time.Second)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// A secondary checks its tier locations as a primary does (both start
// through internal/node): a cold tier that is the database or lies inside
// or around it is refused, on a database a primary serves, before the
// secondary creates anything. Before, only the primary checked, and such a
// secondary started.
func TestSecondaryTierLocations(t *testing.T) {
	dir := t.TempDir()
	db := "file://" + filepath.Join(dir, "db")
	p := startPrimary(t, db, 1)
	defer p.Stop(time.Second)
	for _, cold := range []string{db, db + "/cold", "file://" + dir} {
		cache := filepath.Join(dir, "secondary-cache")
		s, err := Start(Config{DB: db, ColdDB: cold, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
			Storage: shalefs.Config{CacheDir: cache}})
		if err == nil {
			s.Stop(time.Second)
			os.RemoveAll(cache)
		}
		if want := "--cold-db " + cold + " overlaps --db " + db; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("secondary with --cold-db %s: %v, want an error containing %q", cold, err, want)
		} else if _, serr := os.Stat(cache); serr == nil {
			t.Errorf("the secondary refused --cold-db %s after creating its cache dir", cold)
			os.RemoveAll(cache)
		}
	}
}
