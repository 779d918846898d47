// Package secondary runs a Shale secondary: a read-only replica of a
// database that a primary owns (docs/rfcs/0007-reader-leases.md). It opens
// RocksDB as a secondary (DB::OpenAsSecondary) on a reader of the Shale
// FileSystem with its own local cache, catches up with the primary's WAL
// and MANIFEST as they grow in the object store, and serves the KV API's
// reads; writes are refused.
package secondary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/iometrics"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/node"
	"github.com/shale-rocks/shale/internal/shalefs"
)

// Config is what a secondary needs to run.
type Config struct {
	DB            string // store URL of the primary's database
	Listen        string // gRPC address
	MetricsListen string // HTTP address for /metrics; "" disables it
	Pprof         bool   // serve /debug/pprof on MetricsListen too
	// Security is the KV port's TLS and client access, as a primary's;
	// with TLS, the same certificate is this replica's client identity on
	// the primary's Watch stream (the primary grants its database's
	// secondaries read).
	Security auth.ServerConfig
	Limits   kvserver.Limits
	Engine   engine.Options
	// Storage configures the reader: cache dir and size, timeouts. Store
	// and Logger are set by Start; an empty CacheDir gets
	// node.DefaultCacheDir, one per database and Listen.
	Storage shalefs.Config
	// CatchupInterval is how often the secondary looks for new writes when
	// it has no notification stream from the primary (ten times less often
	// while it has one).
	CatchupInterval time.Duration
	// Primary is the primary's gRPC address: its Watch stream announces
	// new durable writes, so the secondary catches up at once ("": poll).
	Primary string
	Logger  *slog.Logger
	// OnCatchUp, when set, is called after each successful catch-up with
	// the sequence number now applied (make bench-secondary measures
	// visibility lag with it).
	OnCatchUp func(applied uint64)
	// ColdDB and ColdEndpoint name the database's cold tier, if it has one
	// (docs/tiering.md).
	ColdDB, ColdEndpoint string
	// Follower opens RocksDB as a follower (DB::OpenAsFollower, RocksDB
	// 9.x; experimental) instead of a secondary: its own thread tails the
	// MANIFEST every CatchupInterval and it reads no WAL, so it applies
	// only flushed writes (docs/secondary.md, "Followers (RocksDB 9.x)").
	Follower bool
	// Checkpoint, when set, fixes the server at that checkpoint
	// (docs/checkpoints.md): its tables and frozen MANIFEST, no WAL; it
	// never catches up, and its reader lease keeps the checkpoint's
	// tables while it serves, even if the checkpoint is deleted.
	Checkpoint string
}

// Server is a running secondary.
type Server struct {
	cfg      Config
	node     *node.Node // holds the cache dir while serving
	fs       *shalefs.Reader
	db       *engine.DB
	ep       *kvserver.Endpoint
	stop     chan struct{}
	wg       sync.WaitGroup
	kick     chan struct{} // a notification: catch up now
	watching atomic.Bool   // the primary's stream is connected
	// hint is what the primary's last notification said it has stored
	// (nil while its stream is down). Events are cumulative: the last one
	// says all a catch-up needs to know.
	hint atomic.Pointer[shalefs.Hint]

	// Lag: the primary's last announced sequence, and since when (unix
	// nanoseconds; 0: caught up) an announced write waits to be applied.
	primarySeq   atomic.Uint64
	pendingSince atomic.Int64

	catchups, failures prometheus.Counter
	lastCatchup        prometheus.Gauge
}

// lag reports the primary's last announced sequence number and how long
// the oldest announced write not yet applied has waited.
func (s *Server) lag() (uint64, time.Duration) {
	seq := s.primarySeq.Load()
	if p := s.pendingSince.Load(); p != 0 && s.db.LatestSequence() < seq {
		return seq, time.Since(time.Unix(0, p))
	}
	return seq, 0
}

