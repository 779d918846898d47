package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// dirTiers locates one database directory: its keys are hotPrefix+KEY in
// hot and coldPrefix+KEY in cold (nil: no cold tier).
type dirTiers struct {
	hot        objstore.Store
	hotPrefix  string
	cold       objstore.Store
	coldPrefix string
	// uid is the UID of the directory's RocksDB: a clone's pins are
	// released only when its _shale/origin names that clone id (the one
	// the operator passes, --clone-id UID).
	uid string
	// openOrigin opens an origin's directory by URL, to release a clone's
	// pins there (nil: pins are not released).
	openOrigin func(url string) (objstore.Store, error)
}

// observedKeys are the keys of a directory (relative to it) that the
// garbage collector listed before judging it.
type observedKeys struct{ hot, cold map[string]bool }

// reclaimDone is what reclaimDir did.
type reclaimDone struct {
	reclaimPlanned
	Objects int
	Bytes   int64
	// Left: objects it did not delete because only lets it delete
	// what was observed before (the garbage collector's rule).
	Left int
	// Released: the pins of this directory's clone deleted in its origins
	// (URL + key); Unreleased says why a clone's pins were left.
	Released   []string
	Unreleased string
}

// reclaimDir deletes a directory as reclaimPlan says: (a) create
// _shale/deleting, (b) list the directory and read its pins, (c) delete
// every object but the marker, the pins and what they name (cold tier
// first), (e) without pins and with nothing left, delete the marker. The
// caller deletes the owner record when the result has no Pinned and no
// Left (step d/e: with pins, the record stays and says Delete). only, when
// not nil, limits the deletion to those keys (relative to the directory:
// what the garbage collector observed quiet for its grace).
func reclaimDir(ctx context.Context, d dirTiers, by string, only *observedKeys) (reclaimDone, error) {
	var done reclaimDone
	// (a) The marker first: a clone pins, then reads it.
	marker := []byte(fmt.Sprintf("{\"by\":%q,\"at\":%q}\n", by, time.Now().UTC().Format(time.RFC3339)))
	if _, err := d.hot.Put(ctx, d.hotPrefix+layout.DeletingKey, bytes.NewReader(marker), int64(len(marker)), objstore.PutOptions{IfNoneMatch: true}); err != nil && !errors.Is(err, objstore.ErrPreconditionFailed) {
		return done, fmt.Errorf("write %s: %w", layout.DeletingKey, err)
	}
	// (b) Then the listing, pins included.
	hotSizes, coldSizes := map[string]int64{}, map[string]int64{}
	list := func(st objstore.Store, prefix string, sizes map[string]int64) ([]string, error) {
		var keys []string
		err := st.List(ctx, prefix, func(o objstore.ObjectInfo) error {
			k := strings.TrimPrefix(o.Key, prefix)
			keys = append(keys, k)
			sizes[k] += o.Size
			return nil
		})
		return keys, err
	}
	var in reclaimInput
	var err error
	if d.cold != nil {
		if in.Cold, err = list(d.cold, d.coldPrefix, coldSizes); err != nil {
			return done, fmt.Errorf("list the cold directory: %w", err)
		}
	}
	if in.Hot, err = list(d.hot, d.hotPrefix, hotSizes); err != nil {
		return done, fmt.Errorf("list the directory: %w", err)
	}
	hot := in.Hot[:0:0]
	for _, k := range in.Hot {
		if _, ok := layout.ParsePinKey(k); !ok {
			hot = append(hot, k)
			continue
		}
		pin, err := readPin(ctx, d.hot, d.hotPrefix, k)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // released since the listing: it keeps nothing
		}
		if err != nil && objstore.IsRetryable(err) {
			return done, err
		}
		in.Pins = append(in.Pins, pin)
		hot = append(hot, k)
	}
	in.Hot = hot
	// A clone's own pins in its origins go first, while its origin
	// record (what says where they are) is still here.
	if slices.Contains(in.Hot, layout.OriginKey) {
		if err := releaseClonePins(ctx, d, &done); err != nil {
			return done, err
		}
	}
	plan, err := reclaimPlan(in)
	if err != nil {
		return done, err
	}
	done.reclaimPlanned = plan
	filter := func(keys []string, cold bool) []string {
		if only == nil {
			return keys
		}
		seen := only.hot
		if cold {
			seen = only.cold
		}
		var out []string
		for _, k := range keys {
			if seen[k] {
				out = append(out, k)
			} else {
				done.Left++
			}
		}
		return out
	}
	// (c) The cold tier first: the hot directory (and the owner record the
	// garbage collector goes by) stays until the cold one is gone.
	if err := deleteKeys(ctx, d.cold, d.coldPrefix, filter(plan.DeleteCold, true), coldSizes, &done); err != nil {
		return done, err
	}
	if err := deleteKeys(ctx, d.hot, d.hotPrefix, filter(plan.DeleteHot, false), hotSizes, &done); err != nil {
		return done, err
	}
	if len(plan.Pinned) > 0 || done.Left > 0 {
		return done, nil
	}
	// (e) No pins: the marker goes; the caller deletes the record.
	if err := d.hot.Delete(ctx, d.hotPrefix+layout.DeletingKey); err != nil {
		return done, fmt.Errorf("delete %s: %w", layout.DeletingKey, err)
	}
	return done, nil
}

