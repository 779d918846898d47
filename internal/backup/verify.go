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
	"github.com/shale-rocks/shale/internal/shalefs"
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
	// SourceKeys is the manifest's count of the source's checkpoint (nil:
	// the backup was created without it, nothing compared); when set,
	// Keys equals it (else Verify fails).
	SourceKeys *uint64
}

// Verify checks backup id (RFC 0011 step 14): every object's size and
// SHA-256, RocksDB's checksums of every table, and a read-only open of
// the restored copy, counting its keys with checksums verified, and the
// count compared with the source checkpoint's when the manifest has it
// (step 14a). scratch is a local directory it may fill with the whole
// backup (removed after).
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
	if rep.Keys, err = countKeys(ctx, db); err != nil {
		if ctx.Err() != nil {
			return rep, err
		}
		return rep, damaged("reading the restored copy: %v", err)
	}
	if rep.Sequence < m.Checkpoint.Sequence {
		return rep, damaged("the restored copy ends at sequence %d, before the checkpoint's %d", rep.Sequence, m.Checkpoint.Sequence)
	}
	// Step 14a: the source's count, read through another path.
	rep.SourceKeys = m.SourceKeys
	if m.SourceKeys != nil && *m.SourceKeys != rep.Keys {
		return rep, damaged("the restored copy holds %d keys, the source's checkpoint %s held %d at sequence %d (counted when the backup was created)",
			rep.Keys, m.Checkpoint.Name, *m.SourceKeys, m.Checkpoint.Sequence)
	}
	return rep, nil
}

// countKeys counts the live keys of db, every entry read with checksums
// verified: verify's count of the copy and create's of the source's
// checkpoint (CountCheckpointKeys) are this one function, so they agree
// on what a key is.
func countKeys(ctx context.Context, db *grocksdb.DB) (uint64, error) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	ro.SetVerifyChecksums(true)
	ro.SetFillCache(false)
	it := db.NewIterator(ro)
	defer it.Close()
	var n uint64
	for it.SeekToFirst(); it.Valid(); it.Next() {
		n++
		if n%100000 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
	return n, it.Err()
}

// CountCheckpointKeys counts the live keys of checkpoint name of the
// database in store (RFC 0011 step 14a): the read-only view a checkpoint
// server opens (shalefs.OpenCheckpointReader: catalog replayed, record
// and MANIFEST copy checked, tables read from the store by key), RocksDB
// opened read-only on it, and verify's countKeys. scratch holds the
// reader's cache (removed after); the reader's lease names the tables
// while it counts and is dropped after. It writes only that lease.
func CountCheckpointKeys(ctx context.Context, store objstore.Store, name, scratch string) (uint64, error) {
	dir, err := os.MkdirTemp(scratch, "shale-count-")
	if err != nil {
		return 0, fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(dir)
	cache := filepath.Join(dir, "db")
	// A bounded cache: tables past it are read range by range, so the
	// count needs little local disk.
	r, _, err := shalefs.OpenCheckpointReader(ctx, shalefs.Config{Store: store, CacheDir: cache, CacheBytes: 256 << 20}, name)
	if err != nil {
		return 0, err
	}
	defer r.Stop()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetInfoLogLevel(grocksdb.FatalInfoLogLevel)
	fs := rocksshim.AttachFileSystem(opts, cache, r)
	defer fs.Close()
	db, err := grocksdb.OpenDbForReadOnly(opts, cache, false)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %q of %s: RocksDB cannot open it read-only: %w", name, store.URL(), err)
	}
	defer db.Close()
	n, err := countKeys(ctx, db)
	if err != nil {
		return n, fmt.Errorf("checkpoint %q of %s: reading its keys: %w", name, store.URL(), err)
	}
	return n, nil
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
