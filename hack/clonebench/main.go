// Command clonebench measures what a clone costs (docs/rfcs/0010-
// checkpoints-and-clones.md, steps 16 and 20), on an S3 store (hack/bench-
// clone.sh runs a MinIO server on loopback): a parent primary is loaded
// with -bytes of incompressible values, flushed and compacted, and
// checkpointed; then, from that checkpoint,
//
//	zero-copy  a clone in the same store (shares the parent's tables, pins
//	           them, copies the frozen MANIFEST);
//	full copy  a clone into another bucket with --clone-copy (every object
//	           of the checkpoint copied server-side, CopyObject, as a
//	           parent in another ObjectStore on the same endpoint is).
//
// Time to serve is from primary.Start of the clone's first primary (the
// bootstrap, the takeover, RocksDB's open) until a Get of a sampled key
// returns the parent's value. Bytes copied are what the bootstrap reports
// (server-side copies included), and the clone's directory is listed once
// serving. Prints a table with the ratios of the zero-copy clone to the
// full copy. Results are noisy on shared machines: compare ratios from one
// run, not times across runs.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/primary"
)

func main() {
	var (
		work      = flag.String("work", "", "directory for cache directories (required)")
		parentURL = flag.String("parent", "s3://bench/clone/parent", "the parent's store URL")
		sameURL   = flag.String("clone", "s3://bench/clone/zero-copy", "the zero-copy clone's store URL (same store as the parent)")
		copyURL   = flag.String("copy", "s3://copy/clone/full-copy", "the copied clone's store URL (another bucket)")
		size      = flag.String("bytes", "1GiB", "bytes of values to load into the parent (e.g. 64MiB, 1GiB)")
		valueSize = flag.Int("value-size", 4096, "bytes per value")
		verbose   = flag.Bool("v", false, "log the primaries' info lines")
	)
	flag.Parse()
	total, err := parseSize(*size)
	if err != nil || *work == "" {
		fmt.Fprintf(os.Stderr, "clonebench: -work is required and -bytes must be a size like 1GiB (%v)\n", err)
		os.Exit(2)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(*work, *parentURL, *sameURL, *copyURL, total, *valueSize, logger); err != nil {
		fmt.Fprintln(os.Stderr, "clonebench:", err)
		os.Exit(1)
	}
}

type node struct {
	srv  *primary.Server
	kv   kvv1.KVClient
	conn *grpc.ClientConn
}

func (n *node) stop() {
	n.srv.Stop(5 * time.Second)
	n.conn.Close()
}

func start(work, name, db string, clone *primary.CloneConfig, logger *slog.Logger) (*node, error) {
	sc := shalefs.Config{CacheDir: filepath.Join(work, name)}
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: sc, Logger: logger, Clone: clone})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(kvserver.DefaultLimits().MaxMessageBytes())))
	if err != nil {
		s.Stop(time.Second)
		return nil, err
	}
	return &node{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}, nil
}

func key(i int) string { return fmt.Sprintf("key%09d", i) }

