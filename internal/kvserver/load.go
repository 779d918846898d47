package kvserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/kvload"
	"github.com/shale-rocks/shale/internal/rocksshim"
)

// loadBatch is one Load message, serialized, on its way to the applier.
type loadBatch struct {
	b            rocksshim.Batch
	pairs, bytes uint64
}

// Load implements KV. One goroutine receives and validates message i+1
// while another applies message i, so decoding and RocksDB's inserts use
// two cores.
func (s *Server) Load(stream kvv1.KV_LoadServer) error {
	if err := s.canWrite(); err != nil {
		return err
	}
	ctx := stream.Context()
	var (
		applyErr error
		applied  loadApplied // written by the applier until applierDone closes
	)
	jobs := make(chan *loadBatch, 1)
	free := make(chan *loadBatch, 2)
	failed, applierDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(applierDone)
		for j := range jobs {
			if applyErr == nil {
				if err := s.db.WriteBatch(&j.b, false); err != nil {
					applyErr = err
					close(failed)
				} else {
					applied.messages++
					applied.pairs += j.pairs
					applied.bytes += j.bytes
				}
			}
			select {
			case free <- j:
			default:
			}
		}
	}()
	stop := func() { close(jobs); <-applierDone }
	// end ends a load that failed after it started (the applier stopped).
	end := func(err error) error { return endLoad(stream, err, applied) }

	var received uint64 // pairs received, for error messages
	sync := false
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			stop()
			return end(err)
		}
		sync = sync || req.Sync
		var j *loadBatch
		select {
		case j = <-free:
			j.b.Reset()
			j.pairs, j.bytes = 0, 0
		default:
			j = &loadBatch{}
		}
		add := func(k, v []byte) error {
			received++
			err := s.checkKey(k)
			if err == nil {
				err = s.checkValue(k, v)
			}
			if err != nil {
				return err
			}
			j.b.Put(k, v)
			j.bytes += uint64(len(k) + len(v))
			j.pairs++
			return nil
		}
		var bad error
		for _, p := range req.Pairs {
			if bad = add(p.Key, p.Value); bad != nil {
				break
			}
		}
		if bad == nil {
			bad = kvload.ForEachPacked(req.Packed, add)
		}
		if errors.Is(bad, kvload.ErrPacked) {
			stop()
			return end(status.Errorf(codes.InvalidArgument, "load message after pair %d: %v; the %d pairs before its message were loaded", received, bad, applied.pairs))
		}
		if bad != nil {
			stop()
			return end(status.Errorf(codes.InvalidArgument, "pair %d of the load: %s; the %d pairs before its message were loaded",
				received, status.Convert(bad).Message(), applied.pairs))
		}
		if j.bytes > uint64(s.limits.MaxBatchBytes) {
			stop()
			return end(invalid("load message ending at pair %d is %d bytes of keys and values, over the %d-byte batch limit (send smaller messages, or raise --max-batch-size); the %d pairs before it were loaded",
				received, j.bytes, s.limits.MaxBatchBytes, applied.pairs))
		}
		if err := s.canWrite(); err != nil {
			stop()
			return end(err) // fenced: "not applied" only if nothing was
		}
		select {
		case jobs <- j:
			continue
		case <-failed:
		}
		break // the applier failed: stop receiving
	}
	stop()
	if applyErr != nil {
		return end(s.writeError(ctx, applyErr))
	}
	if sync {
		if err := s.db.SyncWAL(); err != nil {
			return end(s.writeError(ctx, err))
		}
		s.durable(true)
	}
	return stream.SendAndClose(&kvv1.LoadResponse{Pairs: applied.pairs, Bytes: applied.bytes, Sequence: s.db.LatestSequence()})
}

// loadApplied is how much of a load was applied: messages written to
// RocksDB (sync=false, so to the memtable), their pairs and bytes.
type loadApplied struct{ messages, pairs, bytes uint64 }

func (a loadApplied) String() string {
	return fmt.Sprintf("%d %s of this load (%d pairs) had been applied, not durably: they may or may not be in the database (read them back from the current primary, or load again: loading the same pairs again is harmless)",
		a.messages, map[bool]string{true: "message", false: "messages"}[a.messages == 1], a.pairs)
}

