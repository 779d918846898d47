package shalefs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Reading a table's properties block from the store, so that `shale admin
// tiers` can tell how old the data in the hot tier is without opening the
// database, and so that a primary can check a remote compaction's outputs
// before RocksDB installs them (one ranged GET of each output's tail). The layout is RocksDB's block-based table (table/format.cc,
// table/block_based/block_builder.cc): the file ends with a 53-byte footer
// (checksum type, metaindex and index block handles as varints padded to
// 40 bytes, format version, magic number); the metaindex block maps
// "rocksdb.properties" to the properties block's handle; both blocks are
// uncompressed key/value blocks followed by a 5-byte trailer.

const (
	footerLen     = 53
	blockMagic    = 0x88e241b785f4cff7 // kBlockBasedTableMagicNumber
	tailBytes     = 64 << 10           // one GET of the end usually holds every block needed
	trailerLen    = 5
	propsBlock    = "rocksdb.properties"
	propCreated   = "rocksdb.creation.time" // the oldest ancestor's creation time
	propSeqnoTime = "rocksdb.seqno.time.map"
)

type blockHandle struct{ off, size uint64 }

func readHandle(b []byte) (blockHandle, []byte, error) {
	off, n := binary.Uvarint(b)
	if n <= 0 {
		return blockHandle{}, nil, errors.New("bad block handle")
	}
	size, m := binary.Uvarint(b[n:])
	if m <= 0 {
		return blockHandle{}, nil, errors.New("bad block handle")
	}
	return blockHandle{off, size}, b[n+m:], nil
}

// parseFooter returns the metaindex handle of a block-based table footer.
func parseFooter(f []byte) (blockHandle, error) {
	if len(f) != footerLen {
		return blockHandle{}, fmt.Errorf("footer is %d bytes", len(f))
	}
	if binary.LittleEndian.Uint64(f[footerLen-8:]) != blockMagic {
		return blockHandle{}, errors.New("not a block-based table (bad magic number)")
	}
	h, _, err := readHandle(f[1:])
	return h, err
}

// parseBlock decodes an uncompressed key/value block (without trailer).
func parseBlock(b []byte) (map[string][]byte, error) {
	if len(b) < 4 {
		return nil, errors.New("block too short")
	}
	restarts := binary.LittleEndian.Uint32(b[len(b)-4:]) & 0x7fffffff
	end := len(b) - 4 - 4*int(restarts)
	if restarts == 0 || end < 0 {
		return nil, errors.New("bad restart array")
	}
	for i := 0; i < int(restarts); i++ {
		if int(binary.LittleEndian.Uint32(b[end+4*i:])) > end {
			return nil, errors.New("bad restart array")
		}
	}
	out := map[string][]byte{}
	var key []byte
	for p := b[:end]; len(p) > 0; {
		var v [3]uint64
		for i := range v {
			x, n := binary.Uvarint(p)
			if n <= 0 {
				return nil, errors.New("bad block entry")
			}
			v[i], p = x, p[n:]
		}
		shared, unshared, vlen := v[0], v[1], v[2]
		if shared > uint64(len(key)) || unshared+vlen > uint64(len(p)) {
			return nil, errors.New("bad block entry")
		}
		key = append(key[:shared], p[:unshared]...)
		out[string(key)] = p[unshared : unshared+vlen]
		p = p[unshared+vlen:]
	}
	return out, nil
}

