package shalefs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/cache"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

// The listing of a database as its next owner would see it: what a
// takeover seals and lists (Owner.listStore) and what the admin readers
// list without writing anything (listView).

// listView lists the live files of the database as a takeover would,
// changing nothing in the store: per name, the highest epoch's version,
// minus trashed versions and log versions the last opener did not keep,
// each log up to its last contiguous segment.
func (f *core) listView(ctx context.Context, last *layout.OpenedRecord) (map[string]*file, error) {
	markers, top, err := f.listTrashAndTop(ctx)
	if err != nil {
		return nil, err
	}
	trashed := trashedVersions(markers)
	files, err := f.listLogs(ctx, top, func(ctx context.Context, name string) (*file, error) {
		return f.viewLog(ctx, name, trashed, last)
	})
	if err != nil {
		return nil, err
	}
	return files, f.addObjects(ctx, files, top, trashed)
}

// listTrashAndTop lists the trash markers, then the top level of the
// database, refusing the layout of earlier development builds.
func (f *core) listTrashAndTop(ctx context.Context) (markers, top []objstore.ObjectInfo, err error) {
	if markers, err = f.listRetry(ctx, layout.TrashPrefix, false); err != nil {
		return nil, nil, err
	}
	if top, err = f.listRetry(ctx, "", true); err != nil {
		return nil, nil, err
	}
	return markers, top, f.refuseLegacyDirs(ctx, top, ActOpen)
}

// logEpochs lists the versions of one log name, minus trashed ones: a
// trashed version was deleted by an owner that had sealed it (or had
// written and closed it): no seal, no listing needed.
func (f *core) logEpochs(ctx context.Context, name string, trashed map[layout.VersionRef]bool) ([]uint64, error) {
	epochDirs, err := f.listRetry(ctx, layout.LogPrefix(name), true)
	if err != nil {
		return nil, err
	}
	var epochs []uint64
	for _, d := range epochDirs {
		if e, ok := layout.ParseLogVersionPrefix(name, d.Key); ok && !trashed[layout.VersionRef{Name: name, Epoch: e}] {
			epochs = append(epochs, e)
		}
	}
	return epochs, nil
}

// trashedVersions reads the versions named by trash markers.
func trashedVersions(markers []objstore.ObjectInfo) map[layout.VersionRef]bool {
	trashed := map[layout.VersionRef]bool{}
	for _, m := range markers {
		if name, e, ok := layout.ParseTrashKey(m.Key); ok {
			trashed[layout.VersionRef{Name: name, Epoch: e}] = true
		}
	}
	return trashed
}

