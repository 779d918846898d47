package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/linxGnu/grocksdb"
)

// ingestDir is where files to ingest are staged, inside the database's
// directory so that RocksDB's copy into the database stays on one disk. A
// subdirectory is never one of the FileSystem's managed files.
const ingestDir = "ingest"

// StagingDir returns the directory where files to Ingest are staged
// (created if missing).
func (d *DB) StagingDir() (string, error) {
	p := filepath.Join(d.dir, ingestDir)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return "", fmt.Errorf("cannot create the ingest staging directory: %w", err)
	}
	return p, nil
}

// clearStaging removes files a crashed process left in the staging
// directory.
func clearStaging(dir string) { os.RemoveAll(filepath.Join(dir, ingestDir)) }

// Ingest adds SST files built with SSTWriter (or any SstFileWriter with the
// bytewise comparator) to the database with IngestExternalFile: RocksDB
// copies each into the database (through the Shale FileSystem: an upload
// to the store) and records them in the MANIFEST with a sync, so the pairs
// are durable when it returns, and newer than every earlier write. The
// files given stay where they are; the caller removes them.
func (d *DB) Ingest(paths ...string) error {
	if err := d.enterWrite(); err != nil {
		return err
	}
	defer d.leaveWrite()
	o := grocksdb.NewDefaultIngestExternalFileOptions()
	defer o.Destroy()
	// Copy, never link: the copy goes through the FileSystem into the
	// store, and the staged file is the caller's to remove.
	o.SetMoveFiles(false)
	o.SetAllowGlobalSeqNo(true)
	o.SetAllowBlockingFlush(true)
	return d.db.IngestExternalFile(paths, o)
}

// SyncWAL makes every write acknowledged so far durable, as a sync write
// would (with the Shale FileSystem: uploads the WAL's unsynced tail).
func (d *DB) SyncWAL() error {
	if err := d.enter(); err != nil {
		return err
	}
	defer d.leave()
	return d.write(true, func() error { return d.db.FlushWAL(true) })
}

// SSTWriter builds an SST file for Ingest with the table format of Shale's
// databases (LZ4, 10-bit bloom filters, format version 5). Keys must be
// added in strictly increasing bytewise order.
type SSTWriter struct {
	opts  *grocksdb.Options
	bbto  *grocksdb.BlockBasedTableOptions
	env   *grocksdb.EnvOptions
	w     *grocksdb.SSTFileWriter
	last  []byte
	count int
}

// NewSSTWriter creates the file path.
func NewSSTWriter(path string) (*SSTWriter, error) {
	s := &SSTWriter{opts: grocksdb.NewDefaultOptions(), bbto: grocksdb.NewDefaultBlockBasedTableOptions(), env: grocksdb.NewDefaultEnvOptions()}
	s.bbto.SetFilterPolicy(grocksdb.NewBloomFilter(10))
	s.bbto.SetFormatVersion(5)
	s.opts.SetBlockBasedTableFactory(s.bbto)
	s.opts.SetCompression(grocksdb.LZ4Compression)
	s.w = grocksdb.NewSSTFileWriter(s.env, s.opts)
	if err := s.w.Open(path); err != nil {
		s.free()
		return nil, fmt.Errorf("cannot create SST file %s: %w", path, err)
	}
	return s, nil
}

// Put adds a pair; keys must increase strictly.
func (s *SSTWriter) Put(key, value []byte) error {
	if s.count > 0 && bytes.Compare(key, s.last) <= 0 {
		return fmt.Errorf("SST keys out of order: %q after %q", key, s.last)
	}
	if err := s.w.Put(key, value); err != nil {
		return err
	}
	s.last = append(s.last[:0], key...)
	s.count++
	return nil
}

// Count is the number of pairs added.
func (s *SSTWriter) Count() int { return s.count }

// Finish completes the file; the writer is unusable afterwards.
func (s *SSTWriter) Finish() error {
	defer s.free()
	if s.count == 0 {
		return errors.New("an SST file needs at least one pair")
	}
	return s.w.Finish()
}

// Abort releases the writer without completing the file.
func (s *SSTWriter) Abort() { s.free() }

func (s *SSTWriter) free() {
	if s.w != nil {
		s.w.Destroy()
		s.w = nil
		s.env.Destroy()
		s.opts.Destroy()
		s.bbto.Destroy()
	}
}
