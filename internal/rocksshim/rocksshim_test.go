package rocksshim

import (
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

func TestRocksDBVersion(t *testing.T) {
	if v := RocksDBVersion(); v != "9.11.2" {
		t.Fatalf("linked RocksDB is %q, Shale is built for 9.11.2", v)
	}
}

// Statistics installed through the shim are the ones the DB updates: writes
// and reads through grocksdb show up in the tickers, and in the histograms
// when they are on; without them every ticker still counts.
func TestStatisticsSeeDBActivity(t *testing.T) {
	for _, histograms := range []bool{true, false} {
		t.Run(fmt.Sprintf("histograms=%v", histograms), func(t *testing.T) { testStatistics(t, histograms) })
	}
}

func testStatistics(t *testing.T, histograms bool) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	stats := AttachStatistics(opts, histograms)
	defer stats.Close()

	db, err := grocksdb.OpenDb(opts, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	const n = 137
	for i := 0; i < n; i++ {
		if err := db.Put(wo, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		v, err := db.Get(ro, []byte("k001"))
		if err != nil {
			t.Fatal(err)
		}
		v.Free()
	}

	tickers := map[string]uint64{}
	for _, tk := range stats.Tickers() {
		tickers[tk.Name] = tk.Value
	}
	if len(tickers) < 100 {
		t.Fatalf("only %d tickers", len(tickers))
	}
	if got := tickers["rocksdb.number.keys.written"]; got != n {
		t.Fatalf("rocksdb.number.keys.written = %d, want %d", got, n)
	}
	if got := tickers["rocksdb.number.keys.read"]; got != 10 {
		t.Fatalf("rocksdb.number.keys.read = %d, want 10", got)
	}
	if !histograms {
		if h := stats.Histograms(); h != nil {
			t.Fatalf("histograms off, yet %d histograms", len(h))
		}
	}
	var gets Histogram
	for _, h := range stats.readHistograms() { // what RocksDB recorded
		if h.Name == "rocksdb.db.get.micros" {
			gets = h
		}
	}
	if !histograms {
		if gets.Count != 0 {
			t.Fatalf("histograms off, yet RocksDB timed %d gets", gets.Count)
		}
		return
	}
	if gets.Count != 10 {
		t.Fatalf("rocksdb.db.get.micros count = %d, want 10", gets.Count)
	}
}
