package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/cli"
)

type benchKind int

const (
	kindFill benchKind = iota
	kindRead
	kindMultiRead
	kindScan
)

type benchWorkload struct {
	kind   benchKind
	seq    bool // fill keys in ascending order
	sync   bool // durable writes
	writer bool // one more thread writes while the others read
}

var workloads = map[string]*benchWorkload{
	"fillrandom":       {kind: kindFill},
	"fillseq":          {kind: kindFill, seq: true},
	"fillsync":         {kind: kindFill, sync: true},
	"readrandom":       {kind: kindRead},
	"readwhilewriting": {kind: kindRead, writer: true},
	"multireadrandom":  {kind: kindMultiRead},
	"scan":             {kind: kindScan},
}

// benchCounts are one thread's tallies.
type benchCounts struct {
	ops, requests, errors uint64
	found, missing, pairs uint64
	bytes                 uint64 // keys and values sent (fills) or received (reads)
}

func (c *benchCounts) add(o benchCounts) {
	c.ops += o.ops
	c.requests += o.requests
	c.errors += o.errors
	c.found += o.found
	c.missing += o.missing
	c.pairs += o.pairs
	c.bytes += o.bytes
}

// benchThread is one client thread. Its requests and key buffers are reused
// from one request to the next: gRPC has marshalled a request by the time the
// call returns.
type benchThread struct {
	kv     kvv1.KVClient
	rng    *rand.Rand
	keyBuf []byte // batch keys of keySize bytes
	keys   [][]byte
	muts   []*kvv1.Mutation
	puts   []*kvv1.Mutation_Put
	hist   Histogram
	counts benchCounts
}

// benchRun is one benchmark in progress.
type benchRun struct {
	ctx      context.Context
	cfg      *Config
	name     string
	w        *benchWorkload
	values   *valuePool
	errs     *benchErrors
	deadline time.Time
	next     atomic.Uint64 // operations claimed
	done     atomic.Uint64 // operations completed, for the progress line
	failed   atomic.Uint64
	stopping atomic.Bool // the readers are done: the writer stops
}

func newBenchThread(cfg *Config, kv kvv1.KVClient, name string, id int) *benchThread {
	h := fnv.New64a()
	h.Write([]byte(name))
	// A stream per benchmark and thread: readrandom does not read the keys
	// fillrandom wrote in the order it wrote them.
	t := &benchThread{kv: kv, rng: rand.New(rand.NewPCG(cfg.Seed, h.Sum64()+uint64(id)))}
	n := int(cfg.Batch)
	t.keyBuf = make([]byte, n*cfg.KeySize)
	t.keys = make([][]byte, n)
	t.muts = make([]*kvv1.Mutation, n)
	t.puts = make([]*kvv1.Mutation_Put, n)
	for i := range n {
		t.keys[i] = t.keyBuf[i*cfg.KeySize : (i+1)*cfg.KeySize]
		t.puts[i] = &kvv1.Mutation_Put{}
		t.muts[i] = &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: t.puts[i]}}
	}
	return t
}

// formatKey writes i into dst as a zero-padded decimal number.
func formatKey(dst []byte, i uint64) {
	for j := len(dst) - 1; j >= 0; j-- {
		dst[j] = byte('0' + i%10)
		i /= 10
	}
}

// claim reserves the operations of the next request: the index of the
// first and how many, or ok=false when the benchmark is over.
func (r *benchRun) claim(n uint64) (first, count uint64, ok bool) {
	if r.ctx.Err() != nil {
		return 0, 0, false
	}
	if r.cfg.Duration > 0 {
		if !time.Now().Before(r.deadline) {
			return 0, 0, false
		}
		return r.next.Add(n) - n, n, true
	}
	first = r.next.Add(n) - n
	if first >= r.cfg.Num {
		return 0, 0, false
	}
	return first, min(n, r.cfg.Num-first), true
}

func (r *benchRun) loop(t *benchThread) {
	batch := r.cfg.Batch
	if r.w.kind == kindRead || r.w.kind == kindScan {
		batch = 1
	}
	for {
		first, n, ok := r.claim(batch)
		if !ok {
			return
		}
		switch r.w.kind {
		case kindFill:
			for i := range n {
				k := first + i
				if !r.w.seq {
					k = t.rng.Uint64N(r.cfg.Keys)
				}
				formatKey(t.keys[i], k%r.cfg.Keys)
			}
			r.fill(t, int(n), r.w.sync, r.cfg.Batch > 1, &t.counts, &r.done)
		case kindRead:
			r.read(t)
		case kindMultiRead:
			r.multiRead(t, int(n))
		case kindScan:
			r.scan(t)
		}
	}
}