// Start opens the database read-only and starts serving. On error nothing
// is left running or open.
func Start(cfg Config) (_ *Server, err error) {
	if cfg.CatchupInterval <= 0 {
		cfg.CatchupInterval = time.Second
	}
	n, err := node.Start(node.Config{Kind: node.Secondary, Listen: cfg.Listen, MetricsListen: cfg.MetricsListen, Pprof: cfg.Pprof,
		Security: cfg.Security, Limits: cfg.Limits, Storage: cfg.Storage, Logger: cfg.Logger,
		Stores: node.StoreConfig{DB: cfg.DB, ColdDB: cfg.ColdDB, ColdEndpoint: cfg.ColdEndpoint, Store: cfg.Storage.Store, Cold: cfg.Storage.Cold}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Abandon()
		}
	}()
	cfg.Logger = n.Logger
	// The Watch client's TLS files are loaded now: unusable ones fail the
	// start instead of leaving the replica polling without a word.
	var watchDial []grpc.DialOption
	if cfg.Primary != "" {
		if watchDial, err = (auth.ClientConfig{TLS: cfg.Security.TLS}).DialOptions(); err != nil {
			return nil, fmt.Errorf("--primary: %w", err)
		}
	}
	s := &Server{cfg: cfg, node: n, ep: n.Endpoint, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	sc := n.Storage
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	var ck shalefs.CheckpointInfo
	if cfg.Checkpoint != "" {
		if cfg.Follower {
			cancel()
			return nil, errors.New("--checkpoint and --follower do not go together: a server fixed at a checkpoint never follows the primary")
		}
		s.fs, ck, err = shalefs.OpenCheckpointReader(ctx, sc, cfg.Checkpoint)
	} else {
		s.fs, err = shalefs.OpenReader(ctx, sc)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("--db %s: %w", n.URL, err)
	}
	defer func() {
		if err != nil {
			s.fs.Stop()
		}
	}()
	eo := cfg.Engine
	eo.FileSystem = s.fs
	eo.SecondaryDir = filepath.Join(sc.CacheDir, "secondary")
	if cfg.Follower {
		eo.SecondaryDir = filepath.Join(sc.CacheDir, "follower")
		eo.FollowerRefresh = cfg.CatchupInterval
	}
	if s.db, err = engine.Open(sc.CacheDir, eo); err != nil {
		mode := "secondary"
		if cfg.Follower {
			mode = "follower"
		}
		return nil, fmt.Errorf("--db %s: open as %s: %w", n.URL, mode, err)
	}
	s.fs.Serving()

	s.catchups = prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_secondary_catchups_total", Help: "Catch-ups with the primary that succeeded."})
	s.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "shale_secondary_catchup_failures_total", Help: "Catch-ups with the primary that failed (retried at the next interval)."})
	s.lastCatchup = prometheus.NewGauge(prometheus.GaugeOpts{Name: "shale_secondary_last_catchup_timestamp_seconds", Help: "When the last successful catch-up finished (Unix time)."})
	lagSeq := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shale_secondary_lag_sequence", Help: "Sequence numbers the primary announced that this replica has not applied yet."},
		func() float64 {
			p, a := s.primarySeq.Load(), s.db.LatestSequence()
			if p > a {
				return float64(p - a)
			}
			return 0
		})
	lagSec := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shale_secondary_lag_seconds", Help: "How long the oldest write the primary announced has waited to be applied here (0: caught up)."},
		func() float64 { _, l := s.lag(); return l.Seconds() })
	reg := n.Registry
	reg.MustRegister(s.catchups, s.failures, s.lastCatchup, lagSeq, lagSec, engine.NewCollector(s.db))
	iometrics.RegisterTierUsage(reg, s.fs.TierUsage, nil)
	iometrics.RegisterRangeCache(reg, s.fs.RangeCacheStats)
	s.ep.Serve(kvserver.New(s.db, cfg.Limits, kvserver.Info{Role: kvv1.Role_ROLE_SECONDARY, DB: n.URL, Guard: s.fs, Lag: s.lag,
		Checkpoints: readerCheckpoints{sc.Store}}), reg, cfg.Limits, n.Secured, cfg.Logger)
	s.wg.Add(1)
	if cfg.Checkpoint != "" {
		go s.holdCheckpoint()
		cfg.Logger.Info("serving a checkpoint", "db", n.URL, "checkpoint", ck.Name, "id", ck.ID, "sequence", ck.Sequence, "listen", s.ep.Addr(),
			"transport", kvserver.TransportName(n.Secured))
		return s, nil
	}
	go s.catchUpLoop()
	if cfg.Follower {
		s.wg.Add(1)
		go s.followApplied()
	}
	if cfg.Primary != "" {
		s.wg.Add(1)
		go s.watchPrimary(watchDial)
	}
	cfg.Logger.Info("secondary serving", "db", n.URL, "cache", sc.CacheDir, "listen", s.ep.Addr(), "metrics", s.ep.MetricsAddr(),
		"transport", kvserver.TransportName(n.Secured))
	return s, nil
}

