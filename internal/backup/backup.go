package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// ErrNotFound: no backup with that id (published or pending).
var ErrNotFound = errors.New("backup not found")

// ErrRestored: the target holds this backup's finished restore (CURRENT
// written); a restarted restore step may treat it as done.
var ErrRestored = errors.New("restored already")

// Location is one database's backup location: Store is opened at
// <backup store URL>/<database id>.
type Location struct {
	Store    objstore.Store
	Database string
	// Stream makes every copy to or from the location pass through this
	// process, even on the databases' endpoint: its credentials differ,
	// and a server-side copy runs with one side's credentials only.
	Stream bool
}

// CreateConfig says what a backup copies.
type CreateConfig struct {
	Source     objstore.Store // the database
	To         Location
	ID         string // NewID by default; a rerun with the same id resumes
	Checkpoint string // the checkpoint of Source to copy
	// CreatedCheckpoint: the caller created the checkpoint for this
	// backup; Release deletes it once the backup is published.
	CreatedCheckpoint bool
	Release           func(ctx context.Context) error
	Concurrency       int // parallel copies (default 8)
	// CountSourceKeys counts the live keys of the checkpoint in Source
	// once it is pinned, into the manifest's SourceKeys, for verify to
	// compare (RFC 0011 step 14a). It reads every table of the checkpoint
	// through this process, in Scratch (default: the system's temporary
	// directory).
	CountSourceKeys bool
	Scratch         string
	Logger          *slog.Logger
	Now             func() time.Time
}

