package operator

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
)

func TestProbeVerdict(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	const grace = 5 * time.Second
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	// The suspect last answered 6 s ago and has failed every probe since.
	down := probeRecord{Node: "a", LastSuccess: ago(6 * time.Second), LastAnswer: ago(6 * time.Second), FailingSince: ago(5 * time.Second)}
	witness := probeRecord{Node: "b", LastSuccess: ago(time.Second), LastAnswer: ago(time.Second)}
	for _, tc := range []struct {
		name    string
		suspect probeRecord
		others  []probeRecord
		want    bool
		why     string
	}{
		{"unreachable", down, []probeRecord{witness}, true, ""},
		{"answering", probeRecord{Node: "a", LastSuccess: ago(time.Second), LastAnswer: ago(time.Second)}, []probeRecord{witness}, false, "last probe succeeded"},
		// One failed probe, the next answered: FailingSince is cleared by
		// the answer; a blip never counts.
		{"one-blip", probeRecord{Node: "a", LastSuccess: ago(0), LastAnswer: ago(0)}, []probeRecord{witness}, false, "last probe succeeded"},
		{"within-grace", probeRecord{Node: "a", LastSuccess: ago(4 * time.Second), FailingSince: ago(3 * time.Second)}, []probeRecord{witness}, false, "only"},
		// Answering NOT_SERVING is not serving: Kubernetes' readiness
		// says the same, a little later.
		{"not-serving", probeRecord{Node: "a", LastSuccess: ago(6 * time.Second), LastAnswer: ago(0), FailingSince: ago(5 * time.Second)}, []probeRecord{witness}, true, ""},
		{"never-answered", probeRecord{Node: "a", FailingSince: ago(time.Minute)}, []probeRecord{witness}, false, "never answered"},
		// The operator's own partition: nobody answers.
		{"no-witness", down, nil, false, "cut off"},
		{"witness-silent-too", down, []probeRecord{{Node: "b", LastSuccess: ago(10 * time.Second), LastAnswer: ago(10 * time.Second), FailingSince: ago(5 * time.Second)}}, false, "cut off"},
		// An answer from before the outage proves nothing about now.
		{"witness-before-outage", down, []probeRecord{{Node: "b", LastSuccess: ago(6 * time.Second), LastAnswer: ago(6 * time.Second)}}, false, "cut off"},
		// A server on the suspect's node that answers: that node lives.
		{"witness-same-node", down, []probeRecord{{Node: "a", LastSuccess: ago(time.Second), LastAnswer: ago(time.Second)}}, false, "cut off"},
		{"witness-unknown-node", down, []probeRecord{{LastSuccess: ago(time.Second), LastAnswer: ago(time.Second)}}, false, "cut off"},
		// A witness that answered NOT_SERVING still answered.
		{"witness-not-serving", down, []probeRecord{{Node: "b", LastSuccess: ago(time.Minute), LastAnswer: ago(time.Second), FailingSince: ago(time.Minute)}}, true, ""},
		{"one-witness-of-several", down, []probeRecord{{Node: "a", LastAnswer: ago(0)}, {Node: "c", LastAnswer: ago(time.Minute)}, witness}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, since, why := probeVerdict(tc.suspect, tc.others, now, grace)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Fatalf("probeVerdict = %v (%q), want %v (%q)", got, why, tc.want, tc.why)
			}
			if got && !since.Equal(tc.suspect.LastSuccess) {
				t.Errorf("since = %v, want the last success %v", since, tc.suspect.LastSuccess)
			}
		})
	}
}

// healthServer is a real gRPC health service on loopback, as a Shale
// server's; stop makes it vanish as a dead node's would.
type healthServer struct {
	srv  *grpc.Server
	hs   *health.Server
	port int32
}

func startHealthServer(t *testing.T) *healthServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &healthServer{srv: grpc.NewServer(), hs: health.NewServer(), port: int32(lis.Addr().(*net.TCPAddr).Port)}
	healthpb.RegisterHealthServer(h.srv, h.hs)
	go h.srv.Serve(lis)
	t.Cleanup(h.srv.Stop)
	return h
}

