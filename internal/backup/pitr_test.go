package backup_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/backup"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/primary"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Point-in-time restore (RFC 0011 steps 18-26) on a real MinIO: the
// database in bucket src, its backups and archive in bucket bak.

// startArchiving starts a primary on db that archives into loc.
func startArchiving(t *testing.T, db string, loc backup.Location) *owner {
	t.Helper()
	return startArchivingEvery(t, db, loc, 50*time.Millisecond)
}

func startArchivingEvery(t *testing.T, db string, loc backup.Location, interval time.Duration) *owner {
	t.Helper()
	sc := shalefs.Config{Lease: 100 * time.Millisecond, DeleteGrace: time.Hour, CacheDir: filepath.Join(t.TempDir(), "cache")}
	s, err := primary.Start(primary.Config{DB: db, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(), Storage: sc,
		Archive: &backup.ArchiveConfig{To: loc, Interval: interval}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{srv: s, kv: kvv1.NewKVClient(conn), conn: conn}
	t.Cleanup(o.stop)
	waitFor(t, "the archiver to open", func() bool { return s.Archiver() != nil })
	return o
}

// waitFor polls a condition (up to a minute).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ack is one write the test made: when it was sent and acknowledged, and
// its sequence; value "" is a delete.
type ack struct {
	key, value   string
	sent, acked  time.Time
	seq          uint64
	acknowledged bool
}

type history struct{ writes []ack }

func (h *history) put(t *testing.T, kv kvv1.KVClient, key, value string) ack {
	t.Helper()
	m := &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(key), Value: []byte(value)}}}
	if value == "" {
		m = &kvv1.Mutation{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte(key)}}}
	}
	a := ack{key: key, value: value, sent: time.Now()}
	r, err := kv.Write(context.Background(), &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{m}, Sync: true})
	a.acked = time.Now()
	if err == nil {
		a.seq, a.acknowledged = r.Sequence, true
		h.writes = append(h.writes, a)
	}
	return a
}

func (h *history) fill(t *testing.T, kv kvv1.KVClient, prefix string, n int) {
	t.Helper()
	for i := range n {
		if a := h.put(t, kv, fmt.Sprintf("%s%03d", prefix, i), fmt.Sprintf("%s-value-%d", prefix, i)); !a.acknowledged {
			t.Fatalf("write %s%03d refused", prefix, i)
		}
	}
}

// want is the state at a target: every write acknowledged before it (by
// time, or sequence), on top of base.
func (h *history) want(base map[string]string, upTo func(a ack) bool) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for _, a := range h.writes {
		if !upTo(a) {
			break
		}
		if a.value == "" {
			delete(out, a.key)
		} else {
			out[a.key] = a.value
		}
	}
	return out
}

// after waits until the clock is past t by more than the store's time
// resolution (MinIO: 1 ms), so a write sent now is stored after t by the
// store's clock too.
func after(t time.Time) {
	for time.Since(t) < 3*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
}

func scanAll(t *testing.T, kv kvv1.KVClient) map[string]string {
	t.Helper()
	st, err := kv.Scan(context.Background(), &kvv1.ScanRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.Pairs {
			got[string(p.Key)] = string(p.Value)
		}
	}
}

func sameState(t *testing.T, who string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %q)", k, v))
		} else if g != v {
			diffs = append(diffs, fmt.Sprintf("%s = %q, want %q", k, g, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s = %q should not be there", k, v))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: %d differences: %s", who, len(diffs), strings.Join(diffs[:min(len(diffs), 10)], "; "))
	}
}

