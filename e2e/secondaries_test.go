//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const secondaryReplicas = 2

// stepSecondaries: the main database gets two secondaries; reads through
// NAME-ro (from a Pod, and from the test) see writes made through NAME-rw,
// and each secondary shows a write soon after it was acknowledged (the
// visibility lag is measured per secondary and printed).
func stepSecondaries(t *testing.T, s *suite) {
	s.ensureSecondaries(t)
	ro := s.roAddr(t)
	st := kvStatus(t, ro)
	if st.Role != kvv1.Role_ROLE_SECONDARY {
		t.Fatalf("the server behind %s-ro says it is %s, want a secondary", s.db, st.Role)
	}

	// From a Pod, by Service name, as an application would.
	value := fmt.Sprintf("for-the-replicas-%d", time.Now().UnixNano())
	rw := fmt.Sprintf("%s-rw:%d", s.db, kvPort)
	roName := fmt.Sprintf("%s-ro:%d", s.db, kvPort)
	kv := s.kvClient(t)
	if err := s.put(ctx(t, time.Minute), kv, "e2e/secondaries/from-pod", value); err != nil {
		t.Fatalf("put through %s: %v", rw, err)
	}
	// Both secondaries show it first, so whichever the Service picks
	// for the Pod must answer with it.
	for _, addr := range s.secondaryAddrs(t) {
		waitVisible(t, addr, "e2e/secondaries/from-pod", value, time.Now(), time.Minute)
	}
	secret := s.db + "-client-" + e2eClient
	out := s.clientPod(t, "ro-client", s.db, secret,
		[]string{"kv", "status", "--config", clientConfigFile, "--addr", roName, "--tls-server-name", s.db + "-ro"},
		[]string{"kv", "get", "e2e/secondaries/from-pod", "--config", clientConfigFile, "--addr", roName, "--tls-server-name", s.db + "-ro"})
	if got := strings.TrimSpace(out); got != value {
		t.Fatalf("shale kv get through %s in a Pod printed %q, want %q", roName, got, value)
	}
	t.Logf("a Pod read through %s what the test wrote through %s", roName, rw)

	// Each secondary, directly: the time from an acknowledged synced write
	// on the primary until it shows the key.
	direct := s.secondaryAddrs(t)
	lags := map[string][]time.Duration{}
	for i := range 20 {
		key := fmt.Sprintf("e2e/secondaries/lag/%03d", i)
		if err := s.put(ctx(t, time.Minute), kv, key, "v"+key); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		acked := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for name, addr := range direct {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := waitVisible(t, addr, key, "v"+key, acked, time.Minute)
				mu.Lock()
				lags[name] = append(lags[name], d)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	for name, d := range lags {
		t.Logf("secondary %s: a synced write acknowledged by the primary is readable after p50 %s, max %s (20 writes)",
			name, p50(d), slices.Max(d).Round(time.Millisecond))
	}
	s.verifyLedgerOnSecondaries(t, direct)

	// The operator reports each secondary's replication state.
	eventually(t, 2*time.Minute, "status.secondaryStatus to show both secondaries answering", func() (bool, string) {
		db := s.rocksDB(t, s.db)
		ok := len(db.Status.SecondaryStatus) == secondaryReplicas
		for _, e := range db.Status.SecondaryStatus {
			ok = ok && e.Error == "" && e.Lag != nil && e.AppliedSequence > 0
		}
		return ok, fmt.Sprintf("%+v", db.Status.SecondaryStatus)
	})
	for _, e := range s.rocksDB(t, s.db).Status.SecondaryStatus {
		t.Logf("status.secondaryStatus: %s applied %d, %d behind, lag %s (checked %s)", e.Pod, e.AppliedSequence, e.LagSequences, e.Lag.Duration, e.CheckedAt.Format(time.RFC3339))
	}
	// For the metrics step: a secondary's series (its lag).
	s.noteSeries(t, s.rocksDB(t, s.db).Status.SecondaryStatus[0].Pod, "9091")
}

// stepSecondariesFailover: the primary fails over (Pod deletion, then
// SIGKILL) while a reader reads through NAME-ro without pause. The
// secondaries keep serving: the reader counts failed reads and the longest
// time without a successful one, and reads must have succeeded while no
// primary was serving. The secondary Pods are the same ones afterwards
// (they follow the new epoch without a restart) and show every write
// acknowledged before and after.
func stepSecondariesFailover(t *testing.T, s *suite) {
	s.ensureSecondaries(t)
	before := s.secondaryPods(t)
	ro := s.roAddr(t)
	kv := s.kvClient(t)
	var keys []string
	for i := range 50 {
		key := fmt.Sprintf("e2e/secondaries/failover/before/%03d", i)
		if err := s.put(ctx(t, time.Minute), kv, key, "v"+key); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		keys = append(keys, key)
	}
	for _, addr := range s.secondaryAddrs(t) {
		waitVisible(t, addr, keys[len(keys)-1], "v"+keys[len(keys)-1], time.Now(), time.Minute)
	}

	r := startReader(ro, keys)
	t.Cleanup(r.halt)
	w := s.startWriter(t, s.rwAddr(t), "secondaries-failover")
	for _, kind := range []failoverKind{failoverPodDelete, failoverSIGKILL} {
		db := s.waitReady(t, s.db, 1, 3*time.Minute)
		epoch := db.Status.Epoch
		old := s.pod(t, db.Status.CurrentPrimary)
		if old == nil {
			t.Fatalf("the current primary %s does not exist", db.Status.CurrentPrimary)
		}
		w.waitAcks(t, time.Now(), uint64(epoch), 5, 2*time.Minute)
		r.waitReads(t, 20, time.Minute)
		t0 := time.Now()
		switch kind {
		case failoverPodDelete:
			if err := s.cs.CoreV1().Pods(s.cfg.namespace).Delete(ctx(t, time.Minute), old.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		case failoverSIGKILL:
			s.signal(t, old, "KILL")
		}
		firstNew := w.waitAcks(t, t0, uint64(epoch+1), 5, 3*time.Minute)
		s.waitReady(t, s.db, epoch+1, 3*time.Minute)
		during := r.succeededBetween(t0, firstNew.at)
		if during == 0 {
			t.Fatalf("failover by %s: no read through %s-ro succeeded in the %s without a primary (reader: %s)",
				kind, s.db, firstNew.at.Sub(t0).Round(time.Millisecond), r.state())
		}
		t.Logf("failover by %s, epoch %d -> %d: writes resumed after %s; meanwhile %d reads through %s-ro succeeded",
			kind, epoch, epoch+1, firstNew.at.Sub(t0).Round(time.Millisecond), during, s.db)
	}
	r.waitReads(t, 50, time.Minute)
	r.halt()
	w.halt()
	failed, ok, gap := r.summary()
	t.Logf("reader through %s-ro over two failovers: %d reads succeeded, %d failed, longest time without a successful read %s",
		s.db, ok, failed, gap.Round(time.Millisecond))
	if gap > 10*time.Second {
		t.Fatalf("reads through %s-ro stopped for %s during the failovers (reader: %s)", s.db, gap.Round(time.Millisecond), r.state())
	}
	if r.wrong() != "" {
		t.Fatalf("a secondary returned a wrong value: %s", r.wrong())
	}

	after := s.secondaryPods(t)
	for name, uid := range before {
		if after[name] != uid {
			t.Errorf("secondary %s was replaced or restarted during the failovers (before %v, after %v)", name, before, after)
		}
	}
	s.verifyLedgerOnSecondaries(t, s.secondaryAddrs(t))
}

// ensureSecondaries sets spec.secondaries.replicas on the main database
// and waits until that many are ready.
func (s *suite) ensureSecondaries(t *testing.T) {
	t.Helper()
	db := s.rocksDB(t, s.db)
	if db.Spec.Secondaries.Replicas != secondaryReplicas {
		patch := client.MergeFrom(db.DeepCopy())
		q := resource.MustParse
		db.Spec.Secondaries.Replicas = secondaryReplicas
		db.Spec.Secondaries.CacheSize = ptrTo(q("256Mi"))
		db.Spec.Secondaries.BlockCacheSize = ptrTo(q("16Mi"))
		db.Spec.Secondaries.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("96Mi")},
		}
		if err := s.kube.Patch(ctx(t, time.Minute), db, patch); err != nil {
			t.Fatalf("setting spec.secondaries.replicas=%d: %v", secondaryReplicas, err)
		}
	}
	eventually(t, 4*time.Minute, fmt.Sprintf("%d secondaries of %s to be ready", secondaryReplicas, s.db), func() (bool, string) {
		db = s.rocksDB(t, s.db)
		c := meta.FindStatusCondition(db.Status.Conditions, shalev1.ConditionSecondariesReady)
		ok := db.Status.ObservedGeneration == db.Generation && db.Status.Secondaries == secondaryReplicas &&
			c != nil && c.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("secondaries %d; %s", db.Status.Secondaries, describe(db))
	})
	if db.Status.Phase != shalev1.PhaseReady {
		t.Fatalf("with its secondaries ready, %s is %s", s.db, describe(db))
	}
}

// roAddr is a host address reaching the main database's NAME-ro Service.
func (s *suite) roAddr(t *testing.T) string {
	t.Helper()
	if s.ro == "" {
		s.ro = s.serviceProxy(s.top, s.db+"-ro", kvPort)
	}
	return s.ro
}

// secondaryPods maps the running secondary Pods of the main database to
// their UIDs.
func (s *suite) secondaryPods(t *testing.T) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace),
		client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RoleSecondary}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out[p.Name] = string(p.UID)
		}
	}
	if len(out) != secondaryReplicas {
		t.Fatalf("running secondaries %v, want %d", out, secondaryReplicas)
	}
	return out
}

