// Command tieringbench measures tiered SST placement (docs/tiering.md) on
// two S3 stores, the cold one behind a proxy that adds latency to every
// request (an HDD-class tier): hack/bench-tiering.sh runs two MinIO
// servers on loopback and this program against them.
//
// It runs a primary in-process with --cold-db and a short --cold-after,
// writes -old keys, lets them age past the cold-after while a trickle of
// writes keeps RocksDB's clock samples moving, writes -recent keys, and
// records the fraction of table bytes in the cold tier once a second while
// RocksDB's compactions and the age-out pass place the data (a manual
// compaction ends the observation if the old data is not all cold by
// then). Then, with a small block cache so that reads reach the stores:
//
//	recent   readrandom over the recent keys (hot tier: local cache)
//	old      readrandom over the old keys (cold tier, behind the latency)
//	mixed    both at once, on separate threads: the recent keys' latency
//	         shows whether cold reads stall the foreground path
//
// Ratios are to the "recent" phase of the same run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/bench"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

type config struct {
	hot, cold, coldEndpoint string
	work                    string
	oldKeys, recentKeys     int
	valueSize               int
	coldAfter               time.Duration
	latency                 time.Duration
	reads                   int
	threads                 int
	observe                 time.Duration
	jsonPath                string
}

func main() {
	var c config
	flag.StringVar(&c.hot, "hot", "", "hot tier URL (s3://BUCKET/PREFIX)")
	flag.StringVar(&c.cold, "cold", "", "cold tier URL (s3://BUCKET/PREFIX)")
	flag.StringVar(&c.coldEndpoint, "cold-endpoint", "", "the cold tier's S3 endpoint (http://HOST:PORT): the proxy adds -latency in front of it")
	flag.StringVar(&c.work, "work", os.TempDir(), "directory for the primary's cache")
	flag.IntVar(&c.oldKeys, "old", 200000, "keys written first, which must end cold")
	flag.IntVar(&c.recentKeys, "recent", 50000, "keys written last, which must stay hot")
	flag.IntVar(&c.valueSize, "value-size", 400, "value bytes")
	flag.DurationVar(&c.coldAfter, "cold-after", time.Minute, "--cold-after of the primary: the recent keys must stay younger than it until the read phases end")
	flag.DurationVar(&c.latency, "latency", 10*time.Millisecond, "latency added to each request to the cold tier")
	flag.IntVar(&c.reads, "reads", 4000, "gets per read phase")
	flag.IntVar(&c.threads, "threads", 8, "reader threads per read phase")
	flag.DurationVar(&c.observe, "observe", 0, "how long to watch placement after the recent keys (default a quarter of -cold-after)")
	flag.StringVar(&c.jsonPath, "json", "", "also write the results as JSON to this file")
	flag.Parse()
	if c.hot == "" || c.cold == "" || c.coldEndpoint == "" {
		fmt.Fprintln(os.Stderr, "tieringbench: -hot, -cold and -cold-endpoint are required (hack/bench-tiering.sh sets them)")
		os.Exit(2)
	}
	if c.observe == 0 {
		c.observe = c.coldAfter / 4
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "tieringbench:", err)
		os.Exit(1)
	}
}

// delayProxy forwards TCP connections to target and holds back the first
// bytes of each request (bytes from the client after a pause) by latency:
// one added round trip per S3 request, as a disk seek would add.
func delayProxy(target string, latency time.Duration) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				t, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer t.Close()
				go func() { io.Copy(c, t); c.Close() }()
				buf := make([]byte, 64<<10)
				last := time.Time{}
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if time.Since(last) > time.Millisecond {
							time.Sleep(latency) // a new request
						}
						last = time.Now()
						if _, werr := t.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + l.Addr().String(), func() { l.Close() }, nil
}

type sample struct {
	At        float64 `json:"seconds"`
	Phase     string  `json:"phase"`
	HotBytes  float64 `json:"hotBytes"`
	ColdBytes float64 `json:"coldBytes"`
}

