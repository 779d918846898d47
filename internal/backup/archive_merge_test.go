package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
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

// countingStore counts the requests made to a store, by kind, and which
// archive index objects were read, and at which level each was written.
type countingStore struct {
	objstore.Store
	mu       sync.Mutex
	requests map[string]int
	read     []string       // index objects read
	written  map[string]int // index objects written: their level
}

func newCountingStore(s objstore.Store) *countingStore {
	return &countingStore{Store: s, requests: map[string]int{}, written: map[string]int{}}
}

func (c *countingStore) count(kind string) {
	c.mu.Lock()
	c.requests[kind]++
	c.mu.Unlock()
}

// total counts every request but the writes of archive/status.json,
// which follow the clock (at most once a second while passes copy, every
// 5 s when idle), not the work: under load an idle pass lands after one.
func (c *countingStore) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.requests {
		if k != "PUT status" {
			n += v
		}
	}
	return n
}

func (c *countingStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if key == backup.ArchiveStatusKey {
		c.count("PUT status")
	} else {
		c.count("PUT")
	}
	if strings.HasPrefix(key, backup.ArchiveIndexPrefix) {
		b, err := io.ReadAll(r)
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		ix, err := backup.Parse[backup.ArchiveIndex](key, b)
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		c.mu.Lock()
		c.written[key] = ix.Level
		c.mu.Unlock()
		r = bytes.NewReader(b)
	}
	return c.Store.Put(ctx, key, r, size, opts)
}

func (c *countingStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	c.count("GET")
	if strings.HasPrefix(key, backup.ArchiveIndexPrefix) {
		c.mu.Lock()
		c.read = append(c.read, key)
		c.mu.Unlock()
	}
	return c.Store.Get(ctx, key, off, n)
}

