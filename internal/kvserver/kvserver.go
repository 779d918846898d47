// Package kvserver implements the gRPC KV service (api/kv/v1) over an
// engine.DB: request validation against size limits, the mapping of
// engine errors to gRPC codes, and chunked streaming of scans.
package kvserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/rocksshim"
	"github.com/shale-rocks/shale/internal/shalefs"
	"github.com/shale-rocks/shale/internal/version"
)

// Limits bound request sizes; the zero value is not valid.
type Limits struct {
	MaxKeyBytes   int // --max-key-size
	MaxValueBytes int // --max-value-size
	MaxBatchBytes int // --max-batch-size: total of keys and values in one Write
}

// DefaultLimits: keys up to 64 KiB, values up to 32 MiB, batches up to 64 MiB.
func DefaultLimits() Limits {
	return Limits{MaxKeyBytes: 64 << 10, MaxValueBytes: 32 << 20, MaxBatchBytes: 64 << 20}
}

// MaxMessageBytes is the largest request the gRPC server must accept so
// that oversized keys and values reach validation (and get a message that
// names the limit) instead of being cut off by the transport.
func (l Limits) MaxMessageBytes() int {
	return max(l.MaxBatchBytes, l.MaxValueBytes+l.MaxKeyBytes) + 1<<20
}

// Validate reports limits that cannot work.
func (l Limits) Validate() error {
	switch {
	case l.MaxKeyBytes <= 0:
		return fmt.Errorf("--max-key-size must be positive, got %d", l.MaxKeyBytes)
	case l.MaxValueBytes < 0:
		return fmt.Errorf("--max-value-size must not be negative, got %d", l.MaxValueBytes)
	case l.MaxBatchBytes < l.MaxKeyBytes+l.MaxValueBytes:
		return fmt.Errorf("--max-batch-size (%d) must be at least --max-key-size + --max-value-size (%d)", l.MaxBatchBytes, l.MaxKeyBytes+l.MaxValueBytes)
	case l.MaxMessageBytes() > 1<<30:
		return fmt.Errorf("size limits over 1 GiB are not supported (gRPC messages that large are impractical)")
	}
	return nil
}

// Info describes the server for Status.
type Info struct {
	Role  kvv1.Role
	Epoch uint64
	DB    string // the --db URL
	// Durable, on a primary, is notified when writes became durable in the
	// store; Watch streams it to secondaries.
	Durable *Notifier
	// Logs, on a primary, reports the logs it writes as stored and the
	// MANIFEST its CURRENT names; Watch events carry them as hints.
	Logs func() ([]*kvv1.LogTail, string)
	// Lag, on a secondary, reports the primary's last announced sequence
	// number and how long the oldest unapplied announced write has waited.
	Lag func() (primarySeq uint64, lag time.Duration)
	// Guard, when set, is asked before every request whether this server
	// still owns the database (fencing); nil for a plain local database.
	Guard Guard
	// Tiers, when set, reports the live tables per storage tier.
	Tiers func() []*kvv1.TierUsage
	// SetColdAfter, on a primary, changes its cold-after (SetTiering);
	// nil on a secondary. ColdTier: the primary has a cold tier
	// (--cold-db), without which tiering cannot be turned on.
	SetColdAfter func(time.Duration) error
	ColdTier     bool
	// Checkpoints, on a primary, creates, lists and deletes checkpoints;
	// on a checkpoint server (a secondary fixed at one), it only lists.
	// Nil: the server answers FAILED_PRECONDITION naming the primary.
	Checkpoints Checkpoints
	// StepDown, on a primary, hands the database over to a standby
	// (RFC 0012); nil: FAILED_PRECONDITION.
	StepDown func(ctx context.Context, epoch uint64) (*kvv1.StepDownResponse, error)
}

// Checkpoints is the checkpoint catalog of a primary (shalefs.Owner, with
// the engine's flush) or the listing of a reader.
type Checkpoints interface {
	CreateCheckpoint(ctx context.Context, req shalefs.CheckpointRequest) (shalefs.CheckpointInfo, error)
	ListCheckpoints(ctx context.Context) ([]shalefs.CheckpointInfo, error)
	DeleteCheckpoint(ctx context.Context, name string) error
}

