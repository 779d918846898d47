package operator

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Each secondary's replication state in status.secondaryStatus: the
// operator asks every running secondary Pod for its Status (the same call
// `shale kv status` makes) about every SecondaryStatusInterval, with a
// short timeout per Pod and all Pods at once, so a hung secondary delays
// the reconcile by the timeout at most. The interval bounds the status
// writes this adds (each write wakes the reconciler, which must not poll
// again at once).

// secondaryStatusTimeout bounds one Status call.
const secondaryStatusTimeout = 2 * time.Second

// secondaryStatusFunc asks the server at addr for its Status, connecting
// with dial's transport (kvDial).
type secondaryStatusFunc func(ctx context.Context, addr string, dial grpc.DialOption) (*kvv1.StatusResponse, error)

// grpcSecondaryStatus dials addr and calls Status.
func grpcSecondaryStatus(ctx context.Context, addr string, dial grpc.DialOption) (*kvv1.StatusResponse, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return kvv1.NewKVClient(conn).Status(ctx, &kvv1.StatusRequest{})
}

// kvDial is how the operator reaches the database's KV servers behind the
// Service svc (NAME-rw or NAME-ro) when it dials a Pod's IP: with TLS,
// its own certificate, verifying the server's by the Service's name;
// plaintext with TLS off.
func (r *rocksDBReconciler) kvDial(ctx context.Context, db *shalev1.RocksDB, svc string) (grpc.DialOption, error) {
	if !db.TLSEnabled() {
		return plaintext(), nil
	}
	if db.CertManagerIssuer() != nil {
		return issuedDial(ctx, r.Client, db.Namespace, db.OperatorTLSSecretName(), serviceHost(svc, db.Namespace))
	}
	return r.creds.dial(ctx, serviceHost(svc, db.Namespace))
}

// secondaryStatusDue reports whether the secondaries of a database are to
// be polled now, and if so records the poll.
func (r *rocksDBReconciler) secondaryStatusDue(key types.NamespacedName, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.secondaryPolled[key]; ok && now.Sub(last) < r.opts.SecondaryStatusInterval {
		return false
	}
	r.secondaryPolled[key] = now
	return true
}

// pollSecondaries asks each running secondary Pod of db for its Status.
func (r *rocksDBReconciler) pollSecondaries(ctx context.Context, db *shalev1.RocksDB) ([]shalev1.SecondaryStatus, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(db.Namespace),
		client.MatchingLabels{shalev1.LabelRocksDB: db.Name, shalev1.LabelRole: shalev1.RoleSecondary}); err != nil {
		return nil, err
	}
	now := metav1.NewTime(r.now())
	dial, dialErr := r.kvDial(ctx, db, db.ReadOnlyServiceName())
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out []shalev1.SecondaryStatus
	)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		addr, reason := secondaryAddr(p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st *kvv1.StatusResponse
			err := fmt.Errorf("%s", reason)
			switch {
			case reason != "":
			case dialErr != nil:
				err = dialErr
			default:
				c, cancel := context.WithTimeout(ctx, secondaryStatusTimeout)
				st, err = r.secondaryStatus(c, addr, dial)
				cancel()
			}
			e := secondaryStatusEntry(p.Name, st, err, now)
			mu.Lock()
			out = append(out, e)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b shalev1.SecondaryStatus) int { return strings.Compare(a.Pod, b.Pod) })
	return out, nil
}

// secondaryAddr is where a secondary Pod serves the KV API: its IP and
// the container port named like the primary's. reason says why there is
// none.
func secondaryAddr(p *corev1.Pod) (addr, reason string) {
	if p.Status.PodIP == "" {
		return "", "the Pod has no IP yet"
	}
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == portNameKV {
				return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort))), ""
			}
		}
	}
	return "", fmt.Sprintf("no container port named %q", portNameKV)
}

// secondaryStatusEntry turns one Status answer (or the error asking for
// it) into its status entry.
func secondaryStatusEntry(pod string, st *kvv1.StatusResponse, err error, now metav1.Time) shalev1.SecondaryStatus {
	e := shalev1.SecondaryStatus{Pod: pod, CheckedAt: now}
	switch {
	case err != nil:
		e.Error = err.Error()
	case st.Role != kvv1.Role_ROLE_SECONDARY:
		e.Error = fmt.Sprintf("it answers as %s, not as a secondary", st.Role)
	default:
		e.AppliedSequence = int64(min(st.LatestSequence, uint64(1<<63-1)))
		if st.PrimarySequence > st.LatestSequence {
			e.LagSequences = int64(min(st.PrimarySequence-st.LatestSequence, uint64(1<<63-1)))
		}
		lag := time.Duration(max(st.LagSeconds, 0) * float64(time.Second)).Round(time.Millisecond)
		e.Lag = &metav1.Duration{Duration: lag}
	}
	return e
}
