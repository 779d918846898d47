package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/cli"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvload"
)

type loadConfig struct {
	format        string
	batchBytes    int
	sync          bool
	sst           bool
	sstBytes      int
	tmpDir        string
	progressEvery time.Duration
}

func newKVLoadCmd(kc *kvClient) *cobra.Command {
	cfg := &loadConfig{}
	c := &cobra.Command{
		Use:   "load [FILE|-]",
		Short: "Bulk-load key-value pairs from a file or stdin",
		Long: `Load puts the pairs of FILE (or stdin) into the database: key<TAB>value
lines, as ` + "`shale kv scan`" + ` prints them, or JSON lines {"key": ..., "value": ...}
(keyBase64/valueBase64 for bytes in base64). --format auto decides from the
first line. Empty lines are skipped; a later pair of the same key wins.

Pairs stream to the server in batches of --batch-size (the Load RPC), each
applied atomically as it arrives, and with --sync (the default) the whole
load is made durable once at the end. With --sst, pairs are instead sorted
in chunks of --sst-size, written to SST files in --tmp-dir and ingested
(IngestExternalFile, the Ingest RPC): the fastest way to load a lot of
data, each chunk visible and durable at once.

A malformed line stops the load with its line number; the pairs before it
are loaded (durably with --sync). Loading the same pairs again is harmless,
so fix the line and run the load again. If the server fails or loses
ownership of the database mid-load, the pairs it had applied may or may not
stay: the load reports "outcome unknown" with how many it applied; read
them back or run the load again. --timeout does not bound a load.
A progress bar goes to stderr when it is a terminal, otherwise a line every
--progress-interval.`,
		Example: `  shale kv load pairs.tsv
  shale kv scan --prefix user/ > users.tsv && shale kv --addr other:7070 load users.tsv
  zcat dump.jsonl.gz | shale kv load --format json -
  shale kv load --sst --sst-size 512MiB big.tsv -o json`,
		Args: optionalArg("FILE|-"),
	}
	output := addOutputFlags(c)
	fs := c.Flags()
	fs.StringVar(&cfg.format, "format", "auto", "input `format`: auto, tsv (key<TAB>value lines) or json (JSON lines)")
	fs.Var(newSize(&cfg.batchBytes, 1<<20), "batch-size", "bytes of keys and values per batch sent (under the server's --max-batch-size)")
	fs.BoolVar(&cfg.sync, "sync", true, "make the load durable before reporting success")
	fs.BoolVar(&cfg.sst, "sst", false, "build SST files locally and ingest them instead of streaming puts")
	fs.Var(newSize(&cfg.sstBytes, 256<<20), "sst-size", "with --sst: bytes of pairs sorted in memory and written per SST file")
	fs.StringVar(&cfg.tmpDir, "tmp-dir", os.TempDir(), "with --sst: `directory` for the SST files being built")
	fs.Var(newDuration(&cfg.progressEvery, 10*time.Second), "progress-interval", "how often to print a progress line when stderr is not a terminal")
	c.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]cobra.Completion{"auto", "tsv", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.MarkFlagDirname("tmp-dir")
	noFileCompletion(c, "batch-size", "sst-size", "progress-interval")
	c.RunE = func(c *cobra.Command, args []string) error {
		format, err := kvload.ParseFormat(cfg.format)
		if err != nil {
			return usageErrorf("kv load: --format: %v", err)
		}
		if cfg.batchBytes < 1 || cfg.sstBytes < 1 {
			return usageErrorf("kv load: --batch-size and --sst-size must be at least 1 byte")
		}
		in, size := io.Reader(c.InOrStdin()), int64(-1)
		name := "stdin"
		if len(args) == 1 && args[0] != "-" {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("kv load: %w", err)
			}
			defer f.Close()
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				size = fi.Size()
			}
			in, name = f, args[0]
		}
		l := &loader{cfg: cfg, kc: kc, r: kvload.NewReader(in, format), size: size, name: name, stderr: c.ErrOrStderr()}
		sum, err := l.run()
		if sum != nil {
			if output() == outputJSON {
				if perr := printJSON(c.OutOrStdout(), sum); perr != nil && err == nil {
					err = perr
				}
			} else {
				sum.print(c.OutOrStdout())
			}
		}
		return err
	}
	return c
}

