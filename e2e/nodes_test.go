//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// The steps that need a cluster of several nodes (make e2e-nodes: one
// control plane, which keeps its taint and runs only the operator and the
// demo MinIO, and two workers, which run the databases). They are opt-in
// (not in the default run) and skip on a cluster of fewer than 3 nodes.

// minNodes is what the node steps need: a control plane for the
// operator and MinIO, which a step never stops, and two workers, so that
// the primary has somewhere to go.
const minNodes = 3

// controlPlaneLabel marks the node the operator and MinIO are kept on in a
// multi-node cluster (chartArgs).
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// nodeNames lists the cluster's nodes.
func (s *suite) nodeNames(t *testing.T) []string {
	t.Helper()
	var nodes corev1.NodeList
	if err := s.kube.List(ctx(t, time.Minute), &nodes); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// needNodes skips a step on a cluster too small for it.
func (s *suite) needNodes(t *testing.T) {
	t.Helper()
	if n := len(s.nodes); n < minNodes {
		t.Skipf("needs a cluster of at least %d nodes (this one has %d: %v); run make e2e-nodes", minNodes, n, s.nodes)
	}
}

// primaryNode is the node the current primary runs on, and the primary.
func (s *suite) primaryNode(t *testing.T) (string, *corev1.Pod) {
	t.Helper()
	db := s.rocksDB(t, s.db)
	p := s.pod(t, db.Status.CurrentPrimary)
	if p == nil || p.Spec.NodeName == "" {
		t.Fatalf("the primary %s has no node", db.Status.CurrentPrimary)
	}
	if p.Spec.NodeName == s.cfg.node {
		t.Fatalf("the primary %s runs on the control plane %s, which the node steps never stop: the control plane should keep its NoSchedule taint", p.Name, p.Spec.NodeName)
	}
	return p.Spec.NodeName, p
}

// readySecondaries counts the ready secondary Pods of the main database,
// by node.
func (s *suite) readySecondaries(t *testing.T) map[string]int {
	t.Helper()
	var pods corev1.PodList
	if err := s.kube.List(ctx(t, time.Minute), &pods, client.InNamespace(s.cfg.namespace),
		client.MatchingLabels{shalev1.LabelRocksDB: s.db, shalev1.LabelRole: shalev1.RoleSecondary}); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out[p.Spec.NodeName]++
			}
		}
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// stepDrain: `kubectl drain` of the primary's node while a client writes.
// The operator sees the cordon and moves the primary by a switchover
// (RFC 0012), not a failover: the epoch goes up by exactly one,
// status.failovers does not move, the RocksDB's events say switchover;
// the drain completes once the old primary is gone (its PodDisruptionBudget
// refuses the eviction until then); the secondaries are never all down at
// once (theirs); no acknowledged write is lost. Measured: the longest time
// without an acknowledged write.
func stepDrain(t *testing.T, s *suite) {
	s.needNodes(t)
	s.ensureSecondaries(t)
	addr := s.rwAddr(t)
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch, failovers := db.Status.Epoch, db.Status.Failovers
	node, old := s.primaryNode(t)
	t.Logf("primary %s (epoch %d) on %s; ready secondaries by node %v", old.Name, epoch, node, s.readySecondaries(t))
	w := s.startWriter(t, addr, "drain")
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	uncordoned := false
	uncordon := func() {
		if !uncordoned {
			s.kubectl(t, "uncordon", node)
			uncordoned = true
		}
	}
	t.Cleanup(uncordon)

	t0 := time.Now()
	drained := make(chan error, 1)
	var drainOut string
	go func() {
		out, err := runErr(s.cfg.kubectl, "--kubeconfig", s.cfg.kubeconfig, "drain", node,
			"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=6m")
		drainOut = out
		drained <- err
	}()
	// While it drains: the secondaries are never all down (their PDB).
	fewest := total(s.readySecondaries(t))
	var drainErr error
	eventually(t, 7*time.Minute, "kubectl drain "+node+" to complete", func() (bool, string) {
		select {
		case drainErr = <-drained:
			return true, ""
		default:
		}
		fewest = min(fewest, total(s.readySecondaries(t)))
		return false, describe(s.rocksDB(t, s.db))
	})
	took := time.Since(t0)
	if drainErr != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", node, drainErr, tail(drainOut, 20))
	}
	if fewest < 1 {
		t.Errorf("all secondaries were down at once during the drain: their PodDisruptionBudget should allow one eviction at a time")
	}

	after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
	firstNew := w.waitAcks(t, t0, uint64(after.Status.Epoch), 5, 3*time.Minute)
	var lastOld time.Time
	for _, a := range w.since(t0.Add(-time.Minute)) {
		if a.epoch == uint64(epoch) && a.at.Before(firstNew.at) {
			lastOld = a.at
		}
	}
	gap := firstNew.at.Sub(lastOld)
	if after.Status.Epoch != epoch+1 {
		t.Errorf("the epoch went from %d to %d across the drain: want exactly one more (one switchover)", epoch, after.Status.Epoch)
	}
	if after.Status.Failovers != failovers {
		t.Errorf("status.failovers went from %d to %d: the drain caused a failover, not a switchover", failovers, after.Status.Failovers)
	}
	var reasons []string
	completed := false
	for _, e := range s.events(t, "RocksDB", s.db) {
		if e.LastTimestamp.Time.Before(t0.Add(-time.Second)) && e.EventTime.Time.Before(t0.Add(-time.Second)) {
			continue
		}
		reasons = append(reasons, e.Reason)
		completed = completed || e.Reason == shalev1.ReasonSwitchoverCompleted
		if e.Reason == "Failover" {
			t.Errorf("a Failover event during the drain: %s", e.Message)
		}
	}
	if !completed {
		t.Errorf("no %s event on %s during the drain; events: %v", shalev1.ReasonSwitchoverCompleted, s.db, reasons)
	}
	newNode, newPrimary := s.primaryNode(t)
	if newNode == node {
		t.Errorf("the new primary %s runs on the drained node %s", newPrimary.Name, node)
	}
	t.Logf("drain of %s: epoch %d -> %d (%s -> %s on %s), drain took %s; no write acknowledged for %s; fewest ready secondaries during it %d; events %v",
		node, epoch, after.Status.Epoch, old.Name, newPrimary.Name, newNode, took.Round(time.Millisecond), gap.Round(time.Millisecond), fewest, reasons)

	uncordon()
	// The secondary the drain evicted finds its node again.
	s.ensureSecondaries(t)
	w.halt()
	t.Logf("writer: %s", w.state())
	s.verifyLedger(t, addr)
}