// secondaryAddrs maps each secondary Pod to a host address reaching it
// directly (not through the Service, which picks one per connection).
func (s *suite) secondaryAddrs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name := range s.secondaryPods(t) {
		if addr, ok := s.secondaryProxies[name]; ok {
			out[name] = addr
			continue
		}
		p := s.pod(t, name)
		if p == nil || p.Status.PodIP == "" {
			t.Fatalf("secondary %s has no Pod IP", name)
		}
		port := int32(0)
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "grpc" {
					port = cp.ContainerPort
				}
			}
		}
		if port == 0 {
			t.Fatalf("secondary %s has no container port named grpc", name)
		}
		addr := s.proxy(s.top, fmt.Sprintf("%s:%d", p.Status.PodIP, port))
		registerProxy(addr, s.db, s.db+"-ro")
		s.secondaryProxies[name] = addr
		out[name] = addr
	}
	return out
}

// verifyLedgerOnSecondaries waits until each secondary has applied the
// primary's latest sequence number, then checks the ledger on it.
func (s *suite) verifyLedgerOnSecondaries(t *testing.T, addrs map[string]string) {
	t.Helper()
	latest := kvStatus(t, s.rwAddr(t)).LatestSequence
	for name, addr := range addrs {
		eventually(t, 2*time.Minute, fmt.Sprintf("secondary %s to apply sequence %d", name, latest), func() (bool, string) {
			st := kvStatus(t, addr)
			return st.LatestSequence >= latest, fmt.Sprintf("applied %d, lag %.3fs", st.LatestSequence, st.LagSeconds)
		})
		t.Logf("secondary %s:", name)
		s.verifyLedger(t, addr)
	}
}