// writer puts random keys, one per request, until the readers are done.
func (r *benchRun) writer(t *benchThread) {
	var ignored atomic.Uint64
	for !r.stopping.Load() && r.ctx.Err() == nil {
		formatKey(t.keys[0], t.rng.Uint64N(r.cfg.Keys))
		r.fill(t, 1, false, false, &t.counts, &ignored)
	}
}

func (r *benchRun) fill(t *benchThread, n int, sync, batch bool, counts *benchCounts, done *atomic.Uint64) {
	var size uint64
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now()
	var err error
	if !batch {
		v := r.values.get(t.rng)
		size = uint64(len(t.keys[0]) + len(v))
		_, err = t.kv.Put(ctx, &kvv1.PutRequest{Key: t.keys[0], Value: v, Sync: sync})
	} else {
		for i := range n {
			t.puts[i].Key, t.puts[i].Value = t.keys[i], r.values.get(t.rng)
			size += uint64(len(t.puts[i].Key) + len(t.puts[i].Value))
		}
		_, err = t.kv.Write(ctx, &kvv1.WriteRequest{Mutations: t.muts[:n], Sync: sync})
	}
	if r.finish(t, counts, start, err) {
		counts.ops += uint64(n)
		counts.bytes += size
		done.Add(uint64(n))
	}
}

func (r *benchRun) read(t *benchThread) {
	k := t.keys[0]
	formatKey(k, t.rng.Uint64N(r.cfg.Keys))
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := t.kv.Get(ctx, &kvv1.GetRequest{Key: k})
	found := err == nil
	if status.Code(err) == codes.NotFound {
		err = nil
	}
	if r.finish(t, &t.counts, start, err) {
		t.counts.ops++
		if found {
			t.counts.found++
			t.counts.bytes += uint64(len(k) + len(resp.Value))
		} else {
			t.counts.missing++
		}
		r.done.Add(1)
	}
}

func (r *benchRun) multiRead(t *benchThread, n int) {
	for i := range n {
		formatKey(t.keys[i], t.rng.Uint64N(r.cfg.Keys))
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := t.kv.MultiGet(ctx, &kvv1.MultiGetRequest{Keys: t.keys[:n]})
	if err == nil && len(resp.Results) != n {
		err = fmt.Errorf("MultiGet of %d keys returned %d results", n, len(resp.Results))
	}
	if r.finish(t, &t.counts, start, err) {
		t.counts.ops += uint64(n)
		for _, res := range resp.Results {
			if res.Found {
				t.counts.found++
				t.counts.bytes += uint64(len(res.Key) + len(res.Value))
			} else {
				t.counts.missing++
			}
		}
		r.done.Add(uint64(n))
	}
}

func (r *benchRun) scan(t *benchThread) {
	k := t.keys[0]
	formatKey(k, t.rng.Uint64N(r.cfg.Keys))
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
	defer cancel()
	start := time.Now()
	var pairs, size uint64
	stream, err := t.kv.Scan(ctx, &kvv1.ScanRequest{Start: k, Limit: r.cfg.ScanLength})
	for err == nil {
		var chunk *kvv1.ScanResponse
		chunk, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			err = nil
			break
		}
		for _, p := range chunk.GetPairs() {
			pairs++
			size += uint64(len(p.Key) + len(p.Value))
		}
	}
	if r.finish(t, &t.counts, start, err) {
		t.counts.ops++
		t.counts.pairs += pairs
		t.counts.bytes += size
		r.done.Add(1)
	}
}

// finish records a request's latency, or its failure, and tells whether it
// succeeded. A request cut short by an interrupt is neither.
func (r *benchRun) finish(t *benchThread, counts *benchCounts, start time.Time, err error) bool {
	if err == nil {
		t.hist.Record(time.Since(start))
		counts.requests++
		return true
	}
	if r.ctx.Err() != nil {
		return false
	}
	counts.requests++
	counts.errors++
	r.failed.Add(1)
	r.errs.add(r.name, err, r.cfg.Timeout)
	return false
}

