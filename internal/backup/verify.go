package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/linxGnu/grocksdb"

	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// ErrDamaged: verify found an object that is not what the manifest says,
// or that RocksDB refuses.
var ErrDamaged = errors.New("backup damaged")

// VerifyReport says what a verify checked.
type VerifyReport struct {
	Objects  int
	Bytes    int64
	Tables   int
	Keys     uint64 // live keys at the backup's sequence
	Sequence uint64 // RocksDB's last sequence in the restored copy
}

// Verify checks backup id (RFC 0011 step 14): every object's size and
// SHA-256, RocksDB's checksums of every table, and a read-only open of
// the restored copy, counting its keys with checksums verified. scratch
// is a local directory it may fill with the whole backup (removed after).
func Verify(ctx context.Context, loc Location, id, scratch string) (VerifyReport, error) {
	var rep VerifyReport
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
	dir, err := os.MkdirTemp(scratch, "shale-verify-")
	if err != nil {
		return rep, fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(dir)

	damaged := func(format string, args ...any) error {
		return fmt.Errorf("%w: backup %s: "+format, append([]any{ErrDamaged, id}, args...)...)
	}
	var tables []string
	keyOf := map[string]string{} // local name -> source key
	for _, o := range m.Objects {
		// The local name RocksDB knows the file by ("" for the record).
		local := ""
		switch name, _, ok := layout.ParseObjectKey(o.Key); {
		case o.Key == m.Manifest:
			local = o.Key[strings.LastIndex(o.Key, "/")+1:]
		case ok:
			local = name
		}
		sum, n, err := download(ctx, loc.Store, ObjectKey(o.Key), filepath.Join(dir, local), local != "")
		if err != nil {
			return rep, err
		}
		if n != o.Size {
			return rep, damaged("%s is %d bytes, its manifest says %d", ObjectKey(o.Key), n, o.Size)
		}
		if sum != o.SHA256 {
			return rep, damaged("%s has SHA-256 %.12s..., its manifest says %.12s...", ObjectKey(o.Key), sum, o.SHA256)
		}
		rep.Objects++
		rep.Bytes += n
		if local != "" && layout.KindOf(local) == layout.KindTable {
			tables = append(tables, local)
			keyOf[local] = o.Key
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte(m.Current), 0o644); err != nil {
		return rep, err
	}
	// RocksDB's own checksums, table by table (SstFileReader::
	// VerifyChecksum, then every entry read with checksums verified).
	for _, t := range tables {
		if _, _, err := rocksshim.CheckSSTSizes(filepath.Join(dir, t), math.MaxInt32, math.MaxInt32); err != nil {
			return rep, damaged("table %s (%s): RocksDB: %v", t, ObjectKey(keyOf[t]), err)
		}
		rep.Tables++
	}
	// The copy as a database, read-only, every key read.
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetInfoLogLevel(grocksdb.FatalInfoLogLevel)
	db, err := grocksdb.OpenDbForReadOnly(opts, dir, false)
	if err != nil {
		return rep, damaged("RocksDB cannot open the restored copy: %v", err)
	}
	defer db.Close()
	rep.Sequence = db.GetLatestSequenceNumber()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetVerifyChecksums(true)
	ro.SetFillCache(false)
	it := db.NewIterator(ro)
	defer it.Close()
	for it.SeekToFirst(); it.Valid(); it.Next() {
		rep.Keys++
		if rep.Keys%100000 == 0 && ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	if err := it.Err(); err != nil {
		return rep, damaged("reading the restored copy: %v", err)
	}
	if rep.Sequence < m.Checkpoint.Sequence {
		return rep, damaged("the restored copy ends at sequence %d, before the checkpoint's %d", rep.Sequence, m.Checkpoint.Sequence)
	}
	return rep, nil
}

// download reads key into path (when keep) and returns its SHA-256 and
// size.
func download(ctx context.Context, s objstore.Store, key, path string, keep bool) (string, int64, error) {
	r, _, err := s.Get(ctx, key, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return "", 0, fmt.Errorf("%w: %s is missing from %s", ErrDamaged, key, s.URL())
	}
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", key, err)
	}
	defer r.Close()
	h := sha256.New()
	var w io.Writer = h
	if keep {
		f, err := os.Create(path)
		if err != nil {
			return "", 0, err
		}
		defer f.Close()
		w = io.MultiWriter(h, f)
	}
	n, err := io.Copy(w, r)
	if err != nil {
		return "", n, fmt.Errorf("read %s: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