// Guard reports whether a server may serve. Errors that implement
// Fenced() bool mean a newer owner took over: permanent.
type Guard interface {
	// ReadAllowed fails when the server is fenced or its read lease ran out.
	ReadAllowed() error
	// FenceError is non-nil once the server is fenced.
	FenceError() error
}

// Server is the KV service.
type Server struct {
	kvv1.UnimplementedKVServer
	db     *engine.DB
	limits Limits
	info   Info
}

// New returns a KV service over db.
func New(db *engine.DB, limits Limits, info Info) *Server {
	return &Server{db: db, limits: limits, info: info}
}

// scanChunkBytes bounds one ScanResponse (a single larger pair still goes
// in a chunk of its own).
const scanChunkBytes = 1 << 20
const scanChunkPairs = 1024

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// showKey renders a key for an error message, shortened: what
// fmt.Sprintf("%q", k) gives, built without fmt (a Get of a missing key
// pays for it).
func showKey(k []byte) string {
	if len(k) > 40 {
		return strconv.Quote(string(k[:40])) + "... (" + strconv.Itoa(len(k)) + " bytes)"
	}
	return strconv.Quote(string(k))
}

func (s *Server) checkKey(k []byte) error {
	if len(k) == 0 {
		return invalid("key is empty; keys must be 1 to %d bytes", s.limits.MaxKeyBytes)
	}
	if len(k) > s.limits.MaxKeyBytes {
		return invalid("key %s is %d bytes, over the %d-byte limit (raise it with --max-key-size)", showKey(k), len(k), s.limits.MaxKeyBytes)
	}
	return nil
}

func (s *Server) checkValue(k, v []byte) error {
	if len(v) > s.limits.MaxValueBytes {
		return invalid("value for key %s is %d bytes, over the %d-byte limit (raise it with --max-value-size)", showKey(k), len(v), s.limits.MaxValueBytes)
	}
	return nil
}

func guardError(err error) error {
	var f interface{ Fenced() bool }
	if errors.As(err, &f) && f.Fenced() {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// canRead fails reads of a server that may no longer own the database.
func (s *Server) canRead() error {
	if s.info.Guard == nil {
		return nil
	}
	if err := s.info.Guard.ReadAllowed(); err != nil {
		return guardError(err)
	}
	return nil
}

// canWrite fails writes of a fenced server before they reach RocksDB (a
// sync=false write would otherwise be acknowledged from the memtable).
func (s *Server) canWrite() error {
	if s.info.Role == kvv1.Role_ROLE_SECONDARY {
		return status.Error(codes.FailedPrecondition, "read-only replica: send writes to the primary (the <name>-rw Service, or the address of `shale primary`)")
	}
	if s.info.Guard == nil {
		return nil
	}
	if err := s.info.Guard.FenceError(); err != nil {
		return guardError(err)
	}
	return nil
}

// outcomeGuard is a Guard that knows whether a failed write may have been
// applied all the same (an upload raced the fence).
type outcomeGuard interface {
	WriteOutcomeUnknown() bool
}

// writeError maps a write that failed inside the engine. FAILED_PRECONDITION
// ("fenced") promises the write was not applied, ever: it is returned only
// when the guard knows no upload of this owner may have landed unseen.
// Anything else may have reached the store (a segment whose reply was lost,
// a first segment that raced a takeover) and is UNAVAILABLE with "outcome
// unknown": the client reads the key back from the current primary.
func (s *Server) writeError(ctx context.Context, err error) error {
	if s.info.Guard != nil {
		if ferr := s.info.Guard.FenceError(); ferr != nil {
			if g, ok := s.info.Guard.(outcomeGuard); !ok || !g.WriteOutcomeUnknown() {
				return guardError(ferr)
			}
			return status.Errorf(codes.Unavailable, "write outcome unknown (it may have been applied; read it back from the new primary): %v", ferr)
		}
	}
	switch {
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrWritesStopped), ctx.Err() != nil:
		return dbError(ctx, err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "write outcome unknown (it may have been applied; retry or read it back): rocksdb: %v", err)
}

// dbError maps an engine error to a gRPC status.
func dbError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrClosed):
		return status.Error(codes.Unavailable, "database is shutting down; retry against the new primary")
	case errors.Is(err, engine.ErrWritesStopped):
		// Refused before RocksDB saw it (RFC 0012).
		return status.Error(codes.Unavailable, "primary is stepping down (switchover): write not applied; retry against the new primary")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "rocksdb: %v", err)
}

