//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// stepKV: writes and reads through NAME-rw, from a client Pod running
// `shale kv` (cluster DNS and the Service, as an application would) and
// from the test over gRPC.
func stepKV(t *testing.T, s *suite) {
	addr := fmt.Sprintf("%s-rw:%d", s.db, kvPort)
	// Through the Service's ClusterIP from the node first: right after the
	// primary became ready, kube-proxy may not route the Service yet (the
	// Pod's one-shot `shale kv put` was refused once in 2 s after install).
	kvStatus(t, s.rwAddr(t))
	value := fmt.Sprintf("from-a-pod-%d", time.Now().UnixNano())
	secret := s.db + "-client-" + e2eClient
	out := s.clientPod(t, "kv-client", s.db, secret,
		[]string{"kv", "put", "e2e/kv/from-pod", value, "--config", clientConfigFile, "--addr", addr},
		[]string{"kv", "get", "e2e/kv/from-pod", "--config", clientConfigFile, "--addr", addr})
	if strings.TrimSpace(out) != value {
		t.Fatalf("shale kv get in a Pod printed %q, want %q", out, value)
	}
	s.ledger.ack("e2e/kv/from-pod", value)
	t.Logf("a Pod wrote and read e2e/kv/from-pod through %s", addr)

	kv := s.kvClient(t)
	c := ctx(t, time.Minute)
	for i := range 100 {
		key := fmt.Sprintf("e2e/kv/%03d", i)
		if err := s.put(c, kv, key, "v"+key); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	got, err := kv.Get(c, &kvv1.GetRequest{Key: []byte("e2e/kv/042")})
	if err != nil || string(got.Value) != "ve2e/kv/042" {
		t.Fatalf("get e2e/kv/042: %v %q", err, got.GetValue())
	}
	stream, err := kv.Scan(c, &kvv1.ScanRequest{Prefix: []byte("e2e/kv/0")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		n += len(r.Pairs)
	}
	if n != 100 {
		t.Fatalf("scan of e2e/kv/0 returned %d pairs, want 100", n)
	}
	st := kvStatus(t, s.rwAddr(t))
	t.Logf("100 writes, a get and a scan through %s-rw; the primary reports epoch %d, db %s", s.db, st.Epoch, st.Db)
	if db := s.rocksDB(t, s.db); uint64(db.Status.Epoch) != st.Epoch {
		t.Fatalf("the primary behind %s-rw runs epoch %d, the RocksDB's status says %d", s.db, st.Epoch, db.Status.Epoch)
	}
	s.verifyLedger(t, s.rwAddr(t))
}

// clientPod runs `shale` in a Pod of the shale image: first (an init
// container), then second; it returns the second's output. The Pod mounts
// the Secret secret (a client's credentials) at clientDir, labelled as a
// client of db.
func (s *suite) clientPod(t *testing.T, name, db, secret string, first, second []string) string {
	t.Helper()
	ok, out, logs := s.runClientPod(t, name, db, secret, first, second)
	if !ok {
		t.Fatalf("client Pod %s failed: %s", name, logs)
	}
	return out
}

// clientDir is where client Pods mount their credentials; clientConfig
// the client config file in it.
const (
	clientDir        = "/etc/shale/client"
	clientConfigFile = clientDir + "/client.yaml"
)

// runClientPod is clientPod for runs that may fail: whether the Pod
// succeeded, the second container's output, and both containers' logs.
func (s *suite) runClientPod(t *testing.T, name, db, secret string, first, second []string) (ok bool, out, logs string) {
	t.Helper()
	image := s.cfg.imagePrefix + "/shale:" + s.cfg.imageTag
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptrTo(false),
		ReadOnlyRootFilesystem:   ptrTo(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	if secret != "" {
		mounts = []corev1.VolumeMount{{Name: "client", MountPath: clientDir, ReadOnly: true}}
		volumes = []corev1.Volume{{Name: "client", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}}
	}
	pod := &corev1.Pod{
		// The client label: the database's NetworkPolicy admits it.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.namespace, Labels: map[string]string{
			"app.kubernetes.io/name": "shale-e2e-client",
			shalev1.LabelClient:      db,
		}},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo[int64](65532), FSGroup: ptrTo[int64](65532)},
			InitContainers:  []corev1.Container{{Name: "first", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: first, SecurityContext: sc, VolumeMounts: mounts}},
			Containers:      []corev1.Container{{Name: "second", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: second, SecurityContext: sc, VolumeMounts: mounts}},
			Volumes:         volumes,
		},
	}
	c := ctx(t, 5*time.Minute)
	if err := s.kube.Delete(c, pod); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "an old client Pod to be gone", func() (bool, string) {
		return s.pod(t, name) == nil, ""
	})
	if err := s.kube.Create(c, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.kube.Delete(context.Background(), pod) })
	eventually(t, 3*time.Minute, "client Pod "+name+" to finish", func() (bool, string) {
		if err := s.kube.Get(c, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, string(pod.Status.Phase)
	})
	logsOf := func(container string) string {
		b, err := s.cs.CoreV1().Pods(s.cfg.namespace).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(c)
		if err != nil {
			return "(no logs: " + err.Error() + ")"
		}
		return string(b)
	}
	out = logsOf("second")
	logs = fmt.Sprintf("shale %s: %s; shale %s: %s", strings.Join(first, " "), logsOf("first"), strings.Join(second, " "), out)
	return pod.Status.Phase == corev1.PodSucceeded, out, logs
}