// tableProperties reads the properties of the table stored under key
// (size bytes) in s.
func tableProperties(ctx context.Context, s objstore.Store, key string, size int64) (map[string][]byte, error) {
	if size < footerLen {
		return nil, errors.New("too small to be a table")
	}
	tailOff := max(size-tailBytes, 0)
	tail, err := getRange(ctx, s, key, tailOff, size-tailOff)
	if err != nil {
		return nil, err
	}
	block := func(h blockHandle) ([]byte, error) {
		if h.off > uint64(size) || h.size > uint64(size)-h.off || h.off+h.size+trailerLen > uint64(size) {
			return nil, fmt.Errorf("block handle (%d, %d) beyond the table's %d bytes", h.off, h.size, size)
		}
		end := int64(h.off + h.size + trailerLen)
		var b []byte
		if int64(h.off) >= tailOff && end <= size {
			b = tail[int64(h.off)-tailOff : end-tailOff]
		} else if b, err = getRange(ctx, s, key, int64(h.off), int64(h.size)+trailerLen); err != nil {
			return nil, err
		}
		if len(b) != int(h.size)+trailerLen {
			return nil, errors.New("short block")
		}
		if b[h.size] != 0 {
			return nil, fmt.Errorf("compressed meta block (type %d)", b[h.size])
		}
		return b[:h.size], nil
	}
	mh, err := parseFooter(tail[len(tail)-footerLen:])
	if err != nil {
		return nil, err
	}
	mb, err := block(mh)
	if err != nil {
		return nil, err
	}
	meta, err := parseBlock(mb)
	if err != nil {
		return nil, fmt.Errorf("metaindex: %w", err)
	}
	ph, _, err := readHandle(meta[propsBlock])
	if err != nil {
		return nil, fmt.Errorf("no properties block: %w", err)
	}
	pb, err := block(ph)
	if err != nil {
		return nil, err
	}
	props, err := parseBlock(pb)
	if err != nil {
		return nil, fmt.Errorf("properties: %w", err)
	}
	return props, nil
}

// dataTime is about when the oldest data of a table was written. With
// tiering, RocksDB stores (sequence number, time) samples in each table
// (rocksdb.seqno.time.map: a varint count, then varint deltas of sequence
// number and time), the first one taken at most a sample interval before
// the table's oldest key; that is the answer. Otherwise the creation time
// of the table's oldest ancestor, which a compaction's outputs inherit from
// all its inputs (after per-key placement, a hot table's claims the age of
// the oldest data the compaction read). Zero if unknown.
func dataTime(props map[string][]byte) time.Time {
	if m := props[propSeqnoTime]; len(m) > 0 {
		count, n := binary.Uvarint(m)
		if n > 0 && count > 0 {
			_, a := binary.Uvarint(m[n:])
			t, b := binary.Uvarint(m[n+max(a, 0):])
			if a > 0 && b > 0 && t > 0 {
				return time.Unix(int64(t), 0)
			}
		}
	}
	v, n := binary.Uvarint(props[propCreated])
	if n <= 0 || v == 0 {
		return time.Time{}
	}
	return time.Unix(int64(v), 0)
}

// TableProps are the properties of a table a primary checks a remote
// compaction's output by (RocksDB's table/table_properties.cc names).
type TableProps struct {
	// In RocksDB (7.8.3 as 9.11) Entries and Deletions count range
	// deletions too.
	Entries, Deletions, RangeDeletions, MergeOperands uint64
	// What RocksDB derives the table's unique id from.
	DBID, SessionID string
	OrigFileNumber  uint64
}

// parseTableProps decodes the properties a table must have.
func parseTableProps(props map[string][]byte) (TableProps, error) {
	var p TableProps
	for _, f := range []struct {
		name     string
		v        *uint64
		required bool
	}{
		{"rocksdb.num.entries", &p.Entries, true},
		{"rocksdb.deleted.keys", &p.Deletions, true},
		{"rocksdb.num.range-deletions", &p.RangeDeletions, false},
		{"rocksdb.merge.operands", &p.MergeOperands, false},
		{"rocksdb.original.file.number", &p.OrigFileNumber, false},
	} {
		b, ok := props[f.name]
		if !ok {
			if f.required {
				return TableProps{}, fmt.Errorf("no %s property", f.name)
			}
			continue
		}
		v, n := binary.Uvarint(b)
		if n != len(b) {
			return TableProps{}, fmt.Errorf("property %s is not a varint", f.name)
		}
		*f.v = v
	}
	p.DBID = string(props["rocksdb.creating.db.identity"])
	p.SessionID = string(props["rocksdb.creating.session.identity"])
	if p.RangeDeletions > p.Deletions || p.Deletions > p.Entries {
		return TableProps{}, fmt.Errorf("inconsistent counts: %d entries, %d deletions, %d range deletions", p.Entries, p.Deletions, p.RangeDeletions)
	}
	return p, nil
}

func getRange(ctx context.Context, s objstore.Store, key string, off, n int64) ([]byte, error) {
	r, _, err := s.Get(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