// StepDown implements KV (RFC 0012).
func (s *Server) StepDown(ctx context.Context, r *kvv1.StepDownRequest) (*kvv1.StepDownResponse, error) {
	if s.info.StepDown == nil || s.info.Role != kvv1.Role_ROLE_PRIMARY {
		return nil, status.Errorf(codes.FailedPrecondition, "not the owner of epoch %d: only a primary steps down", r.Epoch)
	}
	return s.info.StepDown(ctx, r.Epoch)
}

// Put implements KV.
func (s *Server) Put(ctx context.Context, r *kvv1.PutRequest) (*kvv1.PutResponse, error) {
	if err := s.checkKey(r.Key); err != nil {
		return nil, err
	}
	if err := s.checkValue(r.Key, r.Value); err != nil {
		return nil, err
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.db.Put(r.Key, r.Value, r.Sync); err != nil {
		return nil, s.writeError(ctx, err)
	}
	s.durable(r.Sync)
	return &kvv1.PutResponse{Sequence: s.db.LatestSequence()}, nil
}

// durable announces a synced write to watchers once its sequence number is
// visible (the FileSystem's own notification comes from inside the WAL
// sync, before RocksDB publishes the sequence).
func (s *Server) durable(synced bool) {
	if synced && s.info.Durable != nil {
		s.info.Durable.Notify()
	}
}

// Get implements KV.
func (s *Server) Get(ctx context.Context, r *kvv1.GetRequest) (*kvv1.GetResponse, error) {
	if err := s.checkKey(r.Key); err != nil {
		return nil, err
	}
	if err := s.canRead(); err != nil {
		return nil, err
	}
	v, ok, err := s.db.Get(r.Key)
	if err != nil {
		return nil, dbError(ctx, err)
	}
	if !ok {
		return nil, status.Error(codes.NotFound, "key "+showKey(r.Key)+" not found")
	}
	return &kvv1.GetResponse{Value: v}, nil
}

// Delete implements KV.
func (s *Server) Delete(ctx context.Context, r *kvv1.DeleteRequest) (*kvv1.DeleteResponse, error) {
	if err := s.checkKey(r.Key); err != nil {
		return nil, err
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.db.Delete(r.Key, r.Sync); err != nil {
		return nil, s.writeError(ctx, err)
	}
	s.durable(r.Sync)
	return &kvv1.DeleteResponse{Sequence: s.db.LatestSequence()}, nil
}

// Write implements KV: the whole batch is validated before anything is
// applied, so a bad mutation rejects the batch and writes nothing.
func (s *Server) Write(ctx context.Context, r *kvv1.WriteRequest) (*kvv1.WriteResponse, error) {
	if len(r.Mutations) == 0 {
		return nil, invalid("batch has no mutations; send at least one put or delete")
	}
	ms := make([]engine.Mutation, len(r.Mutations))
	total := 0
	for i, m := range r.Mutations {
		switch op := m.Op.(type) {
		case *kvv1.Mutation_Put_:
			if err := s.checkKey(op.Put.Key); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "mutation %d: %s", i, status.Convert(err).Message())
			}
			if err := s.checkValue(op.Put.Key, op.Put.Value); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "mutation %d: %s", i, status.Convert(err).Message())
			}
			ms[i] = engine.Mutation{Key: op.Put.Key, Value: op.Put.Value}
			total += len(op.Put.Key) + len(op.Put.Value)
		case *kvv1.Mutation_Delete_:
			if err := s.checkKey(op.Delete.Key); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "mutation %d: %s", i, status.Convert(err).Message())
			}
			ms[i] = engine.Mutation{Key: op.Delete.Key, Delete: true}
			total += len(op.Delete.Key)
		default:
			return nil, invalid("mutation %d has neither put nor delete", i)
		}
	}
	if total > s.limits.MaxBatchBytes {
		return nil, invalid("batch is %d bytes of keys and values, over the %d-byte limit (split it, or raise --max-batch-size)", total, s.limits.MaxBatchBytes)
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.db.Write(ms, r.Sync); err != nil {
		return nil, s.writeError(ctx, err)
	}
	s.durable(r.Sync)
	return &kvv1.WriteResponse{Sequence: s.db.LatestSequence()}, nil
}

