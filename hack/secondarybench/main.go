// Command secondarybench measures Shale's secondaries (make
// bench-secondary runs it against a MinIO server on loopback):
//
//	lag-notify  visibility lag of synced writes made at a steady -rate on
//	            the primary, on a secondary that follows the primary's
//	            notifications (--primary);
//	lag-poll    the same on a secondary that only polls the store every
//	            -poll (Shale's default --catchup-interval);
//	lag-follower the same on a follower (--follower, DB::OpenAsFollower)
//	            that follows the notifications and whose RocksDB thread
//	            tails the MANIFEST every -follower-refresh; it reads no WAL,
//	            so a write shows once the primary flushed it (-flush-every
//	            flushes the primary during every lag scenario alike; each
//	            one ends with a flush);
//	read        readrandom throughput (`shale bench`'s engine,
//	            internal/bench) of one secondary and of the primary on the
//	            same data, alternately, and the ratio.
//
// Lag is measured per write, from the moment the writer got the primary's
// acknowledgement to the end of the first catch-up of the secondary that
// applied its sequence number (from then on its reads return it); a
// catch-up that ends before the acknowledgement arrives counts as 0. The
// store requests the secondary made during the run are counted too, per
// catch-up and per second, and this process's CPU time (the secondary and
// the writer, which is the same in every scenario). The primary is a
// `shale primary` process; the lag scenarios' secondaries and the writer
// run in this process. In the read scenario the secondary is a `shale
// secondary` process too, with the same defaults as the primary, and this
// process is the client: neither server shares a Go scheduler with it or
// with the other. All share the machine with MinIO. Compare figures from
// one run: a shared machine's load changes between runs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/bench"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/secondary"
)

type config struct {
	work, s3, shale string
	scenarios       []string
	rate            float64
	lagFor          time.Duration
	poll            time.Duration
	followerRefresh time.Duration
	flushEvery      time.Duration
	keys, threads   int
	valueSize       int
	readFor         time.Duration
	rounds          int
	jsonPath        string
}

func main() {
	var c config
	var scenarios string
	flag.StringVar(&c.work, "work", "", "working directory (cache directories); required")
	flag.StringVar(&c.s3, "s3", "", "s3://BUCKET[/PREFIX] to create the database in (endpoint and credentials from AWS_* variables); required")
	flag.StringVar(&c.shale, "shale", "bin/shale", "the shale binary, for the primary and the read scenario's secondary")
	flag.StringVar(&scenarios, "scenarios", "lag-notify,lag-poll,read", "scenarios to run, comma-separated")
	flag.Float64Var(&c.rate, "rate", 50, "lag: synced writes per second on the primary")
	flag.DurationVar(&c.lagFor, "lag-duration", 30*time.Second, "lag: how long the writes go on, per scenario")
	flag.DurationVar(&c.poll, "poll", time.Second, "lag-poll: the secondary's --catchup-interval (also the fallback of lag-notify)")
	flag.DurationVar(&c.followerRefresh, "follower-refresh", 100*time.Millisecond, "lag-follower: how often the follower's RocksDB tails the MANIFEST")
	flag.DurationVar(&c.flushEvery, "flush-every", 0, "lag: flush the primary this often while writing (0: only at the end)")
	flag.IntVar(&c.keys, "keys", 200000, "read: keys loaded (fillseq) and read (readrandom)")
	flag.IntVar(&c.valueSize, "value-size", 100, "read: bytes per value")
	flag.IntVar(&c.threads, "threads", 16, "read: client threads (shale bench --threads)")
	flag.DurationVar(&c.readFor, "read-duration", 10*time.Second, "read: each measured readrandom run")
	flag.IntVar(&c.rounds, "rounds", 2, "read: primary and secondary are measured this many times each, alternately (the median counts)")
	flag.StringVar(&c.jsonPath, "json", "", "also write the results as one JSON object to this file")
	flag.Parse()
	if c.work == "" || c.s3 == "" {
		fmt.Fprintln(os.Stderr, "secondarybench: -work and -s3 are required (make bench-secondary runs it)")
		os.Exit(2)
	}
	for _, s := range strings.Split(scenarios, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "lag-notify", "lag-poll", "lag-follower", "read":
			c.scenarios = append(c.scenarios, s)
		default:
			fmt.Fprintf(os.Stderr, "secondarybench: unknown scenario %q (lag-notify, lag-poll, lag-follower, read)\n", s)
			os.Exit(2)
		}
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "secondarybench:", err)
		os.Exit(1)
	}
}