// stepNodeLoss: the primary's node freezes (`docker pause` of its kind
// container: its kubelet, its Pods and its network stop answering, as a
// machine that hangs or drops off the network) while a client writes. The
// node controller would mark its Pods not ready after 40 s; the
// operator's own probes (RFC 0015) fail the primary over after the
// failover grace, with a secondary on the other worker as the witness.
// Measured: the time from the freeze until writes succeed again. No
// acknowledged write is lost. Then the node comes back: the old primary,
// unfrozen, acknowledges no write (its epoch is fenced in the store).
func stepNodeLoss(t *testing.T, s *suite) {
	s.needNodes(t)
	s.ensureSecondaries(t)
	addr := s.rwAddr(t)
	var outages []time.Duration
	for i := 1; i <= s.cfg.nodeLossRuns; i++ {
		outages = append(outages, s.nodeLoss(t, addr, i))
	}
	slices.Sort(outages)
	t.Logf("node loss over %d runs: writes succeeded again after p50 %s, max %s; each: %s", len(outages), p50(outages), outages[len(outages)-1].Round(time.Millisecond), durations(outages))
	s.verifyLedger(t, addr)
}

func (s *suite) nodeLoss(t *testing.T, addr string, i int) time.Duration {
	// An unreachable primary right after another one waits the failover
	// backoff (RFC 0015: what bounds a partition that keeps coming back):
	// each run starts once the row of failures is cleared (the primary
	// ready for --failover-backoff-max, 20 s in this cluster).
	eventually(t, 3*time.Minute, "the failures in a row to clear", func() (bool, string) {
		db := s.rocksDB(t, s.db)
		return db.Status.PrimaryFailures == nil, failures(db)
	})
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	epoch := db.Status.Epoch
	node, old := s.primaryNode(t)
	witnesses := s.readySecondaries(t)
	delete(witnesses, node)
	if total(witnesses) == 0 {
		t.Fatalf("run %d: no ready secondary on a node other than the primary's %s (%v): the operator has no witness and would wait for the node controller", i, node, s.readySecondaries(t))
	}
	// A connection straight to the old primary, for after the freeze.
	zaddr := s.proxy(t, fmt.Sprintf("%s:%d", old.Status.PodIP, kvPort))
	registerProxy(zaddr, s.db, s.db+"-rw")

	w := s.startWriter(t, addr, fmt.Sprintf("node-loss-%d", i))
	w.waitAcks(t, time.Now(), uint64(epoch), 10, 2*time.Minute)

	paused := true
	unpause := func() {
		if paused {
			run(t, s.cfg.docker, "unpause", node)
			paused = false
		}
	}
	t.Cleanup(unpause)
	run(t, s.cfg.docker, "pause", node)
	t0 := time.Now()

	// Acknowledged by any later primary: should the first successor fail
	// too, the time still counts until writes succeed (and the epoch
	// check below says so).
	firstNew := w.waitAcksAbove(t, t0, uint64(epoch), 5, 5*time.Minute)
	var lastOld time.Time
	for _, a := range w.since(t0.Add(-time.Minute)) {
		if a.epoch == uint64(epoch) && a.at.Before(firstNew.at) {
			lastOld = a.at
		}
	}
	outage := firstNew.at.Sub(t0)
	after := s.waitReady(t, s.db, epoch+1, 3*time.Minute)
	if after.Status.Epoch != epoch+1 {
		t.Errorf("run %d: the epoch went from %d to %d, want exactly one more; failures %s", i, epoch, after.Status.Epoch, failures(after))
	}
	// Detected by the operator's probes, not by the node controller: the
	// failure recorded for the frozen primary's epoch says so.
	reason := ""
	if f := after.Status.PrimaryFailures; f != nil {
		for _, r := range f.Recent {
			if r.Epoch == epoch {
				reason = r.Reason
			}
		}
	}
	if reason != shalev1.ReasonPrimaryUnreachable {
		t.Errorf("run %d: the failure of epoch %d is recorded as %q, want %s (the operator's probes, RFC 0015); failures %s", i, epoch, reason, shalev1.ReasonPrimaryUnreachable, failures(after))
	}
	t.Logf("run %d: froze %s (primary %s, epoch %d); writes succeeded again at epoch %d on %s after %s (no write acknowledged for %s)",
		i, node, old.Name, epoch, after.Status.Epoch, after.Status.CurrentPrimary, outage.Round(time.Millisecond), firstNew.at.Sub(lastOld).Round(time.Millisecond))

	// The node comes back. Its old primary resumes where it froze; it
	// must acknowledge nothing (the store fences epoch E), until its Pod
	// (deleted by the operator in the failover) is gone.
	unpause()
	thawed := time.Now()
	var refusals []string
	eventually(t, 4*time.Minute, fmt.Sprintf("the old primary %s to be gone", old.Name), func() (bool, string) {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if conn, cerr := newConn(zaddr); cerr != nil {
			err = cerr
		} else {
			key := fmt.Sprintf("node-loss/zombie/%d/%d", i, time.Now().UnixNano())
			err = s.put(c, kvv1.NewKVClient(conn), key, "must-not-be-acknowledged")
			conn.Close()
			if err == nil {
				t.Fatalf("run %d: the old primary %s acknowledged %s %s after its node came back", i, old.Name, key, time.Since(thawed).Round(time.Millisecond))
			}
			if status.Code(err) == codes.FailedPrecondition && len(refusals) < 3 {
				refusals = append(refusals, err.Error())
			}
		}
		p := s.pod(t, old.Name)
		return p == nil, fmt.Sprintf("pod %s: %v; last write error %v", old.Name, p != nil, err)
	})
	t.Logf("run %d: the old primary acknowledged nothing after its node came back and was gone %s later; refusals it sent: %q",
		i, time.Since(thawed).Round(time.Millisecond), refusals)
	s.kubectl(t, "wait", "--for=condition=Ready", "node/"+node, "--timeout=3m")
	s.ensureSecondaries(t)
	w.halt()
	t.Logf("run %d: writer: %s", i, w.state())
	return outage
}

// waitAcksAbove waits for n writes acknowledged after after by primaries
// of epochs above epoch, and returns the first.
func (w *writer) waitAcksAbove(t *testing.T, after time.Time, epoch uint64, n int, timeout time.Duration) ack {
	t.Helper()
	var first ack
	eventually(t, timeout, fmt.Sprintf("%d writes acknowledged by a primary of an epoch above %d", n, epoch), func() (bool, string) {
		got := 0
		for _, a := range w.since(after) {
			if a.epoch > epoch {
				if got == 0 {
					first = a
				}
				got++
			}
		}
		return got >= n, w.state()
	})
	return first
}

// failures describes status.primaryFailures.
func failures(db *shalev1.RocksDB) string {
	f := db.Status.PrimaryFailures
	if f == nil {
		return "none"
	}
	var out []string
	for _, r := range f.Recent {
		out = append(out, fmt.Sprintf("epoch %d %s", r.Epoch, r.Reason))
	}
	return fmt.Sprintf("%d in a row: %s", f.Count, strings.Join(out, "; "))
}