// MultiGet implements KV.
func (s *Server) MultiGet(ctx context.Context, r *kvv1.MultiGetRequest) (*kvv1.MultiGetResponse, error) {
	if len(r.Keys) == 0 {
		return nil, invalid("multiget has no keys; send at least one")
	}
	for i, k := range r.Keys {
		if err := s.checkKey(k); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "key %d: %s", i, status.Convert(err).Message())
		}
	}
	if err := s.canRead(); err != nil {
		return nil, err
	}
	vals, found, err := s.db.MultiGet(r.Keys)
	if err != nil {
		return nil, dbError(ctx, err)
	}
	resp := &kvv1.MultiGetResponse{Results: make([]*kvv1.MultiGetResponse_Result, len(r.Keys))}
	for i, k := range r.Keys {
		resp.Results[i] = &kvv1.MultiGetResponse_Result{Key: k, Found: found[i], Value: vals[i]}
	}
	return resp, nil
}

// Scan implements KV.
func (s *Server) Scan(r *kvv1.ScanRequest, stream kvv1.KV_ScanServer) error {
	if len(r.Prefix) > 0 && (len(r.Start) > 0 || len(r.End) > 0) {
		return invalid("scan prefix cannot be combined with start or end; use one or the other")
	}
	if len(r.Start) > 0 && len(r.End) > 0 && bytes.Compare(r.Start, r.End) > 0 {
		return invalid("scan start %s is after end %s; start must be <= end (use reverse=true for descending order)", showKey(r.Start), showKey(r.End))
	}
	for _, b := range [][]byte{r.Start, r.End, r.Prefix} {
		if len(b) > s.limits.MaxKeyBytes {
			return invalid("scan bound %s is %d bytes, over the %d-byte key limit (--max-key-size)", showKey(b), len(b), s.limits.MaxKeyBytes)
		}
	}
	if err := s.canRead(); err != nil {
		return err
	}
	ctx := stream.Context()
	chunk := &kvv1.ScanResponse{}
	size := 0
	flush := func() error {
		if len(chunk.Pairs) == 0 {
			return nil
		}
		err := stream.Send(chunk)
		chunk, size = &kvv1.ScanResponse{}, 0
		return err
	}
	err := s.db.Scan(engine.ScanOptions{
		Start: r.Start, End: r.End, Prefix: r.Prefix,
		Limit: r.Limit, Reverse: r.Reverse, KeysOnly: r.KeysOnly,
	}, func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(chunk.Pairs) == 0 {
			// Long scans re-check ownership before every chunk.
			if err := s.canRead(); err != nil {
				return err
			}
		}
		kv := &kvv1.KeyValue{Key: append([]byte{}, k...)}
		if !r.KeysOnly {
			kv.Value = append([]byte{}, v...)
		}
		if size > 0 && (size+len(k)+len(v) > scanChunkBytes || len(chunk.Pairs) >= scanChunkPairs) {
			if err := flush(); err != nil {
				return err
			}
		}
		chunk.Pairs = append(chunk.Pairs, kv)
		size += len(k) + len(v)
		return nil
	})
	if err == nil {
		err = flush()
	}
	return dbError(ctx, err)
}

