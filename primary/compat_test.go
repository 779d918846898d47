package primary

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// A database written by an older RocksDB must open with the current one:
// testdata/rocksdb-7.8.3 is a file:// store that TestWriteCompatFixture
// wrote with Shale's RocksDB 7.8.3 build (Debian bookworm's librocksdb),
// before the move to 9.11.2. It holds flushed tables (overwrites and
// deletions across them) and a WAL tail that was never flushed.

const compatFixture = "testdata/rocksdb-7.8.3"

// compatModel is what the fixture holds: key i's value, or false when the
// key is absent (deleted or never written).
func compatModel(i int) (string, bool) {
	switch {
	case i < 50:
		return fmt.Sprintf("wal-%d", i), true // overwritten in the WAL tail
	case i < 100 && i%10 == 0:
		return "", false // deleted, flushed
	case i >= 100 && i < 300:
		return fmt.Sprintf("flushed-2-%d", i), true
	case i < 100:
		return fmt.Sprintf("flushed-1-%d", i), true
	case i < 400:
		return fmt.Sprintf("wal-%d", i), true // only in the WAL tail
	}
	return "", false
}

const compatKeys = 400

func compatKey(i int) string { return fmt.Sprintf("key-%04d", i) }

// TestWriteCompatFixture regenerates the fixture; it only means something
// with the RocksDB build it is named after, so it runs only when asked:
// SHALE_WRITE_COMPAT_FIXTURE=1 go test -run TestWriteCompatFixture ./primary/
func TestWriteCompatFixture(t *testing.T) {
	if os.Getenv("SHALE_WRITE_COMPAT_FIXTURE") == "" {
		t.Skip("set SHALE_WRITE_COMPAT_FIXTURE=1 to rewrite " + compatFixture + " (with the RocksDB build it is named after)")
	}
	dir, err := filepath.Abs(compatFixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s, err := Start(Config{
		DB: "file://" + dir, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "cache"), Lease: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := connect(t, s)
	flush := func() {
		if _, err := f.kv.Flush(f.ctx, &kvv1.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// Batches keep the fixture small: a synced write is one WAL segment
	// object.
	var batch []*kvv1.Mutation
	write := func() {
		if _, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: batch, Sync: true}); err != nil {
			t.Fatal(err)
		}
		batch = nil
	}
	for i := 0; i < 200; i++ {
		batch = append(batch, mutPut(compatKey(i), fmt.Sprintf("flushed-1-%d", i)))
	}
	write()
	flush()
	for i := 100; i < 300; i++ {
		batch = append(batch, mutPut(compatKey(i), fmt.Sprintf("flushed-2-%d", i)))
	}
	for i := 0; i < 100; i += 10 {
		batch = append(batch, &kvv1.Mutation{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte(compatKey(i))}}})
	}
	write()
	flush()
	// The WAL tail: synced writes after the last flush. RocksDB does not
	// flush at close when writes go through the WAL.
	for i := 0; i < 50; i++ {
		batch = append(batch, mutPut(compatKey(i), fmt.Sprintf("wal-%d", i)))
	}
	write()
	for i := 300; i < 400; i++ {
		batch = append(batch, mutPut(compatKey(i), fmt.Sprintf("wal-%d", i)))
	}
	write()
	checkCompatModel(t, f)
	s.Stop(5 * time.Second)
}

// TestOpensCompatFixture: a copy of the 7.8.3 fixture opens and every key
// reads as written: flushed tables, deletions and the WAL tail.
func TestOpensCompatFixture(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	if err := os.CopyFS(dir, os.DirFS(compatFixture)); err != nil {
		t.Fatal(err)
	}
	var files int
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if files == 0 {
		t.Fatalf("the fixture %s is empty", compatFixture)
	}
	s, err := Start(Config{
		DB: "file://" + dir, Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions(),
		Storage: shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "cache"), Lease: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatalf("opening the database RocksDB 7.8.3 wrote: %v", err)
	}
	t.Cleanup(func() { s.Stop(5 * time.Second) })
	f := connect(t, s)
	checkCompatModel(t, f)
	// And it takes writes.
	f.put(t, "after-upgrade", "v")
	if v, ok := f.get(t, "after-upgrade"); !ok || v != "v" {
		t.Fatalf("after-upgrade = %q %v", v, ok)
	}
}

func checkCompatModel(t *testing.T, f *fixture) {
	t.Helper()
	want := 0
	for i := 0; i < compatKeys; i++ {
		v, ok := f.get(t, compatKey(i))
		wv, wok := compatModel(i)
		if ok != wok || v != wv {
			t.Fatalf("%s = %q (found %v), want %q (found %v)", compatKey(i), v, ok, wv, wok)
		}
		if wok {
			want++
		}
	}
	pairs, _ := f.scan(t, &kvv1.ScanRequest{})
	if len(pairs) != want {
		t.Fatalf("a scan finds %d pairs, want %d", len(pairs), want)
	}
}

func connect(t *testing.T, s *Server) *fixture {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{srv: s, conn: conn, kv: kvv1.NewKVClient(conn), ctx: ctx}
}