func run(work, parentURL, sameURL, copyURL string, total int64, valueSize int, logger *slog.Logger) error {
	ctx := context.Background()
	keys := int(total / int64(valueSize))
	fmt.Fprintf(os.Stderr, "# loading %d keys of %d bytes (%s) into %s\n", keys, valueSize, human(total), parentURL)
	p, err := start(work, "parent", parentURL, nil, logger)
	if err != nil {
		return fmt.Errorf("the parent: %w", err)
	}
	defer p.stop()
	values := make([]byte, 1<<20) // random, read at offsets: incompressible
	if _, err := rand.Read(values); err != nil {
		return err
	}
	value := func(i int) []byte {
		off := (i * 7919) % (len(values) - valueSize)
		v := append([]byte(nil), values[off:off+valueSize]...)
		copy(v, key(i)) // each value names its key: a read checks it
		return v
	}
	loadStart := time.Now()
	const batch = 256
	for i := 0; i < keys; i += batch {
		var ms []*kvv1.Mutation
		for j := i; j < min(keys, i+batch); j++ {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(key(j)), Value: value(j)}}})
		}
		if _, err := p.kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	if _, err := p.kv.Flush(ctx, &kvv1.FlushRequest{}); err != nil {
		return err
	}
	if _, err := p.kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		return err
	}
	ck, err := p.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "bench"})
	if err != nil {
		return err
	}
	pstore, err := objstore.Open(parentURL)
	if err != nil {
		return err
	}
	pObjects, pBytes, err := dirSize(ctx, pstore)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "# loaded in %s; checkpoint %s: %d tables, %s; the parent's directory: %d objects, %s\n",
		time.Since(loadStart).Round(time.Millisecond), ck.Checkpoint.GetName(), ck.Checkpoint.GetTables(), human(int64(ck.Checkpoint.GetBytes())), pObjects, human(pBytes))

	type row struct {
		name                          string
		boot, serve                   time.Duration
		copied, copiedBytes, streamed int64
		shared, sharedBytes           int64
		dirObjects, dirBytes          int64
	}
	var rows []row
	for i, c := range []struct {
		name, url string
		copy      bool
	}{{"zero-copy (same store)", sameURL, false}, {"full copy (server-side, 2nd bucket)", copyURL, true}} {
		t0 := time.Now()
		n, err := start(work, fmt.Sprintf("clone%d", i), c.url, &primary.CloneConfig{From: parentURL, Checkpoint: "bench", ID: fmt.Sprintf("bench-%d", i), Copy: c.copy}, logger)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		k := keys / 2
		r, err := n.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(key(k))})
		serve := time.Since(t0)
		if err != nil || !strings.HasPrefix(string(r.GetValue()), key(k)) {
			n.stop()
			return fmt.Errorf("%s: Get %s: %v (value %.20q)", c.name, key(k), err, r.GetValue())
		}
		rep := n.srv.Cloned()
		st, err := objstore.Open(c.url)
		if err != nil {
			return err
		}
		objs, b, err := dirSize(ctx, st)
		if err != nil {
			return err
		}
		rw := row{name: c.name, boot: rep.Took, serve: serve, copied: int64(rep.CopiedObjects), copiedBytes: rep.CopiedBytes, streamed: rep.Streamed, dirObjects: objs, dirBytes: b}
		if !c.copy {
			rw.shared, rw.sharedBytes = int64(rep.Tables), rep.TableBytes
		}
		rows = append(rows, rw)
		n.stop()
	}

	fmt.Printf("parent: %s of values in %d keys; checkpoint: %d tables, %s\n\n", human(total), keys, ck.Checkpoint.GetTables(), human(int64(ck.Checkpoint.GetBytes())))
	fmt.Printf("| clone | time to serve | of which the bootstrap | objects copied | bytes copied | streamed through the process | tables shared | clone's directory once serving |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %d | %s | %s | %d (%s) | %d objects, %s |\n", r.name, r.serve.Round(time.Millisecond), r.boot.Round(time.Millisecond), r.copied, human(r.copiedBytes), human(r.streamed), r.shared, human(r.sharedBytes), r.dirObjects, human(r.dirBytes))
	}
	z, f := rows[0], rows[1]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return strconv.FormatFloat(a/b, 'g', 3, 64)
	}
	fmt.Printf("| zero-copy / full copy | %s | %s | %s | %s | | | %s |\n", ratio(float64(z.serve), float64(f.serve)), ratio(float64(z.boot), float64(f.boot)), ratio(float64(z.copied), float64(f.copied)), ratio(float64(z.copiedBytes), float64(f.copiedBytes)), ratio(float64(z.dirBytes), float64(f.dirBytes)))
	return nil
}

func dirSize(ctx context.Context, s objstore.Store) (objects, bytes int64, err error) {
	err = s.List(ctx, "", func(o objstore.ObjectInfo) error {
		objects++
		bytes += o.Size
		return nil
	})
	return objects, bytes, err
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mult, nil
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