// Flush implements KV.
func (s *Server) Flush(ctx context.Context, _ *kvv1.FlushRequest) (*kvv1.FlushResponse, error) {
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.db.Flush(); err != nil {
		return nil, s.writeError(ctx, err)
	}
	s.durable(true)
	return &kvv1.FlushResponse{}, nil
}

// Compact implements KV.
func (s *Server) Compact(ctx context.Context, r *kvv1.CompactRequest) (*kvv1.CompactResponse, error) {
	if len(r.Start) > 0 && len(r.End) > 0 && bytes.Compare(r.Start, r.End) > 0 {
		return nil, invalid("compact start %s is after end %s; start must be <= end", showKey(r.Start), showKey(r.End))
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	if err := s.db.Compact(r.Start, r.End); err != nil {
		return nil, s.writeError(ctx, err)
	}
	return &kvv1.CompactResponse{}, nil
}

// SetTiering implements KV: a primary's cold-after, changed live.
func (s *Server) SetTiering(ctx context.Context, r *kvv1.SetTieringRequest) (*kvv1.SetTieringResponse, error) {
	if s.info.SetColdAfter == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server places no data (a secondary): call SetTiering on the primary (the <name>-rw Service, or the address of `shale primary`)")
	}
	var d time.Duration
	if r.ColdAfter != nil {
		if err := r.ColdAfter.CheckValid(); err != nil {
			return nil, invalid("cold_after: %v", err)
		}
		d = r.ColdAfter.AsDuration()
	}
	switch {
	case d < 0:
		return nil, invalid("cold_after %s is negative: want a duration of at least 1s, such as 24h, or 0 to turn tiering off", d)
	case d > 0 && d < time.Second:
		return nil, invalid("cold_after %s is under 1s (RocksDB ages data in seconds): want at least 1s, such as 24h, or 0 to turn tiering off", d)
	case d > 0 && !s.info.ColdTier:
		return nil, status.Error(codes.FailedPrecondition, "this primary has no cold tier: restart it with --cold-db (and --cold-after) to turn tiering on; the operator's next primary gets both from spec.tiering")
	}
	if err := s.canWrite(); err != nil {
		return nil, err
	}
	prev := s.db.ColdAfter()
	if err := s.info.SetColdAfter(d); err != nil {
		return nil, dbError(ctx, err)
	}
	return &kvv1.SetTieringResponse{Previous: durationpb.New(prev), ColdAfter: durationpb.New(d)}, nil
}

// Status implements KV.
func (s *Server) Status(ctx context.Context, _ *kvv1.StatusRequest) (*kvv1.StatusResponse, error) {
	st, err := s.db.Stats()
	if err != nil {
		return nil, dbError(ctx, err)
	}
	var primarySeq uint64
	var lag time.Duration
	if s.info.Lag != nil {
		primarySeq, lag = s.info.Lag()
	}
	var tiers []*kvv1.TierUsage
	if s.info.Tiers != nil {
		tiers = s.info.Tiers()
	}
	var coldAfter *durationpb.Duration
	if d := s.db.ColdAfter(); d > 0 {
		coldAfter = durationpb.New(d)
	}
	return &kvv1.StatusResponse{
		ColdAfter:       coldAfter,
		ColdTier:        s.info.ColdTier,
		Tiers:           tiers,
		Role:            s.info.Role,
		Epoch:           s.info.Epoch,
		PrimarySequence: primarySeq,
		LagSeconds:      lag.Seconds(),
		LatestSequence:  s.db.LatestSequence(),
		Db:              s.info.DB,
		Version:         version.Version,
		RocksdbVersion:  rocksshim.RocksDBVersion(),
		Stats: &kvv1.DBStats{
			EstimatedKeys:          st.EstimatedKeys,
			LiveSstBytes:           st.LiveSSTBytes,
			MemtableBytes:          st.MemtableBytes,
			SstFiles:               st.SSTFiles,
			FilesPerLevel:          st.FilesPerLevel,
			PendingCompactionBytes: st.PendingCompactionBytes,
			RunningCompactions:     st.RunningCompactions,
			RunningFlushes:         st.RunningFlushes,
			BackgroundErrors:       st.BackgroundErrors,
		},
	}, nil
}