// TestLivenessProber runs the prober against a real API server (the
// RocksDBs and Pods it reads) and real gRPC health servers on loopback,
// one round at a time on a clock the test moves, and checks the verdicts
// and the wake-ups RFC 0015 describes.
func TestLivenessProber(t *testing.T) {
	env := testenv.Start(t, testenv.WithCRDDirs("../config/crd/bases"), testenv.WithScheme(shalev1.AddToScheme))
	c := env.Client
	const grace = 500 * time.Millisecond

	type world struct {
		t     *testing.T
		ctx   context.Context
		ns    string
		p     *livenessProber
		clock time.Time
	}
	newWorld := func(t *testing.T) *world {
		ctx := context.Background()
		ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		w := &world{t: t, ctx: ctx, ns: ns, clock: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
		w.p = newLivenessProber(c, func(context.Context, *shalev1.RocksDB, string) (grpc.DialOption, error) {
			return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
		}, 100*time.Millisecond, grace, logr.Discard())
		w.p.now = func() time.Time { return w.clock }
		t.Cleanup(w.p.closeAll)
		// The databases of one subtest must not witness for the next.
		t.Cleanup(func() {
			if err := c.DeleteAllOf(ctx, &shalev1.RocksDB{}, client.InNamespace(ns)); err != nil {
				t.Error(err)
			}
		})
		return w
	}
	// pod makes a Running, Ready Pod on node serving kv on port.
	pod := func(w *world, name, db, role, node string, port int32) *corev1.Pod {
		w.t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{shalev1.LabelRocksDB: db, shalev1.LabelRole: role}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: containerName, Image: "shale",
				Ports: []corev1.ContainerPort{{Name: portNameKV, ContainerPort: port}}}}},
		}
		if err := c.Create(w.ctx, p); err != nil {
			w.t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := c.Status().Update(w.ctx, p); err != nil {
			w.t.Fatal(err)
		}
		return p
	}
	// database makes a RocksDB whose primary of epoch 1 runs on node.
	database := func(w *world, name, node string, port int32) *corev1.Pod {
		w.t.Helper()
		db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
			Spec: shalev1.RocksDBSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "store"}}}
		if err := c.Create(w.ctx, db); err != nil {
			w.t.Fatal(err)
		}
		db.Status.Epoch, db.Status.CurrentPrimary = 1, db.PrimaryPodName(1)
		if err := c.Status().Update(w.ctx, db); err != nil {
			w.t.Fatal(err)
		}
		return pod(w, db.PrimaryPodName(1), name, shalev1.RolePrimary, node, port)
	}
	round := func(w *world) {
		w.t.Helper()
		w.clock = w.clock.Add(100 * time.Millisecond)
		if err := w.p.round(w.ctx); err != nil {
			w.t.Fatal(err)
		}
	}
	verdict := func(w *world, pod *corev1.Pod) (bool, string) {
		bad, _, why := w.p.verdict(pod.UID, w.clock)
		return bad, why
	}
	woken := func(w *world) []string {
		var out []string
		for {
			select {
			case ev := <-w.p.events:
				out = append(out, ev.Object.GetName())
			default:
				return out
			}
		}
	}

	t.Run("dead-primary", func(t *testing.T) {
		w := newWorld(t)
		orders, users := startHealthServer(t), startHealthServer(t)
		ordersPod := database(w, "orders", "node-a", orders.port)
		usersPod := database(w, "users", "node-b", users.port)
		for range 3 {
			round(w)
		}
		for _, pp := range []*corev1.Pod{ordersPod, usersPod} {
			if bad, why := verdict(w, pp); bad || !strings.Contains(why, "last probe succeeded") {
				t.Fatalf("%s: verdict %v (%s) while it answers", pp.Name, bad, why)
			}
		}
		// orders' server dies; users' (on another node) answers: a
		// verdict after the grace, not before, and one wake-up.
		lastAnswer := w.clock
		orders.srv.Stop()
		for w.clock.Add(100*time.Millisecond).Sub(lastAnswer) < grace {
			round(w)
			if bad, why := verdict(w, ordersPod); bad {
				t.Fatalf("orders found unreachable %s after its last answer, before the grace: %s", w.clock.Sub(lastAnswer), why)
			}
		}
		for range 3 {
			round(w)
		}
		if bad, why := verdict(w, ordersPod); !bad {
			t.Fatalf("orders: no verdict %s after its server stopped while users answered: %s", w.clock.Sub(lastAnswer), why)
		}
		if got := woken(w); !slices.Equal(got, []string{"orders"}) {
			t.Fatalf("woken: %v, want orders once", got)
		}
		if bad, _ := verdict(w, usersPod); bad {
			t.Fatal("users, which answers, found unreachable")
		}
		// Not ready for Kubernetes: no longer probed, no verdict (the
		// kubelet's word decides, as before).
		ordersPod.Status.Conditions[0].Status = corev1.ConditionFalse
		if err := c.Status().Update(w.ctx, ordersPod); err != nil {
			t.Fatal(err)
		}
		round(w)
		if bad, why := verdict(w, ordersPod); bad || why != "not probed" {
			t.Fatalf("orders, not ready for Kubernetes: verdict %v (%s), want none", bad, why)
		}
	})

	t.Run("operator-cut-off", func(t *testing.T) {
		w := newWorld(t)
		orders, users := startHealthServer(t), startHealthServer(t)
		ordersPod := database(w, "orders", "node-a", orders.port)
		usersPod := database(w, "users", "node-b", users.port)
		for range 3 {
			round(w)
		}
		// Nothing answers any more: the operator is the one cut off.
		orders.srv.Stop()
		users.srv.Stop()
		for range 20 {
			round(w)
		}
		for _, pp := range []*corev1.Pod{ordersPod, usersPod} {
			if bad, why := verdict(w, pp); bad || !strings.Contains(why, "cut off") {
				t.Fatalf("%s: verdict %v (%s) with no server answering: the operator would fail over everything it cannot reach", pp.Name, bad, why)
			}
		}
		if got := woken(w); len(got) != 0 {
			t.Fatalf("woken: %v, want none", got)
		}
	})

	t.Run("secondary-witness", func(t *testing.T) {
		w := newWorld(t)
		primary, beside, elsewhere := startHealthServer(t), startHealthServer(t), startHealthServer(t)
		primaryPod := database(w, "lonely", "node-c", primary.port)
		pod(w, "lonely-ro-1", "lonely", shalev1.RoleSecondary, "node-c", beside.port)
		pod(w, "lonely-ro-2", "lonely", shalev1.RoleSecondary, "node-d", elsewhere.port)
		for range 3 {
			round(w)
		}
		// The primary and the secondary on another node stop; the one
		// beside the primary answers, which proves its node lives, not
		// that the operator reaches other nodes.
		primary.srv.Stop()
		elsewhere.srv.Stop()
		for range 20 {
			round(w)
		}
		if bad, why := verdict(w, primaryPod); bad || !strings.Contains(why, "cut off") {
			t.Fatalf("verdict %v (%s) with only a server on the primary's own node answering", bad, why)
		}
		// The secondary on node-d comes back (same port): a witness.
		lis, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(int(elsewhere.port)))
		if err != nil {
			t.Fatal(err)
		}
		revived := grpc.NewServer()
		healthpb.RegisterHealthServer(revived, health.NewServer())
		go revived.Serve(lis)
		t.Cleanup(revived.Stop)
		// The kept connection redials on its own schedule (at most a
		// probe period apart, in real time): wait for the answer.
		deadline := time.Now().Add(30 * time.Second)
		for bad, _ := verdict(w, primaryPod); !bad && time.Now().Before(deadline); bad, _ = verdict(w, primaryPod) {
			round(w)
		}
		if bad, why := verdict(w, primaryPod); !bad {
			t.Fatalf("no verdict with the secondary on node-d answering: %s", why)
		}
		if got := woken(w); !slices.Contains(got, "lonely") {
			t.Fatalf("woken: %v, want lonely", got)
		}
	})
}
