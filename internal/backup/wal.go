package backup

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A RocksDB WAL, read as the log format stores it (db/log_format.h in
// RocksDB 9.11): 32 KiB blocks of physical records, each a 7-byte header
// (masked CRC32C, length, type; 11 bytes with the log number for
// recyclable types) and a fragment of a logical record; a block's tail too
// short for a header is zero padding. A logical record of a WAL is a write
// batch: its sequence number (8 bytes) and count (4 bytes) first.

const (
	walBlockSize        = 32768
	walHeaderSize       = 7
	walRecyclableHeader = 11
)

// WALBatch is one write batch of a WAL: sequences Seq..Seq+Count-1, its
// bytes ending at End (the offset just after its last fragment).
type WALBatch struct {
	Seq, Count uint64
	End        int
}

// Last is the batch's last sequence number (a batch is one atomic write:
// it is in a restore whole or not at all).
func (b WALBatch) Last() uint64 { return b.Seq + max(b.Count, 1) - 1 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// unmaskCRC undoes RocksDB's crc32c::Mask.
func unmaskCRC(m uint32) uint32 {
	rot := m - 0xa282ead8
	return rot>>17 | rot<<15
}

// ReadWAL returns the complete write batches of a WAL's bytes, in order.
// It stops at the end of the data, at a zero (preallocated) header, or at
// a record the bytes end inside of (a tail a later segment completes):
// what it returns ends at a record boundary. A record whose checksum does
// not match, or a compressed WAL (not used by Shale), is an error naming
// the offset.
func ReadWAL(data []byte) ([]WALBatch, error) {
	var out []WALBatch
	var frag []byte
	inRecord := false
	off := 0
	for off < len(data) {
		left := walBlockSize - off%walBlockSize
		if left < walHeaderSize {
			off += left // padding
			continue
		}
		if len(data)-off < walHeaderSize {
			break // a header cut by the end of the data
		}
		h := data[off:]
		length := int(binary.LittleEndian.Uint16(h[4:6]))
		typ := h[6]
		hs := walHeaderSize
		if typ >= 5 && typ <= 8 || typ == 11 || typ == 131 {
			hs = walRecyclableHeader
		}
		if typ == 0 && length == 0 {
			break // preallocated space: the end
		}
		if len(data)-off < hs+length {
			break // the record's end is not stored yet
		}
		if hs+length > left {
			return out, fmt.Errorf("WAL record at offset %d crosses its block: not a RocksDB log", off)
		}
		payload := data[off+hs : off+hs+length]
		want := unmaskCRC(binary.LittleEndian.Uint32(h[0:4]))
		if got := crc32.Checksum(data[off+6:off+hs+length], castagnoli); got != want {
			return out, fmt.Errorf("WAL record at offset %d: checksum mismatch", off)
		}
		off += hs + length
		var done []byte
		switch typ {
		case 1, 5: // full
			done = payload
			inRecord = false
		case 2, 6: // first
			frag, inRecord = append([]byte(nil), payload...), true
		case 3, 7: // middle
			if !inRecord {
				return out, fmt.Errorf("WAL record at offset %d: a middle fragment without a first", off-hs-length)
			}
			frag = append(frag, payload...)
		case 4, 8: // last
			if !inRecord {
				return out, fmt.Errorf("WAL record at offset %d: a last fragment without a first", off-hs-length)
			}
			done, inRecord = append(frag, payload...), false
		case 9:
			return out, fmt.Errorf("WAL record at offset %d: the WAL is compressed, which a point-in-time restore does not read", off-hs-length)
		default:
			// Metadata (timestamp sizes, the predecessor WAL's info) or a
			// type RocksDB itself ignores: no write batch.
			continue
		}
		if done == nil {
			continue
		}
		if len(done) < 12 {
			return out, fmt.Errorf("WAL record ending at offset %d: %d bytes, too short for a write batch", off, len(done))
		}
		out = append(out, WALBatch{Seq: binary.LittleEndian.Uint64(done[0:8]), Count: uint64(binary.LittleEndian.Uint32(done[8:12])), End: off})
	}
	return out, nil
}