// loadSummary is what a load did; -o json prints it.
type loadSummary struct {
	Input       string  `json:"input"`
	Format      string  `json:"format"`
	Mode        string  `json:"mode"` // "stream" or "sst"
	Pairs       uint64  `json:"pairs"`
	Bytes       uint64  `json:"bytes"` // keys and values
	SSTFiles    int     `json:"sstFiles,omitempty"`
	Seconds     float64 `json:"seconds"`
	PairsPerSec float64 `json:"pairsPerSec"`
	MBPerSec    float64 `json:"mbPerSec"` // 10^6 bytes of keys and values
	Durable     bool    `json:"durable"`
	Sequence    uint64  `json:"sequence"`
	Complete    bool    `json:"complete"` // false when a bad line or an error stopped it
	// OutcomeUnknown: the load failed after pairs were sent, and they may
	// or may not be in the database (Pairs were applied, not durably, by a
	// server that then failed or was deposed).
	OutcomeUnknown bool `json:"outcomeUnknown,omitempty"`
}

func (s *loadSummary) print(w io.Writer) {
	state := "loaded"
	if !s.Complete {
		state = "stopped after loading"
	}
	dur := "not durable yet (--sync=false)"
	switch {
	case s.Durable:
		dur = "durable"
	case s.OutcomeUnknown:
		dur = "outcome unknown"
	case !s.Complete:
		dur = "not durable"
	}
	files := ""
	if s.Mode == "sst" {
		files = fmt.Sprintf(" through %d SST files", s.SSTFiles)
	}
	fmt.Fprintf(w, "%s %d pairs (%.1f MB)%s in %.1fs: %.0f pairs/s, %.1f MB/s; %s\n",
		state, s.Pairs, float64(s.Bytes)/1e6, files, s.Seconds, s.PairsPerSec, s.MBPerSec, dur)
}

type loader struct {
	cfg    *loadConfig
	kc     *kvClient
	r      *kvload.Reader
	size   int64 // of the input, -1 when unknown
	name   string
	stderr io.Writer

	pairs, bytes atomic.Uint64 // applied (sst: ingested), for the progress line

	failed *streamFailure // a Load stream that failed
}

// streamFailure is what is known of a Load stream that failed: how much the
// server applied (its trailer), and how many pairs were sent.
type streamFailure struct {
	sent     uint64 // pairs sent
	known    bool   // the server's trailer said how much it applied
	messages uint64 // messages applied (when known)
}

// sentMessage remembers the input lines of a message, to name the line of
// a pair the server refused.
type sentMessage struct {
	firstPair uint64 // global index from 1
	lines     []int
}

func (l *loader) run() (*loadSummary, error) {
	conn, err := l.kc.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	kv := kvv1.NewKVClient(conn)
	ctx, stop := signalContext()
	defer stop()

	sum := &loadSummary{Input: l.name, Mode: "stream", Complete: true}
	if l.cfg.sst {
		sum.Mode = "sst"
	}
	start := time.Now()
	stopProgress := l.startProgress(start)
	var lineErr error
	if l.cfg.sst {
		lineErr, err = l.loadSST(ctx, kv, sum)
	} else {
		lineErr, err = l.loadStream(ctx, kv, sum)
	}
	stopProgress()
	sum.Format = l.r.Format().String()
	sum.Seconds = time.Since(start).Seconds()
	sum.PairsPerSec = float64(sum.Pairs) / sum.Seconds
	sum.MBPerSec = float64(sum.Bytes) / 1e6 / sum.Seconds
	if err == nil {
		err = lineErr
	}
	if err != nil {
		sum.Complete = false
		f := l.failed
		if f != nil && f.known && f.messages > 0 && status.Code(err) == codes.Unavailable && ctx.Err() == nil {
			// Applied, then the server failed or was deposed: the pairs
			// may or may not stay.
			sum.OutcomeUnknown = true
			return sum, fmt.Errorf("kv load: outcome unknown; %d %s applied (%d pairs), not durably: the server stopped the load: %s",
				f.messages, map[bool]string{true: "message", false: "messages"}[f.messages == 1], sum.Pairs, status.Convert(err).Message())
		}
		if ctx.Err() != nil {
			err = errors.New("kv load: interrupted")
		} else if _, ok := status.FromError(err); ok {
			err = l.kc.describe(err)
		}
		if f != nil && !f.known && f.sent > 0 {
			// The stream broke without the server saying how far it got.
			sum.OutcomeUnknown = true
			return sum, fmt.Errorf("%w; outcome unknown: an unknown number of the %d pairs sent were applied (read them back, or run the load again: loading the same pairs again is harmless)", err, f.sent)
		}
		return sum, fmt.Errorf("%w; %d pairs were loaded before it%s", err, sum.Pairs, map[bool]string{true: " (durably)", false: ""}[sum.Durable])
	}
	return sum, nil
}

