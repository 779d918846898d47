// Command backupbench measures backups (docs/rfcs/0011-backups-and-point-
// in-time-restore.md) on S3 stores (hack/bench-backup.sh runs two MinIO
// servers on loopback): a primary is loaded with -bytes of incompressible
// values, flushed, compacted (and left to settle: no compaction pending)
// and checkpointed; then, in this run:
//
//	full, server-side  (each full row twice, in ABBA order, into fresh
//	                   prefixes; the ratio is of the sums)
//	                   shale's backup into a second bucket of the same
//	                   server (CopyObject, each copy read back once for
//	                   its SHA-256) vs a plain server-side copy of the
//	                   same objects (CopyObject, nothing else);
//	full, streamed     shale's backup to the second server (GET, SHA-256
//	                   on the stream, PUT) vs a plain streamed copy of the
//	                   same objects (GET and PUT, nothing else);
//	incremental        twice, each after -change of the keys are rewritten
//	                   and flushed: the next backup's objects, bytes and
//	                   time (the first may also copy a bottom-level table
//	                   RocksDB rewrote after the full backup's checkpoint);
//	restore            each full backup restored into a new directory,
//	                   then a primary started on it until a Get answers
//	                   (time to serving).
//
// Every copy runs 8 objects at a time, as the backup does. Prints a table
// with the ratios. Results are noisy on shared machines: compare ratios
// from one run, not times across runs.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/primary"
)

func main() {
	var (
		work      = flag.String("work", "", "directory for cache directories (required)")
		dbURL     = flag.String("db", "s3://bench/backup/orders", "the database's store URL")
		sameURL   = flag.String("same", "s3://bak/shale", "backup store on the database's endpoint (another bucket)")
		plainURL  = flag.String("plain", "s3://bak/plain", "where the plain copies go on the database's endpoint")
		otherEP   = flag.String("other-endpoint", "", "S3 endpoint URL of the second server (required)")
		otherURL  = flag.String("other", "s3://bak/shale", "backup store on the second server")
		otherPl   = flag.String("other-plain", "s3://bak/plain", "where the plain streamed copies go on the second server")
		size      = flag.String("bytes", "1GiB", "bytes of values to load (e.g. 64MiB, 1GiB)")
		valueSize = flag.Int("value-size", 4096, "bytes per value")
		change    = flag.Float64("change", 0.01, "share of the keys rewritten before the incremental backup")
		verbose   = flag.Bool("v", false, "log the primaries' and backups' info lines")
	)
	flag.Parse()
	total, err := parseSize(*size)
	if err != nil || *work == "" || *otherEP == "" {
		fmt.Fprintf(os.Stderr, "backupbench: -work and -other-endpoint are required and -bytes must be a size like 1GiB (%v)\n", err)
		os.Exit(2)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	b := &bench{work: *work, db: *dbURL, same: *sameURL, plain: *plainURL, otherEP: *otherEP, other: *otherURL, otherPlain: *otherPl,
		total: total, valueSize: *valueSize, change: *change, logger: logger}
	if err := b.run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "backupbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	work, db, same, plain, otherEP, other, otherPlain string
	total                                             int64
	valueSize                                         int
	change                                            float64
	logger                                            *slog.Logger
	keys                                              int
	values                                            []byte
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

func (b *bench) start(name, db string) (*node, error) {
	sc := shalefs.Config{CacheDir: filepath.Join(b.work, name)}
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: sc, Logger: b.logger})
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

// value is key i's value of generation gen: random bytes at an offset
// (incompressible), starting with the key and generation.
func (b *bench) value(i, gen int) []byte {
	off := ((i + gen*104729) * 7919) % (len(b.values) - b.valueSize)
	v := append([]byte(nil), b.values[off:off+b.valueSize]...)
	copy(v, fmt.Sprintf("%s/%d", key(i), gen))
	return v
}

func (b *bench) load(ctx context.Context, kv kvv1.KVClient, keys []int, gen int) error {
	const batch = 256
	for i := 0; i < len(keys); i += batch {
		var ms []*kvv1.Mutation
		for _, k := range keys[i:min(len(keys), i+batch)] {
			ms = append(ms, &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(key(k)), Value: b.value(k, gen)}}})
		}
		if _, err := kv.Write(ctx, &kvv1.WriteRequest{Mutations: ms}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	_, err := kv.Flush(ctx, &kvv1.FlushRequest{})
	return err
}

