//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

const proxyInNode = "/usr/local/bin/shale-e2e-tcpproxy"

// prepareNode checks that the node keeps traffic for the pod and Service
// ranges inside it (hack/kind.sh sets this up for every cluster: without
// it a client could stay connected to whatever answered outside the node
// after a failover) and installs the e2e proxy.
func (s *suite) prepareNode(t *testing.T) {
	routes := s.nodeExec(t, "ip route show type unreachable")
	rules := s.nodeExec(t, "iptables -w -S")
	if !strings.Contains(routes, "10.244.0.0/16") || !strings.Contains(rules, "shale-unrewritten-service-traffic") {
		t.Fatalf("the kind node %s does not contain cluster traffic (unreachable routes %q; no REJECT rule shale-unrewritten-service-traffic): run make kind-up (hack/kind.sh up sets both up, also on an existing cluster)", s.cfg.node, routes)
	}
	s.installProxy(t)
}

// installProxy builds tcpproxy (static) and copies it into the kind node.
func (s *suite) installProxy(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tcpproxy")
	cmd := exec.Command("go", "build", "-o", bin, "./tcpproxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building e2e/tcpproxy: %v\n%s", err, out)
	}
	run(t, s.cfg.docker, "cp", bin, s.cfg.node+":"+proxyInNode)
}

// nodeIP is the kind node's address on the docker network, which the host
// reaches directly.
func (s *suite) nodeIP(t *testing.T) string {
	t.Helper()
	ip := strings.TrimSpace(run(t, s.cfg.docker, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", s.cfg.node))
	if f := strings.Fields(ip); len(f) > 0 {
		return f[0]
	}
	t.Fatalf("node %s has no IP address on a docker network", s.cfg.node)
	return ""
}

// proxy starts tcpproxy in the node forwarding to target (IP:PORT) and
// returns the address the host connects to. It stops when t ends.
func (s *suite) proxy(t *testing.T, target string) string {
	t.Helper()
	cmd := exec.Command(s.cfg.docker, "exec", "-i", s.cfg.node, proxyInNode, "0.0.0.0:0", target)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting tcpproxy in the node: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("tcpproxy to %s exited: %s", target, stderr.String())
		}
		_, port, found := strings.Cut(strings.TrimPrefix(l, "listening on "), "]:")
		if !found {
			_, port, found = strings.Cut(strings.TrimPrefix(l, "listening on "), ":")
		}
		if !found {
			t.Fatalf("tcpproxy printed %q", l)
		}
		return fmt.Sprintf("%s:%s", s.nodeIP(t), port)
	case <-time.After(60 * time.Second):
		t.Fatalf("tcpproxy to %s did not start within 60s: %s", target, stderr.String())
	}
	return ""
}

// serviceProxy returns a host address that reaches port of the Service
// name through its ClusterIP (so through kube-proxy, as any client would).
func (s *suite) serviceProxy(t *testing.T, name string, port int) string {
	t.Helper()
	var svc corev1.Service
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: name}, &svc); err != nil {
		t.Fatalf("Service %s: %v", name, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("Service %s has no ClusterIP", name)
	}
	addr := s.proxy(t, fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, port))
	if target, ok := kvTarget(name); ok && port == kvPort {
		registerProxy(addr, target.db, target.serverName)
	}
	return addr
}

// rocksDB reads a RocksDB.
func (s *suite) rocksDB(t *testing.T, name string) *shalev1.RocksDB {
	t.Helper()
	var db shalev1.RocksDB
	if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: name}, &db); err != nil {
		t.Fatalf("RocksDB %s: %v", name, err)
	}
	return &db
}

// describe is a one-line summary of a RocksDB's status for timeouts.
func describe(db *shalev1.RocksDB) string {
	var conds []string
	for _, c := range db.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase=%s epoch=%d primary=%s generation=%d observed=%d conditions=[%s]",
		db.Status.Phase, db.Status.Epoch, db.Status.CurrentPrimary, db.Generation, db.Status.ObservedGeneration, strings.Join(conds, "; "))
}

// isReady: the status describes the current spec and says Ready.
func isReady(db *shalev1.RocksDB) bool {
	return db.Status.ObservedGeneration == db.Generation &&
		db.Status.Phase == shalev1.PhaseReady &&
		meta.IsStatusConditionTrue(db.Status.Conditions, shalev1.ConditionReady)
}

