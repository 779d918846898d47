package shalefs

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// A primary told the database exists (Config.Existing, the operator's
// --existing once a database was ready) refuses a location that does not
// hold it, before claiming or writing anything there: after an
// ObjectStore's endpoint, region, bucket or prefix changed, the next
// primary must not start an empty database while the old primary, on the
// old location, is never fenced.
func TestExistingRefusesLocationWithoutDatabase(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		ctx := context.Background()
		open := func(url string) objstore.Store {
			s, err := objstore.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		old := open(loc.NewURL(t))
		cache := filepath.Join(t.TempDir(), "a")
		f := openFS(t, old, 1, cache)
		d := openDB(t, f, cache)
		if err := d.Put([]byte("k"), []byte("v"), true); err != nil {
			t.Fatal(err)
		}
		d.Close()
		f.Stop()

		// Claims but no CURRENT (an owner that never opened RocksDB).
		claimsOnly := open(loc.NewURL(t))
		openFS(t, claimsOnly, 1, filepath.Join(t.TempDir(), "c")).Stop()

		for _, tc := range []struct {
			name  string
			store objstore.Store
			want  string
			epoch uint64 // the highest epoch there, unchanged by the refusal
		}{
			{"empty location", open(loc.NewURL(t)), "holds no database", 0},
			{"claims but no CURRENT", claimsOnly, "no CURRENT", 1},
		} {
			before := allKeys(t, tc.store)
			_, err := Open(ctx, Config{Store: tc.store, CacheDir: filepath.Join(t.TempDir(), "x"), Epoch: 2, Existing: true, Lease: 100 * time.Millisecond})
			if err == nil {
				t.Fatalf("%s: Open with Existing succeeded: a new, empty database replaced the one that exists elsewhere", tc.name)
			}
			if !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.store.URL()) {
				t.Errorf("%s: Open = %v; want ErrNoDatabase naming %s and %q", tc.name, err, tc.store.URL(), tc.want)
			}
			if after := allKeys(t, tc.store); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Errorf("%s: the refused open wrote %v (before: %v)", tc.name, after, before)
			}
			if st, _ := ReadFenceStatus(ctx, tc.store); st.Epoch != tc.epoch {
				t.Errorf("%s: epoch %d after the refused open, want %d", tc.name, st.Epoch, tc.epoch)
			}
		}

		// The database's own location opens with Existing.
		cache2 := filepath.Join(t.TempDir(), "b")
		f2, err := Open(ctx, Config{Store: old, CacheDir: cache2, Epoch: 2, Existing: true, Lease: 100 * time.Millisecond, DeleteGrace: time.Hour})
		if err != nil {
			t.Fatalf("Open with Existing on the database's location: %v", err)
		}
		t.Cleanup(f2.Stop)
		d2 := openDB(t, f2, cache2)
		defer d2.Close()
		if v, ok, err := d2.Get([]byte("k")); err != nil || !ok || string(v) != "v" {
			t.Fatalf("k = %q %v %v, want v", v, ok, err)
		}
	})
}

func TestCheckExisting(t *testing.T) {
	for _, tc := range []struct {
		name           string
		existing       bool
		current        bool
		epochs         []uint64
		err            string
		wantNoDatabase bool
	}{
		{"new database", false, false, nil, "", false},
		{"not told it exists", false, true, []uint64{1}, "", false},
		{"exists", true, true, []uint64{1, 2}, "", false},
		{"empty location", true, false, nil, "holds no database", true},
		{"claims, no CURRENT", true, false, []uint64{3}, "no CURRENT", true},
		{"CURRENT, no claim", true, true, nil, "no epoch claim", true},
	} {
		err := checkExisting("s3://b/db", tc.existing, tc.current, tc.epochs)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v, want nil", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "s3://b/db") || errors.Is(err, ErrNoDatabase) != tc.wantNoDatabase {
			t.Errorf("%s: %v, want ErrNoDatabase naming s3://b/db and %q", tc.name, err, tc.err)
		}
	}
}