// Create copies checkpoint cfg.Checkpoint of cfg.Source into the backup
// location and publishes its manifest (RFC 0011 steps 4-11). The
// returned manifest says what was copied.
func Create(ctx context.Context, cfg CreateConfig) (Manifest, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.ID == "" {
		cfg.ID = NewID(cfg.Now())
	}
	if err := ValidID(cfg.ID); err != nil {
		return Manifest{}, err
	}
	src, dst := cfg.Source, cfg.To.Store
	started := cfg.Now().UTC()

	// 4. The checkpoint, as a checkpoint server reads it.
	rec, err := shalefs.ReadCheckpointRecord(ctx, src, cfg.Checkpoint)
	if err != nil {
		return Manifest{}, err
	}
	recInfo, err := src.Stat(ctx, layout.CheckpointRecordKey(rec.ID))
	if err != nil {
		return Manifest{}, fmt.Errorf("stat the checkpoint's record: %w", err)
	}
	manifestKey := layout.CheckpointManifestKey(rec.ID, rec.Manifest.Name)
	// The record and the MANIFEST copy first: the sweep removes them once
	// the checkpoint leaves the catalog (its tables stay: the pin).
	want := map[string]int64{recInfo.Key: recInfo.Size, manifestKey: rec.Manifest.Size}
	first := []string{recInfo.Key, manifestKey}
	var tables []layout.VersionRef
	for _, f := range rec.Files {
		if f.Tier == "cold" || f.Location != "" {
			return Manifest{}, fmt.Errorf("checkpoint %q names %s in %s: backups of cold-tier and clone-origin tables are not built yet (RFC 0011 step 20)",
				cfg.Checkpoint, f.Name, map[bool]string{true: "the cold tier", false: "origin " + f.Location}[f.Tier == "cold"])
		}
		want[layout.ObjectKey(f.Name, f.Epoch)] = f.Size
		if layout.KindOf(f.Name) == layout.KindTable {
			tables = append(tables, layout.VersionRef{Name: f.Name, Epoch: f.Epoch})
		}
	}
	keys := slices.Sorted(maps.Keys(want))
	pin := layout.PinKey(PinID(cfg.ID))

	// 11. Release the pending record, the pin and the checkpoint (after
	// the publish, or on a rerun that finds it published).
	release := func(m Manifest) {
		if err := dst.Delete(ctx, PendingKey(cfg.ID)); err != nil {
			cfg.Logger.Warn("backup published; its pending record is left (a rerun or delete of it removes it)", "backup", cfg.ID, "err", err)
		}
		if err := src.Delete(ctx, pin); err != nil {
			cfg.Logger.Warn("backup published; its pin in the source is left, keeping tables longer (a rerun removes it)", "pin", pin, "source", src.URL(), "err", err)
		}
		if cfg.Release != nil {
			if err := cfg.Release(ctx); err != nil {
				cfg.Logger.Warn("backup published; the checkpoint it created is left until it expires", "checkpoint", cfg.Checkpoint, "err", err)
			}
		}
		cfg.Logger.Info("backup published", "backup", cfg.ID, "checkpoint", cfg.Checkpoint, "sequence", m.Checkpoint.Sequence,
			"objects", len(m.Objects), "bytes", m.Bytes, "copiedObjects", m.CopiedObjects, "copiedBytes", m.CopiedBytes, "streamedBytes", m.Streamed)
	}
	// A rerun of a published backup only finishes its release.
	switch b, err := get(ctx, dst, ManifestKey(cfg.ID)); {
	case err == nil:
		have, err := Parse[Manifest](ManifestKey(cfg.ID), b)
		if err != nil {
			return Manifest{}, err
		}
		if have.Checkpoint.ID != rec.ID {
			return Manifest{}, fmt.Errorf("backup %s is published already, of checkpoint %s (id %s); a new backup needs a new id", cfg.ID, have.Checkpoint.Name, have.Checkpoint.ID)
		}
		release(have)
		return have, nil
	case !errors.Is(err, objstore.ErrNotFound):
		return Manifest{}, err
	}

	// 5. Whose location this is.
	identity, err := sourceIdentity(ctx, src)
	if err != nil {
		return Manifest{}, err
	}
	db := Database{Database: cfg.To.Database, Source: src.URL(), Identity: identity, CreatedAt: started}
	if err := putOnce(ctx, dst, DatabaseKey, Format(db), func(got []byte) error {
		have, err := Parse[Database](DatabaseKey, got)
		if err != nil {
			return err
		}
		return CheckIdentity(&have, cfg.To.Database, src.URL(), identity)
	}); err != nil {
		return Manifest{}, err
	}

	// 6. The pending record, naming every key this backup will name.
	pend := Pending{ID: cfg.ID, Source: src.URL(), Checkpoint: cfg.Checkpoint, CheckpointID: rec.ID, CreatedCheckpoint: cfg.CreatedCheckpoint,
		Pin: pin, StartedAt: started, Keys: keys}
	if err := putOnce(ctx, dst, PendingKey(cfg.ID), Format(pend), func(got []byte) error {
		have, err := Parse[Pending](PendingKey(cfg.ID), got)
		if err != nil {
			return err
		}
		if !have.SameRun(pend) {
			return fmt.Errorf("backup %s is already running or was interrupted for checkpoint %s (id %s) of %s; this run is for checkpoint %s (id %s): use another id, or delete the interrupted one (shale backup delete %s)",
				cfg.ID, have.Checkpoint, have.CheckpointID, have.Source, cfg.Checkpoint, rec.ID, cfg.ID)
		}
		return nil
	}); err != nil {
		return Manifest{}, err
	}

	// 7. No delete running (after 6: RFC 0011, "Retention racing a backup").
	var deleting []string
	if err := dst.List(ctx, DeletingPrefix, func(o objstore.ObjectInfo) error {
		deleting = append(deleting, o.Key)
		return nil
	}); err != nil {
		return Manifest{}, fmt.Errorf("list %s: %w", DeletingPrefix, err)
	}
	if len(deleting) > 0 {
		return Manifest{}, fmt.Errorf("a delete is running in %s (%s): retry once it ends (or rerun `shale backup delete %s` if it was interrupted)", dst.URL(), deleting[0], IDOfKey(DeletingPrefix, deleting[0]))
	}

	// 8. Pin the tables in the source, then check the checkpoint still
	// holds them: a delete or expiry stored after that read finds the pin.
	pr := layout.PinRecord{Clone: dst.URL(), CloneID: PinID(cfg.ID), Checkpoint: cfg.Checkpoint, Files: tables}
	if err := putOnce(ctx, src, pin, pr.Format(), func(got []byte) error {
		return fmt.Errorf("%s in %s holds another pin than this backup's: two backups with id %s?", pin, src.URL(), cfg.ID)
	}); err != nil {
		return Manifest{}, err
	}
	again, err := shalefs.ReadCheckpointRecord(ctx, src, cfg.Checkpoint)
	if err == nil && again.ID != rec.ID {
		err = fmt.Errorf("checkpoint %q of %s was deleted and created again while the backup started", cfg.Checkpoint, src.URL())
	}
	if err != nil {
		if derr := src.Delete(ctx, pin); derr != nil {
			cfg.Logger.Warn("backup refused; its pin is left", "pin", pin, "source", src.URL(), "err", derr)
		}
		return Manifest{}, err
	}

	// 14a. The source's key count, while the pin and the checkpoint hold
	// its tables.
	var sourceKeys *uint64
	if cfg.CountSourceKeys {
		n, err := CountCheckpointKeys(ctx, src, cfg.Checkpoint, cfg.Scratch)
		if err != nil {
			return Manifest{}, fmt.Errorf("backup %s: count the source's keys: %w (nothing is published; rerun with --id %s, or without --count-source-keys)", cfg.ID, err, cfg.ID)
		}
		sourceKeys = &n
		cfg.Logger.Info("counted the source's keys", "backup", cfg.ID, "checkpoint", cfg.Checkpoint, "keys", n)
	}

	// 9. Copy what the backup store lacks.
	present := map[string]int64{}
	if err := dst.List(ctx, ObjectsPrefix, func(o objstore.ObjectInfo) error {
		present[strings.TrimPrefix(o.Key, ObjectsPrefix)] = o.Size
		return nil
	}); err != nil {
		return Manifest{}, fmt.Errorf("list %s%s: %w", dst.URL(), "/"+ObjectsPrefix, err)
	}
	ms, err := List(ctx, cfg.To)
	if err != nil {
		return Manifest{}, err
	}
	known := KnownSums(ms)
	plan, err := PlanCopy(want, present, known)
	if err != nil {
		return Manifest{}, err
	}
	out := Manifest{ID: cfg.ID, Database: cfg.To.Database, Source: src.URL(),
		Checkpoint: CheckpointRef{Name: rec.Name, ID: rec.ID, Sequence: rec.Sequence, CreatedAt: rec.CreatedAt},
		Current:    rec.Current, Manifest: manifestKey, StartedAt: started, SourceKeys: sourceKeys}
	sums := map[string]string{}
	var mu sync.Mutex
	do := func(ctx context.Context, key string) error {
		var sum string
		var copied, streamed int64
		switch plan[key] {
		case Skip:
			sum = known[key].SHA256
		case Hash:
			r, _, err := dst.Get(ctx, ObjectKey(key), 0, -1)
			if err != nil {
				return fmt.Errorf("read %s of the backup store: %w", ObjectKey(key), err)
			}
			h := sha256.New()
			n, err := io.Copy(h, r)
			r.Close()
			if err != nil {
				return fmt.Errorf("read %s of the backup store: %w", ObjectKey(key), err)
			}
			if n != want[key] {
				return fmt.Errorf("%s of the backup store read %d bytes, want %d", ObjectKey(key), n, want[key])
			}
			sum = hex.EncodeToString(h.Sum(nil))
		case Copy:
			var err error
			if sum, streamed, err = copyObject(ctx, src, key, dst, ObjectKey(key), want[key], cfg.To.Stream); err != nil {
				return err
			}
			copied = want[key]
		}
		mu.Lock()
		defer mu.Unlock()
		sums[key] = sum
		if plan[key] == Copy {
			out.CopiedObjects++
			out.CopiedBytes += copied
			out.Streamed += streamed
		}
		return nil
	}
	for _, k := range first {
		if err := do(ctx, k); err != nil {
			return Manifest{}, fmt.Errorf("backup %s: %w", cfg.ID, err)
		}
	}
	rest := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return slices.Contains(first, k) })
	if err := parallel(ctx, cfg.Concurrency, rest, do); err != nil {
		return Manifest{}, fmt.Errorf("backup %s: %w (nothing is published; rerun with --id %s to resume, or delete it)", cfg.ID, err, cfg.ID)
	}
	for _, k := range keys {
		out.Objects = append(out.Objects, Object{Key: k, Size: want[k], SHA256: sums[k]})
		out.Bytes += want[k]
	}

	// 10. Publish: the manifest, create-only, last.
	out.CompletedAt = cfg.Now().UTC()
	if err := putOnce(ctx, dst, ManifestKey(cfg.ID), Format(out), func(got []byte) error {
		have, err := Parse[Manifest](ManifestKey(cfg.ID), got)
		if err == nil && have.Checkpoint.ID == out.Checkpoint.ID && slices.Equal(have.Objects, out.Objects) {
			out = have // a rerun after a lost reply
			return nil
		}
		return fmt.Errorf("backup %s is published already with other content", cfg.ID)
	}); err != nil {
		return Manifest{}, err
	}

	release(out)
	return out, nil
}