// open opens url; on the second server when other.
func (b *bench) open(url string, other bool) (objstore.Store, error) {
	if !other {
		return objstore.Open(url)
	}
	cfg := objstore.S3ConfigFromEnv()
	cfg.Endpoint = strings.TrimSuffix(b.otherEP, "/")
	return objstore.OpenS3(url, cfg)
}

type result struct {
	name            string
	took            time.Duration
	objects, copied int64
	bytes, copiedB  int64
	streamed        int64
}

func (b *bench) run(ctx context.Context) error {
	b.keys = int(b.total / int64(b.valueSize))
	b.values = make([]byte, 4<<20)
	if _, err := rand.Read(b.values); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "# loading %d keys of %d bytes (%s) into %s\n", b.keys, b.valueSize, human(b.total), b.db)
	p, err := b.start("db", b.db)
	if err != nil {
		return fmt.Errorf("the database: %w", err)
	}
	defer p.stop()
	all := make([]int, b.keys)
	for i := range all {
		all[i] = i
	}
	t0 := time.Now()
	if err := b.load(ctx, p.kv, all, 0); err != nil {
		return err
	}
	if _, err := p.kv.Compact(ctx, &kvv1.CompactRequest{}); err != nil {
		return err
	}
	if err := settle(ctx, p.kv); err != nil {
		return err
	}
	ck, err := p.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: "full"})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "# loaded, flushed and compacted in %s; checkpoint: %d tables, %s\n", time.Since(t0).Round(time.Millisecond), ck.Checkpoint.GetTables(), human(int64(ck.Checkpoint.GetBytes())))
	src, err := objstore.Open(b.db)
	if err != nil {
		return err
	}
	locOf := func(url string, other bool) (backup.Location, error) {
		s, err := b.open(strings.TrimSuffix(url, "/")+"/orders", other)
		return backup.Location{Store: s, Database: "orders"}, err
	}
	sameLoc, err := locOf(b.same, false)
	if err != nil {
		return err
	}
	otherLoc, err := locOf(b.other, true)
	if err != nil {
		return err
	}

	var rows []result
	backupRow := func(name string, loc backup.Location, id, ckName string) (backup.Manifest, error) {
		fmt.Fprintf(os.Stderr, "# %s\n", name)
		t := time.Now()
		m, err := backup.Create(ctx, backup.CreateConfig{Source: src, To: loc, ID: id, Checkpoint: ckName, Logger: b.logger})
		if err != nil {
			return m, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, result{name: name, took: time.Since(t), objects: int64(len(m.Objects)), copied: int64(m.CopiedObjects), bytes: m.Bytes, copiedB: m.CopiedBytes, streamed: m.Streamed})
		return m, nil
	}
	plainRow := func(name string, m backup.Manifest, dstURL string, other bool) error {
		fmt.Fprintf(os.Stderr, "# %s\n", name)
		dst, err := b.open(dstURL, other)
		if err != nil {
			return err
		}
		r, err := plainCopy(ctx, src, dst, m)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r.name = name
		rows = append(rows, r)
		return nil
	}

	// (a) Full backups against plain copies of the same objects, twice
	// each in ABBA order (plain, backup, backup, plain: each into a fresh
	// prefix), so a load that drifts during the run weighs on both sides;
	// the ratio is of the sums.
	m, err := checkpointObjects(ctx, src, "full")
	if err != nil {
		return err
	}
	for _, o := range m.Objects {
		fmt.Fprintf(os.Stderr, "#   in the full backup: %s (%s)\n", o.Key, human(o.Size))
	}
	sameLoc2, err := locOf(b.same+"-2", false)
	if err != nil {
		return err
	}
	otherLoc2, err := locOf(b.other+"-2", true)
	if err != nil {
		return err
	}
	var full []result // plain, backup, backup, plain; server-side then streamed
	for _, side := range []struct {
		what, plainURL string
		other          bool
		locs           [2]backup.Location
	}{{"server-side (CopyObject, 2nd bucket)", b.plain, false, [2]backup.Location{sameLoc, sameLoc2}},
		{"streamed (2nd server)", b.otherPlain, true, [2]backup.Location{otherLoc, otherLoc2}}} {
		for i, step := range []string{"plain", "backup", "backup", "plain"} {
			name := fmt.Sprintf("%s %s, run %d", step, side.what, 1+i/2)
			var err error
			if step == "plain" {
				err = plainRow(name, m, fmt.Sprintf("%s/run-%d", side.plainURL, i), side.other)
			} else {
				_, err = backupRow(name, side.locs[i-1], "full", "full")
			}
			if err != nil {
				return err
			}
			full = append(full, rows[len(rows)-1])
		}
	}
	rows = slices.Clone(full)

	// (b) Incrementals, each after a change of b.change of the keys: the
	// first right after the full backup (RocksDB may still rewrite the
	// bottom level once, e.g. to zero sequence numbers: that table is new
	// and is copied), the second on the settled database.
	prev := m
	for round, what := range []string{"1st incremental", "2nd incremental"} {
		n := max(1, int(float64(b.keys)*b.change))
		changed := make([]int, n)
		for i := range changed {
			changed[i] = (i*9973 + round*7) % b.keys
		}
		if err := b.load(ctx, p.kv, changed, round+1); err != nil {
			return err
		}
		if err := settle(ctx, p.kv); err != nil {
			return err
		}
		id := fmt.Sprintf("incr%d", round+1)
		if _, err := p.kv.Checkpoint(ctx, &kvv1.CheckpointRequest{Name: id}); err != nil {
			return err
		}
		mi, err := backupRow(fmt.Sprintf("%s after %g%% of the keys rewritten, server-side", what, b.change*100), sameLoc, id, id)
		if err != nil {
			return err
		}
		had := map[string]bool{}
		for _, o := range prev.Objects {
			had[o.Key] = true
		}
		for _, o := range mi.Objects {
			if !had[o.Key] {
				fmt.Fprintf(os.Stderr, "#   new in the %s: %s (%s)\n", what, o.Key, human(o.Size))
			}
		}
		prev = mi
		if _, err := backupRow(fmt.Sprintf("%s after %g%% of the keys rewritten, streamed", what, b.change*100), otherLoc, id, id); err != nil {
			return err
		}
	}

	// (c) Restores to serving.
	type restoreRow struct {
		name                 string
		restore, open, total time.Duration
		bytes                int64
	}
	var restores []restoreRow
	for i, r := range []struct {
		name string
		loc  backup.Location
	}{{"from the 2nd bucket (server-side)", sameLoc}, {"from the 2nd server (streamed)", otherLoc}} {
		fmt.Fprintf(os.Stderr, "# restore %s\n", r.name)
		into := fmt.Sprintf("%s-restored-%d", b.db, i)
		dst, err := objstore.Open(into)
		if err != nil {
			return err
		}
		t := time.Now()
		rep, err := backup.Restore(ctx, r.loc, "full", dst)
		if err != nil {
			return fmt.Errorf("restore %s: %w", r.name, err)
		}
		restored := time.Since(t)
		q, err := b.start(fmt.Sprintf("restored-%d", i), into)
		if err != nil {
			return fmt.Errorf("open the restored database: %w", err)
		}
		k := b.keys / 2
		g, err := q.kv.Get(ctx, &kvv1.GetRequest{Key: []byte(key(k))})
		took := time.Since(t)
		q.stop()
		if err != nil || !strings.HasPrefix(string(g.GetValue()), key(k)+"/0") {
			return fmt.Errorf("restored %s: Get %s: %v (value %.20q)", r.name, key(k), err, g.GetValue())
		}
		restores = append(restores, restoreRow{r.name, restored, took - restored, took, rep.Bytes})
	}

	fmt.Printf("database: %s of values in %d keys; checkpoint: %d tables, %s (%d objects in a backup)\n\n", human(b.total), b.keys, ck.Checkpoint.GetTables(), human(int64(ck.Checkpoint.GetBytes())), len(m.Objects))
	fmt.Printf("| copy | time | objects copied | bytes copied | through this process | MB/s |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %d of %d | %s of %s | %s | %.0f |\n", r.name, r.took.Round(time.Millisecond), r.copied, r.objects, human(r.copiedB), human(r.bytes), human(r.streamed), float64(r.copiedB)/1e6/r.took.Seconds())
	}
	ratio := func(a, b time.Duration) string { return strconv.FormatFloat(a.Seconds()/b.Seconds(), 'f', 2, 64) }
	sum := func(rs ...result) time.Duration {
		var d time.Duration
		for _, r := range rs {
			d += r.took
		}
		return d
	}
	fmt.Printf("\nthroughput, shale backup / plain copy of the same objects (sums of two runs each): server-side %sx, streamed %sx (target >= 0.8x)\n",
		ratio(sum(full[0], full[3]), sum(full[1], full[2])), ratio(sum(full[4], full[7]), sum(full[5], full[6])))
	for i, r := range rows[8:] {
		full := rows[1+4*(i%2)]
		fmt.Printf("%s: %.2f%% of the bytes, %d of %d objects, in %s (%.2fx the full backup's time)\n", r.name, 100*float64(r.copiedB)/float64(r.bytes), r.copied, r.objects, r.took.Round(time.Millisecond), r.took.Seconds()/full.took.Seconds())
	}
	fmt.Printf("\n| restore | restore | open to the first Get | to serving | bytes |\n|---|---:|---:|---:|---:|\n")
	for _, r := range restores {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.name, r.restore.Round(time.Millisecond), r.open.Round(time.Millisecond), r.total.Round(time.Millisecond), human(r.bytes))
	}
	return nil
}

