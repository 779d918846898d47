package compactor_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	compactorv1 "github.com/shale-rocks/shale/api/compactor/v1"
	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/compactor"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/objstore/storetest"
	"github.com/shale-rocks/shale/internal/pki"
)

// Issue 23, "A compactor that cannot be abused": with certificates the
// scheduler knows who calls. Only primaries submit, each only for its own
// database; only workers of the pool take and report jobs; a job's events
// go only to the stream that submitted it. The three attacks of the issue,
// replayed by callers with every wrong kind of certificate (none, a
// client's, a worker's of another pool, a primary's of another database),
// are refused with the right code and leave the store as it was.

const (
	testNS   = "shale-test"
	testPool = "pool"
)

// testCA is a CA of internal/pki and the files of the leaves it issued.
type testCA struct {
	ca     *pki.CA
	dir    string
	caFile string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("shale test CA", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCA{ca: ca, dir: t.TempDir()}
	c.caFile = filepath.Join(c.dir, "ca.crt")
	if err := os.WriteFile(c.caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// issue writes a leaf naming uris (the shale:// identity first) that
// serves and authenticates on loopback, and returns its files.
func (c *testCA) issue(t *testing.T, name string, uris ...string) auth.TLSFiles {
	t.Helper()
	var us []*url.URL
	for _, u := range uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, p)
	}
	certPEM, keyPEM, err := c.ca.Issue(pki.Leaf{CommonName: name, URIs: us, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Client: true, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := auth.TLSFiles{Cert: filepath.Join(c.dir, name+".crt"), Key: filepath.Join(c.dir, name+".key"), CA: c.caFile}
	if err := os.WriteFile(f.Cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func identityURI(ns string, kind auth.Kind, name string) string {
	return (auth.Identity{Namespace: ns, Kind: kind, Name: name}).URI().String()
}

// primaryCert is the certificate of db's primary in namespace ns.
func (c *testCA) primaryCert(t *testing.T, ns, db string) auth.TLSFiles {
	t.Helper()
	u, err := objstore.ParseURL(db)
	if err != nil {
		t.Fatal(err)
	}
	name := path.Base(u.Path)
	return c.issue(t, fmt.Sprintf("primary-%s-%s-%d", ns, name, time.Now().UnixNano()), identityURI(ns, auth.KindPrimary, name), u.String())
}

func (c *testCA) schedulerCert(t *testing.T) auth.TLSFiles {
	return c.issue(t, "scheduler", identityURI(testNS, auth.KindScheduler, testPool))
}

func (c *testCA) workerCert(t *testing.T, ns, pool string) auth.TLSFiles {
	return c.issue(t, "worker-"+ns+"-"+pool, identityURI(ns, auth.KindWorker, pool))
}

func startSecureScheduler(t *testing.T, files auth.TLSFiles, cfg compactor.SchedulerConfig) *compactor.SchedulerServer {
	t.Helper()
	s, err := compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: "127.0.0.1:0", Scheduler: cfg, Security: auth.ServerConfig{TLS: files}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// dialAs connects to addr with files (only a CA: TLS with no
// certificate; nothing: plaintext).
func dialAs(t *testing.T, addr string, files auth.TLSFiles) *grpc.ClientConn {
	t.Helper()
	conn, err := auth.ClientConfig{TLS: files}.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// caller is someone who reaches the scheduler and should not be let in.
type caller struct {
	name  string
	files auth.TLSFiles
	// code of each call (Stats: the operator's and the namespace's
	// components' may read).
	code, stats codes.Code
}

// intruders are the callers that may neither submit for db nor take or
// report jobs of the pool.
func intruders(t *testing.T, ca *testCA, db string) []caller {
	foreign := newTestCA(t).workerCert(t, testNS, testPool)
	foreign.CA = ca.caFile
	otherDB := strings.TrimSuffix(db, "/db") + "/other"
	if strings.HasPrefix(db, "file://") {
		otherDB = db + "-other"
	}
	return []caller{
		{"no certificate", auth.TLSFiles{CA: ca.caFile}, codes.Unauthenticated, codes.Unauthenticated},
		{"a client's certificate", ca.issue(t, "client", (auth.Identity{Namespace: testNS, Kind: auth.KindClient, Name: "db", Client: "app"}).URI().String()),
			codes.PermissionDenied, codes.PermissionDenied},
		{"a worker's of another pool", ca.workerCert(t, testNS, "other-pool"), codes.PermissionDenied, codes.OK},
		{"a worker's of another namespace", ca.workerCert(t, "elsewhere", testPool), codes.PermissionDenied, codes.PermissionDenied},
		{"a primary's of another database", ca.primaryCert(t, testNS, otherDB), codes.PermissionDenied, codes.OK},
		{"a primary's of another namespace naming this database", ca.primaryCert(t, "elsewhere", db), codes.PermissionDenied, codes.PermissionDenied},
		// A certificate from another CA fails the handshake: the call
		// never reaches the scheduler.
		{"the pool's worker identity from another CA", foreign, codes.Unavailable, codes.Unavailable},
	}
}

func wantCode(t *testing.T, who, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: %s: %v, want %v", who, what, err, want)
	}
}

// TestSecuredSchedulerRefusesWhoMayNot: every method, every wrong caller,
// against a scheduler holding a genuine job; then the genuine primary and
// worker run it, and the primary's stream alone gets its result.
func TestSecuredSchedulerRefusesWhoMayNot(t *testing.T) {
	ca := newTestCA(t)
	db := "s3://bucket/shale/db"
	sched := startSecureScheduler(t, ca.schedulerCert(t), compactor.SchedulerConfig{})
	addr := sched.Addr()
	primary := compactorv1.NewCompactorClient(dialAs(t, addr, ca.primaryCert(t, testNS, db)))
	worker := compactorv1.NewCompactorClient(dialAs(t, addr, ca.workerCert(t, testNS, testPool)))

	// Health is open (probes carry no identity); reflection is off.
	anon := dialAs(t, addr, auth.TLSFiles{CA: ca.caFile})
	if r, err := healthpb.NewHealthClient(anon).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a certificate: %v %v", r, err)
	}
	if _, err := compactorv1.NewCompactorClient(dialAs(t, addr, auth.TLSFiles{})).Stats(context.Background(), &compactorv1.StatsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext call to a TLS scheduler: %v, want Unavailable", err)
	}
	operator := ca.issue(t, "operator", identityURI("shale-system", auth.KindOperator, ""))
	plain := startScheduler(t, compactor.SchedulerConfig{})
	for _, conn := range []*grpc.ClientConn{dialAs(t, addr, operator), dialAs(t, plain.Addr(), auth.TLSFiles{})} {
		rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err == nil {
			rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = rs.Recv()
		}
		wantCode(t, conn.Target(), "reflection", err, codes.Unimplemented)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := primary.Compact(ctx, &compactorv1.CompactRequest{Db: db, JobId: "00000000000000000001-aa", Input: []byte("input")})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.State != compactorv1.CompactEvent_ACCEPTED {
		t.Fatalf("the genuine submission: %v %v", ev, err)
	}
	ref := &compactorv1.JobRef{JobId: "00000000000000000001-aa", Attempt: 1}
	for _, c := range intruders(t, ca, db) {
		cl := compactorv1.NewCompactorClient(dialAs(t, addr, c.files))
		_, err := cl.Lease(ctx, &compactorv1.LeaseRequest{Worker: "w1", Slots: 1})
		wantCode(t, c.name, "Lease", err, c.code)
		st, err := cl.Compact(ctx, &compactorv1.CompactRequest{Db: db, JobId: "00000000000000000001-bb", Input: []byte("x")})
		if err == nil {
			_, err = st.Recv()
		}
		wantCode(t, c.name, "Compact for the pool's database", err, c.code)
		_, err = cl.Stats(ctx, &compactorv1.StatsRequest{})
		wantCode(t, c.name, "Stats", err, c.stats)
	}
	if st := sched.Snapshot(); st.Total.Queued != 1 || len(st.Dbs) != 1 {
		t.Fatalf("after the intruders: %v", st)
	}
	r, err := worker.Lease(ctx, &compactorv1.LeaseRequest{Worker: "w1", Slots: 1, WaitMillis: 1000})
	if err != nil || r.Job == nil || r.Job.Attempt != 1 || r.Job.JobId != ref.JobId {
		t.Fatalf("the genuine worker's lease: %v %v (an intruder took it?)", r, err)
	}
	// Reports claiming the genuine worker's name, on its real lease.
	for _, c := range intruders(t, ca, db) {
		cl := compactorv1.NewCompactorClient(dialAs(t, addr, c.files))
		_, err := cl.Heartbeat(ctx, &compactorv1.HeartbeatRequest{Worker: "w1", Jobs: []*compactorv1.JobRef{ref}})
		wantCode(t, c.name, "Heartbeat", err, c.code)
		_, err = cl.Fail(ctx, &compactorv1.FailRequest{Worker: "w1", Job: ref, Error: "Corruption: forged"})
		wantCode(t, c.name, "Fail", err, c.code)
		_, err = cl.Complete(ctx, &compactorv1.CompleteRequest{Worker: "w1", Job: ref, Result: []byte("forged")})
		wantCode(t, c.name, "Complete", err, c.code)
	}
	if c, err := worker.Complete(ctx, &compactorv1.CompleteRequest{Worker: "w1", Job: ref, Result: []byte("genuine")}); err != nil || !c.Accepted {
		t.Fatalf("the genuine completion: %v %v", c, err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == compactorv1.CompactEvent_DONE {
			if string(ev.Result) != "genuine" {
				t.Fatalf("the primary got result %q", ev.Result)
			}
			break
		}
		if ev.State != compactorv1.CompactEvent_RUNNING {
			t.Fatalf("event %v", ev)
		}
	}
}

// TestSecuredJobIDCollision: a primary of another database submits under
// a job id in use. It is refused and gets nothing of that job; the job's
// result goes to its own primary.
func TestSecuredJobIDCollision(t *testing.T) {
	ca := newTestCA(t)
	db, otherDB := "s3://bucket/shale/db", "s3://bucket/shale/other"
	sched := startSecureScheduler(t, ca.schedulerCert(t), compactor.SchedulerConfig{})
	owner := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), ca.primaryCert(t, testNS, db)))
	other := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), ca.primaryCert(t, testNS, otherDB)))
	worker := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), ca.workerCert(t, testNS, testPool)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const id = "00000000000000000003-cafe"
	st, err := owner.Compact(ctx, &compactorv1.CompactRequest{Db: db, JobId: id, Input: []byte("input")})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := st.Recv(); err != nil || ev.State != compactorv1.CompactEvent_ACCEPTED {
		t.Fatalf("%v %v", ev, err)
	}
	// For its own database, and for the owner's: refused either way.
	for _, target := range []string{otherDB, db} {
		s2, err := other.Compact(ctx, &compactorv1.CompactRequest{Db: target, JobId: id, Input: []byte("x")})
		if err == nil {
			var ev *compactorv1.CompactEvent
			ev, err = s2.Recv()
			if err == nil {
				t.Fatalf("a colliding submission for %s got %v", target, ev)
			}
		}
		want := codes.AlreadyExists
		if target == db {
			want = codes.PermissionDenied
		}
		wantCode(t, "a primary of another database", "Compact with a job id in use, for "+target, err, want)
	}
	r, err := worker.Lease(ctx, &compactorv1.LeaseRequest{Worker: "w1", Slots: 1, WaitMillis: 1000})
	if err != nil || r.Job == nil || r.Job.Db != db || string(r.Job.Input) != "input" {
		t.Fatalf("lease: %v %v", r, err)
	}
	if c, err := worker.Complete(ctx, &compactorv1.CompleteRequest{Worker: "w1", Job: &compactorv1.JobRef{JobId: id, Attempt: r.Job.Attempt}, Result: []byte("result")}); err != nil || !c.Accepted {
		t.Fatalf("complete: %v %v", c, err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.State == compactorv1.CompactEvent_DONE {
			break
		}
	}
	if s := sched.Snapshot(); len(s.Dbs) != 1 || s.Dbs[0].Db != db || s.Total.Completed != 1 {
		t.Fatalf("stats: %v", s)
	}
}

// recordOpens makes a worker's OpenStore note each database it opens.
func recordOpens(opened *sync.Map) func(*compactor.WorkerConfig) {
	return func(c *compactor.WorkerConfig) {
		c.OpenStore = func(u string) (objstore.Store, error) {
			opened.Store(u, true)
			return objstore.Open(u)
		}
	}
}

func secureWorker(files auth.TLSFiles, mods ...func(*compactor.WorkerConfig)) func(*compactor.WorkerConfig) {
	return func(c *compactor.WorkerConfig) {
		c.Security = auth.ClientConfig{TLS: files}
		for _, m := range mods {
			m(c)
		}
	}
}

// TestSecuredCompactorAttacks replays the issue's three attacks on a
// scheduler with TLS, each by every wrong caller, around a genuine remote
// compaction of a database with 20,001 keys: (1) taking the primary's job
// and reporting zero outputs, (2) reporting it failed with Corruption,
// (3) submitting a job for a database that never used remote compaction.
// All are refused; the victim's directory lists the same before and
// after, no worker opened it, and the genuine primary and worker, with
// their certificates, complete the compaction remotely with every key.
func TestSecuredCompactorAttacks(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		ca := newTestCA(t)
		db, victim := loc.NewURL(t), loc.NewURL(t)

		// The victim: a database that compacts locally, at rest.
		vcfg := remoteConfig(victim, "", 1)
		vcfg.CompactionMode = "local"
		v := startPrimary(t, vcfg)
		vm := model{}
		loadKeys(t, v.kv, vm, 1000)
		v.stop()
		victimBefore := storeKeys(t, victim, "")

		sched := startSecureScheduler(t, ca.schedulerCert(t), compactor.SchedulerConfig{})
		var opened sync.Map
		held := make(chan *compactorv1.Job, 1)
		release := make(chan struct{})
		var once sync.Once
		startWorker(t, sched.Addr(), "w1", secureWorker(ca.workerCert(t, testNS, testPool), recordOpens(&opened), func(c *compactor.WorkerConfig) {
			compactor.SetAfterUpload(c, func(j *compactorv1.Job) {
				once.Do(func() {
					held <- j
					<-release
				})
			})
		}))
		pcfg := remoteConfig(db, sched.Addr(), 1)
		pcfg.Compaction.Security = auth.ClientConfig{TLS: ca.primaryCert(t, testNS, db)}
		p := startPrimary(t, pcfg)
		m := model{}
		loadKeys(t, p.kv, m, 20001)
		compacted := make(chan error, 1)
		go func() {
			_, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{})
			compacted <- err
		}()
		var j *compactorv1.Job
		select {
		case j = <-held:
		case <-time.After(waitDeadline):
			t.Fatal("the genuine worker got no job")
		}
		ref := &compactorv1.JobRef{JobId: j.JobId, Attempt: j.Attempt}
		ctx := context.Background()
		for _, c := range intruders(t, ca, db) {
			cl := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), c.files))
			// (1) and (2): the job's lease and its report, naming the
			// genuine worker and its real attempt.
			_, err := cl.Lease(ctx, &compactorv1.LeaseRequest{Worker: "forger", Slots: 1})
			wantCode(t, c.name, "Lease", err, c.code)
			_, err = cl.Complete(ctx, &compactorv1.CompleteRequest{Worker: "w1", Job: ref, Result: forgedResult(t, j, 0, "")})
			wantCode(t, c.name, "Complete with zero outputs", err, c.code)
			_, err = cl.Fail(ctx, &compactorv1.FailRequest{Worker: "w1", Job: ref, Error: "Corruption: forged"})
			wantCode(t, c.name, "Fail with Corruption", err, c.code)
			// (3): a job for the victim, with a genuine job's input.
			st, err := cl.Compact(ctx, &compactorv1.CompactRequest{Db: victim, JobId: "00000000000000000001-0bad", Input: j.Input, TableOptions: j.TableOptions, InputFiles: j.InputFiles})
			if err == nil {
				_, err = st.Recv()
			}
			wantCode(t, c.name, "Compact for the victim", err, c.code)
		}
		// And the genuine primary's own certificate, for the victim.
		st, err := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), pcfg.Compaction.Security.TLS)).Compact(ctx,
			&compactorv1.CompactRequest{Db: victim, JobId: "00000000000000000001-0bad", Input: j.Input, TableOptions: j.TableOptions, InputFiles: j.InputFiles})
		if err == nil {
			_, err = st.Recv()
		}
		wantCode(t, "the primary of another database", "Compact for the victim", err, codes.PermissionDenied)
		if err != nil && !strings.Contains(err.Error(), "may submit compactions only for") {
			t.Errorf("the refusal does not say why: %v", err)
		}

		close(release)
		if err := <-compacted; err != nil {
			t.Fatal(err)
		}
		if n := fallbacks(p); n != 0 {
			t.Fatalf("fallbacks %v: the genuine job did not complete remotely", p.Compactor().Fallbacks())
		}
		s := sched.Snapshot()
		if s.Total.Completed < 1 || s.Total.Failed != 0 || len(s.Dbs) != 1 || s.Dbs[0].Db != db {
			t.Fatalf("scheduler stats %v: want only the genuine database's jobs, completed", s)
		}
		checkModel(t, p.kv, m)
		checkNoBackgroundErrors(t, p.kv)
		if _, ok := opened.Load(victim); ok {
			t.Fatal("a worker opened the victim database")
		}
		if after := storeKeys(t, victim, ""); !slices.Equal(after, victimBefore) {
			t.Fatalf("the victim's store changed:\nbefore %q\nafter  %q", victimBefore, after)
		}
		waitFor(t, "empty job directories", func() bool { return len(storeKeys(t, db, "_shale/compactions/")) == 0 })
		p.stop()
		p2cfg := remoteConfig(db, sched.Addr(), 2)
		p2cfg.Compaction.Security = pcfg.Compaction.Security
		p2 := startPrimary(t, p2cfg)
		checkModel(t, p2.kv, m)
		checkNoBackgroundErrors(t, p2.kv)
	})
}

