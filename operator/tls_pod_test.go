package operator

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// checkSecretMount checks that the Pod mounts Secret secret read-only at
// dir, readable by the owner and Shale's group only.
func checkSecretMount(t *testing.T, spec corev1.PodSpec, c corev1.Container, volume, secret, dir string) {
	t.Helper()
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == volume })
	if i < 0 || spec.Volumes[i].Secret == nil || spec.Volumes[i].Secret.SecretName != secret ||
		spec.Volumes[i].Secret.DefaultMode == nil || *spec.Volumes[i].Secret.DefaultMode != 0o440 {
		t.Errorf("volume %s: %+v, want Secret %s with mode 0440", volume, spec.Volumes, secret)
	}
	j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
	if j < 0 || c.VolumeMounts[j].MountPath != dir || !c.VolumeMounts[j].ReadOnly {
		t.Errorf("mount of %s: %+v, want read-only at %s", volume, c.VolumeMounts, dir)
	}
	if spec.SecurityContext == nil || ptr.Deref(spec.SecurityContext.FSGroup, 0) != runAsUser {
		t.Errorf("pod security context %+v: the files are group-readable, so fsGroup must be Shale's gid", spec.SecurityContext)
	}
}

// The primary with TLS (the default) mounts its certificate and the access
// list, names them in its flags and is probed by `shale health` over TLS;
// with TLS off it serves plaintext (--insecure), mounts nothing and keeps
// the kubelet's gRPC probe.
func TestPrimaryPodTLS(t *testing.T) {
	db, store := secondaryFixture()
	pod := primaryPod(db, store, 3, "default:image")
	c := pod.Spec.Containers[0]
	args := " " + strings.Join(c.Args, " ") + " "
	for _, want := range []string{" --tls-cert /etc/shale/tls/tls.crt ", " --tls-key /etc/shale/tls/tls.key ", " --tls-ca /etc/shale/tls/ca.crt ", " --access-file /etc/shale/access/access.json "} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--insecure") {
		t.Errorf("args %q: --insecure with TLS on", args)
	}
	checkSecretMount(t, pod.Spec, c, "tls", "orders-primary-tls", "/etc/shale/tls")
	checkSecretMount(t, pod.Spec, c, "access", "orders-access", "/etc/shale/access")
	p := c.ReadinessProbe
	if p == nil || p.Exec == nil || p.GRPC != nil ||
		!slices.Equal(p.Exec.Command, []string{"shale", "health", "--addr", "127.0.0.1:7070", "--tls-ca", "/etc/shale/tls/ca.crt", "--tls-server-name", "localhost"}) {
		t.Errorf("readiness probe %+v, want `shale health` over TLS on 7070", p)
	} else if p.PeriodSeconds != 1 || p.TimeoutSeconds < 3 {
		t.Errorf("readiness probe period %d timeout %d: want the primary's 1 s period, and time for a process to start", p.PeriodSeconds, p.TimeoutSeconds)
	}

	db.Spec.TLS = &shalev1.TLSSpec{Enabled: ptr.To(false)}
	pod = primaryPod(db, store, 3, "default:image")
	c = pod.Spec.Containers[0]
	args = " " + strings.Join(c.Args, " ") + " "
	if !strings.Contains(args, " --insecure ") || strings.Contains(args, "--tls-") || strings.Contains(args, "--access-file") {
		t.Errorf("TLS off: args %q, want --insecure and no TLS files", args)
	}
	// The cache and the store's credentials; no certificate, no access list.
	if len(pod.Spec.Volumes) != 2 || len(c.VolumeMounts) != 2 || pod.Spec.Volumes[1].Name != "s3-credentials" {
		t.Errorf("TLS off: volumes %+v, want the cache and the store's credentials only", pod.Spec.Volumes)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Port != 7070 {
		t.Errorf("TLS off: readiness probe %+v, want gRPC on 7070", c.ReadinessProbe)
	}
}

// The scheduler serves TLS with its certificate; the workers present
// theirs (clients only: no --insecure, no access list); with TLS off the
// scheduler serves plaintext and the workers dial it so.
func TestCompactorPoolTLS(t *testing.T) {
	_, store := secondaryFixture()
	pool := &shalev1.CompactorPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "prod"}}
	sched := schedulerDeployment(pool, "default:image")
	sc := sched.Spec.Template.Spec.Containers[0]
	wantSched := "compactor scheduler --listen :7080 --metrics-listen :9080 --tls-cert /etc/shale/tls/tls.crt --tls-key /etc/shale/tls/tls.key --tls-ca /etc/shale/tls/ca.crt"
	if got := strings.Join(sc.Args, " "); got != wantSched {
		t.Errorf("scheduler args %q, want %q", got, wantSched)
	}
	checkSecretMount(t, sched.Spec.Template.Spec, sc, "tls", "pool-scheduler-tls", "/etc/shale/tls")
	if p := sc.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, healthCommand(7080)) {
		t.Errorf("scheduler readiness probe %+v, want `shale health` on 7080", p)
	}
	work := workerDeployment(pool, store, "default:image", 2)
	wc := work.Spec.Template.Spec.Containers[0]
	wargs := " " + strings.Join(wc.Args, " ") + " "
	if !strings.HasSuffix(wargs, " --tls-cert /etc/shale/tls/tls.crt --tls-key /etc/shale/tls/tls.key --tls-ca /etc/shale/tls/ca.crt ") {
		t.Errorf("worker args %q, want its certificate's files last", wargs)
	}
	checkSecretMount(t, work.Spec.Template.Spec, wc, "tls", "pool-worker-tls", "/etc/shale/tls")
	if p := wc.ReadinessProbe; p == nil || p.HTTPGet == nil {
		t.Errorf("worker readiness probe %+v, want its HTTP /healthz kept", p)
	}

	pool.Spec.TLS = &shalev1.TLSSpec{Enabled: ptr.To(false)}
	sched = schedulerDeployment(pool, "default:image")
	sc = sched.Spec.Template.Spec.Containers[0]
	if got := strings.Join(sc.Args, " "); got != "compactor scheduler --listen :7080 --metrics-listen :9080 --insecure" {
		t.Errorf("TLS off: scheduler args %q", got)
	}
	if len(sched.Spec.Template.Spec.Volumes) != 0 || sc.ReadinessProbe.GRPC == nil {
		t.Errorf("TLS off: scheduler volumes %+v probe %+v", sched.Spec.Template.Spec.Volumes, sc.ReadinessProbe)
	}
	work = workerDeployment(pool, store, "default:image", 2)
	wc = work.Spec.Template.Spec.Containers[0]
	if got := strings.Join(wc.Args, " "); strings.Contains(got, "--tls") || strings.Contains(got, "--insecure") || len(work.Spec.Template.Spec.Volumes) != 2 {
		t.Errorf("TLS off: worker args %q volumes %+v", got, work.Spec.Template.Spec.Volumes)
	}
}
