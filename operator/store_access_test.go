package operator

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// wantSecretAccess checks that a Pod of Shale reaches the ObjectStore
// with its Secret mounted read-only as files (read again on rotation),
// never as environment variables, and without a ServiceAccount token.
func wantSecretAccess(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container, secret string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("%s: %s comes from Secret %s as an environment variable: a rotated key would need a restart", what, e.Name, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	if env[objstore.EnvCredentialsDir] != credentialsDir {
		t.Errorf("%s: %s = %q, want %s", what, objstore.EnvCredentialsDir, env[objstore.EnvCredentialsDir], credentialsDir)
	}
	for _, k := range []string{objstore.EnvAccessKeyID, objstore.EnvSecretAccessKey, objstore.EnvInstanceRole} {
		if _, ok := env[k]; ok {
			t.Errorf("%s: %s set", what, k)
		}
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == credentialsVolume })
	if i < 0 || spec.Volumes[i].Secret == nil {
		t.Fatalf("%s: no Secret volume %s in %+v", what, credentialsVolume, spec.Volumes)
	}
	sv := spec.Volumes[i].Secret
	items := map[string]string{}
	for _, it := range sv.Items {
		items[it.Key] = it.Path
	}
	if sv.SecretName != secret || len(items) != 2 || items[shalev1.SecretKeyAccessKeyID] != objstore.CredentialsFileAccessKeyID ||
		items[shalev1.SecretKeySecretAccessKey] != objstore.CredentialsFileSecretAccessKey {
		t.Errorf("%s: Secret volume %+v, want %s's two keys as %s and %s", what, sv, secret, objstore.CredentialsFileAccessKeyID, objstore.CredentialsFileSecretAccessKey)
	}
	if sv.DefaultMode == nil || *sv.DefaultMode != 0o440 {
		t.Errorf("%s: Secret volume mode %v, want 0440", what, sv.DefaultMode)
	}
	j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == credentialsVolume })
	if j < 0 || c.VolumeMounts[j].MountPath != credentialsDir || !c.VolumeMounts[j].ReadOnly || c.VolumeMounts[j].SubPath != "" {
		t.Errorf("%s: mounts %+v, want %s read-only at %s (no subPath: the kubelet does not update those)", what, c.VolumeMounts, credentialsVolume, credentialsDir)
	}
	if spec.ServiceAccountName != "" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: ServiceAccount %q, token mounted %v; want the default and no token", what, spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
}

// Each source of credentials, in a Pod: a Secret as read-only files; a
// ServiceAccount run as, with its token (and nothing else: the platform
// injects the rest); an instance role by one variable.
func TestStoreAccess(t *testing.T) {
	base := shalev1.ObjectStoreSpec{Endpoint: "https://s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Hot: shalev1.BucketLocation{Bucket: "data"}}
	pod := func(spec shalev1.ObjectStoreSpec) (corev1.PodSpec, corev1.Container) {
		ps := corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}}}}}
		storeAccessOf(&shalev1.ObjectStore{Spec: spec}).apply(&ps, &ps.Containers[0])
		return ps, ps.Containers[0]
	}
	envOf := func(c corev1.Container) map[string]string {
		m := map[string]string{}
		for _, e := range c.Env {
			m[e.Name] = e.Value
		}
		return m
	}

	s := base
	s.Credentials = &shalev1.SecretReference{Name: "creds"}
	ps, c := pod(s)
	wantSecretAccess(t, "secret", ps, c, "creds")
	if env := envOf(c); env[objstore.EnvEndpoint] != base.Endpoint || env[objstore.EnvRegion] != "eu-west-1" {
		t.Errorf("secret: env %v", env)
	}
	if c.VolumeMounts[0].Name != "cache" {
		t.Errorf("secret: the cache mount went: %+v", c.VolumeMounts)
	}

	s = base
	s.ServiceAccountName = "orders-s3"
	ps, c = pod(s)
	if ps.ServiceAccountName != "orders-s3" || ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
		t.Errorf("workload identity: ServiceAccount %q, token %v; want orders-s3 with its token", ps.ServiceAccountName, ps.AutomountServiceAccountToken)
	}
	if env := envOf(c); len(env) != 2 || len(ps.Volumes) != 0 || len(c.VolumeMounts) != 1 {
		t.Errorf("workload identity: env %v volumes %+v mounts %+v; want endpoint and region only (the webhook adds the rest)", env, ps.Volumes, c.VolumeMounts)
	}

	s = base
	s.Credentials = &shalev1.SecretReference{Name: "creds"}
	s.Checksum = objstore.ChecksumNone
	if _, c := pod(s); envOf(c)[objstore.EnvChecksum] != objstore.ChecksumNone {
		t.Errorf("checksum none: env %v, want %s=%s", envOf(c), objstore.EnvChecksum, objstore.ChecksumNone)
	}

	s = base
	s.InstanceRole = true
	ps, c = pod(s)
	if env := envOf(c); env[objstore.EnvInstanceRole] != "true" || len(ps.Volumes) != 0 || ps.ServiceAccountName != "" || *ps.AutomountServiceAccountToken {
		t.Errorf("instance role: env %v volumes %+v ServiceAccount %q token %v", env, ps.Volumes, ps.ServiceAccountName, *ps.AutomountServiceAccountToken)
	}
}