// CatchUp brings the secondary up to what the store holds now.
func (s *Server) CatchUp(ctx context.Context) error {
	return s.catchUp(ctx, nil)
}

// catchUp refreshes the view, guided by the primary's hint when there is
// one (fetching just the new segments), then catches RocksDB up with it.
func (s *Server) catchUp(ctx context.Context, h *shalefs.Hint) error {
	if err := s.fs.RefreshHinted(ctx, h); err != nil {
		return err
	}
	if s.cfg.Follower {
		// RocksDB's own thread applies the refreshed MANIFEST later. Not
		// knowing when, a follower never declares itself caught up: one
		// whose lease lapsed stays NOT_SERVING (fails closed).
		return nil
	}
	if err := s.db.TryCatchUp(); err != nil {
		return err
	}
	s.fs.CaughtUp()
	return nil
}

// followApplied reports what a follower's own catch-up thread applies:
// RocksDB says nothing when it does, so its sequence number is sampled
// every 10 ms (a follower's lag is bounded below by its refresh period).
func (s *Server) followApplied() {
	defer s.wg.Done()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var last uint64 // 0: what it opened with is reported too
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		seq := s.db.LatestSequence()
		if seq == last {
			continue
		}
		last = seq
		if s.cfg.OnCatchUp != nil {
			s.cfg.OnCatchUp(seq)
		}
		if seq >= s.primarySeq.Load() {
			s.pendingSince.Store(0)
		}
	}
}

func (s *Server) catchUpLoop() {
	defer s.wg.Done()
	failing, takeover := false, false
	retry := time.Duration(0) // after a failure: how soon to try again
	for {
		interval := s.cfg.CatchupInterval
		if s.watching.Load() {
			interval *= 10 // notifications drive it; polling backs them up
		}
		// Each refresh renews the lease: well within its TTL.
		interval = min(interval, s.fs.ReaderTTL()/4)
		if retry > 0 {
			// A failed catch-up (the MANIFEST rolled, a file went, the
			// store hiccuped) is retried soon, backing off, not at the
			// next interval: readers meanwhile see the last good version.
			interval = min(interval, retry)
		}
		s.ep.SetServing(s.fs.ReaderLeaseFresh())
		timer := time.NewTimer(interval)
		var hint *shalefs.Hint
		select {
		case <-s.stop:
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
		}
		// Driven by notifications, a catch-up fetches what the last one
		// names; so does the periodic one while they flow (MANIFEST edits
		// announce no new sequence and kick nothing), which also renews
		// the lease and lists the trash when due. Without them, and after
		// a failure, it lists the store, which also covers a takeover;
		// every 10 minutes the reader lists everything anyway.
		if retry == 0 {
			hint = s.hint.Load()
		}
		timer.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), max(10*s.cfg.CatchupInterval, 30*time.Second))
		err := s.catchUp(ctx, hint)
		cancel()
		s.ep.SetServing(s.fs.ReaderLeaseFresh())
		if errors.Is(err, shalefs.ErrTakeoverInProgress) {
			// Not a failure: the view stays at what is durable until the
			// new primary has opened; look again soon.
			if !takeover {
				s.cfg.Logger.Info("a takeover is in progress; serving the last durable state until the new primary has opened")
			}
			takeover = true
			retry = min(max(2*retry, 50*time.Millisecond), time.Second)
			continue
		}
		takeover = false
		if err != nil {
			s.failures.Inc()
			if !failing {
				s.cfg.Logger.Warn("catch-up with the primary failed; retrying", "err", err)
			}
			failing = true
			retry = min(max(2*retry, 50*time.Millisecond), 5*time.Second)
			continue
		}
		if failing {
			s.cfg.Logger.Info("catch-up with the primary works again")
		}
		failing, retry = false, 0
		s.catchups.Inc()
		s.lastCatchup.SetToCurrentTime()
		if s.cfg.OnCatchUp != nil && !s.cfg.Follower {
			s.cfg.OnCatchUp(s.db.LatestSequence())
		}
		if s.db.LatestSequence() >= s.primarySeq.Load() {
			s.pendingSince.Store(0)
		}
	}
}