// appliedOf reads how much of a failed load the server applied from its
// trailer (kvload.TrailerApplied*).
func appliedOf(md metadata.MD) (messages, pairs, bytes uint64, ok bool) {
	get := func(key string) (uint64, bool) {
		v := md.Get(key)
		if len(v) != 1 {
			return 0, false
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		return n, err == nil
	}
	messages, ok1 := get(kvload.TrailerAppliedMessages)
	pairs, ok2 := get(kvload.TrailerAppliedPairs)
	bytes, ok3 := get(kvload.TrailerAppliedBytes)
	return messages, pairs, bytes, ok1 && ok2 && ok3
}

// loadStream sends the pairs with the Load RPC. It returns the input's
// error (a bad line) apart from the RPC's, after loading the lines before
// the bad one.
func (l *loader) loadStream(ctx context.Context, kv kvv1.KVClient, sum *loadSummary) (lineErr, err error) {
	stream, err := kv.Load(ctx)
	if err != nil {
		return nil, err
	}
	// Pairs go packed (LoadRequest.packed): no message per pair to build
	// on this side or to decode on the server's.
	req := &kvv1.LoadRequest{Sync: l.cfg.sync, Packed: make([]byte, 0, l.cfg.batchBytes+64<<10)}
	var sent []sentMessage // the last few, to map a refused pair to its line
	var npairs uint64
	cur := sentMessage{firstPair: 1}
	size := 0
	send := func() error {
		if len(req.Packed) == 0 {
			return nil
		}
		err := stream.Send(req) // marshals req: its buffer is free again after
		sent = append(sent, cur)
		if len(sent) > 256 {
			sent = slices.Delete(sent, 0, 128)
		}
		cur = sentMessage{firstPair: npairs + 1}
		req.Packed, size = req.Packed[:0], 0
		return err
	}
	for {
		k, v, err := l.r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			lineErr = err
			break
		}
		req.Packed = kvload.AppendPacked(req.Packed, k, v)
		npairs++
		cur.lines = append(cur.lines, l.r.Line())
		size += len(k) + len(v)
		if size >= l.cfg.batchBytes {
			if err := send(); err != nil {
				break // the server's error comes from CloseAndRecv
			}
		}
	}
	send()
	resp, err := stream.CloseAndRecv()
	if err != nil {
		f := &streamFailure{sent: npairs}
		if m, p, b, ok := appliedOf(stream.Trailer()); ok {
			f.known, f.messages = true, m
			sum.Pairs, sum.Bytes = p, b
			l.pairs.Store(p)
		}
		l.failed = f
		return lineErr, l.pairLine(err, sent)
	}
	sum.Pairs, sum.Bytes, sum.Sequence, sum.Durable = resp.Pairs, resp.Bytes, resp.Sequence, l.cfg.sync
	l.pairs.Store(resp.Pairs)
	return lineErr, nil
}

// pairLine adds the input line to the server's "pair N of the load" error.
func (l *loader) pairLine(err error, sent []sentMessage) error {
	st := status.Convert(err)
	var n uint64
	if _, scanErr := fmt.Sscanf(st.Message(), "pair %d of the load", &n); scanErr != nil {
		return err
	}
	for _, m := range sent {
		if n >= m.firstPair && n < m.firstPair+uint64(len(m.lines)) {
			return status.Errorf(st.Code(), "line %d: %s", m.lines[n-m.firstPair], st.Message())
		}
	}
	return err
}

// sstPair is a pair of an SST chunk, in the chunk's arena.
type sstPair struct{ k, v []byte }