// settle waits until RocksDB has no compaction pending, and logs the
// tables per level.
func settle(ctx context.Context, kv kvv1.KVClient) error {
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, err := kv.Status(ctx, &kvv1.StatusRequest{})
		if err != nil {
			return err
		}
		if st.GetStats().GetPendingCompactionBytes() == 0 || time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "#   tables per level: %v, pending compaction %d bytes\n", st.GetStats().GetFilesPerLevel(), st.GetStats().GetPendingCompactionBytes())
			return nil
		}
	}
}

// checkpointObjects lists what a backup of checkpoint name copies, as
// backup.Create does: the record, the MANIFEST copy, every file.
func checkpointObjects(ctx context.Context, src objstore.Store, name string) (backup.Manifest, error) {
	var m backup.Manifest
	rec, err := shalefs.ReadCheckpointRecord(ctx, src, name)
	if err != nil {
		return m, err
	}
	info, err := src.Stat(ctx, layout.CheckpointRecordKey(rec.ID))
	if err != nil {
		return m, err
	}
	m.Objects = append(m.Objects, backup.Object{Key: info.Key, Size: info.Size},
		backup.Object{Key: layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name), Size: rec.Manifest.Size})
	for _, f := range rec.Files {
		m.Objects = append(m.Objects, backup.Object{Key: layout.ObjectKey(f.Name, f.Epoch), Size: f.Size})
	}
	return m, nil
}