// waitArchivedPast waits until the archive's status (in the backup
// store) says every object stored before t is archived.
func waitArchivedPast(t *testing.T, bak objstore.Store, at time.Time) {
	t.Helper()
	waitFor(t, "the archive to catch up", func() bool {
		r, _, err := bak.Get(context.Background(), backup.ArchiveStatusKey, 0, -1)
		if err != nil {
			return false
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		st, err := backup.Parse[backup.ArchiveStatus](backup.ArchiveStatusKey, b)
		return err == nil && st.CaughtUpAt.After(at)
	})
}

// restoreAndRead restores loc to target into dir, opens it with a
// primary and returns its keys.
func restoreAndRead(t *testing.T, loc backup.Location, target backup.Target, dir string) (map[string]string, backup.PointInTimeReport) {
	t.Helper()
	rep, err := backup.RestoreToPoint(context.Background(), loc, target, open(t, dir))
	if err != nil {
		t.Fatalf("restore to %v: %v", target, err)
	}
	t.Logf("restored to %v: base %s (S=%d), replayed to sequence %d from %d WALs (%d bytes); window %s", target, rep.Base, rep.Sequence, rep.Last, rep.WALs, rep.WALBytes, rep.Window)
	p := startPrimary(t, dir)
	defer p.stop()
	return scanAll(t, p.kv), rep
}

// The test: k=v1 at T1, k=v2 at T2, a failover (a new owner with
// the next epoch; the old one, not yet aware, has a write refused as
// fenced), k deleted at T3. A restore to a time between T2 and T3 gives
// v2, with every write acknowledged before it and none sent after; one
// after T3 has no k; one to v1's sequence gives v1. The fenced write is
// never there.
func TestPointInTimeAcrossFailover(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	a := startArchiving(t, db, loc)
	var h history
	h.fill(t, a.kv, "base", 50)
	checkpoint(t, a.kv, "c1")
	m := create(t, src, loc, "b1", "c1")
	base := h.want(nil, func(w ack) bool { return w.seq <= m.Checkpoint.Sequence })
	h.writes = slices.DeleteFunc(h.writes, func(w ack) bool { return w.seq <= m.Checkpoint.Sequence })

	h.fill(t, a.kv, "a", 30)
	v1 := h.put(t, a.kv, "k", "v1")
	h.fill(t, a.kv, "b", 30)
	h.put(t, a.kv, "k", "v2")
	h.fill(t, a.kv, "c", 30)
	tMid := time.Now()
	after(tMid)

	// The failover: b takes over with the next epoch while a still runs.
	b := startArchiving(t, db, loc)
	if b.srv.Epoch() != a.srv.Epoch()+1 {
		t.Fatalf("epochs %d then %d", a.srv.Epoch(), b.srv.Epoch())
	}
	if z := h.put(t, a.kv, "zombie", "fenced"); z.acknowledged {
		t.Fatal("the deposed owner acknowledged a write after the takeover")
	}
	// And a deposed owner's log created after the takeover listed the
	// store (a memtable switch, then a write answered fenced: its segment
	// 1 is stored before the confirmation fails): a WAL of a's epoch with
	// a write at the sequence b's first write takes.
	zombieWAL(t, src, a.srv.Epoch(), h.writes[len(h.writes)-1].seq+1)
	h.fill(t, b.kv, "d", 30)
	if d := h.put(t, b.kv, "k", ""); !d.acknowledged {
		t.Fatal("delete refused")
	}
	h.fill(t, b.kv, "e", 30)
	tAfter := time.Now()
	after(tAfter)
	h.fill(t, b.kv, "f", 30)
	waitArchivedPast(t, bak, time.Now())

	// The archive continued across the failover from where a's logs end:
	// every WAL version of a's epoch is archived up to its seal.
	ea := layout.FormatNumber(a.srv.Epoch())
	var sealed []string
	for _, k := range keysUnder(t, bak, backup.ArchivePrefix) {
		if strings.HasSuffix(k, "/") || !strings.Contains(k, ".log/"+ea+"/") {
			continue
		}
		if info, err := bak.Stat(context.Background(), k); err == nil && info.Size == 0 {
			sealed = append(sealed, k)
		}
	}
	if len(sealed) == 0 {
		t.Fatalf("no seal of epoch %d's WAL in the archive", a.srv.Epoch())
	}

	got, rep := restoreAndRead(t, loc, backup.Target{Time: tMid}, "s3://src/r-mid")
	sameState(t, "restored to between T2 and T3", got, h.want(base, func(w ack) bool { return !w.acked.After(tMid) }))
	if got["k"] != "v2" {
		t.Fatalf("k = %q at T2 < t < T3, want v2", got["k"])
	}
	if rep.Base != "b1" {
		t.Fatalf("base %s, want b1", rep.Base)
	}

	got, _ = restoreAndRead(t, loc, backup.Target{Time: tAfter}, "s3://src/r-after")
	sameState(t, "restored to after T3 (across the failover)", got, h.want(base, func(w ack) bool { return !w.acked.After(tAfter) }))
	if _, ok := got["k"]; ok {
		t.Fatal("k is there after its delete")
	}

	got, _ = restoreAndRead(t, loc, backup.Target{Sequence: v1.seq}, "s3://src/r-seq")
	sameState(t, "restored to v1's sequence", got, h.want(base, func(w ack) bool { return w.seq <= v1.seq }))
	if got["k"] != "v1" {
		t.Fatalf("k = %q at v1's sequence", got["k"])
	}

	// Outside the window: refused, naming it.
	_, err := backup.RestoreToPoint(context.Background(), loc, backup.Target{Time: time.Now().Add(time.Hour)}, open(t, "s3://src/r-late"))
	if !errors.Is(err, backup.ErrOutsideWindow) || !strings.Contains(err.Error(), "window, from sequence") {
		t.Fatalf("a target after the archive: %v", err)
	}
	_, err = backup.RestoreToPoint(context.Background(), loc, backup.Target{Sequence: m.Checkpoint.Sequence - 1}, open(t, "s3://src/r-early"))
	if !errors.Is(err, backup.ErrOutsideWindow) || !strings.Contains(err.Error(), "window, from sequence") {
		t.Fatalf("a target before the base: %v", err)
	}
	t.Logf("refused: %v", err)
}

// archivedKeys is every key an index names, with how many indexes name it.
func archivedKeys(t *testing.T, bak objstore.Store) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, k := range keysUnder(t, bak, backup.ArchiveIndexPrefix) {
		r, _, err := bak.Get(context.Background(), k, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		ix, err := backup.Parse[backup.ArchiveIndex](k, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range ix.Objects {
			out[o.Key]++
		}
	}
	return out
}

// logKeys is every log object of a store (its segments, folds, seals).
func logKeys(t *testing.T, s objstore.Store) []string {
	t.Helper()
	var out []string
	for _, k := range keysUnder(t, s, "") {
		if _, _, _, _, ok := layout.ParseSegmentKey(k); ok {
			out = append(out, k)
		}
	}
	return out
}

// An archiver killed and restarted resumes: every log object is archived,
// and indexed exactly once, including one the killed archiver copied but
// had not indexed yet.
func TestArchiverResumes(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p := startPrimary(t, db)
	write(t, p.kv, 0, 2000, "v1")
	ctx := context.Background()
	cfg := backup.ArchiveConfig{Source: src, To: loc, Epoch: p.srv.Epoch()}
	a1, err := backup.OpenArchiver(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a1.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	first := archivedKeys(t, bak)
	// More writes; the killed archiver had copied one new segment and
	// not indexed it.
	write(t, p.kv, 2000, 4000, "v1")
	var unindexed string
	for _, k := range logKeys(t, src) {
		if first[k] == 0 {
			unindexed = k
			break
		}
	}
	if unindexed == "" {
		t.Fatal("no new log object after the writes")
	}
	if _, _, err := objstore.CopyAcross(ctx, src, unindexed, bak, backup.ArchivedKey(unindexed), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a2, err := backup.OpenArchiver(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got := archivedKeys(t, bak)
	for _, k := range logKeys(t, src) {
		if got[k] != 1 {
			t.Errorf("%s is named by %d indexes, want 1", k, got[k])
		}
		if _, err := bak.Stat(ctx, backup.ArchivedKey(k)); err != nil {
			t.Errorf("%s is not in the archive: %v", k, err)
		}
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s is indexed %d times", k, n)
		}
	}
	if st := a2.Status(); st.Gaps != 0 {
		t.Fatalf("%d gaps", st.Gaps)
	}
	t.Logf("%d objects archived by the first archiver, %d in all (one copied by the killed archiver, unindexed: %s)", len(first), len(got), unindexed)

	// Merging the index objects keeps every entry once, and an archiver
	// opened on the merged index has nothing to copy.
	if err := a2.CompactIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(keysUnder(t, bak, backup.ArchiveIndexPrefix)); n != 1 {
		t.Fatalf("%d index objects after the merge", n)
	}
	if merged := archivedKeys(t, bak); !maps.Equal(merged, got) {
		t.Fatalf("the merge changed the entries: %v, want %v", merged, got)
	}
	a3, err := backup.OpenArchiver(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a3.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a3.Status(); st.Objects != 0 {
		t.Fatalf("an archiver opened on the merged index copied %d objects again", st.Objects)
	}
}

// A log version deleted before the archive had it is a gap: recorded in
// the archive, counted, and the window restarts at the next base backup.
func TestArchiveGapReported(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p := startPrimary(t, db)
	checkpoint(t, p.kv, "c1")
	write(t, p.kv, 0, 3000, "v1") // three segments of one WAL
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: loc, Epoch: p.srv.Epoch(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// The trash took a WAL's first segment before the archiver ran (it
	// deletes a log from segment 1 up).
	var wal string
	keys := logKeys(t, src)
	for _, k := range keys {
		name, e, first, _, _ := layout.ParseSegmentKey(k)
		if strings.HasSuffix(name, ".log") && first == 1 && slices.Contains(keys, layout.SegmentKey(name, e, 2)) {
			wal = k
		}
	}
	if wal == "" {
		t.Fatal("no WAL segment 1 in the source")
	}
	if err := src.Delete(ctx, wal); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	gaps, err := backup.ListGaps(ctx, bak)
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 || a.Status().Gaps != 1 || !strings.HasPrefix(wal, gaps[0].Log+"/") {
		t.Fatalf("gaps %+v (status %d) after deleting %s", gaps, a.Status().Gaps, wal)
	}
	t.Logf("gap: %+v", gaps[0])
	// The alerts' series (charts: ShaleArchiveGap, ShaleArchiveLagging):
	// the gap counted, and the window's end at the pass's listing.
	if n := metricValue(t, reg, "shale_backup_archive_gaps_total"); n != 1 {
		t.Errorf("shale_backup_archive_gaps_total %v, want 1", n)
	}
	if got, want := metricValue(t, reg, "shale_backup_archive_caught_up_timestamp_seconds"), float64(a.Status().CaughtUpAt.UnixNano())/1e9; got != want || want < 1 {
		t.Errorf("shale_backup_archive_caught_up_timestamp_seconds %v, want caughtUpAt %v", got, want)
	}
	// A second pass does not report it again.
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if gaps, _ := backup.ListGaps(ctx, bak); len(gaps) != 1 {
		t.Fatalf("%d gaps after a second pass", len(gaps))
	}
	// The window: a base taken before the gap does not start it.
	create(t, src, loc, "b1", "c1")
	_, err = backup.RestoreToPoint(ctx, loc, backup.Target{Time: time.Now()}, open(t, "s3://src/r1"))
	if !errors.Is(err, backup.ErrOutsideWindow) || !strings.Contains(err.Error(), "has a gap detected at") {
		t.Fatalf("a restore with a gap after its only base: %v", err)
	}
	t.Logf("refused: %v", err)
}

// metricValue is the value of a registered counter or gauge.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if m := mf.GetMetric()[0]; m.Counter != nil {
				return m.Counter.GetValue()
			} else if m.Gauge != nil {
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no counter or gauge %s registered", name)
	return 0
}

// zombieWAL stores, in src, segment 1 of a new WAL of epoch e (numbered
// one above e's highest WAL, which no later owner has used) holding one
// write batch at sequence seq: zombie=fenced.
func zombieWAL(t *testing.T, src objstore.Store, e, seq uint64) {
	t.Helper()
	var top uint64
	used := map[uint64]bool{}
	for _, k := range logKeys(t, src) {
		name, ep, _, _, _ := layout.ParseSegmentKey(k)
		num, ok := strings.CutSuffix(name, ".log")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		used[n] = true
		if ep == e {
			top = max(top, n)
		}
	}
	if used[top+1] {
		t.Fatalf("WAL %d is used by the new owner already", top+1)
	}
	batch := binary.LittleEndian.AppendUint64(nil, seq)
	batch = binary.LittleEndian.AppendUint32(batch, 1)
	batch = append(batch, 1) // kTypeValue
	batch = binary.AppendUvarint(batch, 6)
	batch = append(batch, "zombie"...)
	batch = binary.AppendUvarint(batch, 6)
	batch = append(batch, "fenced"...)
	rec := append([]byte{1}, batch...) // kFullType, then the payload
	crc := crc32.Checksum(rec, crc32.MakeTable(crc32.Castagnoli))
	crc = (crc>>15 | crc<<17) + 0xa282ead8
	h := binary.LittleEndian.AppendUint32(nil, crc)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(batch)))
	data := append(append(h, 1), batch...)
	key := layout.SegmentKey(fmt.Sprintf("%06d.log", top+1), e, 1)
	if _, err := src.Put(context.Background(), key, strings.NewReader(string(data)), int64(len(data)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	t.Logf("a deposed owner's late WAL: %s (sequence %d)", key, seq)
}

// The new owner's archiver archives the old owner's logs up to the seals
// its takeover wrote: the old owner's archiver stopped (killed) before
// copying its last writes, and a restore to the new owner's last write
// still holds them.
func TestArchiveContinuesAfterFailover(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p1 := startPrimary(t, db)
	ctx := context.Background()
	a1, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: loc, Epoch: p1.srv.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a1.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, p1.kv, "c1")
	m := create(t, src, loc, "b1", "c1")
	var h history
	h.fill(t, p1.kv, "old", 40) // a1 never copies these: it was killed
	p2 := startArchiving(t, db, loc)
	h.fill(t, p2.kv, "new", 40)
	last := h.writes[len(h.writes)-1]
	waitArchivedPast(t, bak, last.acked)
	got, rep := restoreAndRead(t, loc, backup.Target{Sequence: last.seq}, "s3://src/r1")
	sameState(t, "restored to the new owner's last write", got, h.want(nil, func(ack) bool { return true }))
	if rep.Base != m.ID {
		t.Fatalf("base %s", rep.Base)
	}
}

// outage is a backup store whose PUTs of archived log objects fail after
// the first `after`, until up (the index and status still go through: the
// pass records what it copied).
type outage struct {
	objstore.Store
	after int32
	puts  atomic.Int32
	up    atomic.Bool
}

func (o *outage) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	_, _, _, _, isLog := layout.ParseSegmentKey(strings.TrimPrefix(key, backup.ArchivePrefix))
	if isLog && !o.up.Load() && o.puts.Add(1) > o.after {
		return objstore.ObjectInfo{}, errDown
	}
	return o.Store.Put(ctx, key, r, size, opts)
}

// The backup store down in the middle of a pass: the pass fails; once it
// is back, the next pass archives every log object, and a restore to the
// last write holds every write.
func TestArchiveAfterOutage(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p := startPrimary(t, db)
	ctx := context.Background()
	down := &outage{Store: bak, after: 1 << 30}
	a, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: backup.Location{Store: down, Database: "orders"}, Epoch: p.srv.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	checkpoint(t, p.kv, "c1")
	create(t, src, loc, "b1", "c1")
	var h history
	h.fill(t, p.kv, "w", 60)
	down.puts.Store(0)
	down.after = 20
	if err := a.Pass(ctx); !errors.Is(err, errDown) {
		t.Fatalf("a pass with the store down after 20 puts: %v", err)
	}
	if n := len(archivedKeys(t, bak)); n == 0 {
		t.Fatal("the failed pass indexed nothing it copied")
	}
	down.up.Store(true)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	got := archivedKeys(t, bak)
	for _, k := range logKeys(t, src) {
		if got[k] == 0 {
			t.Errorf("%s is not archived", k)
		}
	}
	if st := a.Status(); st.Gaps != 0 {
		t.Fatalf("%d gaps", st.Gaps)
	}
	last := h.writes[len(h.writes)-1]
	state, _ := restoreAndRead(t, loc, backup.Target{Sequence: last.seq}, "s3://src/r1")
	sameState(t, "restored after the outage", state, h.want(nil, func(ack) bool { return true }))
}

// Archive retention (RFC 0011 step 23a): three bases with writes around
// them; prune drops the oldest (keep 2), and the archive below the new
// window's start goes. Every sequence target in the new window still
// restores to exactly that write (some opened and compared whole, with a
// time target), a target before it is refused naming the window, and the
// pruned WALs are gone from the archive.
func TestArchivePrunedKeepsWindow(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	loc := location(t, bak)
	p := startArchiving(t, db, loc)
	ctx := context.Background()
	waitFor(t, "the archive to start", func() bool { _, err := bak.Stat(ctx, backup.ArchiveStartedKey); return err == nil })
	var h history
	h.fill(t, p.kv, "a", 40)
	checkpoint(t, p.kv, "c1")
	b1 := create(t, src, loc, "b1", "c1")
	h.fill(t, p.kv, "b", 40)
	checkpoint(t, p.kv, "c2")
	b2 := create(t, src, loc, "b2", "c2")
	h.fill(t, p.kv, "c", 40)
	tMid := time.Now()
	after(tMid)
	checkpoint(t, p.kv, "c3")
	create(t, src, loc, "b3", "c3")
	h.fill(t, p.kv, "d", 40)
	waitArchivedPast(t, bak, time.Now())

	// Retention keeps the last 2: b1 goes, the window starts at b2.
	if ids := backup.Expired([]backup.Manifest{b1, b2, {ID: "b3", CompletedAt: time.Now()}}, time.Now(), backup.Policy{KeepLast: 2}); !slices.Equal(ids, []string{"b1"}) {
		t.Fatalf("expired %v", ids)
	}
	if _, err := backup.Delete(ctx, loc, "b1", nil); err != nil {
		t.Fatal(err)
	}
	// The WALs before c2 are finished in the archive once the archiver saw
	// their trash markers (RocksDB deletes a WAL after the flush).
	var dry backup.ArchivePruneReport
	waitFor(t, "a WAL below the window's start to be finished in the archive", func() bool {
		var err error
		dry, err = backup.PruneArchived(ctx, loc, true)
		if err != nil {
			t.Fatal(err)
		}
		return len(dry.Versions) > 0
	})
	before := archivedKeys(t, bak)
	rep, err := backup.PruneArchived(ctx, loc, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pruned %d WAL versions (%d objects, %d bytes) at or below sequence %d (window starts at %s); %d kept", len(rep.Versions), rep.Objects, rep.Bytes, rep.Sequence, rep.Window, rep.Kept)
	if rep.Window != "b2" || rep.Sequence != b2.Checkpoint.Sequence || len(rep.Versions) == 0 {
		t.Fatalf("prune: %+v", rep)
	}
	gone := 0
	for k := range before {
		ref, ok := archivedRefOf(k)
		if !ok || !slices.Contains(rep.Versions, ref) {
			continue
		}
		if _, err := bak.Stat(ctx, backup.ArchivedKey(k)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s of a pruned WAL is still in the archive: %v", k, err)
		}
		gone++
	}
	if gone != rep.Objects {
		t.Fatalf("%d archived objects of the pruned WALs gone, the prune says %d", gone, rep.Objects)
	}
	// Again: nothing more to prune (the record hides what it took).
	if again, err := backup.PruneArchived(ctx, loc, false); err != nil || len(again.Versions) != 0 {
		t.Fatalf("a second prune: %+v %v", again, err)
	}

	// Every sequence target in the window restores up to exactly it.
	var window []ack
	for _, w := range h.writes {
		if w.seq > b2.Checkpoint.Sequence {
			window = append(window, w)
		}
	}
	if len(window) != 80 {
		t.Fatalf("%d writes in the window, want 80", len(window))
	}
	targets := []uint64{b2.Checkpoint.Sequence}
	for _, w := range window {
		targets = append(targets, w.seq)
	}
	for i, seq := range targets {
		into := fmt.Sprintf("s3://src/r-%d", i)
		r, err := backup.RestoreToPoint(ctx, loc, backup.Target{Sequence: seq}, open(t, into))
		if err != nil {
			t.Fatalf("restore to sequence %d (in the window from %d): %v", seq, b2.Checkpoint.Sequence, err)
		}
		if r.Last != seq {
			t.Fatalf("restore to sequence %d replayed to %d", seq, r.Last)
		}
	}
	for _, i := range []int{0, 20, 41, 60, len(targets) - 1} {
		seq := targets[i]
		o := startPrimary(t, fmt.Sprintf("s3://src/r-%d", i))
		sameState(t, fmt.Sprintf("restored to sequence %d", seq), scanAll(t, o.kv), h.want(nil, func(w ack) bool { return w.seq <= seq }))
		o.stop()
	}
	got, _ := restoreAndRead(t, loc, backup.Target{Time: tMid}, "s3://src/r-mid")
	sameState(t, "restored to a time between c's writes and c3", got, h.want(nil, func(w ack) bool { return !w.acked.After(tMid) }))

	// Before the window: refused, naming it.
	_, err = backup.RestoreToPoint(ctx, loc, backup.Target{Sequence: b1.Checkpoint.Sequence + 1}, open(t, "s3://src/r-early"))
	if !errors.Is(err, backup.ErrOutsideWindow) || !strings.Contains(err.Error(), fmt.Sprintf("window, from sequence %d", b2.Checkpoint.Sequence)) {
		t.Fatalf("a target before the new window: %v", err)
	}
	t.Logf("refused: %v", err)

	// The next owner's archiver (a restart, a new epoch) does not copy the
	// pruned WALs again, though the source still holds them (the delete
	// grace), and its index merge drops their entries.
	p.stop()
	q := startArchiving(t, db, loc)
	h.fill(t, q.kv, "e", 5)
	waitArchivedPast(t, bak, time.Now())
	if err := q.srv.Archiver().CompactIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	indexed := archivedKeys(t, bak)
	for k := range before {
		ref, ok := archivedRefOf(k)
		if !ok || !slices.Contains(rep.Versions, ref) {
			continue
		}
		if _, err := bak.Stat(ctx, backup.ArchivedKey(k)); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s of a pruned WAL was archived again by the next owner: %v", k, err)
		}
		if indexed[k] > 0 {
			t.Fatalf("%s of a pruned WAL is still named by an index after the merge", k)
		}
	}
}

// archivedRefOf is the log version of an archived source key.
func archivedRefOf(key string) (layout.VersionRef, bool) {
	if name, e, _, _, ok := layout.ParseSegmentKey(key); ok {
		return layout.VersionRef{Name: name, Epoch: e}, true
	}
	if name, e, ok := layout.ParseTrashKey(key); ok {
		return layout.VersionRef{Name: name, Epoch: e}, true
	}
	return layout.VersionRef{}, false
}

// heldMerge is a backup store whose deletes of archive index objects (a
// merge's last step) wait until released.
type heldMerge struct {
	objstore.Store
	held     chan struct{} // closed when a merge's delete is waiting
	release  chan struct{}
	heldOnce sync.Once
}

func (h *heldMerge) DeleteMany(ctx context.Context, keys []string) error {
	if len(keys) > 0 && strings.HasPrefix(keys[0], backup.ArchiveIndexPrefix) {
		h.heldOnce.Do(func() { close(h.held) })
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.Store.DeleteMany(ctx, keys)
}

// A merge of the archive's index objects runs beside the passes: while
// one is held (its delete waits), new writes are still archived. With the
// merge between passes, the archive stops for as long as a merge takes
// (seconds once the index is large), and the folding overtakes it: the
// e2e step pitr was refused "only as one fold (the archive was behind)".
func TestArchiveMergeDoesNotStopPasses(t *testing.T) {
	minio(t)
	const db = "s3://src/orders"
	src, bak := open(t, db), open(t, "s3://bak/shale/orders")
	p := startPrimary(t, db)
	ctx := context.Background()
	hm := &heldMerge{Store: bak, held: make(chan struct{}), release: make(chan struct{})}
	a, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: backup.Location{Store: hm, Database: "orders"}, Epoch: p.srv.Epoch(), CompactAfter: 3})
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	defer a.Stop()
	released := false
	defer func() {
		if !released {
			close(hm.release)
		}
	}()
	var h history
	for i := 0; ; i++ {
		h.fill(t, p.kv, fmt.Sprintf("w%03d-", i), 5)
		select {
		case <-hm.held:
		case <-time.After(50 * time.Millisecond):
			if i < 1000 {
				continue
			}
			t.Fatal("no merge of the archive's index objects started")
		}
		break
	}
	// A merge waits in its delete: writes go on and reach the archive.
	before := a.Status().Objects
	h.fill(t, p.kv, "during-", 20)
	want := map[string]bool{}
	for _, k := range logKeys(t, src) {
		want[k] = true
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := archivedKeys(t, bak)
		missing := 0
		for k := range want {
			if got[k] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while a merge waits, %d of %d log objects are not archived (%d objects copied before it, %d now)", missing, len(want), before, a.Status().Objects)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(hm.release)
	released = true
	a.Stop()
	// Every entry once the merge finished (readers take an entry named
	// twice once): a restore to the last write holds them all.
	loc := location(t, bak)
	checkpoint(t, p.kv, "c1")
	create(t, src, loc, "b1", "c1")
	h.fill(t, p.kv, "after-", 5)
	a2, err := backup.OpenArchiver(ctx, backup.ArchiveConfig{Source: src, To: loc, Epoch: p.srv.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	last := h.writes[len(h.writes)-1]
	state, _ := restoreAndRead(t, loc, backup.Target{Sequence: last.seq}, "s3://src/r1")
	sameState(t, "restored after a merge beside the passes", state, h.want(nil, func(ack) bool { return true }))
}
