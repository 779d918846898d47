package operator

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// What TLS adds to a Shale container (the flag names are the data-plane
// binaries', docs/operator.md): the certificate Secret mounted read-only
// at /etc/shale/tls, for KV servers the access Secret at
// /etc/shale/access, the flags naming the files, and an exec readiness
// probe (`shale health` inside the container, against 127.0.0.1 with the
// certificate's name localhost: a kubelet gRPC probe cannot speak TLS,
// and an exec probe crosses no network, so no NetworkPolicy blocks it).
// With TLS off, servers get --insecure and keep the kubelet's gRPC probe.
//
// Kept apart from the Pod builders, which other concerns edit too.

// Where the credential Secrets are mounted.
const (
	tlsDir       = "/etc/shale/tls"
	accessDir    = "/etc/shale/access"
	volumeTLS    = "tls"
	volumeAccess = "access"
	// secretMode: owner and group may read (the Pod's fsGroup is Shale's
	// gid), nobody may write.
	secretMode = 0o440
	// execProbeTimeout: starting `shale health` and a TLS handshake take
	// a few milliseconds, more on a loaded node.
	execProbeTimeout = 3
)

// podTLS is the TLS of one Shale container.
type podTLS struct {
	enabled bool
	// certSecret holds tls.crt, tls.key and ca.crt.
	certSecret string
	// accessSecret holds access.json ("" for none: not a KV server).
	accessSecret string
	// server: a server, which needs --insecure to serve plaintext.
	server bool
	// probePort: the gRPC port the readiness probe checks (0: the
	// container's probe is not a gRPC one and is left alone).
	probePort int32
}

// args are the container's TLS flags.
func (t podTLS) args() []string {
	if !t.enabled {
		if t.server {
			return []string{"--insecure"}
		}
		return nil
	}
	args := []string{
		"--tls-cert", tlsDir + "/" + keyTLSCert,
		"--tls-key", tlsDir + "/" + keyTLSKey,
		"--tls-ca", tlsDir + "/" + keyCA,
	}
	if t.accessSecret != "" {
		args = append(args, "--access-file", accessDir+"/"+keyAccess)
	}
	return args
}

// healthCommand is the exec readiness probe of a TLS server on port.
func healthCommand(port int32) []string {
	return []string{"shale", "health", "--addr", "127.0.0.1:" + strconv.Itoa(int(port)), "--tls-ca", tlsDir + "/" + keyCA, "--tls-server-name", "localhost"}
}

// applyTLS adds t to the Pod spec's first container.
func applyTLS(spec *corev1.PodSpec, t podTLS) {
	c := &spec.Containers[0]
	c.Args = append(c.Args, t.args()...)
	if !t.enabled {
		return
	}
	mount := func(volume, secret, dir string) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret, DefaultMode: ptr.To[int32](secretMode),
		}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: dir, ReadOnly: true})
	}
	mount(volumeTLS, t.certSecret, tlsDir)
	if t.accessSecret != "" {
		mount(volumeAccess, t.accessSecret, accessDir)
	}
	if t.probePort != 0 && c.ReadinessProbe != nil {
		c.ReadinessProbe.ProbeHandler = corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: healthCommand(t.probePort)}}
		c.ReadinessProbe.TimeoutSeconds = max(c.ReadinessProbe.TimeoutSeconds, execProbeTimeout)
	}
}