// endLoad ends a load that failed after it started. The trailer says how
// much of it was applied (kvload.TrailerApplied*), and so does the message.
// FAILED_PRECONDITION ("fenced") promises that nothing was applied, ever:
// once a message was, a fence ends the load UNAVAILABLE, outcome unknown.
// The applied messages are in the deposed owner's memtable, and another
// client's synced write may have carried them to the store before the new
// owner sealed the WAL, or not.
func endLoad(stream kvv1.KV_LoadServer, err error, a loadApplied) error {
	stream.SetTrailer(metadata.Pairs(
		kvload.TrailerAppliedMessages, strconv.FormatUint(a.messages, 10),
		kvload.TrailerAppliedPairs, strconv.FormatUint(a.pairs, 10),
		kvload.TrailerAppliedBytes, strconv.FormatUint(a.bytes, 10)))
	st := status.Convert(err)
	switch {
	case st.Code() == codes.InvalidArgument:
		return err // its message says how many pairs were loaded
	case a.messages > 0 && st.Code() == codes.FailedPrecondition:
		return status.Errorf(codes.Unavailable, "load outcome unknown: %s; %s", st.Message(), a)
	case a.messages > 0:
		return status.Errorf(st.Code(), "%s; %s", st.Message(), a)
	}
	return err
}

// Ingest implements KV: the file is staged on the local disk, then
// ingested.
func (s *Server) Ingest(stream kvv1.KV_IngestServer) error {
	if err := s.canWrite(); err != nil {
		return err
	}
	ctx := stream.Context()
	dir, err := s.db.StagingDir()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	f, err := os.CreateTemp(dir, "*.sst")
	if err != nil {
		return status.Errorf(codes.Internal, "cannot stage the SST file: %v", err)
	}
	defer os.Remove(f.Name())
	var n uint64
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			_, err = f.Write(req.Data)
			n += uint64(len(req.Data))
		}
		if err != nil {
			f.Close()
			if _, ok := status.FromError(err); !ok {
				err = status.Errorf(codes.Internal, "cannot stage the SST file: %v", err)
			}
			return err
		}
	}
	if err := f.Close(); err != nil {
		return status.Errorf(codes.Internal, "cannot stage the SST file: %v", err)
	}
	if n == 0 {
		return invalid("ingest received no data; send the bytes of an SST file built with SstFileWriter")
	}
	// The limits hold for ingested entries as for Put and Write: an
	// oversized key would otherwise get in through the side door and
	// break readers that trust them.
	bad, _, err := rocksshim.CheckSSTSizes(f.Name(), s.limits.MaxKeyBytes, s.limits.MaxValueBytes)
	if err != nil {
		return invalid("not an SST file RocksDB can ingest (%d bytes received): %v; nothing was ingested", n, err)
	}
	if bad != nil {
		return invalid("%s; nothing was ingested", sstViolation(bad, s.limits))
	}
	if err := s.canWrite(); err != nil {
		return err
	}
	if err := s.db.Ingest(f.Name()); err != nil {
		if s.fenceErr() == nil && rejectedFile(err) {
			return invalid("not an SST file RocksDB can ingest (%d bytes received): %v", n, err)
		}
		return s.writeError(ctx, err)
	}
	s.durable(true)
	return stream.SendAndClose(&kvv1.IngestResponse{Bytes: n, Sequence: s.db.LatestSequence()})
}

func (s *Server) fenceErr() error {
	if s.info.Guard == nil {
		return nil
	}
	return s.info.Guard.FenceError()
}

// rejectedFile tells a file RocksDB refused to ingest (nothing was
// applied) from a failure to apply it.
func rejectedFile(err error) bool {
	msg := err.Error()
	for _, p := range []string{"Corruption:", "Invalid argument:", "Not implemented:"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// sstViolation says which limit an ingested file's entry breaks and how
// to raise it, in the words of the Put and Write checks.
func sstViolation(v *rocksshim.SSTEntryTooLarge, l Limits) string {
	key := fmt.Sprintf("%q", v.Key)
	if v.KeyLen > 40 {
		key = fmt.Sprintf("%q...", v.Key[:40])
	}
	switch {
	case v.KeyLen == 0:
		return fmt.Sprintf("entry %d of the SST file has an empty key; keys must be 1 to %d bytes", v.Index, l.MaxKeyBytes)
	case v.KeyLen > l.MaxKeyBytes:
		return fmt.Sprintf("entry %d of the SST file: key %s is %d bytes, over the %d-byte limit (raise it with --max-key-size)", v.Index, key, v.KeyLen, l.MaxKeyBytes)
	default:
		return fmt.Sprintf("entry %d of the SST file: value for key %s is %d bytes, over the %d-byte limit (raise it with --max-value-size)", v.Index, key, v.ValueLen, l.MaxValueBytes)
	}
}
