package shalefs

import (
	"context"
	"strings"

	"github.com/shale-rocks/shale/internal/objstore"
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
	markers, err := f.listRetry(ctx, layout.TrashPrefix, false)
	if err != nil {
		return nil, err
	}
	trashed := trashedVersions(markers)
	top, err := f.listRetry(ctx, "", true)
	if err != nil {
		return nil, err
	}
	if err := f.refuseLegacyDirs(ctx, top, ActOpen); err != nil {
		return nil, err
	}
	files, err := f.listLogs(ctx, top, func(ctx context.Context, name string) (*file, error) {
		return f.viewLog(ctx, name, trashed, last)
	})
	if err != nil {
		return nil, err
	}
	return files, f.addObjects(ctx, files, top, trashed)
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
	epochDirs, err := f.listRetry(ctx, layout.LogPrefix(name), true)
	if err != nil {
		return nil, err
	}
	var versions []protocol.LogVersion
	for _, d := range epochDirs {
		e, ok := layout.ParseLogVersionPrefix(name, d.Key)
		if !ok || trashed[layout.VersionRef{Name: name, Epoch: e}] || !protocol.AdmitLogVersion(name, e, last) {
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