// TestForgedFailFromPoolWorkerFallsBack: a worker of the pool (it holds
// the pool's certificate, so the scheduler lets it in) takes the job and
// reports it failed with Corruption, not retryable. The primary compacts
// locally: no background error, writes go on, every key is there.
func TestForgedFailFromPoolWorkerFallsBack(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, loc storetest.Location) {
		ca := newTestCA(t)
		db := loc.NewURL(t)
		sched := startSecureScheduler(t, ca.schedulerCert(t), compactor.SchedulerConfig{})
		pcfg := remoteConfig(db, sched.Addr(), 1)
		pcfg.Compaction.Security = auth.ClientConfig{TLS: ca.primaryCert(t, testNS, db)}
		p := startPrimary(t, pcfg)
		m := model{}
		loadKeys(t, p.kv, m, 5000)

		c := compactorv1.NewCompactorClient(dialAs(t, sched.Addr(), ca.workerCert(t, testNS, testPool)))
		var failed atomic.Bool
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				r, err := c.Lease(ctx, &compactorv1.LeaseRequest{Worker: "rogue", Slots: 1, WaitMillis: 500})
				if err != nil || r.Job == nil {
					continue
				}
				_, err = c.Fail(ctx, &compactorv1.FailRequest{Worker: "rogue", Job: &compactorv1.JobRef{JobId: r.Job.JobId, Attempt: r.Job.Attempt},
					Error: "Corruption: block checksum mismatch (forged)", Retryable: false})
				if err != nil {
					t.Errorf("the rogue worker's Fail: %v", err)
				}
				failed.Store(true)
				return
			}
		}()
		if _, err := p.kv.Compact(context.Background(), &kvv1.CompactRequest{}); err != nil {
			t.Fatal(err)
		}
		cancel()
		<-done
		if !failed.Load() {
			t.Fatal("no job reached the rogue worker")
		}
		if n := p.Compactor().Fallbacks()[compactor.ReasonFailed]; n != 1 {
			t.Fatalf("fallbacks %v: want the failed job compacted locally (job_failed)", p.Compactor().Fallbacks())
		}
		checkNoBackgroundErrors(t, p.kv)
		loadKeys(t, p.kv, m, 100) // writes go on
		checkModel(t, p.kv, m)
		checkNoBackgroundErrors(t, p.kv)
	})
}

