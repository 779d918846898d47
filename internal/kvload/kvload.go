// Package kvload is bulk loading: it reads key-value pairs, JSON lines
// ({"key": ..., "value": ...}, with keyBase64/valueBase64 for bytes that are
// not UTF-8, as `shale kv get -o json` prints them) or key<TAB>value lines
// (as `shale kv scan` prints them), with errors that name the line and what
// to write instead; it packs them for the Load RPC (the server unpacks them
// here too); and Load is the client of `shale kv load` (client.go).
package kvload

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Trailer keys of a Load that failed after it started: how much of it the
// server had applied (decimal counts). Applied messages went to the
// memtable, not durably; after a failure they may or may not stay.
const (
	TrailerAppliedMessages = "shale-load-applied-messages"
	TrailerAppliedPairs    = "shale-load-applied-pairs"
	TrailerAppliedBytes    = "shale-load-applied-bytes"
)

// Format of the input.
type Format int

const (
	// Auto: JSON lines if the first non-empty line starts with '{',
	// key<TAB>value lines otherwise.
	Auto Format = iota
	TSV
	JSON
)

// ParseFormat parses --format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "tsv":
		return TSV, nil
	case "json":
		return JSON, nil
	}
	return Auto, fmt.Errorf("unknown format %q: want auto, tsv (key<TAB>value lines) or json (JSON lines)", s)
}

func (f Format) String() string { return [...]string{"auto", "tsv", "json"}[f] }

// MaxLine bounds one input line.
const MaxLine = 256 << 20

// Reader reads pairs from lines.
type Reader struct {
	r      *bufio.Reader
	format Format
	line   int   // of the last pair returned
	read   int64 // bytes consumed
	buf    []byte
	key    []byte
	value  []byte
}

// NewReader reads pairs in format from r.
func NewReader(r io.Reader, format Format) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 1<<20), format: format}
}

// Line is the line number (from 1) of the last pair Next returned.
func (r *Reader) Line() int { return r.line }

// BytesRead is how much of the input has been consumed.
func (r *Reader) BytesRead() int64 { return r.read }

// Format is the input's format (known after the first pair when Auto).
func (r *Reader) Format() Format { return r.format }

// Next returns the next pair, or io.EOF after the last. The slices are
// valid until the next call. Empty lines are skipped; a line that is not a
// pair is an error naming it.
func (r *Reader) Next() (key, value []byte, err error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, nil, err
		}
		if len(line) == 0 {
			continue
		}
		if r.format == Auto {
			r.format = TSV
			if line[0] == '{' {
				r.format = JSON
			}
		}
		if r.format == JSON {
			key, value, err = r.parseJSON(line)
		} else {
			key, value, err = parseTSV(line)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w", r.line, err)
		}
		return key, value, nil
	}
}

// readLine returns the next line without its "\n" (and "\r"), counting it.
func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.r.ReadSlice('\n')
		r.read += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(r.buf)+len(chunk) > MaxLine {
				return nil, fmt.Errorf("line %d is longer than %d MiB; split the value or load it with shale kv put", r.line+1, MaxLine>>20)
			}
			r.buf = append(r.buf, chunk...)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		line := chunk
		if len(r.buf) > 0 {
			r.buf = append(r.buf, chunk...)
			line = r.buf
		}
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil, io.EOF
		}
		r.line++
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

func parseTSV(line []byte) ([]byte, []byte, error) {
	i := bytes.IndexByte(line, '\t')
	if i < 0 {
		return nil, nil, errors.New("no tab between key and value; want key<TAB>value (or JSON lines with --format json)")
	}
	if i == 0 {
		return nil, nil, errors.New("empty key; want key<TAB>value with a key of at least one byte")
	}
	return line[:i], line[i+1:], nil
}

// pairJSON is one JSON line; pointers tell absent fields from empty ones.
type pairJSON struct {
	Key         *string `json:"key"`
	KeyBase64   *string `json:"keyBase64"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"valueBase64"`
}

const jsonWant = `want {"key": "...", "value": "..."} (keyBase64/valueBase64 for bytes in base64)`

func (r *Reader) parseJSON(line []byte) ([]byte, []byte, error) {
	var p pairJSON
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, nil, fmt.Errorf("invalid JSON (%v); %s", err, jsonWant)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("more than one JSON value on the line; %s, one per line", jsonWant)
	}
	var err error
	if r.key, err = field(r.key[:0], p.Key, p.KeyBase64, "key"); err != nil {
		return nil, nil, err
	}
	if len(r.key) == 0 {
		return nil, nil, errors.New("empty key; keys need at least one byte")
	}
	if r.value, err = field(r.value[:0], p.Value, p.ValueBase64, "value"); err != nil {
		return nil, nil, err
	}
	return r.key, r.value, nil
}

func field(dst []byte, plain, b64 *string, name string) ([]byte, error) {
	switch {
	case plain != nil && b64 != nil:
		return nil, fmt.Errorf("both %q and %q given; use one", name, name+"Base64")
	case plain != nil:
		return append(dst, *plain...), nil
	case b64 != nil:
		out, err := base64.StdEncoding.AppendDecode(dst, []byte(*b64))
		if err != nil {
			return nil, fmt.Errorf("%s is not valid base64: %v", name+"Base64", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no %q (or %q); %s", name, name+"Base64", jsonWant)
}

// AppendPacked appends a pair to dst in the packed form of
// LoadRequest.packed: varint key length, key, varint value length, value.
func AppendPacked(dst, key, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// ErrPacked is a malformed packed pair.
var ErrPacked = errors.New("malformed packed pairs: want a varint length, the key, a varint length, the value, repeated")

// ForEachPacked calls fn with each pair of packed, in order (the slices
// point into packed), and stops at fn's first error.
func ForEachPacked(packed []byte, fn func(key, value []byte) error) error {
	for len(packed) > 0 {
		var kv [2][]byte
		for i := range kv {
			n, w := binary.Uvarint(packed)
			if w <= 0 || n > uint64(len(packed)-w) {
				return ErrPacked
			}
			kv[i] = packed[w : w+int(n) : w+int(n)]
			packed = packed[w+int(n):]
		}
		if err := fn(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}