// waitVisible polls addr until key has value, and returns the time since
// from.
func waitVisible(t *testing.T, addr, key, value string, from time.Time, timeout time.Duration) time.Duration {
	conn, err := newConn(addr)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return 0
	}
	defer conn.Close()
	kv := kvv1.NewKVClient(conn)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
		cancel()
		switch {
		case err == nil && string(got.Value) == value:
			return time.Since(from)
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("value %q", got.Value)
		}
		time.Sleep(5 * time.Millisecond) // a polling interval, not a wait for a condition
	}
	t.Errorf("%s did not show %s=%q within %s (last: %s)", addr, key, value, timeout, last)
	return timeout
}

// reader reads keys round-robin through one address without pause, each
// read bounded by 2 s, reconnecting after a failure, and records when
// reads succeeded.
type reader struct {
	addr string
	keys []string
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	ok      []time.Time
	failed  int
	lastErr error
	bad     string
}

func startReader(addr string, keys []string) *reader {
	r := &reader{addr: addr, keys: keys, stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *reader) loop() {
	defer close(r.done)
	var conn interface{ Close() error }
	var kv kvv1.KVClient
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-r.stop:
			return
		default:
		}
		if kv == nil {
			c, err := newConn(r.addr)
			if err != nil {
				r.record(err, "")
				time.Sleep(20 * time.Millisecond)
				continue
			}
			conn, kv = c, kvv1.NewKVClient(c)
		}
		key := r.keys[i%len(r.keys)]
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got, err := kv.Get(c, &kvv1.GetRequest{Key: []byte(key)})
		cancel()
		bad := ""
		switch {
		case status.Code(err) == codes.NotFound:
			// Every key was visible on each secondary before the
			// reader started: a secondary that lost it is wrong.
			bad, err = fmt.Sprintf("%s: not found", key), nil
		case err == nil && string(got.Value) != "v"+key:
			bad = fmt.Sprintf("%s: value %q", key, got.Value)
		}
		r.record(err, bad)
		if err != nil {
			conn.Close()
			conn, kv = nil, nil
		}
	}
}

func (r *reader) record(err error, bad string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.failed++
		r.lastErr = err
	case bad != "":
		r.failed++
		if r.bad == "" {
			r.bad = bad
		}
	default:
		r.ok = append(r.ok, time.Now())
	}
}

func (r *reader) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// waitReads waits for n more successful reads.
func (r *reader) waitReads(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	r.mu.Lock()
	from := len(r.ok)
	r.mu.Unlock()
	eventually(t, timeout, fmt.Sprintf("%d more reads through %s to succeed", n, r.addr), func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.ok)-from >= n, r.stateLocked()
	})
}

func (r *reader) succeededBetween(a, b time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.ok {
		if at.After(a) && at.Before(b) {
			n++
		}
	}
	return n
}

// summary: failed reads, successful reads, and the longest time between
// two successful reads.
func (r *reader) summary() (failed, ok int, gap time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i < len(r.ok); i++ {
		gap = max(gap, r.ok[i].Sub(r.ok[i-1]))
	}
	return r.failed, len(r.ok), gap
}

func (r *reader) wrong() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

func (r *reader) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked()
}

func (r *reader) stateLocked() string {
	return fmt.Sprintf("%d reads succeeded, %d failed, last error %v", len(r.ok), r.failed, r.lastErr)
}