// A primary given a new, empty cold location for a database whose cold
// tier was paired with another one refuses before claiming its epoch: the
// live primary is not deposed, and nothing is written in either store.
// Before, the check took the new location as a pairing interrupted by a
// crash, marked it, claimed the epoch (deposing the live primary) and
// failed only when RocksDB found its cold tables missing.
func TestMovedColdTierRefusedBeforeClaim(t *testing.T) {
	hot, cold, srv := twoTierServers(t)
	ctx := context.Background()
	root := t.TempDir()
	live := openTiered(t, hot, cold, filepath.Join(root, "live"), nil)

	moved := storeAt(t, srv[1], "s3://cold/moved")
	hotBefore, coldBefore := allKeys(t, hot), allKeys(t, moved)
	_, err := Open(ctx, Config{Store: hot, Cold: moved, CacheDir: filepath.Join(root, "next"), Lease: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("Open with a moved cold tier succeeded")
	}
	if !strings.Contains(err.Error(), "s3://cold/db") || !strings.Contains(err.Error(), "--cold-db") {
		t.Errorf("Open = %v; want an error naming --cold-db and the recorded cold location s3://cold/db", err)
	}
	if st, _ := ReadFenceStatus(ctx, hot); st.Epoch != 1 {
		t.Errorf("epoch %d after the refused open, want 1: the live primary was deposed", st.Epoch)
	}
	if err := live.confirm(ctx, ActBackground); err != nil {
		t.Errorf("the live primary: %v", err)
	}
	if got := allKeys(t, hot); strings.Join(got, ",") != strings.Join(hotBefore, ",") {
		t.Errorf("the refused open wrote in the hot store: %v, before %v", got, hotBefore)
	}
	if got := allKeys(t, moved); strings.Join(got, ",") != strings.Join(coldBefore, ",") {
		t.Errorf("the refused open wrote in the new cold location: %v", got)
	}
}

// Nothing is written before the epoch is claimed, cold tier records
// included: the first write of an open, in either store, is its claim.
// A pairing interrupted after the record (no marker yet) is finished by
// the next owner.
func TestOpenWritesNothingBeforeItsClaim(t *testing.T) {
	hotRaw, coldRaw := twoTiers(t)
	var mu sync.Mutex
	var puts []string
	note := func(prefix string) func(string, int64, objstore.PutOptions) error {
		return func(key string, _ int64, _ objstore.PutOptions) error {
			mu.Lock()
			puts = append(puts, prefix+key)
			mu.Unlock()
			return nil
		}
	}
	hot := &storetest.Hooked{Store: hotRaw, BeforePut: note("hot:")}
	cold := &storetest.Hooked{Store: coldRaw, BeforePut: note("cold:")}
	f := openTiered(t, hot, cold, filepath.Join(t.TempDir(), "a"), nil)
	f.Stop()
	mu.Lock()
	first := puts
	mu.Unlock()
	if len(first) == 0 || !strings.HasPrefix(first[0], "hot:"+layout.EpochPrefix) {
		t.Fatalf("puts of a new tiered database's open: %v; want its epoch claim first", first)
	}

	// Interrupted pairing: the record, no marker, no pairing note.
	ctx := context.Background()
	for _, k := range []string{layout.ColdMarkerKey, layout.TiersPairedKey} {
		for _, s := range []objstore.Store{hotRaw, coldRaw} {
			if err := s.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	puts = nil
	mu.Unlock()
	f2 := openTiered(t, hot, cold, filepath.Join(t.TempDir(), "b"), nil)
	f2.Stop()
	mu.Lock()
	second := puts
	mu.Unlock()
	if len(second) == 0 || !strings.HasPrefix(second[0], "hot:"+layout.EpochPrefix) {
		t.Errorf("puts of the open that finished the pairing: %v; want its epoch claim first", second)
	}
	if m, err := readColdMarker(ctx, coldRaw); err != nil || m == nil {
		t.Errorf("cold marker after the interrupted pairing was finished: %v, %v", m, err)
	}
}

func allKeys(t *testing.T, s objstore.Store) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), "", func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}