// impostor serves the Compactor API with a valid certificate of the CA
// that is not the pool's scheduler's, and offers one job for a database
// no primary asked to compact.
type impostor struct {
	compactorv1.UnimplementedCompactorServer
	db     string
	leases atomic.Int32
}

func (s *impostor) Lease(context.Context, *compactorv1.LeaseRequest) (*compactorv1.LeaseResponse, error) {
	s.leases.Add(1)
	return &compactorv1.LeaseResponse{Job: &compactorv1.Job{JobId: "00000000000000000001-1234", Attempt: 1, Db: s.db, Input: []byte("x"), LeaseMillis: 60000}}, nil
}

// TestWorkerTakesJobsOnlyFromItsScheduler: a worker with TLS that reaches
// a server holding some other certificate of the CA (here a primary's,
// valid for the address) refuses its jobs: it never opens the database
// they name.
func TestWorkerTakesJobsOnlyFromItsScheduler(t *testing.T) {
	ca := newTestCA(t)
	victim := "file://" + filepath.Join(t.TempDir(), "victim")
	for _, cert := range []auth.TLSFiles{
		ca.primaryCert(t, testNS, victim),
		ca.issue(t, "other-scheduler", identityURI(testNS, auth.KindScheduler, "other-pool")),
	} {
		tl, err := auth.LoadTLS(cert)
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(tl.ServerCredentials()))
		imp := &impostor{db: victim}
		compactorv1.RegisterCompactorServer(srv, imp)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		var opened sync.Map
		w := startWorker(t, lis.Addr().String(), "w1", secureWorker(ca.workerCert(t, testNS, testPool), recordOpens(&opened)))
		waitFor(t, "the worker to lease from the impostor twice", func() bool { return imp.leases.Load() >= 2 })
		w.stop()
		srv.Stop()
		if _, ok := opened.Load(victim); ok {
			t.Fatalf("the worker opened %s for a server with certificate %s", victim, cert.Cert)
		}
	}
}

