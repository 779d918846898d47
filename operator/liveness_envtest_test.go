package operator

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/auth"
)

// TestOperatorUnreachablePrimary runs testUnreachablePrimary on an
// operator of its own: one whose failures in a row are kept for a minute
// of readiness (the shared harness clears them after a second), so that
// two unreachable primaries in a row can be seen counted as such.
func TestOperatorUnreachablePrimary(t *testing.T) {
	opts := testOptions()
	opts.FailoverBackoffMax = time.Minute
	h := startOperatorWith(t, opts)
	testUnreachablePrimary(h.with(t))
}

// testUnreachablePrimary (RFC 0015): two databases whose primaries run on
// two nodes and serve their health service over TLS, as Shale's do. One
// primary's server goes away while Kubernetes still calls its Pod Ready
// (a node that died reports nothing for 40 s): the operator's own probes
// fail it over with the reason PrimaryUnreachable, the other primary
// answering as the witness; the other database is left alone.
func testUnreachablePrimary(h *harness) {
	t := h.t
	ns := h.namespace("unreachable")
	sec, store, orders := h.samples(ns)
	users := orders.DeepCopy()
	users.Name = "users"
	h.create(sec, store, orders, users)

	// serve plays a primary on node: Pod bound there, its health
	// service on a loopback address with the database's certificate.
	serve := func(db string, epoch int, node string) (*grpc.Server, *countingHealth) {
		t.Helper()
		name := fmt.Sprintf("%s-primary-%d", db, epoch)
		pod := h.waitPod(ns, name)
		if err := h.c.SubResource("binding").Create(h.ctx, pod, &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: node}}); err != nil {
			t.Fatalf("binding %s to %s: %v", name, node, err)
		}
		ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
		lis, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
		if err != nil {
			t.Fatal(err)
		}
		dir := h.mountSecret(h.secret(ns, db+"-primary-tls"))
		sec, err := auth.Secure(auth.ServerConfig{TLS: auth.TLSFiles{Cert: filepath.Join(dir, keyTLSCert), Key: filepath.Join(dir, keyTLSKey), CA: filepath.Join(dir, keyCA)},
			AccessFile: filepath.Join(h.mountSecret(h.secret(ns, db+"-access")), keyAccess)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(sec.ServerOption(), grpc.ChainUnaryInterceptor(sec.UnaryInterceptors()...), grpc.ChainStreamInterceptor(sec.StreamInterceptors()...))
		hs := &countingHealth{Server: health.NewServer()}
		healthpb.RegisterHealthServer(srv, hs)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		pod = h.waitPod(ns, name)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.PodIP = ip
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		h.primaryOpened(pod)
		if err := h.c.Status().Update(h.ctx, pod); err != nil {
			t.Fatal(err)
		}
		return srv, hs
	}
	ordersSrv, ordersHealth := serve("orders", 1, "node-a")
	serve("users", 1, "node-b")
	for _, name := range []string{"orders", "users"} {
		h.waitDB(ns, name, "ready", func(db *shalev1.RocksDB) (bool, string) {
			return db.Status.Phase == shalev1.PhaseReady && db.Status.ReadyEpoch == 1, fmt.Sprintf("phase %s", db.Status.Phase)
		})
	}

	// A primary the operator never reached gets no verdict (RFC 0015,
	// rule 1): wait for its probes to reach it first.
	eventually(t, "the operator to probe orders' primary", func() (bool, string) {
		n := ordersHealth.checks.Load()
		return n > 0, fmt.Sprintf("%d health checks", n)
	})

	// orders' node dies: its server is gone, its Pod stays Ready.
	ordersSrv.Stop()
	db := h.waitDB(ns, "orders", "failed over for unreachability", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Epoch == 2 && condIs(db, shalev1.ConditionFailover, metav1.ConditionTrue, shalev1.ReasonPrimaryUnreachable),
			fmt.Sprintf("epoch %d, %s", db.Status.Epoch, statusOf(db.Status.Conditions))
	})
	if pod, err := h.pod(ns, "orders-primary-1"); err == nil && pod.Status.Phase == corev1.PodRunning {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
				t.Errorf("the old primary's Pod turned not ready: the failover may have come from Kubernetes' word, not the probes")
			}
		}
	}
	if ev := h.waitEvent(ns, "orders", eventFailover); !strings.Contains(ev.Message, "health probes") {
		t.Errorf("the Failover event says %q: want the probes named as the cause", ev.Message)
	}
	if f := db.Status.PrimaryFailures; f == nil || f.Count != 1 {
		t.Errorf("status.primaryFailures %+v: an unreachable primary counts as a failure (the backoff bounds a partial partition)", f)
	}
	// The new primary avoids the node that did not answer: until the
	// node controller notices, a dead node still looks schedulable.
	next := h.waitPod(ns, "orders-primary-2")
	if a := next.Spec.Affinity; a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		!slices.Equal(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchFields[0].Values, []string{"node-a"}) {
		t.Errorf("the new primary's affinity %+v: want a preference for any node but node-a", next.Spec.Affinity)
	}
	if u := h.db(ns, "users"); u.Status.Epoch != 1 {
		t.Errorf("users, which answered, went to epoch %d", u.Status.Epoch)
	}

	// The successor is lost the same way: a second unreachable primary
	// in a row counts as the second failure (the backoff bounds what a
	// partition that keeps coming back costs), not as a new row.
	nextSrv, nextHealth := serve("orders", 2, "node-c")
	h.waitDB(ns, "orders", "ready at epoch 2", func(db *shalev1.RocksDB) (bool, string) {
		return db.Status.Phase == shalev1.PhaseReady && db.Status.ReadyEpoch == 2, fmt.Sprintf("phase %s", db.Status.Phase)
	})
	eventually(t, "the operator to probe orders' second primary", func() (bool, string) {
		n := nextHealth.checks.Load()
		return n > 0, fmt.Sprintf("%d health checks", n)
	})
	nextSrv.Stop()
	h.waitDB(ns, "orders", "failed over again, second in a row", func(db *shalev1.RocksDB) (bool, string) {
		f := db.Status.PrimaryFailures
		return db.Status.Epoch == 3 && f != nil && f.Count == 2, fmt.Sprintf("epoch %d, failures %+v", db.Status.Epoch, f)
	})
}

// countingHealth is a health service that counts the checks it answers.
type countingHealth struct {
	*health.Server
	checks atomic.Int64
}

func (c *countingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	resp, err := c.Server.Check(ctx, req)
	if err == nil {
		c.checks.Add(1)
	}
	return resp, err
}