// loadSST sorts chunks of the input, writes each to an SST file and
// ingests it, in order. Building the next file overlaps ingesting this one.
func (l *loader) loadSST(ctx context.Context, kv kvv1.KVClient, sum *loadSummary) (lineErr, err error) {
	if err := os.MkdirAll(l.cfg.tmpDir, 0o755); err != nil {
		return nil, fmt.Errorf("--tmp-dir: %w", err)
	}
	sum.Durable = true // an ingested file is durable when Ingest returns
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type built struct {
		path        string
		pairs, size uint64
	}
	files := make(chan built, 1)
	var buildErr error
	go func() {
		defer close(files)
		var arena []byte
		var pairs []sstPair
		for eof := false; !eof && lineErr == nil; {
			arena, pairs = arena[:0], pairs[:0]
			for len(arena) < l.cfg.sstBytes {
				k, v, err := l.r.Next()
				if errors.Is(err, io.EOF) {
					eof = true
					break
				}
				if err != nil {
					lineErr = err
					break
				}
				// Lengths now, slices once the arena stops moving.
				arena = append(append(arena, k...), v...)
				pairs = append(pairs, sstPair{k: k[:len(k):len(k)], v: v[:len(v):len(v)]})
			}
			if len(pairs) == 0 {
				return
			}
			off := 0
			for i := range pairs {
				kl, vl := len(pairs[i].k), len(pairs[i].v)
				pairs[i] = sstPair{k: arena[off : off+kl], v: arena[off+kl : off+kl+vl]}
				off += kl + vl
			}
			path, n, size, err := l.buildSST(pairs)
			if err != nil {
				buildErr = err
				return
			}
			select {
			case files <- built{path, n, size}:
			case <-ctx.Done():
				os.Remove(path)
				return
			}
		}
	}()
	for f := range files {
		if err == nil {
			var seq uint64
			if seq, err = l.sendFile(ctx, kv, f.path); err == nil {
				sum.Pairs += f.pairs
				sum.Bytes += f.size
				sum.Sequence = seq
				sum.SSTFiles++
				l.pairs.Store(sum.Pairs)
			} else {
				cancel()
			}
		}
		os.Remove(f.path)
	}
	if err == nil {
		err = buildErr
	}
	return lineErr, err
}

// buildSST sorts pairs (the last of equal keys wins) and writes them to a
// new SST file in --tmp-dir, whose path it returns.
func (l *loader) buildSST(pairs []sstPair) (path string, n, size uint64, err error) {
	slices.SortStableFunc(pairs, func(a, b sstPair) int { return bytes.Compare(a.k, b.k) })
	f, err := os.CreateTemp(l.cfg.tmpDir, "shale-load-*.sst")
	if err != nil {
		return "", 0, 0, fmt.Errorf("--tmp-dir: %w", err)
	}
	path = f.Name()
	f.Close()
	w, err := engine.NewSSTWriter(path)
	if err != nil {
		os.Remove(path)
		return "", 0, 0, err
	}
	for i, p := range pairs {
		if i+1 < len(pairs) && bytes.Equal(pairs[i+1].k, p.k) {
			continue // a later pair of the same key wins
		}
		if err := w.Put(p.k, p.v); err != nil {
			w.Abort()
			os.Remove(path)
			return "", 0, 0, fmt.Errorf("building %s: %w", path, err)
		}
		n++
		size += uint64(len(p.k) + len(p.v))
	}
	if err := w.Finish(); err != nil {
		os.Remove(path)
		return "", 0, 0, fmt.Errorf("building %s: %w", path, err)
	}
	return path, n, size, nil
}

func (l *loader) sendFile(ctx context.Context, kv kvv1.KVClient, path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	stream, err := kv.Ingest(ctx)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			if err := stream.Send(&kvv1.IngestRequest{Data: buf[:n]}); err != nil {
				break // the server's error comes from CloseAndRecv
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return 0, rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return 0, err
	}
	return resp.Sequence, nil
}

// startProgress prints the progress bar (a terminal) or lines until the
// returned function is called.
func (l *loader) startProgress(start time.Time) func() {
	tty := cli.IsTerminal(l.stderr)
	return cli.Progress(l.stderr, tty, l.cfg.progressEvery, func(now time.Time) string {
		return l.progressLine(now.Sub(start), tty)
	})
}

func (l *loader) progressLine(elapsed time.Duration, bar bool) string {
	read := l.r.BytesRead()
	rate := float64(read) / 1e6 / elapsed.Seconds()
	what := fmt.Sprintf("%.1f MB read", float64(read)/1e6)
	if l.size > 0 {
		frac := min(1, float64(read)/float64(l.size))
		what = fmt.Sprintf("%5.1f%% of %s (%.1f MB)", 100*frac, filepath.Base(l.name), float64(l.size)/1e6)
		if bar {
			const width = 30
			done := int(frac * width)
			what = "[" + strings.Repeat("=", done) + strings.Repeat(" ", width-done) + "] " + what
		}
	}
	return fmt.Sprintf("load: %s, %.1f MB/s, %d pairs applied, %s", what, rate, l.pairs.Load(), cli.FormatDuration(elapsed.Round(time.Second)))
}

// describe turns a gRPC error into the one line kv commands print.
func (kc *kvClient) describe(err error) error {
	if derr := describeConnError(kc.addr, kc.security, err); derr != nil {
		return derr
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("cannot reach a Shale server at %s, or it failed: %s", kc.addr, st.Message())
	}
	return fmt.Errorf("%s: %s", st.Code(), st.Message())
}