// listLogs runs one (many at a time) for every log name in top, a listing
// of the top level, and returns the live versions it found.
func (f *core) listLogs(ctx context.Context, top []objstore.ObjectInfo, one func(ctx context.Context, name string) (*file, error)) (map[string]*file, error) {
	var logNames []string
	for _, o := range top {
		if name, isDir := strings.CutSuffix(o.Key, "/"); isDir && layout.KindOf(name) == layout.KindLog {
			logNames = append(logNames, name)
		}
	}
	logs := make([]*file, len(logNames))
	err := parallel(ctx, len(logNames), openParallelism, func(ctx context.Context, i int) (err error) {
		logs[i], err = one(ctx, logNames[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	files := map[string]*file{}
	for i, st := range logs {
		if st != nil {
			files[logNames[i]] = st
		}
	}
	return files, nil
}

// addObjects adds to files the tables, objects and CURRENT of top (a
// listing of the top level) and of the cold tier: per name the highest
// epoch's version not trashed.
func (f *core) addObjects(ctx context.Context, files map[string]*file, top []objstore.ObjectInfo, trashed map[layout.VersionRef]bool) error {
	for _, o := range top {
		if o.Key == layout.CurrentKey {
			files["CURRENT"] = &file{kind: layout.KindCurrent, size: o.Size}
			continue
		}
		name, e, ok := layout.ParseObjectKey(o.Key)
		if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] {
			continue
		}
		if st := files[name]; st == nil || e > st.epoch {
			files[name] = &file{kind: layout.KindOf(name), epoch: e, size: o.Size}
		}
	}
	return f.listColdTables(ctx, files, trashed)
}

// viewLog lists the versions of one log name and returns the live one
// (nil if none), writing nothing: versions trashed or not admitted by the
// last opener are skipped, as are emptied ones.
func (f *core) viewLog(ctx context.Context, name string, trashed map[layout.VersionRef]bool, last *layout.OpenedRecord) (*file, error) {
	epochs, err := f.logEpochs(ctx, name, trashed)
	if err != nil {
		return nil, err
	}
	var versions []protocol.LogVersion
	for _, e := range epochs {
		if !protocol.AdmitLogVersion(name, e, last) {
			continue
		}
		v, err := f.listVersion(ctx, name, e)
		if err != nil {
			return nil, err
		}
		if !v.HeadDeleted() {
			versions = append(versions, v)
		}
	}
	return liveLog(versions), nil
}

// liveLog is the file of the version protocol.ChooseLogVersion picks (nil
// if none).
func liveLog(versions []protocol.LogVersion) *file {
	v, ok := protocol.ChooseLogVersion(versions)
	if !ok {
		return nil
	}
	return &file{kind: layout.KindLog, epoch: v.Epoch, size: v.Size, segments: v.Segments, nextSeq: v.LastSeq + 1}
}

// recognize refuses a location with objects but no sign of Shale; top is
// its first level (ListDir).
func recognize(top []objstore.ObjectInfo) error {
	if len(top) == 0 {
		return nil
	}
	for _, o := range top {
		if o.Key == layout.CurrentKey || o.Key == layout.MetaPrefix {
			return nil
		}
	}
	for _, o := range top {
		if k := layout.KindOf(o.Key); k == layout.KindLog || k == layout.KindTable {
			return fmt.Errorf("%w: %q looks like a plain RocksDB directory, not Shale's layout; choose an empty location", ErrNotShale, o.Key)
		}
	}
	return fmt.Errorf("%w (found %q); choose an empty location", ErrNotShale, strings.TrimSuffix(top[0].Key, "/"))
}

// refuseLegacyDirs refuses a store whose top level holds table
// directories of the layout of earlier development builds (tables are now
// flat objects). MinIO may list an object that is being deleted as a
// prefix for a moment ("OPTIONS-004015.<epoch>/" while the trash loop
// deleted it, seen in make stress), so such a directory counts only if a
// listing of it finds objects.
func (f *core) refuseLegacyDirs(ctx context.Context, top []objstore.ObjectInfo, activity Activity) error {
	for _, o := range top {
		if !layout.IsLegacyTableDir(o.Key) {
			continue
		}
		var objs []objstore.ObjectInfo
		if err := f.background().do(ctx, func(ctx context.Context) (err error) {
			objs, err = f.list(ctx, o.Key, activity)
			return err
		}); err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("%w: %q is a table directory of the layout of earlier development builds (tables are now flat objects); this build cannot open it", ErrNotShale, o.Key)
		}
	}
	return nil
}

// openParallelism bounds the listings and seals a takeover runs at once.
const openParallelism = 16

// lastOpened reads the record of the highest epoch that completed a
// takeover (nil if none did: a new database, or one written before
// records existed).
func (f *core) lastOpened(ctx context.Context, below uint64) (*layout.OpenedRecord, error) {
	var highest uint64
	err := f.background().do(ctx, func(ctx context.Context) error {
		objs, err := f.list(ctx, layout.OpenedPrefix, ActOpen)
		for _, o := range objs {
			if e, ok := layout.ParseOpenedKey(o.Key); ok && e < below {
				highest = max(highest, e)
			}
		}
		return err
	})
	if err != nil || highest == 0 {
		return nil, err
	}
	var rec layout.OpenedRecord
	err = f.background().do(ctx, func(ctx context.Context) error {
		b, _, err := f.get(ctx, layout.OpenedKey(highest), "", ActOpen)
		if err != nil {
			return err
		}
		if rec, err = layout.ParseOpenedRecord(b); err != nil || rec.Epoch != highest {
			return fmt.Errorf("%s is unreadable (%v); refusing to open", layout.OpenedKey(highest), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// listVersion reads one log version's segments.
func (f *core) listVersion(ctx context.Context, name string, epoch uint64) (protocol.LogVersion, error) {
	var objs []objstore.ObjectInfo
	if err := f.background().do(ctx, func(ctx context.Context) (err error) {
		objs, err = f.list(ctx, layout.LogVersionPrefix(name, epoch), ActOpen)
		return err
	}); err != nil {
		return protocol.LogVersion{}, err
	}
	var segs []protocol.Segment
	for _, o := range objs {
		if _, _, first, last, ok := layout.ParseSegmentKey(o.Key); ok {
			segs = append(segs, protocol.Segment{Seq: first, Last: last, Size: o.Size})
		}
	}
	return protocol.BuildLogVersion(epoch, segs), nil
}

// prepareCache makes the local directory agree with the store: the store
// is the truth, so every local copy of a log or small object is dropped
// (it may hold bytes that were never synced) and tables are kept only when
// the store has them with the same size.
func (f *core) prepareCache() error {
	if err := os.MkdirAll(f.cfg.CacheDir, 0o755); err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	entries, err := os.ReadDir(f.cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		keep := false
		switch layout.KindOf(name) {
		case layout.KindLocal:
			keep = !strings.HasSuffix(name, ".dbtmp") && !strings.Contains(name, fetchTempMark)
			if name == cache.VersionsDir {
				keep = true
				// Forget versions of copies that are gone.
				if vs, err := os.ReadDir(filepath.Join(f.cfg.CacheDir, name)); err == nil {
					for _, v := range vs {
						if _, err := os.Stat(filepath.Join(f.cfg.CacheDir, v.Name())); err != nil {
							os.Remove(filepath.Join(f.cfg.CacheDir, name, v.Name()))
						}
					}
				}
			}
		case layout.KindTable:
			if st := f.files[name]; st != nil {
				v, known := f.cache.Version(name)
				if fi, err := e.Info(); err == nil && fi.Size() == st.size && known && v == st.epoch {
					keep = true
					f.cache.Add(name, st.size)
				}
			}
		}
		if !keep {
			if err := os.RemoveAll(filepath.Join(f.cfg.CacheDir, name)); err != nil {
				return fmt.Errorf("cache dir: %w", err)
			}
		}
	}
	return nil
}

func isManifest(name string) bool { return strings.HasPrefix(name, "MANIFEST-") }

// manifestOf is the MANIFEST a CURRENT content names ("" if none).
func manifestOf(current []byte) string {
	m := strings.TrimSpace(string(current))
	if !isManifest(m) || strings.ContainsAny(m, "/\n") {
		return ""
	}
	return m
}
