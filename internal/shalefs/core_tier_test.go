package shalefs

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/miniotest"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

func TestTierFor(t *testing.T) {
	cold, hot := rocksshim.TemperatureCold, rocksshim.TemperatureUnknown
	for _, tc := range []struct {
		name     string
		temp     rocksshim.Temperature
		haveCold bool
		want     Tier
	}{
		{"000012.sst", cold, true, TierCold},
		{"000012.sst", hot, true, TierHot},
		{"000012.sst", rocksshim.TemperatureWarm, true, TierHot}, // only cold goes cold
		{"000012.sst", cold, false, TierHot},                     // no cold tier: everything hot
		{"000012.blob", cold, true, TierCold},
		{"000011.log", cold, true, TierHot}, // logs never leave the hot tier
		{"MANIFEST-000005", cold, true, TierHot},
		{"OPTIONS-000007", cold, true, TierHot},
	} {
		if got := TierFor(tc.name, tc.temp, tc.haveCold); got != tc.want {
			t.Errorf("TierFor(%s, %s, %v) = %s, want %s", tc.name, tc.temp, tc.haveCold, got, tc.want)
		}
	}
}

func TestMergeColdTables(t *testing.T) {
	files := map[string]*file{
		"000010.sst":      {kind: layout.KindTable, epoch: 2, size: 10},
		"000011.sst":      {kind: layout.KindTable, epoch: 3, size: 11},
		"MANIFEST-000005": {kind: layout.KindLog, epoch: 3},
	}
	cold := []objstore.ObjectInfo{
		{Key: "000010.sst." + layout.FormatNumber(3), Size: 100}, // a newer version, cold
		{Key: "000011.sst." + layout.FormatNumber(2), Size: 110}, // an older one: the hot one stays
		{Key: "000012.sst." + layout.FormatNumber(1), Size: 120}, // only in the cold tier
		{Key: "000013.sst." + layout.FormatNumber(1), Size: 130}, // trashed
		{Key: "000011.sst." + layout.FormatNumber(3), Size: 999}, // the same version as the hot one: hot wins
		{Key: "_shale/"}, // the marker's directory
		{Key: "OPTIONS-000007." + layout.FormatNumber(1)}, // never cold; ignored
	}
	mergeColdTables(files, cold, map[layout.VersionRef]bool{{Name: "000013.sst", Epoch: 1}: true})
	want := map[string]string{
		"000010.sst": "e3 cold 100",
		"000011.sst": "e3 hot 11",
		"000012.sst": "e1 cold 120",
	}
	for name, w := range want {
		st := files[name]
		if st == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if got := fmt.Sprintf("e%d %s %d", st.epoch, st.tier, st.size); got != w {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	if _, ok := files["000013.sst"]; ok {
		t.Error("a trashed cold table was listed")
	}
	if _, ok := files["OPTIONS-000007"]; ok {
		t.Error("an object in the cold store other than a table was listed")
	}
}

// twoTiers starts two MinIO servers, one per tier (the cold one stands for
// HDD-class storage), and returns a store on each.
func twoTiers(t *testing.T) (hot, cold objstore.Store) {
	hot, cold, _ = twoTierServers(t)
	return hot, cold
}

// storeAt opens s3://BUCKET/PREFIX on srv.
func storeAt(t *testing.T, srv *miniotest.Server, url string) objstore.Store {
	t.Helper()
	s, err := objstore.OpenS3(url, srv.S3Config())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func twoTierServers(t *testing.T) (hot, cold objstore.Store, srv [2]*miniotest.Server) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range srv {
		wg.Add(1)
		go func() { defer wg.Done(); srv[i] = miniotest.Start(t) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	srv[0].CreateBucket(t, "hot")
	srv[1].CreateBucket(t, "cold")
	return storeAt(t, srv[0], "s3://hot/db"), storeAt(t, srv[1], "s3://cold/db"), srv
}

func openTiered(t *testing.T, hot, cold objstore.Store, cache string, observe func(Request)) *Owner {
	t.Helper()
	f, err := Open(context.Background(), Config{Store: hot, Cold: cold, CacheDir: cache, Lease: 200 * time.Millisecond, DeleteGrace: 500 * time.Millisecond, Observe: observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// tableObjects lists the table objects of a store.
func tableObjects(t *testing.T, s objstore.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := s.ListDir(context.Background(), "", func(o objstore.ObjectInfo) error {
		if name, _, ok := layout.ParseObjectKey(o.Key); ok && layout.KindOf(name) == layout.KindTable {
			out[o.Key] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tierCounter counts table gets per tier.
type tierCounter struct {
	mu   sync.Mutex
	gets map[string]int
}

func (c *tierCounter) observe(r Request) {
	if r.Op == "get" && r.FileType == "sst" {
		c.mu.Lock()
		c.gets[r.Tier]++
		c.mu.Unlock()
	}
}

func (c *tierCounter) get(tier string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets[tier]
}

// The tests on real MinIO with two stores: with a short cold-after,
// data older than it ends in the cold store after compaction and recent
// data stays hot; every key reads back from the primary and a secondary;
// a primary restarted on an empty cache keeps placement and reads; trashed
// cold tables leave the cold store.
func TestTieredPlacementOnTwoStores(t *testing.T) {
	hot, cold := twoTiers(t)
	ctx := context.Background()
	root := t.TempDir()
	cache := filepath.Join(root, "primary")
	f := openTiered(t, hot, cold, cache, nil)

	const coldAfter = 3 * time.Second
	o := engine.DefaultOptions()
	o.FileSystem = f
	o.ColdAfter = coldAfter
	d, err := engine.Open(cache, o)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	f.Serving()

	const n = 1000
	want := map[string]string{}
	put := func(prefix string) {
		for i := 0; i < n; i++ {
			k, v := fmt.Sprintf("k%04d-%s", i, prefix), fmt.Sprintf("%s-%d", prefix, i)
			if err := d.Put([]byte(k), []byte(v), i == n-1); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// As in engine.TestTieredPlacement: RocksDB ages keys by samples it
	// takes once a second and stores in flushed tables.
	put("old")
	oldWritten := time.Now()
	waitFor("a sample after the old keys", 5*time.Second, func() bool { return time.Since(oldWritten) > 1200*time.Millisecond })
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; time.Since(oldWritten) < coldAfter+1200*time.Millisecond; i++ {
		d.Put([]byte("trickle"), []byte(fmt.Sprint(i)), false)
		time.Sleep(50 * time.Millisecond)
	}
	put("new")
	newWritten := time.Now()
	waitFor("a sample after the new keys", 5*time.Second, func() bool { return time.Since(newWritten) > 1200*time.Millisecond })
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.Compact(nil, nil); err != nil {
		t.Fatal(err)
	}
	if time.Since(newWritten) >= coldAfter {
		t.Skip("the machine is too slow for a 3s cold-after: the recent keys aged before the compaction")
	}

	// Where each live table is: cold exactly when RocksDB wrote it cold,
	// and in exactly one store.
	checkPlacement := func(f *Owner, d *engine.DB) (coldKeys, hotKeys uint64) {
		t.Helper()
		hotObjs, coldObjs := tableObjects(t, hot), tableObjects(t, cold)
		for _, lf := range d.LiveFiles() {
			f.mu.Lock()
			st := f.files[lf.Name]
			f.mu.Unlock()
			if st == nil {
				t.Fatalf("live table %s is not in the FS listing", lf.Name)
			}
			key := layout.ObjectKey(lf.Name, st.epoch)
			inHot, inCold := hotObjs[key], coldObjs[key]
			if inHot == inCold {
				t.Fatalf("table %s: in the hot store %v, in the cold store %v; want exactly one", key, inHot, inCold)
			}
			if inCold != (st.tier == TierCold) {
				t.Fatalf("table %s is in the %s store but recorded %s", key, map[bool]string{true: "cold", false: "hot"}[inCold], st.tier)
			}
			if lf.Temperature != rocksshim.TemperatureUnknown && (lf.Temperature == rocksshim.TemperatureCold) != inCold {
				t.Fatalf("table %s: RocksDB wrote it %s, the FS put it in the %s tier", lf.Name, lf.Temperature, st.tier)
			}
			if inCold {
				coldKeys += lf.Entries
			} else {
				hotKeys += lf.Entries
			}
		}
		return coldKeys, hotKeys
	}
	coldKeys, hotKeys := checkPlacement(f, d)
	// The trickle key is on either side, or absent when a loaded machine
	// spent the whole wait flushing.
	total := coldKeys + hotKeys
	if coldKeys < n || coldKeys > n+1 || hotKeys < n || hotKeys > n+1 || total < 2*n || total > 2*n+1 {
		t.Fatalf("after the compaction: %d keys in the cold store, %d in the hot one; want the %d old ones cold and the %d new ones hot", coldKeys, hotKeys, n, n)
	}
	u := f.TierUsage()
	if u[TierCold].Files == 0 || u[TierHot].Files == 0 {
		t.Fatalf("TierUsage %+v: want both tiers in use", u)
	}
	// What `shale admin tiers` reports, from the stores alone.
	ts, err := ReadTierStatus(ctx, hot, cold)
	if err != nil {
		t.Fatal(err)
	}
	for i, tu := range u {
		if r := ts.Tiers[i]; r.Files != tu.Files || r.Bytes != tu.Bytes {
			t.Fatalf("ReadTierStatus %+v, the primary's FS %+v", ts.Tiers, u)
		}
	}
	if ts.Tiers[1].Location != cold.URL() || ts.ColdFraction <= 0 || ts.ColdFraction >= 1 {
		t.Fatalf("ReadTierStatus %+v", ts)
	}
	// The oldest hot data is the recent keys (or the trickle key's last
	// version), written after the old keys, which are cold.
	if ts.OldestHotData.IsZero() || !ts.OldestHotData.After(oldWritten.Truncate(time.Second)) || ts.OldestHotData.After(time.Now()) {
		t.Fatalf("oldest hot data %v (%s); the old keys, written at %v, are cold", ts.OldestHotData, ts.OldestHotTable, oldWritten)
	}
	readAll := func(d *engine.DB, who string) {
		t.Helper()
		for k, v := range want {
			got, ok, err := d.Get([]byte(k))
			if err != nil || !ok || string(got) != v {
				t.Fatalf("%s: %s = %q, %v, %v; want %q", who, k, got, ok, err, v)
			}
		}
	}
	readAll(d, "primary")

	// A secondary on a reader of both stores reads every key.
	rc := &tierCounter{gets: map[string]int{}}
	rcache := filepath.Join(root, "reader")
	r, err := OpenReader(ctx, Config{Store: hot, Cold: cold, CacheDir: rcache, ReaderTTL: time.Minute, Observe: rc.observe})
	if err != nil {
		t.Fatal(err)
	}
	sec := openSecondary(t, r, rcache)
	catchUp(t, r, sec, want)
	if rc.get("cold") == 0 {
		t.Fatal("the secondary read every key without reading the cold store")
	}
	sec.Close()
	r.Stop()

	// Without a manual compaction, the age-out pass moves the new keys
	// cold once they are old; the cold table they replace leaves the cold
	// store after the delete grace.
	waitFor("the recent keys moving cold", 30*time.Second, func() bool {
		c, h := checkPlacement(f, d)
		return c == total && h == 0
	})
	waitFor("the replaced cold tables leaving the cold store", 30*time.Second, func() bool {
		live := map[string]bool{}
		for _, lf := range d.LiveFiles() {
			live[lf.Name] = true
		}
		for key := range tableObjects(t, cold) {
			if name, _, _ := layout.ParseObjectKey(key); !live[name] {
				return false
			}
		}
		return true
	})
	readAll(d, "primary after age-out")
	d.Close()
	closed = true
	f.Stop()

	// A new primary on an empty cache: same placement, every key, read
	// from the cold store.
	pc := &tierCounter{gets: map[string]int{}}
	cache2 := filepath.Join(root, "primary2")
	f2 := openTiered(t, hot, cold, cache2, pc.observe)
	o.FileSystem = f2
	d2, err := engine.Open(cache2, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	f2.Serving()
	if c, h := checkPlacement(f2, d2); c != total || h != 0 {
		t.Fatalf("after a restart on an empty cache: %d keys cold, %d hot; want all %d cold", c, h, total)
	}
	readAll(d2, "restarted primary")
	if pc.get("cold") == 0 || pc.get("hot") != 0 {
		t.Fatalf("the restarted primary read %d times from the cold store and %d from the hot one; every table is cold", pc.get("cold"), pc.get("hot"))
	}
}

// A database with a cold tier refuses to open without it or with a cold
// location that is another database's, and a reader refuses likewise.
func TestTierRecordRefusals(t *testing.T) {
	hot, cold, srv := twoTierServers(t)
	ctx := context.Background()
	root := t.TempDir()
	f := openTiered(t, hot, cold, filepath.Join(root, "a"), nil)
	f.Stop()
	other, third := storeAt(t, srv[0], "s3://hot/other"), storeAt(t, srv[0], "s3://hot/third")

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no cold tier", Config{Store: hot}, "pass --cold-db s3://cold/db"},
		{"another database's cold tier", Config{Store: other, Cold: cold}, "cold tier of another database"},
		{"a used location", Config{Store: third, Cold: hot}, "holds objects but no Shale cold tier"},
	} {
		tc.cfg.CacheDir = filepath.Join(root, tc.name)
		tc.cfg.Lease = 100 * time.Millisecond
		_, err := Open(ctx, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := OpenReader(ctx, Config{Store: hot, CacheDir: filepath.Join(root, "reader")}); err == nil || !strings.Contains(err.Error(), "--cold-db") {
		t.Errorf("reader without the cold tier: %v, want an error naming --cold-db", err)
	}
	// Nothing of the refused opens claimed an epoch.
	st, err := ReadFenceStatus(ctx, hot)
	if err != nil || st.Epoch != 1 {
		t.Fatalf("fence status %+v, %v: want epoch 1 only", st, err)
	}
}

func TestCheckTierLocations(t *testing.T) {
	for _, tc := range []struct {
		hot, cold string
		same      bool
		bad       bool
	}{
		{"s3://b/db", "s3://c/db", true, false},
		{"s3://b/db", "s3://b/db-cold", true, false}, // a sibling prefix
		{"s3://b/db", "s3://b/db", true, true},
		{"s3://b/db", "s3://b/db/cold", true, true}, // inside the database
		{"s3://b/db", "s3://b", true, true},         // around it
		{"s3://b/db", "s3://b/db", false, false},    // another server
		{"file:///srv/db", "file:///srv/db/cold", true, true},
		{"file:///srv/db", "file:///srv/cold", true, false},
	} {
		err := CheckTierLocations(tc.hot, tc.cold, tc.same)
		if (err != nil) != tc.bad {
			t.Errorf("CheckTierLocations(%s, %s, %v) = %v, want error %v", tc.hot, tc.cold, tc.same, err, tc.bad)
		}
	}
}

func TestTablePropertiesRefusesGarbage(t *testing.T) {
	if _, err := parseFooter(make([]byte, footerLen)); err == nil {
		t.Error("a footer of zeros parsed")
	}
	for _, b := range [][]byte{nil, {1, 2}, {0, 0, 0, 0}, {5, 0, 0, 0, 1, 0, 0, 0}, {9, 9, 9, 0, 0, 0, 0, 1, 0, 0, 0}} {
		if _, err := parseBlock(b); err == nil {
			t.Errorf("block %v parsed", b)
		}
	}
	// A block of two entries, the second sharing a prefix.
	blk := []byte{0, 3, 1, 'a', 'b', 'c', 'x', 2, 1, 1, 'd', 'y', 0, 0, 0, 0, 1, 0, 0, 0}
	got, err := parseBlock(blk)
	if err != nil || string(got["abc"]) != "x" || string(got["abd"]) != "y" || len(got) != 2 {
		t.Fatalf("parseBlock = %q, %v", got, err)
	}
}

// A compaction output written by another process into either store is
// installed in the store that holds it, and a reader finds it there.
func TestInstallTableKeepsItsTier(t *testing.T) {
	hot, cold := twoTiers(t)
	ctx := context.Background()
	root := t.TempDir()
	f := openTiered(t, hot, cold, filepath.Join(root, "p"), nil)
	put := func(s objstore.Store, key, body string) {
		if _, err := s.Put(ctx, key, strings.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(cold, "_shale/compactions/job-1/000012.sst", "cold output")
	put(hot, "_shale/compactions/job-2/000013.sst", "hot output")
	for _, tc := range []struct {
		src, name string
		want      Tier
		store     objstore.Store
	}{
		{"_shale/compactions/job-1/000012.sst", "000040.sst", TierCold, cold},
		{"_shale/compactions/job-2/000013.sst", "000041.sst", TierHot, hot},
	} {
		got, err := f.InstallTable(ctx, tc.src, tc.name)
		if err != nil || got != tc.want {
			t.Fatalf("InstallTable(%s) = %s, %v; want %s", tc.src, got, err, tc.want)
		}
		if _, err := tc.store.Stat(ctx, layout.ObjectKey(tc.name, f.Epoch())); err != nil {
			t.Fatalf("%s not in the %s store: %v", tc.name, tc.want, err)
		}
		if f.tierOf(tc.name) != tc.want {
			t.Fatalf("%s recorded %s", tc.name, f.tierOf(tc.name))
		}
	}
	if _, err := f.InstallTable(ctx, "_shale/compactions/job-3/000014.sst", "000042.sst"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("installing a missing output: %v", err)
	}
	// A reader (a secondary, or a primary on an empty cache) finds each
	// where it is. No RocksDB ran here, so there is no CURRENT to open a
	// reader with: list the stores as one does.
	files, err := listAsReader(ctx, hot, cold)
	if err != nil {
		t.Fatal(err)
	}
	if files["000040.sst"] == nil || files["000040.sst"].tier != TierCold || files["000041.sst"] == nil || files["000041.sst"].tier != TierHot {
		t.Fatalf("listing: %+v", files)
	}
}

// listAsReader lists a database as a reader does, without opening one.
func listAsReader(ctx context.Context, hot, cold objstore.Store) (map[string]*file, error) {
	files, _, err := listDatabase(ctx, hot, cold)
	return files, err
}

func TestDataTime(t *testing.T) {
	uv := func(xs ...uint64) []byte {
		var b []byte
		for _, x := range xs {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		props map[string][]byte
		want  int64
	}{
		// Two samples, delta-encoded: (100, 1000), (150, 1010).
		{"seqno map", map[string][]byte{propSeqnoTime: uv(2, 100, 1000, 50, 10), propCreated: uv(500)}, 1000},
		{"creation time without a map", map[string][]byte{propCreated: uv(500)}, 500},
		{"empty map", map[string][]byte{propSeqnoTime: uv(0), propCreated: uv(500)}, 500},
		{"truncated map", map[string][]byte{propSeqnoTime: uv(1, 100), propCreated: uv(500)}, 500},
		{"nothing", map[string][]byte{}, 0},
	} {
		got := dataTime(tc.props)
		if tc.want == 0 && !got.IsZero() || tc.want != 0 && got.Unix() != tc.want {
			t.Errorf("%s: dataTime = %v, want unix %d", tc.name, got, tc.want)
		}
	}
}

// A reader given the cold tier before the database recorded one (its
// primary not yet started with --cold-db) starts without it and takes it
// into use at the first refresh after the primary records it.
func TestReaderAdoptsColdTierLater(t *testing.T) {
	root := t.TempDir()
	hot, err := objstore.Open("file://" + filepath.Join(root, "hot"))
	if err != nil {
		t.Fatal(err)
	}
	cold, err := objstore.Open("file://" + filepath.Join(root, "cold"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c1 := filepath.Join(root, "p1")
	f1 := openFS(t, hot, 1, c1)
	d := openDB(t, f1, c1)
	if err := d.Put([]byte("k"), []byte("v"), true); err != nil {
		t.Fatal(err)
	}
	d.Close()
	f1.Stop()

	r, err := OpenReader(ctx, Config{Store: hot, Cold: cold, CacheDir: filepath.Join(root, "r")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.HasColdTier() {
		t.Fatal("the reader uses a cold tier the database has not recorded")
	}
	f2 := openTiered(t, hot, cold, filepath.Join(root, "p2"), nil)
	if !f2.HasColdTier() {
		t.Fatal("the primary started with the cold tier does not use it")
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if !r.HasColdTier() {
		t.Fatal("the reader did not take the recorded cold tier into use")
	}
}