// runBenchmark runs one benchmark to its end (--num operations, --duration,
// or an interrupt) and measures it.
func runBenchmark(ctx context.Context, cfg *Config, name string, conns []kvv1.KVClient, values *valuePool,
	metrics *serverMetrics, errs *benchErrors, stderr io.Writer, tty bool) *Result {
	r := &benchRun{ctx: ctx, cfg: cfg, name: name, w: workloads[name], values: values, errs: errs}
	threads := make([]*benchThread, cfg.Threads)
	for i := range threads {
		threads[i] = newBenchThread(cfg, conns[i%len(conns)], name, i)
	}
	var writer *benchThread
	if r.w.writer {
		writer = newBenchThread(cfg, conns[len(threads)%len(conns)], name, len(threads))
	}

	var serverBefore float64
	var serverErr error
	if metrics != nil {
		serverBefore, serverErr = metrics.cpuSeconds()
	}
	cpuBefore := processCPU()
	start := time.Now()
	r.deadline = start.Add(cfg.Duration)
	stopProgress := startProgress(stderr, tty, r, start)

	var writerDone sync.WaitGroup
	if writer != nil {
		writerDone.Go(func() { r.writer(writer) })
	}
	var wg sync.WaitGroup
	for _, t := range threads {
		wg.Go(func() { r.loop(t) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	r.stopping.Store(true)
	writerDone.Wait()
	cpu := processCPU() - cpuBefore
	var serverCPU float64
	if metrics != nil && serverErr == nil {
		var after float64
		after, serverErr = metrics.cpuSeconds()
		serverCPU = after - serverBefore
	}
	stopProgress()

	var counts benchCounts
	var hist Histogram
	for _, t := range threads {
		counts.add(t.counts)
		hist.Merge(&t.hist)
	}
	res := newBenchResult(name, r.w, counts, &hist, elapsed)
	res.Interrupted = ctx.Err() != nil
	allOps := counts.ops
	if writer != nil {
		w := writer.counts
		res.Writer = &Writer{Ops: w.ops, Requests: w.requests, Errors: w.errors, OpsPerSec: perSecond(w.ops, elapsed)}
		allOps += w.ops
	}
	res.ClientCPUSeconds = cpu.Seconds()
	res.ClientCPUMicrosPerOp = microsPerOp(cpu.Seconds(), allOps)
	if metrics != nil {
		if serverErr != nil {
			fmt.Fprintf(stderr, "shale: bench: %s: server CPU not measured: --server-metrics: %v\n", name, serverErr)
		} else {
			res.ServerCPUSeconds = &serverCPU
			per := microsPerOp(serverCPU, allOps)
			res.ServerCPUMicrosPerOp = &per
		}
	}
	return res
}

func perSecond(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func microsPerOp(seconds float64, ops uint64) float64 {
	if ops == 0 {
		return 0
	}
	return seconds * 1e6 / float64(ops)
}

// benchErrors counts failed requests over the whole run and prints the
// first few.
type benchErrors struct {
	w       io.Writer
	tty     bool
	count   atomic.Uint64
	mu      sync.Mutex
	printed int
	first   string
}

const benchPrintErrors = 5

func (e *benchErrors) add(name string, err error, timeout time.Duration) {
	n := e.count.Add(1)
	if n > benchPrintErrors+1 {
		return
	}
	msg := describeBenchError(err, timeout)
	e.mu.Lock()
	defer e.mu.Unlock()
	// Counted again under the lock, so that the lines come in order.
	e.printed++
	if e.first == "" {
		e.first = name + ": " + msg
	}
	clear := ""
	if e.tty {
		clear = "\r\033[K" // over the progress line
	}
	if e.printed <= benchPrintErrors {
		fmt.Fprintf(e.w, "%sshale: bench: %s: request failed: %s\n", clear, name, msg)
	} else {
		fmt.Fprintf(e.w, "%sshale: bench: more requests failed; they are counted, not printed\n", clear)
	}
}

func (e *benchErrors) firstError() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.first
}

func describeBenchError(err error, timeout time.Duration) string {
	st, ok := status.FromError(err)
	if !ok {
		return cli.OneLine(err.Error())
	}
	if st.Code() == codes.DeadlineExceeded {
		return fmt.Sprintf("no answer within %s (--timeout)", cli.FormatDuration(timeout))
	}
	return cli.OneLine(fmt.Sprintf("%s: %s", st.Code(), st.Message()))
}

// valuePool holds the bytes values are cut from: pieces of 100 bytes, each
// a run of random printable bytes ratio*100 long repeated to fill the
// piece, so that a value compresses to about ratio of its size (as
// db_bench's --compression_ratio). Values are read-only slices of the pool,
// shared by all threads.
type valuePool struct {
	buf  []byte
	size int
}

func newValuePool(size int, ratio float64, seed uint64) *valuePool {
	const piece = 100
	n := 1<<20 + size
	rng := rand.New(rand.NewPCG(seed, 0x76616c756573)) // "values"
	raw := max(1, int(math.Round(piece*ratio)))
	chunk := make([]byte, raw)
	buf := make([]byte, 0, n+piece)
	for len(buf) < n {
		for i := range chunk {
			chunk[i] = byte(' ' + rng.IntN('~'-' '+1))
		}
		for i := range piece {
			buf = append(buf, chunk[i%raw])
		}
	}
	return &valuePool{buf: buf[:n], size: size}
}

func (p *valuePool) get(rng *rand.Rand) []byte {
	off := rng.IntN(len(p.buf) - p.size + 1)
	return p.buf[off : off+p.size : off+p.size]
}
