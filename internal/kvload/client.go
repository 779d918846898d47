package kvload

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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/cli"
	"github.com/shale-rocks/shale/internal/engine"
)

// The client side of `shale kv load`: cmd/shale opens the input and
// wires the flags to Options.

// Options are how a load goes (the flags of `shale kv load`).
type Options struct {
	BatchBytes int    // keys and values per Load message (--batch-size)
	Sync       bool   // make the load durable before it succeeds (--sync)
	SST        bool   // build SST files and ingest them (--sst)
	SSTBytes   int    // pairs sorted in memory per SST file (--sst-size)
	TmpDir     string // where SST files are built (--tmp-dir)
	// Input names the input in the summary and the progress line; Size is
	// its size in bytes (-1: unknown, as stdin's), for the progress bar.
	Input string
	Size  int64
	// Stderr receives the progress line (nil: none): a bar redrawn on a
	// terminal, otherwise a line every ProgressEvery.
	Stderr        io.Writer
	ProgressEvery time.Duration
	// Describe turns the server's error into the line to print, knowing
	// how the client reached it (nil: as it is).
	Describe func(error) error
}

// Validate checks what a single flag cannot.
func (o Options) Validate() error {
	if o.BatchBytes < 1 || o.SSTBytes < 1 {
		return errors.New("kv load: --batch-size and --sst-size must be at least 1 byte")
	}
	return nil
}

// Summary is what a load did; `shale kv load -o json` prints it.
type Summary struct {
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

// Print writes the summary as the line `shale kv load` prints.
func (s *Summary) Print(w io.Writer) {
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
	opts Options
	r    *Reader

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

// Load sends the pairs r reads to the server kv reaches: in batches of
// opts.BatchBytes over the Load RPC, or with opts.SST sorted into SST files
// ingested one by one. It returns what it did, also when it fails (except
// before it began): a bad input line stops it after the pairs before it
// are loaded, and a server that failed or lost the database mid-load makes
// the outcome unknown, which the summary and the error say. Ending ctx
// interrupts it.
func Load(ctx context.Context, kv kvv1.KVClient, r *Reader, opts Options) (*Summary, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 10 * time.Second
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.Describe == nil {
		opts.Describe = func(err error) error { return err }
	}
	l := &loader{opts: opts, r: r}
	return l.run(ctx, kv)
}

func (l *loader) run(ctx context.Context, kv kvv1.KVClient) (*Summary, error) {
	sum := &Summary{Input: l.opts.Input, Mode: "stream", Complete: true}
	if l.opts.SST {
		sum.Mode = "sst"
	}
	start := time.Now()
	stopProgress := l.startProgress(start)
	var lineErr error
	var err error
	if l.opts.SST {
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
			err = l.opts.Describe(err)
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
// trailer (TrailerApplied*).
func appliedOf(md metadata.MD) (messages, pairs, bytes uint64, ok bool) {
	get := func(key string) (uint64, bool) {
		v := md.Get(key)
		if len(v) != 1 {
			return 0, false
		}
		n, err := strconv.ParseUint(v[0], 10, 64)
		return n, err == nil
	}
	messages, ok1 := get(TrailerAppliedMessages)
	pairs, ok2 := get(TrailerAppliedPairs)
	bytes, ok3 := get(TrailerAppliedBytes)
	return messages, pairs, bytes, ok1 && ok2 && ok3
}

// loadStream sends the pairs with the Load RPC. It returns the input's
// error (a bad line) apart from the RPC's, after loading the lines before
// the bad one.
func (l *loader) loadStream(ctx context.Context, kv kvv1.KVClient, sum *Summary) (lineErr, err error) {
	stream, err := kv.Load(ctx)
	if err != nil {
		return nil, err
	}
	// Pairs go packed (LoadRequest.packed): no message per pair to build
	// on this side or to decode on the server's.
	req := &kvv1.LoadRequest{Sync: l.opts.Sync, Packed: make([]byte, 0, l.opts.BatchBytes+64<<10)}
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
		req.Packed = AppendPacked(req.Packed, k, v)
		npairs++
		cur.lines = append(cur.lines, l.r.Line())
		size += len(k) + len(v)
		if size >= l.opts.BatchBytes {
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
	sum.Pairs, sum.Bytes, sum.Sequence, sum.Durable = resp.Pairs, resp.Bytes, resp.Sequence, l.opts.Sync
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
func (l *loader) loadSST(ctx context.Context, kv kvv1.KVClient, sum *Summary) (lineErr, err error) {
	if err := os.MkdirAll(l.opts.TmpDir, 0o755); err != nil {
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
			for len(arena) < l.opts.SSTBytes {
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
	f, err := os.CreateTemp(l.opts.TmpDir, "shale-load-*.sst")
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
	tty := cli.IsTerminal(l.opts.Stderr)
	return cli.Progress(l.opts.Stderr, tty, l.opts.ProgressEvery, func(now time.Time) string {
		return l.progressLine(now.Sub(start), tty)
	})
}

func (l *loader) progressLine(elapsed time.Duration, bar bool) string {
	read := l.r.BytesRead()
	rate := float64(read) / 1e6 / elapsed.Seconds()
	what := fmt.Sprintf("%.1f MB read", float64(read)/1e6)
	if l.opts.Size > 0 {
		frac := min(1, float64(read)/float64(l.opts.Size))
		what = fmt.Sprintf("%5.1f%% of %s (%.1f MB)", 100*frac, filepath.Base(l.opts.Input), float64(l.opts.Size)/1e6)
		if bar {
			const width = 30
			done := int(frac * width)
			what = "[" + strings.Repeat("=", done) + strings.Repeat(" ", width-done) + "] " + what
		}
	}
	return fmt.Sprintf("load: %s, %.1f MB/s, %d pairs applied, %s", what, rate, l.pairs.Load(), cli.FormatDuration(elapsed.Round(time.Second)))
}