func readPin(ctx context.Context, st objstore.Store, prefix, key string) (pinObservation, error) {
	pin := pinObservation{Key: key}
	r, _, err := st.Get(ctx, prefix+key, 0, -1)
	if err != nil {
		pin.Err = fmt.Errorf("pin %s: %w", key, err)
		return pin, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		pin.Err = fmt.Errorf("pin %s: %w", key, err)
		return pin, err
	}
	rec, err := layout.ParsePin(key, b)
	pin.Clone, pin.Files, pin.Err = rec.Clone, rec.Files, err
	return pin, nil
}

func deleteKeys(ctx context.Context, st objstore.Store, prefix string, keys []string, sizes map[string]int64, done *reclaimDone) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		batch := make([]string, n)
		for i, k := range keys[:n] {
			batch[i] = prefix + k
		}
		if err := st.DeleteMany(ctx, batch); err != nil {
			return err
		}
		for _, k := range keys[:n] {
			done.Objects++
			done.Bytes += sizes[k]
		}
		keys = keys[n:]
	}
	return nil
}

// releaseClonePins deletes, in every origin its _shale/origin names, the
// pin of the clone whose directory is being deleted (RFC 0010 step 14:
// "a clone's own pins are released first"). Only a record naming this
// directory's UID as its clone id is trusted to say where this database's
// pins are; another one is left, and said so.
func releaseClonePins(ctx context.Context, d dirTiers, done *reclaimDone) error {
	r, _, err := d.hot.Get(ctx, d.hotPrefix+layout.OriginKey, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", layout.OriginKey, err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", layout.OriginKey, err)
	}
	rec, err := layout.ParseOriginRecord(b)
	switch {
	case err != nil:
		done.Unreleased = fmt.Sprintf("%v: its pins in its origins, if any, are left (delete them by hand)", err)
		return nil
	case d.openOrigin == nil || d.uid == "" || rec.CloneID != d.uid:
		done.Unreleased = fmt.Sprintf("%s names clone id %q, not this RocksDB's UID %q: its pins %s in %d origin(s) are left (delete them by hand)", layout.OriginKey, rec.CloneID, d.uid, layout.PinKey(rec.CloneID), len(rec.Origins))
		return nil
	}
	for _, o := range rec.Origins {
		st, err := d.openOrigin(o.URL)
		if err != nil {
			return fmt.Errorf("open origin %s to release the pin %s: %w", o.URL, o.Pin, err)
		}
		if err := st.Delete(ctx, o.Pin); err != nil {
			return fmt.Errorf("release the pin %s in %s: %w", o.Pin, o.URL, err)
		}
		done.Released = append(done.Released, strings.TrimSuffix(o.URL, "/")+"/"+o.Pin)
	}
	return nil
}