// TestSecuredConfigErrors: a certificate that cannot work is refused at
// start, naming the problem, rather than every job being refused later.
func TestSecuredConfigErrors(t *testing.T) {
	ca := newTestCA(t)
	db := "s3://bucket/shale/db"
	for _, tc := range []struct {
		name string
		cfg  compactor.SchedulerServerConfig
		want string
	}{
		{"plaintext on all interfaces", compactor.SchedulerServerConfig{Listen: ":0"}, "reachable from other machines but has no TLS"},
		{"a worker's certificate", compactor.SchedulerServerConfig{Listen: "127.0.0.1:0", Security: auth.ServerConfig{TLS: ca.workerCert(t, testNS, testPool)}}, "not a compactor scheduler"},
		{"an access file", compactor.SchedulerServerConfig{Listen: "127.0.0.1:0", Security: auth.ServerConfig{TLS: ca.schedulerCert(t), AccessFile: "/x"}}, "the scheduler has none"},
	} {
		if s, err := compactor.StartScheduler(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			if s != nil {
				s.Stop()
			}
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if s, err := compactor.StartScheduler(compactor.SchedulerServerConfig{Listen: ":0", Security: auth.ServerConfig{Insecure: true}}); err != nil {
		t.Errorf("--insecure: %v", err)
	} else {
		s.Stop()
	}
	cache := t.TempDir()
	if _, err := compactor.NewWorker(compactor.WorkerConfig{Scheduler: "127.0.0.1:1", CacheDir: cache, Security: auth.ClientConfig{TLS: ca.primaryCert(t, testNS, db)}}); err == nil || !strings.Contains(err.Error(), "not a compactor worker") {
		t.Errorf("worker with a primary's certificate: %v", err)
	}
	if _, err := compactor.NewWorker(compactor.WorkerConfig{Scheduler: "127.0.0.1:1", CacheDir: cache, Security: auth.ClientConfig{TLS: auth.TLSFiles{CA: ca.caFile}}}); err == nil || !strings.Contains(err.Error(), "needs the worker's certificate") {
		t.Errorf("worker with only a CA: %v", err)
	}
	for _, files := range []auth.TLSFiles{ca.primaryCert(t, testNS, "s3://bucket/shale/other"), ca.workerCert(t, testNS, testPool)} {
		_, err := compactor.NewClient(compactor.ClientConfig{Scheduler: "127.0.0.1:1", DB: db, Security: auth.ClientConfig{TLS: files}}, nil)
		if err == nil || !strings.Contains(err.Error(), "the scheduler takes jobs for "+db+" only from a primary certificate naming it") {
			t.Errorf("primary with %s: %v", files.Cert, err)
		}
	}
}