// copyObject copies srcKey of src to dstKey of dst and returns the
// copy's SHA-256: computed on the stream, or, after a server-side copy,
// by reading the copy back (what the manifest records is what the backup
// store holds).
func copyObject(ctx context.Context, src objstore.Store, srcKey string, dst objstore.Store, dstKey string, size int64, stream bool) (sum string, streamed int64, err error) {
	h := sha256.New()
	if !stream && objstore.CopiesServerSide(src, dst) {
		info, n, err := objstore.CopyAcross(ctx, src, srcKey, dst, dstKey, objstore.PutOptions{})
		if err != nil {
			return "", n, fmt.Errorf("copy %s: %w", srcKey, err)
		}
		if info.Size != size {
			return "", n, fmt.Errorf("copied %d bytes of %s, want %d", info.Size, srcKey, size)
		}
		r, _, err := dst.Get(ctx, dstKey, 0, -1)
		if err != nil {
			return "", n, fmt.Errorf("read back %s: %w", dstKey, err)
		}
		defer r.Close()
		if m, err := io.Copy(h, r); err != nil || m != size {
			return "", n, fmt.Errorf("read back %s: %d bytes of %d: %v", dstKey, m, size, err)
		}
		return hex.EncodeToString(h.Sum(nil)), n, nil
	}
	r, from, err := src.Get(ctx, srcKey, 0, -1)
	if err != nil {
		return "", 0, fmt.Errorf("read %s of %s: %w", srcKey, src.URL(), err)
	}
	defer r.Close()
	if from.Size != size {
		return "", 0, fmt.Errorf("%s of %s is %d bytes, the checkpoint says %d", srcKey, src.URL(), from.Size, size)
	}
	if _, err := dst.Put(ctx, dstKey, io.TeeReader(r, h), size, objstore.PutOptions{}); err != nil {
		return "", 0, fmt.Errorf("write %s of %s: %w", dstKey, dst.URL(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}

// parallel runs fn for each key, n at a time, until the first error.
func parallel(ctx context.Context, n int, keys []string, fn func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan string)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if err := fn(ctx, k); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, k := range keys {
		select {
		case work <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// sourceIdentity is the SHA-256 of the database's lowest epoch claim:
// claims are never deleted, and another database has other ones.
func sourceIdentity(ctx context.Context, s objstore.Store) (string, error) {
	var first string
	errStop := errors.New("stop")
	err := s.List(ctx, layout.EpochPrefix, func(o objstore.ObjectInfo) error {
		if _, ok := layout.ParseEpochKey(o.Key); ok {
			first = o.Key
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return "", fmt.Errorf("list the epoch claims of %s: %w", s.URL(), err)
	}
	if first == "" {
		return "", fmt.Errorf("%s has no epoch claim: no primary ever opened it, so it has no checkpoint to back up", s.URL())
	}
	b, err := get(ctx, s, first)
	if err != nil {
		return "", err
	}
	return layout.Digest(b), nil
}

// putOnce creates key with b; a key already there with other bytes is
// judged by same.
func putOnce(ctx context.Context, s objstore.Store, key string, b []byte, same func(got []byte) error) error {
	_, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		if err != nil {
			return fmt.Errorf("write %s in %s: %w", key, s.URL(), err)
		}
		return nil
	}
	got, err := get(ctx, s, key)
	if err != nil {
		return err
	}
	if bytes.Equal(got, b) {
		return nil
	}
	return same(got)
}

func get(ctx context.Context, s objstore.Store, key string) ([]byte, error) {
	r, _, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", key, s.URL(), err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", key, s.URL(), err)
	}
	return b, nil
}

// List returns the published backups of a location, oldest first.
func List(ctx context.Context, loc Location) ([]Manifest, error) {
	var out []Manifest
	err := loc.Store.List(ctx, BackupsPrefix, func(o objstore.ObjectInfo) error {
		if IDOfKey(BackupsPrefix, o.Key) == "" {
			return nil
		}
		b, err := get(ctx, loc.Store, o.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // deleted since the listing
		}
		if err != nil {
			return err
		}
		m, err := Parse[Manifest](o.Key, b)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the backups in %s: %w", loc.Store.URL(), err)
	}
	slices.SortFunc(out, func(a, b Manifest) int { return a.CompletedAt.Compare(b.CompletedAt) })
	return out, nil
}

// ListPending returns the backups that started and were not published
// (running, or interrupted).
func ListPending(ctx context.Context, loc Location) ([]Pending, error) {
	var out []Pending
	err := loc.Store.List(ctx, PendingPrefix, func(o objstore.ObjectInfo) error {
		if IDOfKey(PendingPrefix, o.Key) == "" {
			return nil
		}
		b, err := get(ctx, loc.Store, o.Key)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		p, err := Parse[Pending](o.Key, b)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the pending backups in %s: %w", loc.Store.URL(), err)
	}
	return out, nil
}

// DeleteReport says what a delete removed.
type DeleteReport struct {
	Published      bool // a published backup (else an interrupted one)
	Objects        int
	Bytes          int64
	PinLeft        string // a pin in the source it could not delete
	KeptObjectsFor int    // of its objects, how many other backups still name
}

// Delete removes backup id, published or interrupted, and the objects
// only it names (RFC 0011 step 13). openSource opens an interrupted
// backup's source to delete its pin (nil: objstore.Open).
func Delete(ctx context.Context, loc Location, id string, openSource func(url string) (objstore.Store, error)) (DeleteReport, error) {
	var rep DeleteReport
	if err := ValidID(id); err != nil {
		return rep, err
	}
	if openSource == nil {
		openSource = objstore.Open
	}
	s := loc.Store
	var keys []string
	var pend *Pending
	mb, err := get(ctx, s, ManifestKey(id))
	switch {
	case err == nil:
		m, err := Parse[Manifest](ManifestKey(id), mb)
		if err != nil {
			return rep, err
		}
		rep.Published = true
		for _, o := range m.Objects {
			keys = append(keys, o.Key)
		}
	case !errors.Is(err, objstore.ErrNotFound):
		return rep, err
	}
	switch pb, err := get(ctx, s, PendingKey(id)); {
	case err == nil:
		p, err := Parse[Pending](PendingKey(id), pb)
		if err != nil {
			return rep, err
		}
		pend = &p
		if !rep.Published {
			keys = p.Keys
		}
	case !errors.Is(err, objstore.ErrNotFound):
		return rep, err
	}
	// (b) The marker, naming the keys; a rerun reads them from it.
	marker := Deleting{ID: id, Keys: keys, StartedAt: time.Now().UTC()}
	if keys == nil {
		b, err := get(ctx, s, DeletingKey(id))
		if errors.Is(err, objstore.ErrNotFound) {
			return rep, fmt.Errorf("%w: no backup %s in %s (list them with `shale backup list`)", ErrNotFound, id, s.URL())
		}
		if err != nil {
			return rep, err
		}
		if marker, err = Parse[Deleting](DeletingKey(id), b); err != nil {
			return rep, err
		}
		keys = marker.Keys
	} else if err := putOnce(ctx, s, DeletingKey(id), Format(marker), func(got []byte) error {
		have, err := Parse[Deleting](DeletingKey(id), got)
		if err != nil {
			return err
		}
		keys = have.Keys
		return nil
	}); err != nil {
		return rep, err
	}
	// (c) Unpublish, then the pending record and its pin.
	if err := s.Delete(ctx, ManifestKey(id)); err != nil {
		return rep, fmt.Errorf("delete %s: %w", ManifestKey(id), err)
	}
	if pend != nil {
		if src, err := openSource(pend.Source); err == nil {
			err = src.Delete(ctx, pend.Pin)
			if err != nil {
				rep.PinLeft = pend.Source + "/" + pend.Pin
			}
		} else {
			rep.PinLeft = pend.Source + "/" + pend.Pin
		}
		if err := s.Delete(ctx, PendingKey(id)); err != nil {
			return rep, fmt.Errorf("delete %s: %w", PendingKey(id), err)
		}
	}
	// (d) What the others name, listed after the marker.
	others, err := List(ctx, loc)
	if err != nil {
		return rep, err
	}
	pending, err := ListPending(ctx, loc)
	if err != nil {
		return rep, err
	}
	// (e) Delete what no one else names.
	gone := Unreferenced(keys, others, pending)
	rep.KeptObjectsFor = len(keys) - len(gone)
	del := make([]string, 0, len(gone))
	for _, k := range gone {
		if info, err := s.Stat(ctx, ObjectKey(k)); err == nil {
			rep.Bytes += info.Size
			rep.Objects++
		}
		del = append(del, ObjectKey(k))
	}
	if err := s.DeleteMany(ctx, del); err != nil {
		return rep, fmt.Errorf("delete the objects of backup %s: %w (rerun the delete)", id, err)
	}
	// (f) Done.
	if err := s.Delete(ctx, DeletingKey(id)); err != nil {
		return rep, fmt.Errorf("delete %s: %w (rerun the delete)", DeletingKey(id), err)
	}
	return rep, nil
}

// Sweep deletes the objects no manifest or pending record names, stored
// longer than grace ago (RFC 0011 step 17), under a delete marker as a
// delete does: a backup starting meanwhile either sees the marker and
// refuses, or wrote its pending record before the sweep's second listing,
// which keeps what it names. It returns the objects and bytes removed.
func Sweep(ctx context.Context, loc Location, grace time.Duration, now time.Time) (int, int64, error) {
	s := loc.Store
	var objs []Stored
	sizes := map[string]int64{}
	if err := s.List(ctx, ObjectsPrefix, func(o objstore.ObjectInfo) error {
		k := strings.TrimPrefix(o.Key, ObjectsPrefix)
		objs = append(objs, Stored{Key: k, ModTime: o.ModTime})
		sizes[k] = o.Size
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("list %s: %w", ObjectsPrefix, err)
	}
	refs := func() ([]Manifest, []Pending, error) {
		ms, err := List(ctx, loc)
		if err != nil {
			return nil, nil, err
		}
		ps, err := ListPending(ctx, loc)
		return ms, ps, err
	}
	ms, ps, err := refs()
	if err != nil {
		return 0, 0, err
	}
	cand := Orphans(objs, ms, ps, now, grace)
	if len(cand) == 0 {
		return 0, 0, nil
	}
	id := "sweep-" + now.UTC().Format("20060102-150405")
	marker := Deleting{ID: id, Keys: cand, StartedAt: now.UTC()}
	if err := putOnce(ctx, s, DeletingKey(id), Format(marker), func([]byte) error {
		return fmt.Errorf("another sweep started at the same second (%s)", DeletingKey(id))
	}); err != nil {
		return 0, 0, err
	}
	if ms, ps, err = refs(); err != nil {
		return 0, 0, err
	}
	gone := Unreferenced(cand, ms, ps)
	var del []string
	var bytes int64
	for _, k := range gone {
		del = append(del, ObjectKey(k))
		bytes += sizes[k]
	}
	if err := s.DeleteMany(ctx, del); err != nil {
		return 0, 0, fmt.Errorf("sweep: %w (finish it with: shale backup delete %s)", err, id)
	}
	if err := s.Delete(ctx, DeletingKey(id)); err != nil {
		return len(del), bytes, fmt.Errorf("sweep: delete %s: %w (finish it with: shale backup delete %s)", DeletingKey(id), err, id)
	}
	return len(del), bytes, nil
}

// RestoreReport says what a restore wrote.
type RestoreReport struct {
	Tables   int
	Bytes    int64
	Streamed int64
	Sequence uint64
}

// Restore copies backup id into target, a new empty directory (or one
// holding an interrupted restore of the same backup), as a database a
// primary then opens (RFC 0011 step 15): every table as its epoch-0
// version, the frozen MANIFEST as the epoch-0 log, CURRENT last.
func Restore(ctx context.Context, loc Location, id string, target objstore.Store) (RestoreReport, error) {
	return restore(ctx, loc, id, target, "", nil)
}

// restore is Restore; pointInTime names a point-in-time restore's target
// (its record says so, so a rerun with another target is refused), and
// before, when set, writes its logs before CURRENT.
func restore(ctx context.Context, loc Location, id string, target objstore.Store, pointInTime string, before func(context.Context, Manifest) error) (RestoreReport, error) {
	var rep RestoreReport
	if err := ValidID(id); err != nil {
		return rep, err
	}
	b, err := get(ctx, loc.Store, ManifestKey(id))
	if errors.Is(err, objstore.ErrNotFound) {
		return rep, fmt.Errorf("%w: no published backup %s in %s (list them with `shale backup list`)", ErrNotFound, id, loc.Store.URL())
	}
	if err != nil {
		return rep, err
	}
	m, err := Parse[Manifest](ManifestKey(id), b)
	if err != nil {
		return rep, err
	}
	rep.Sequence = m.Checkpoint.Sequence

	// (a) An empty directory, or this restore's.
	var top []string
	if err := target.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
		top = append(top, o.Key)
		return nil
	}); err != nil {
		return rep, fmt.Errorf("list %s: %w", target.URL(), err)
	}
	rr := RestoreRecord{Backup: id, Database: m.Database, StartedAt: time.Now().UTC(), Target: pointInTime}
	if len(top) > 0 {
		got, err := get(ctx, target, RestoreKey)
		if errors.Is(err, objstore.ErrNotFound) {
			return rep, fmt.Errorf("%s is not empty (it holds %q): a restore writes a new database into an empty directory", target.URL(), top[0])
		}
		if err != nil {
			return rep, err
		}
		have, err := Parse[RestoreRecord](RestoreKey, got)
		if err != nil {
			return rep, err
		}
		if have.Backup != id || have.Database != m.Database || have.Target != pointInTime {
			return rep, fmt.Errorf("%s holds a restore of backup %s of %s%s, not of %s of %s%s", target.URL(), have.Backup, have.Database, toTarget(have.Target), id, m.Database, toTarget(pointInTime))
		}
		if _, err := target.Stat(ctx, layout.CurrentKey); err == nil {
			return rep, fmt.Errorf("%s is %w (CURRENT is written): start a primary on it", target.URL(), ErrRestored)
		}
	} else if _, err := target.Put(ctx, RestoreKey, bytes.NewReader(Format(rr)), -1, objstore.PutOptions{IfNoneMatch: true}); err != nil {
		return rep, fmt.Errorf("write %s in %s: %w", RestoreKey, target.URL(), err)
	}

	// (b, c) Tables as epoch 0, the MANIFEST as the epoch-0 log.
	var mu sync.Mutex
	sizes := map[string]Object{}
	var srcKeys []string
	for _, o := range m.Objects {
		if _, ok := RestoredKey(o.Key, m.Manifest); ok {
			srcKeys = append(srcKeys, o.Key)
			sizes[o.Key] = o
		}
	}
	err = parallel(ctx, 8, srcKeys, func(ctx context.Context, key string) error {
		o := sizes[key]
		dst, _ := RestoredKey(key, m.Manifest)
		if info, err := target.Stat(ctx, dst); err == nil && info.Size == o.Size {
			return nil // an earlier run copied it
		}
		sum, streamed, err := copyObject(ctx, loc.Store, ObjectKey(key), target, dst, o.Size, loc.Stream)
		if err != nil {
			return err
		}
		if sum != o.SHA256 {
			return fmt.Errorf("%s of backup %s has SHA-256 %.12s..., its manifest says %.12s...: the backup is damaged (run shale backup verify)", ObjectKey(key), id, sum, o.SHA256)
		}
		mu.Lock()
		defer mu.Unlock()
		rep.Bytes += o.Size
		rep.Streamed += streamed
		if key != m.Manifest {
			rep.Tables++
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("restore backup %s into %s: %w (rerun the restore; do not start a primary there before it ends)", id, target.URL(), err)
	}

	if before != nil {
		if err := before(ctx, m); err != nil {
			return rep, fmt.Errorf("restore into %s: %w (rerun the restore; do not start a primary there before it ends)", target.URL(), err)
		}
	}

	// (d) CURRENT, last: the directory is a database from here on.
	cur := layout.CurrentObject([]byte(m.Current), 0, nonce())
	if _, err := target.Put(ctx, layout.CurrentKey, bytes.NewReader(cur), int64(len(cur)), objstore.PutOptions{IfNoneMatch: true}); err != nil {
		return rep, fmt.Errorf("write CURRENT in %s: %w", target.URL(), err)
	}
	return rep, nil
}

func toTarget(t string) string {
	if t == "" {
		return ""
	}
	return " to " + t
}

func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