// watchPrimary follows the primary's Watch stream, reconnecting with
// backoff; each announcement of a write this replica has not applied
// triggers a catch-up.
func (s *Server) watchPrimary(dial []grpc.DialOption) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.stop; cancel() }()
	conn, err := grpc.NewClient(s.cfg.Primary, dial...)
	if err != nil {
		s.cfg.Logger.Error("--primary: cannot watch the primary; polling only", "addr", s.cfg.Primary, "err", err)
		return
	}
	defer conn.Close()
	kv := kvv1.NewKVClient(conn)
	backoff := 100 * time.Millisecond
	refused := codes.OK // the primary's last refusal, told once
	for ctx.Err() == nil {
		stream, err := kv.Watch(ctx, &kvv1.WatchRequest{})
		for err == nil {
			var ev *kvv1.WatchEvent
			if ev, err = stream.Recv(); err != nil {
				break
			}
			if !s.watching.Swap(true) {
				s.cfg.Logger.Info("following the primary's notifications", "primary", s.cfg.Primary)
			}
			backoff = 100 * time.Millisecond
			s.primarySeq.Store(ev.LatestSequence)
			s.hint.Store(hintOf(ev))
			if ev.LatestSequence > s.db.LatestSequence() {
				s.pendingSince.CompareAndSwap(0, time.Now().UnixNano())
				select {
				case s.kick <- struct{}{}:
				default:
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if s.watching.Swap(false) {
			s.cfg.Logger.Warn("lost the primary's notifications; polling until they are back", "primary", s.cfg.Primary, "err", err)
		}
		if c := status.Code(err); (c == codes.Unauthenticated || c == codes.PermissionDenied) && c != refused {
			// A wrong certificate would otherwise go unnoticed: the
			// replica still serves, only later (by polling).
			s.cfg.Logger.Error("the primary refuses this secondary's notifications; polling until it accepts them (its --tls-cert must be a secondary's of the same database, from the primary's CA)",
				"primary", s.cfg.Primary, "err", err)
		}
		refused = status.Code(err)
		s.hint.Store(nil)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// hintOf is what a notification says the primary has stored (nil when it
// says nothing: a primary of an earlier version).
func hintOf(ev *kvv1.WatchEvent) *shalefs.Hint {
	if ev.CurrentManifest == "" {
		return nil
	}
	h := &shalefs.Hint{Epoch: ev.Epoch, CurrentManifest: ev.CurrentManifest}
	for _, l := range ev.Logs {
		h.Logs = append(h.Logs, shalefs.LogTail{Name: l.Name, Epoch: l.Epoch, LastSegment: l.LastSegment, Bytes: int64(l.Bytes)})
	}
	return h
}

// Addr is the gRPC address the server listens on.
func (s *Server) Addr() string { return s.ep.Addr() }

// MetricsAddr is the HTTP metrics address, or "" when disabled.
func (s *Server) MetricsAddr() string { return s.ep.MetricsAddr() }

// Done reports a serving error (the server is then unusable; call Stop).
func (s *Server) Done() <-chan error { return s.ep.Done() }

// Stop stops serving and closes the database.
func (s *Server) Stop(grace time.Duration) {
	close(s.stop)
	s.wg.Wait()
	s.ep.Stop(grace)
	s.db.Close()
	s.fs.Stop()
	s.node.Close()
	s.cfg.Logger.Info("secondary stopped", "db", s.cfg.DB)
}

// Run starts a secondary and serves until ctx is done or serving fails.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		s.Stop(10 * time.Second)
		return nil
	case err := <-s.Done():
		s.Stop(time.Second)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}