// lagResult is one lag scenario's measurement.
type lagResult struct {
	Scenario        string         `json:"scenario"`
	Writes          int            `json:"writes"`
	WriteP50Ms      float64        `json:"writeP50Ms"`
	LagP50Ms        float64        `json:"lagP50Ms"`
	LagP99Ms        float64        `json:"lagP99Ms"`
	LagMaxMs        float64        `json:"lagMaxMs"`
	CatchUps        int            `json:"catchUps"`
	Requests        map[string]int `json:"requests"`
	RequestsPerCU   float64        `json:"requestsPerCatchUp"`
	ListsPerSecond  float64        `json:"listsPerSecond"`
	RequestsPerSec  float64        `json:"requestsPerSecond"`
	DurationSeconds float64        `json:"durationSeconds"`
	RequestsPerMin  float64        `json:"requestsPerMinute"`
	// CPU of this process (secondary and writer) over the run, in
	// seconds per second.
	CPUPerSecond float64 `json:"cpuPerSecond"`
	// The machine's 1-minute load average at the end: on a shared machine
	// the lag's tail follows it.
	LoadAverage float64 `json:"loadAverage"`
}

// readResult is the read scenario's measurement.
type readResult struct {
	Keys           int       `json:"keys"`
	Threads        int       `json:"threads"`
	PrimaryOps     []float64 `json:"primaryOpsPerSec"`
	SecondaryOps   []float64 `json:"secondaryOpsPerSec"`
	PrimaryP99Us   []float64 `json:"primaryP99Micros"`
	SecondaryP99Us []float64 `json:"secondaryP99Micros"`
	Ratio          float64   `json:"secondaryToPrimary"`
}