type phase struct {
	Name      string  `json:"name"`
	Ops       int     `json:"ops"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50ms     float64 `json:"p50ms"`
	P99ms     float64 `json:"p99ms"`
	Ratio     float64 `json:"opsRatioToRecent"`
}

func run(c config) error {
	proxy, stop, err := delayProxy(trimScheme(c.coldEndpoint), c.latency)
	if err != nil {
		return err
	}
	defer stop()
	eo := engine.DefaultOptions()
	eo.ColdAfter = c.coldAfter
	eo.BlockCacheBytes = 8 << 20 // reads must reach the stores
	cache, err := os.MkdirTemp(c.work, "primary-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	p, err := primary.Start(primary.Config{DB: c.hot, ColdDB: c.cold, ColdEndpoint: proxy, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0",
		Limits: kvserver.DefaultLimits(), Engine: eo, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Storage: shalefs.Config{CacheDir: filepath.Join(cache, "c"), DeleteGrace: time.Minute}})
	if err != nil {
		return err
	}
	defer p.Stop(10 * time.Second)
	conn, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	kv := kvv1.NewKVClient(conn)
	ctx := context.Background()
	fmt.Printf("# cold tier behind +%s per request; cold-after %s; %d old and %d recent keys of %d bytes\n", c.latency, c.coldAfter, c.oldKeys, c.recentKeys, c.valueSize)

	var samples []sample
	var smu sync.Mutex
	begin := time.Now()
	curPhase := atomic.Value{}
	curPhase.Store("load old")
	sampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampler:
				return
			case <-t.C:
			}
			h, cb := tierBytes(p.MetricsAddr())
			smu.Lock()
			samples = append(samples, sample{At: time.Since(begin).Seconds(), Phase: curPhase.Load().(string), HotBytes: h, ColdBytes: cb})
			smu.Unlock()
		}
	}()

	load := func(prefix string, n int) error {
		const batch = 500
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(w)))
				for start := w * batch; start < n; start += 4 * batch {
					var ms []*kvv1.Mutation
					for i := start; i < min(start+batch, n); i++ {
						// Half random bytes: values compress about 2:1.
						v := make([]byte, c.valueSize)
						r.Read(v[:c.valueSize/2])
						ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: key(prefix, i), Value: v}}})
					}
					if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms}); err != nil {
						errs <- err
						return
					}
					// Flush every flushEvery keys (about 8 MB), as small
					// memtables would: RocksDB then compacts level 0 into
					// the lower levels during the load, as in a busy
					// database, instead of holding everything in memory.
					if w == 0 && (start/(4*batch))%(flushEvery/(4*batch)) == 0 {
						if _, err := kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
							errs <- err
							return
						}
					}
				}
			}(w)
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
		}
		_, err := kv.Flush(ctx, &kvv1.FlushRequest{})
		return err
	}
	if err := load("old", c.oldKeys); err != nil {
		return fmt.Errorf("load old keys: %w", err)
	}
	oldDone := time.Now()
	curPhase.Store("old ageing")
	// A trickle of writes, as a live database has: RocksDB dates keys by
	// (sequence number, time) samples, which an idle database does not move.
	// The old keys age past the cold-after and two age-out passes follow
	// (one every quarter of it).
	for i := 0; time.Since(oldDone) < c.coldAfter+c.coldAfter/2+time.Second; i++ {
		kv.Put(ctx, &kvv1.PutRequest{Key: []byte("trickle"), Value: []byte(strconv.Itoa(i))})
		time.Sleep(50 * time.Millisecond)
	}
	curPhase.Store("load recent")
	if err := load("recent", c.recentKeys); err != nil {
		return fmt.Errorf("load recent keys: %w", err)
	}
	curPhase.Store("placement")
	recentDone := time.Now()
	for i := 0; time.Since(recentDone) < c.observe; i++ {
		kv.Put(ctx, &kvv1.PutRequest{Key: []byte("trickle"), Value: []byte(strconv.Itoa(i))})
		time.Sleep(50 * time.Millisecond)
	}
	curPhase.Store("after manual compaction")
	if _, err := kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond) // one more sample
	close(sampler)
	defer func() {
		// The comparison holds only while the recent keys are recent.
		if age := time.Since(recentDone); age > c.coldAfter {
			fmt.Printf("\nWARNING: the read phases ended %s after the recent keys were written, past the cold-after (%s): they may have gone cold; raise -cold-after or lower -reads\n", age.Round(time.Second), c.coldAfter)
		}
	}()
	<-samplerDone

	fmt.Println()
	fmt.Println("# fraction of table bytes in the cold tier over time (every 5 s and at phase changes)")
	fmt.Printf("%8s  %-24s %10s %10s %7s\n", "t(s)", "phase", "hot MB", "cold MB", "cold %")
	for i, s := range samples {
		// Every fifth second, and each phase's first and last sample.
		if i%5 != 0 && i+1 < len(samples) && samples[i-1].Phase == s.Phase && samples[i+1].Phase == s.Phase {
			continue
		}
		fmt.Printf("%8.0f  %-24s %10.1f %10.1f %6.1f%%\n", s.At, s.Phase, s.HotBytes/1e6, s.ColdBytes/1e6, 100*s.ColdBytes/max(s.HotBytes+s.ColdBytes, 1))
	}

	read := func(name string, prefixes []string, keys []int, ops, threads int) phase {
		var mu sync.Mutex
		var lat []time.Duration
		var failed atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < threads; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				r := rand.New(rand.NewSource(int64(w) + 7))
				mine := make([]time.Duration, 0, ops/threads)
				for i := 0; i < ops/threads; i++ {
					j := r.Intn(len(prefixes))
					k := key(prefixes[j], r.Intn(keys[j]))
					t0 := time.Now()
					if _, err := kv.Get(ctx, &kvv1.GetRequest{Key: k}); err != nil {
						failed.Add(1)
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}(w)
		}
		wg.Wait()
		el := time.Since(start)
		ph := phase{Name: name, Ops: len(lat), OpsPerSec: float64(len(lat)) / el.Seconds(),
			P50ms: float64(bench.Percentile(lat, 0.5)) / 1e6, P99ms: float64(bench.Percentile(lat, 0.99)) / 1e6}
		if f := failed.Load(); f > 0 {
			fmt.Fprintf(os.Stderr, "%s: %d gets failed\n", name, f)
		}
		return ph
	}
	// Warm the index and filter blocks of every table first, so that the
	// phases compare data reads.
	read("warm-up", []string{"old", "recent"}, []int{c.oldKeys, c.recentKeys}, 2000, c.threads)
	phases := []phase{
		read("recent", []string{"recent"}, []int{c.recentKeys}, c.reads, c.threads),
		read("old", []string{"old"}, []int{c.oldKeys}, c.reads, c.threads),
	}
	var mixedRecent, mixedOld phase
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		mixedOld = read("mixed: old", []string{"old"}, []int{c.oldKeys}, c.reads, c.threads)
	}()
	go func() {
		defer wg.Done()
		mixedRecent = read("mixed: recent", []string{"recent"}, []int{c.recentKeys}, c.reads, c.threads)
	}()
	wg.Wait()
	phases = append(phases, mixedRecent, mixedOld)
	for i := range phases {
		phases[i].Ratio = phases[i].OpsPerSec / phases[0].OpsPerSec
	}
	fmt.Println()
	fmt.Printf("# readrandom over the KV API, %d threads per phase, block cache 8 MiB\n", c.threads)
	fmt.Printf("%-16s %8s %10s %9s %9s %14s\n", "phase", "ops", "ops/s", "p50 ms", "p99 ms", "ops/s vs recent")
	for _, ph := range phases {
		fmt.Printf("%-16s %8d %10.0f %9.2f %9.2f %14.2f\n", ph.Name, ph.Ops, ph.OpsPerSec, ph.P50ms, ph.P99ms, ph.Ratio)
	}
	reads := tierReads(p.MetricsAddr())
	fmt.Printf("\n# table reads from the stores: hot %v, cold %v\n", reads["hot"], reads["cold"])
	if c.jsonPath != "" {
		b, _ := json.MarshalIndent(map[string]any{"latency": c.latency.String(), "coldAfter": c.coldAfter.String(), "samples": samples, "phases": phases, "tierReads": reads}, "", "  ")
		if err := os.WriteFile(c.jsonPath, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// flushEvery is how many keys the load writes between flushes.
const flushEvery = 20000

func key(prefix string, i int) []byte { return []byte(fmt.Sprintf("%s-%09d", prefix, i)) }

func trimScheme(u string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(u) > len(p) && u[:len(p)] == p {
			return u[len(p):]
		}
	}
	return u
}

func scrape(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var tierBytesRE = regexp.MustCompile(`(?m)^shale_tier_bytes\{tier="(hot|cold)"\} (\S+)$`)

func tierBytes(addr string) (hot, cold float64) {
	for _, m := range tierBytesRE.FindAllStringSubmatch(scrape(addr), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[1] == "hot" {
			hot = v
		} else {
			cold = v
		}
	}
	return hot, cold
}

var tierReadsRE = regexp.MustCompile(`(?m)^shale_tier_reads_total\{activity="[^"]*",result="ok",tier="(hot|cold)"\} (\S+)$`)

func tierReads(addr string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range tierReadsRE.FindAllStringSubmatch(scrape(addr), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] += v
	}
	return out
}