// waitReady waits until the RocksDB is Ready with an epoch of at least
// minEpoch, and returns it.
func (s *suite) waitReady(t *testing.T, name string, minEpoch int64, timeout time.Duration) *shalev1.RocksDB {
	t.Helper()
	var db shalev1.RocksDB
	eventually(t, timeout, fmt.Sprintf("RocksDB %s to be Ready at epoch >= %d", name, minEpoch), func() (bool, string) {
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: name}, &db); err != nil {
			return false, err.Error()
		}
		return isReady(&db) && db.Status.Epoch >= minEpoch && db.Status.CurrentPrimary != "", describe(&db)
	})
	return &db
}

// pod reads a Pod; nil if it does not exist.
func (s *suite) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: name}, &p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("Pod %s: %v", name, err)
	}
	return &p
}

// containerPID is the node-side PID of the main process of a Pod's first
// container, found through the node's container runtime.
func (s *suite) containerPID(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	container := pod.Spec.Containers[0].Name
	script := fmt.Sprintf(`set -e
id=$(crictl ps -q --state running --name '^%s$' --label io.kubernetes.pod.namespace=%s --label io.kubernetes.pod.name=%s)
[ -n "$id" ] || { echo "no running container %s in pod %s" >&2; exit 1; }
crictl inspect -o go-template --template '{{.info.pid}}' $id`, container, pod.Namespace, pod.Name, container, pod.Name)
	pid := s.nodeExec(t, script)
	if pid == "" || pid == "0" || strings.ContainsAny(pid, " \n") {
		t.Fatalf("could not find the PID of %s/%s: %q", pod.Name, container, pid)
	}
	return pid
}

// signal sends sig (KILL, STOP, CONT) to a Pod's main process from the
// node, as a crash or a freeze of the machine would.
func (s *suite) signal(t *testing.T, pod *corev1.Pod, sig string) {
	t.Helper()
	pid := s.containerPID(t, pod)
	s.nodeExec(t, fmt.Sprintf("kill -%s %s", sig, pid))
	t.Logf("sent SIG%s to %s (pid %s in the node)", sig, pod.Name, pid)
}

// operatorDeployment is the chart's operator Deployment name.
func (s *suite) operatorDeployment() string { return s.cfg.release + "-operator" }

// dump writes what helps to understand a failure into the artifacts
// directory and the test log: Pods, RocksDBs, ObjectStores, events, the
// logs of every Pod in the namespace and the operator's log.
func (s *suite) dump(t *testing.T, step string) {
	dir := filepath.Join(s.cfg.artifacts, step)
	os.MkdirAll(dir, 0o755)
	save := func(file string, args ...string) string {
		out, err := runErr(s.cfg.kubectl, append([]string{"--kubeconfig", s.cfg.kubeconfig}, args...)...)
		if err != nil {
			out += "\n(" + err.Error() + ")"
		}
		os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644)
		return out
	}
	ns := s.cfg.namespace
	save("pods.txt", "get", "pods", "-A", "-o", "wide")
	save("shale.yaml", "-n", ns, "get", "rocksdbs,objectstores", "-o", "yaml")
	save("describe-pods.txt", "-n", ns, "describe", "pods")
	events := save("events.txt", "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	operatorLog := save("operator.log", "-n", ns, "logs", "deployment/"+s.operatorDeployment(), "--all-containers", "--timestamps", "--tail=-1")
	save("operator-previous.log", "-n", ns, "logs", "deployment/"+s.operatorDeployment(), "--all-containers", "--timestamps", "--previous")
	var pods corev1.PodList
	if err := s.kube.List(context.Background(), &pods, client.InNamespace(ns)); err == nil {
		for _, p := range pods.Items {
			save("pod-"+p.Name+".log", "-n", ns, "logs", p.Name, "--all-containers", "--timestamps")
			for _, cs := range p.Status.ContainerStatuses {
				if cs.RestartCount > 0 {
					save("pod-"+p.Name+"-previous.log", "-n", ns, "logs", p.Name, "--all-containers", "--timestamps", "--previous")
				}
			}
		}
	}
	t.Logf("step %s failed; Pods, events and logs are in %s", step, dir)
	t.Logf("pods:\n%s", save("pods-ns.txt", "-n", ns, "get", "pods", "-o", "wide", "--show-labels"))
	t.Logf("events (last 40):\n%s", tail(events, 40))
	t.Logf("operator log (last 80 lines):\n%s", tail(operatorLog, 80))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