func run(c config) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db := strings.TrimSuffix(c.s3, "/") + "/bench-" + time.Now().UTC().Format("20060102T150405")
	p, err := startServer(c, "primary", "--db", db, "--cache-dir", filepath.Join(c.work, "primary"))
	if err != nil {
		return err
	}
	defer p.stop()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	pkv := kvv1.NewKVClient(conn)
	fmt.Fprintf(os.Stderr, "# primary (shale primary, pid %d) on %s serving %s\n", p.cmd.Process.Pid, p.addr, db)

	out := map[string]any{"db": db, "rate": c.rate, "lagDurationSeconds": c.lagFor.Seconds(), "pollSeconds": c.poll.Seconds()}
	var lags []lagResult
	for _, s := range c.scenarios {
		switch s {
		case "lag-notify", "lag-poll", "lag-follower":
			r, err := measureLag(c, s, db, p.addr, pkv, logger)
			if err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			lags = append(lags, r)
		case "read":
			r, err := measureReads(c, db, p, pkv)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			out["read"] = r
			printRead(r)
		}
	}
	if len(lags) > 0 {
		out["lag"] = lags
		printLags(c, lags)
	}
	if c.jsonPath != "" {
		b, _ := json.MarshalIndent(out, "", "  ")
		if err := os.WriteFile(c.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startSecondary starts a secondary on db with a counting store; notify
// makes it follow the primary's notifications.
func startSecondary(c config, name, db, paddr string, notify, follower bool, onCatchUp func(uint64), logger *slog.Logger) (*secondary.Server, *storetest.Counting, error) {
	store, err := objstore.Open(db)
	if err != nil {
		return nil, nil, err
	}
	counting := storetest.NewCounting(store)
	cfg := secondary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{Store: counting, CacheDir: filepath.Join(c.work, name)}, CatchupInterval: c.poll, Logger: logger, OnCatchUp: onCatchUp}
	if notify {
		cfg.Primary = paddr
	}
	if follower {
		cfg.Follower, cfg.CatchupInterval = true, c.followerRefresh
	}
	s, err := secondary.Start(cfg)
	return s, counting, err
}

type catchUp struct {
	at      time.Time
	applied uint64
}

func measureLag(c config, scenario, db, paddr string, pkv kvv1.KVClient, logger *slog.Logger) (lagResult, error) {
	res := lagResult{Scenario: scenario}
	var mu sync.Mutex
	var cus []catchUp
	s, counting, err := startSecondary(c, scenario, db, paddr, scenario != "lag-poll", scenario == "lag-follower", func(applied uint64) {
		mu.Lock()
		cus = append(cus, catchUp{time.Now(), applied})
		mu.Unlock()
	}, logger)
	if err != nil {
		return res, err
	}
	defer s.Stop(10 * time.Second)
	applied := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		if len(cus) == 0 {
			return 0
		}
		return cus[len(cus)-1].applied
	}
	st, err := pkv.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil {
		return res, err
	}
	if err := waitUntil(time.Minute, func() bool { return applied() >= st.LatestSequence }); err != nil {
		return res, fmt.Errorf("the secondary did not catch up with the primary at start: %w", err)
	}
	time.Sleep(2 * max(c.poll, c.followerRefresh)) // settle: the first catch-ups list everything
	mu.Lock()
	cus = cus[:0]
	mu.Unlock()
	before := counting.Counts()
	cpu0 := cpuTime()

	type write struct {
		seq uint64
		ack time.Time
		dur time.Duration
	}
	var writes []write
	flush := func() error {
		_, err := pkv.Flush(context.Background(), &kvv1.FlushRequest{})
		return err
	}
	stopFlushing := make(chan struct{})
	flushed := make(chan error, 1)
	go func() {
		if c.flushEvery <= 0 {
			flushed <- nil
			return
		}
		t := time.NewTicker(c.flushEvery)
		defer t.Stop()
		for {
			select {
			case <-stopFlushing:
				flushed <- nil
				return
			case <-t.C:
				if err := flush(); err != nil {
					flushed <- err
					return
				}
			}
		}
	}()
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.rate))
	for n := 0; time.Since(start) < c.lagFor; n++ {
		<-tick.C
		t0 := time.Now()
		r, err := pkv.Put(context.Background(), &kvv1.PutRequest{Key: []byte(fmt.Sprintf("%s/%08d", scenario, n)), Value: []byte(t0.Format(time.RFC3339Nano)), Sync: true})
		if err != nil {
			tick.Stop()
			close(stopFlushing)
			return res, err
		}
		now := time.Now()
		writes = append(writes, write{r.Sequence, now, now.Sub(t0)})
	}
	tick.Stop()
	close(stopFlushing)
	if err := <-flushed; err != nil {
		return res, err
	}
	// Every scenario ends with a flush: a follower applies nothing else.
	if err := flush(); err != nil {
		return res, err
	}
	last := writes[len(writes)-1].seq
	if err := waitUntil(time.Minute, func() bool { return applied() >= last }); err != nil {
		return res, fmt.Errorf("the secondary did not apply the last write: %w", err)
	}
	elapsed := time.Since(start)
	after := counting.Counts()
	cpu := cpuTime() - cpu0
	mu.Lock()
	events := append([]catchUp(nil), cus...)
	mu.Unlock()

	var lag, wdur []time.Duration
	for _, w := range writes {
		i := sort.Search(len(events), func(i int) bool { return events[i].applied >= w.seq })
		if i == len(events) {
			return res, fmt.Errorf("no catch-up applied sequence %d", w.seq)
		}
		lag = append(lag, max(events[i].at.Sub(w.ack), 0))
		wdur = append(wdur, w.dur)
	}
	res.Writes = len(writes)
	res.WriteP50Ms = ms(bench.Percentile(wdur, 0.5))
	res.LagP50Ms, res.LagP99Ms, res.LagMaxMs = ms(bench.Percentile(lag, 0.5)), ms(bench.Percentile(lag, 0.99)), ms(bench.Percentile(lag, 1))
	res.CatchUps = len(events)
	res.Requests = map[string]int{}
	total := 0
	for op, n := range after {
		if d := n - before[op]; d > 0 {
			res.Requests[op] = d
			total += d
		}
	}
	res.DurationSeconds = elapsed.Seconds()
	if res.CatchUps > 0 {
		res.RequestsPerCU = float64(total) / float64(res.CatchUps)
	}
	res.ListsPerSecond = float64(res.Requests["list"]) / elapsed.Seconds()
	res.RequestsPerSec = float64(total) / elapsed.Seconds()
	res.RequestsPerMin = 60 * res.RequestsPerSec
	res.CPUPerSecond = cpu.Seconds() / elapsed.Seconds()
	res.LoadAverage = loadAverage()
	return res, nil
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the 1-minute load average (0 if unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

func measureReads(c config, db string, p *serverProc, pkv kvv1.KVClient) (readResult, error) {
	res := readResult{Keys: c.keys, Threads: c.threads}
	base := bench.DefaultConfig()
	base.Keys, base.ValueSize, base.Threads = uint64(c.keys), c.valueSize, uint64(c.threads)
	fill := base
	fill.Benchmarks, fill.Num, fill.Batch = []string{"fillseq"}, uint64(c.keys), 100
	if _, err := runBench(p.addr, fill); err != nil {
		return res, err
	}
	if _, err := pkv.Flush(context.Background(), &kvv1.FlushRequest{}); err != nil {
		return res, err
	}
	st, err := pkv.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil {
		return res, err
	}
	s, err := startServer(c, "secondary", "--db", db, "--cache-dir", filepath.Join(c.work, "read"), "--primary", p.addr,
		"--catchup-interval", c.poll.String())
	if err != nil {
		return res, err
	}
	defer s.stop()
	fmt.Fprintf(os.Stderr, "# secondary (shale secondary, pid %d) on %s\n", s.cmd.Process.Pid, s.addr)
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	skv := kvv1.NewKVClient(conn)
	if err := waitUntil(time.Minute, func() bool {
		r, err := skv.Status(context.Background(), &kvv1.StatusRequest{})
		return err == nil && r.LatestSequence >= st.LatestSequence
	}); err != nil {
		return res, fmt.Errorf("the secondary did not catch up with the loaded data: %w", err)
	}
	read := base
	read.Benchmarks = []string{"readrandom"}
	for _, addr := range []string{p.addr, s.addr} { // warm both caches
		warm := read
		warm.Duration = 3 * time.Second
		if _, err := runBench(addr, warm); err != nil {
			return res, err
		}
	}
	read.Duration = c.readFor
	for i := 0; i < c.rounds; i++ {
		for _, role := range []string{"primary", "secondary"} {
			addr := p.addr
			if role == "secondary" {
				addr = s.addr
			}
			r, err := runBench(addr, read)
			if err != nil {
				return res, err
			}
			if role == "primary" {
				res.PrimaryOps, res.PrimaryP99Us = append(res.PrimaryOps, r.OpsPerSec), append(res.PrimaryP99Us, r.Latency.P99)
			} else {
				res.SecondaryOps, res.SecondaryP99Us = append(res.SecondaryOps, r.OpsPerSec), append(res.SecondaryP99Us, r.Latency.P99)
			}
		}
	}
	res.Ratio = median(res.SecondaryOps) / median(res.PrimaryOps)
	return res, nil
}

// serverProc is a server in a `shale` process of its own, as in
// production: the primary, and the read scenario's secondary. A server
// measured in this process shares no Go scheduler with them.
type serverProc struct {
	cmd  *exec.Cmd
	addr string
	log  bytes.Buffer
}

// startServer runs `shale ROLE ARGS` on a free loopback port and waits
// until it serves.
func startServer(c config, role string, args ...string) (*serverProc, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	p := &serverProc{addr: addr}
	p.cmd = exec.Command(c.shale, append([]string{role, "--listen", addr, "--metrics-listen", ""}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.stop()
		return nil, err
	}
	defer conn.Close()
	err = waitUntil(time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("shale %s did not start: %w\n%s", role, err, p.log.String())
	}
	return p, nil
}

func (p *serverProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// runBench runs cfg with `shale bench`'s engine against the plaintext
// server at addr and returns the last benchmark's result.
func runBench(addr string, cfg bench.Config) (*bench.Result, error) {
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	conn, err := dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	st, err := kvv1.NewKVClient(conn).Status(ctx, &kvv1.StatusRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	cfg.Addr = addr
	r, err := bench.Run(context.Background(), cfg, bench.Target{Status: st, Dial: dial}, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("bench %s against %s: %w", strings.Join(cfg.Benchmarks, ","), addr, err)
	}
	return r.Benchmarks[len(r.Benchmarks)-1], nil
}

func waitUntil(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

func printLags(c config, lags []lagResult) {
	fmt.Printf("\nVisibility lag of synced writes (%.0f/s for %s; polling every %s; follower refresh %s; flush every %s)\n\n", c.rate, c.lagFor, c.poll, c.followerRefresh, c.flushEvery)
	fmt.Printf("| %-10s | %6s | %9s | %9s | %9s | %9s | %9s | %12s | %9s | %9s | %8s | %6s |\n", "secondary", "writes", "write p50", "lag p50", "lag p99", "lag max", "catch-ups", "requests/cu", "LISTs/s", "req/min", "CPU", "load")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dash(12), dash(8), dash(11), dash(11), dash(11), dash(11), dash(11), dash(14), dash(11), dash(11), dash(10), dash(8))
	for _, r := range lags {
		fmt.Printf("| %-10s | %6d | %6.1f ms | %6.0f ms | %6.0f ms | %6.0f ms | %9d | %12.1f | %9.1f | %9.0f | %7.1f%% | %6.1f |\n",
			strings.TrimPrefix(r.Scenario, "lag-"), r.Writes, r.WriteP50Ms, r.LagP50Ms, r.LagP99Ms, r.LagMaxMs, r.CatchUps, r.RequestsPerCU, r.ListsPerSecond, r.RequestsPerMin, 100*r.CPUPerSecond, r.LoadAverage)
	}
}

func printRead(r readResult) {
	fmt.Printf("\nreadrandom, %d keys, %d threads (median of %d runs each)\n\n", r.Keys, r.Threads, len(r.PrimaryOps))
	fmt.Printf("| %-9s | %10s | %10s | %8s |\n", "server", "ops/s", "p99", "ratio")
	fmt.Printf("|%s|%s|%s|%s|\n", dash(11), dash(12), dash(12), dash(10))
	fmt.Printf("| %-9s | %10.0f | %7.0f µs | %8.2f |\n", "primary", median(r.PrimaryOps), median(r.PrimaryP99Us), 1.0)
	fmt.Printf("| %-9s | %10.0f | %7.0f µs | %8.2f |\n", "secondary", median(r.SecondaryOps), median(r.SecondaryP99Us), r.Ratio)
}

func dash(n int) string { return strings.Repeat("-", n) }