// plainCopy copies the objects manifest m names from src to dst, 8 at a
// time: CopyObject on one endpoint, else a GET streamed into a PUT.
// Nothing else: no checksum, no listing, no records.
func plainCopy(ctx context.Context, src, dst objstore.Store, m backup.Manifest) (result, error) {
	r := result{objects: int64(len(m.Objects))}
	work := make(chan backup.Object)
	errs := make(chan error, 8)
	var mu sync.Mutex
	var wg sync.WaitGroup
	t := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				var streamed int64
				var err error
				if objstore.CopiesServerSide(src, dst) {
					_, streamed, err = objstore.CopyAcross(ctx, src, o.Key, dst, o.Key, objstore.PutOptions{})
				} else {
					var rc io.ReadCloser
					rc, _, err = src.Get(ctx, o.Key, 0, -1)
					if err == nil {
						_, err = dst.Put(ctx, o.Key, rc, o.Size, objstore.PutOptions{})
						rc.Close()
						streamed = o.Size
					}
				}
				if err != nil {
					errs <- fmt.Errorf("copy %s: %w", o.Key, err)
					return
				}
				mu.Lock()
				r.copied++
				r.copiedB += o.Size
				r.streamed += streamed
				mu.Unlock()
			}
		}()
	}
	for _, o := range m.Objects {
		select {
		case work <- o:
		case err := <-errs:
			close(work)
			wg.Wait()
			return r, err
		}
	}
	close(work)
	wg.Wait()
	r.took = time.Since(t)
	r.bytes = r.copiedB
	select {
	case err := <-errs:
		return r, err
	default:
	}
	return r, nil
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
