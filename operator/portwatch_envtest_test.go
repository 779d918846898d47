package operator

import (
	"fmt"
	"math/rand"
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestOperatorPortWatch: the primary's KV port (a listener on a loopback
// address, the Pod's IP) stops accepting while the Pod still says Running
// and Ready, as after SIGKILL before the kubelet's relist: the operator
// fails over at once, to the next epoch, reason PrimaryFailed. Without the
// port watch nothing happens until the kubelet reports the exit.
func TestOperatorPortWatch(t *testing.T) {
	opts := testOptions()
	opts.WatchPrimaryPorts = true
	h := startOperatorWith(t, opts)
	ns := h.namespace("portwatch")
	sec, store, db := h.samples(ns)
	h.create(sec, store, db)

	// The stand-in primary: a KV server with the database's certificate
	// and access list, on the Pod's IP.
	ip := fmt.Sprintf("127.%d.%d.%d", 10+rand.Intn(200), rand.Intn(250), 1+rand.Intn(250))
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(portKV)))
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: l}
	pod := h.waitPod(ns, "orders-primary-1")
	srv := h.serveGuardedServer(lis, ns, "orders-primary-tls", "orders-access", &guardedStatus{st: &kvv1.StatusResponse{Role: kvv1.Role_ROLE_PRIMARY}})
	h.primaryOpened(pod)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		t.Fatal(err)
	}
	h.waitDB(ns, "orders", "Ready at epoch 1", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Phase == shalev1.PhaseReady && d.Status.Epoch == 1, "want Ready"
	})
	eventually(t, "the operator to connect to the ready primary's port", func() (bool, string) {
		return lis.n.Load() > 0, "no connection accepted"
	})

	// The process dies: its connections cut, its port refused. The Pod's
	// status is not touched.
	srv.Stop()
	db = h.waitDB(ns, "orders", "failed over to epoch 2 on the refused port", func(d *shalev1.RocksDB) (bool, string) {
		return d.Status.Epoch == 2 && d.Status.CurrentPrimary == "orders-primary-2", "want epoch 2"
	})
	if c := db.Condition(shalev1.ConditionFailover); c == nil || c.Reason != shalev1.ReasonPrimaryFailed {
		t.Errorf("Failover condition %+v, want reason %s", c, shalev1.ReasonPrimaryFailed)
	}
	if p, err := h.pod(ns, "orders-primary-1"); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the old Pod changed: %v %v", p, err)
	}
	h.waitPod(ns, "orders-primary-2")
}