func (c *countingStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.count("HEAD")
	return c.Store.Stat(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix string, fn func(objstore.ObjectInfo) error) error {
	c.count("LIST")
	return c.Store.List(ctx, prefix, fn)
}

func (c *countingStore) ListDir(ctx context.Context, dir string, fn func(objstore.ObjectInfo) error) error {
	c.count("LIST")
	return c.Store.ListDir(ctx, dir, fn)
}

func (c *countingStore) DeleteMany(ctx context.Context, keys []string) error {
	c.count("DELETE")
	return c.Store.DeleteMany(ctx, keys)
}

func (c *countingStore) Copy(ctx context.Context, src, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	c.count("COPY")
	return c.Store.Copy(ctx, src, dst, opts)
}

// An archiver's merge of the index objects reads none it wrote or read
// before (it merges them from memory): only another archiver's, and the
// merged objects once they are merged in turn. A merge that read back
// every index (512 GETs, 16 at a time) on the e2e step pitr's starved
// MinIO stopped the archive for ~50 s, and the folding overtook it. And a
// pass costs the same requests however many index objects the archive
// holds (the archive's share: the source's is one LIST per log, and 5).
func TestArchiveMergeReadsOnlyUnknownIndexes(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	p := startPrimary(t, db)
	ctx := context.Background()
	cs, csrc := newCountingStore(bak), newCountingStore(src)
	cfg := backup.ArchiveConfig{Source: csrc, To: backup.Location{Store: cs, Database: "orders"}, Epoch: p.srv.Epoch(), CompactAfter: 4}
	a, err := backup.OpenArchiver(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h history
	// One pass's requests to the source and the archive, with nothing new.
	idle := func() (int, int) {
		s0, d0 := csrc.total(), cs.total()
		if err := a.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		return csrc.total() - s0, cs.total() - d0
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	firstSrc, firstDst := idle()
	merges := 0
	for i := range 24 {
		h.fill(t, p.kv, fmt.Sprintf("w%02d-", i), 3)
		if err := a.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		// As Start does: a merge once CompactAfter pass indexes are there.
		if n := len(keysUnder(t, bak, backup.ArchiveIndexPrefix)); n >= cfg.CompactAfter {
			if err := a.MergeIndexes(ctx); err != nil {
				t.Fatal(err)
			}
			merges++
		}
	}
	// A deposed owner's archiver indexes what it copied, under its epoch.
	h.fill(t, p.kv, "other-", 3)
	other, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: location(t, bak), Epoch: p.srv.Epoch() + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	otherKeys := keysUnder(t, bak, backup.ArchiveIndexPrefix+fmt.Sprintf("%020d", p.srv.Epoch()+1))
	if len(otherKeys) == 0 {
		t.Fatal("the other archiver wrote no index")
	}
	for i := range 4 {
		h.fill(t, p.kv, fmt.Sprintf("x%02d-", i), 3)
		if err := a.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.MergeIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	lastSrc, lastDst := idle()

	cs.mu.Lock()
	read, written := slices.Clone(cs.read), cs.written
	cs.mu.Unlock()
	var own []string
	for _, k := range read {
		if lvl, ok := written[k]; ok && lvl == 0 {
			own = append(own, k)
		}
	}
	levels := map[int]int{}
	for _, l := range written {
		levels[l]++
	}
	t.Logf("%d merges; index objects written by level %v; index objects read %d (%v); an idle pass: %d requests to the source, %d to the archive first, %d and %d at the end",
		merges, levels, len(read), read[:min(len(read), 5)], firstSrc, firstDst, lastSrc, lastDst)
	if len(own) > 0 {
		t.Fatalf("the merges read back %d pass indexes this archiver wrote itself (of %d index objects read): %v", len(own), len(read), own[:min(len(own), 5)])
	}
	if !slices.Contains(read, otherKeys[0]) {
		t.Fatalf("the merge did not read the other archiver's index %s (read %v)", otherKeys[0], read)
	}
	if levels[2] == 0 {
		t.Fatalf("the merged objects were never merged in turn (levels written %v)", levels)
	}
	// (The source's share follows the number of logs: one LIST each.)
	if lastDst != firstDst {
		t.Fatalf("an idle pass made %d requests to the archive first and %d after %d merges", firstDst, lastDst, merges)
	}
	// Every log object is named: a new archiver has nothing to copy.
	got := archivedKeys(t, bak)
	for _, k := range logKeys(t, src) {
		if got[k] == 0 {
			t.Errorf("%s is not named by any index after the merges", k)
		}
	}
	a3, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: location(t, bak), Epoch: p.srv.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a3.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a3.Status(); st.Objects != 0 {
		t.Fatalf("an archiver opened after the merges copied %d objects again", st.Objects)
	}
}

// heldArchive is a backup store whose archive writes (but the archive's
// first start record) wait while held.
type heldArchive struct {
	objstore.Store
	mu   sync.Mutex
	gate chan struct{} // nil: not held
}

func (h *heldArchive) hold() {
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldArchive) release() {
	h.mu.Lock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
	h.mu.Unlock()
}

func (h *heldArchive) wait(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, backup.ArchivePrefix) || key == backup.ArchiveStartedKey {
		return nil
	}
	h.mu.Lock()
	g := h.gate
	h.mu.Unlock()
	if g == nil {
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *heldArchive) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := h.wait(ctx, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return h.Store.Put(ctx, key, r, size, opts)
}

func (h *heldArchive) Copy(ctx context.Context, src, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := h.wait(ctx, dst); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return h.Store.Copy(ctx, src, dst, opts)
}

// An archive behind the folding still dates every write group: the owner
// keeps a fold's segments until the archive has them (RFC 0011 step 22a),
// so a restore to a time inside a fold's span is exact. Without that, the
// archive held only the fold, and the restore was refused ("only as one
// fold (the archive was behind)"), as in the e2e step pitr under load.
func TestArchiveKeepsSegmentsOfFolds(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	held := &heldArchive{Store: bak}
	defer held.release()
	sc := shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: time.Hour, CacheDir: filepath.Join(t.TempDir(), "cache"), FoldSegments: 32}
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc,
		Archive: &backup.ArchiveConfig{To: backup.Location{Store: held, Database: "orders"}, Interval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p := &owner{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(p.stop)
	waitFor(t, "the archiver to open", func() bool { return s.Archiver() != nil })

	var h history
	h.fill(t, p.kv, "base", 20)
	checkpoint(t, p.kv, "c1")
	m := create(t, src, loc, "b1", "c1")
	base := h.want(nil, func(w ack) bool { return w.seq <= m.Checkpoint.Sequence })
	h.writes = slices.DeleteFunc(h.writes, func(w ack) bool { return w.seq <= m.Checkpoint.Sequence })

	// The archive stops; 100 writes (one segment each) fold three times.
	held.hold()
	h.fill(t, p.kv, "a", 50)
	tMid := time.Now()
	after(tMid)
	h.fill(t, p.kv, "b", 50)
	folds := func() []string {
		var out []string
		for _, k := range keysUnder(t, src, "") {
			if _, _, first, last, ok := layout.ParseSegmentKey(k); ok && last > first && strings.HasSuffix(strings.Split(k, "/")[0], ".log") {
				out = append(out, k)
			}
		}
		return out
	}
	waitFor(t, "three folds of the WAL", func() bool { return len(folds()) >= 3 })

	// The archive goes on and catches up.
	held.release()
	waitArchivedPast(t, bak, time.Now())
	got, _ := restoreAndRead(t, loc, backup.Target{Time: tMid}, "s3://src/r-mid")
	sameState(t, "restored to a time inside a fold's span", got, h.want(base, func(w ack) bool { return !w.acked.After(tMid) }))

	// The archive holds the segments, not the folds, and once it has
	// them the owner deletes them.
	var archivedFolds []string
	for k := range archivedKeys(t, bak) {
		if _, _, first, last, ok := layout.ParseSegmentKey(k); ok && last > first {
			archivedFolds = append(archivedFolds, k)
		}
	}
	if len(archivedFolds) > 0 {
		t.Fatalf("the archive copied folds %v: their segments were gone", archivedFolds)
	}
	waitFor(t, "the folded segments deleted", func() bool {
		for _, f := range folds() {
			name, e, first, last, _ := layout.ParseSegmentKey(f)
			for seq := max(first, 2); seq <= last; seq++ {
				if _, err := src.Stat(context.Background(), layout.SegmentKey(name, e, seq)); err == nil {
					return false
				}
			}
		}
		return true
	})
}
