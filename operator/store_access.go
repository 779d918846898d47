package operator

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

const (
	// credentialsVolume holds the ObjectStore's Secret, mounted read-only
	// at credentialsDir: the kubelet updates the files when the Secret
	// changes, and Shale reads them again (no restart, no failover).
	credentialsVolume = "s3-credentials"
	credentialsDir    = "/etc/shale/s3-credentials"
)

// storeAccess is what a Pod of Shale (primary, secondary, compactor
// worker) needs to reach its ObjectStore: environment, the credentials
// volume and its mount, and the ServiceAccount it runs as.
type storeAccess struct {
	env     []corev1.EnvVar
	volumes []corev1.Volume
	mounts  []corev1.VolumeMount
	// serviceAccount is the Pod's ServiceAccount ("" the namespace's
	// default); its token is mounted only then (workload identity).
	serviceAccount string
}

// storeAccessOf says how Pods reach store:
//   - credentials (a Secret): mounted read-only, its two keys as the files
//     accessKeyID and secretAccessKey (nothing else in the Secret reaches
//     the Pod), SHALE_S3_CREDENTIALS_DIR naming the directory;
//   - serviceAccountName: the Pod runs as it, with its token, and takes
//     what the platform's webhook injects for it (AWS_WEB_IDENTITY_TOKEN_FILE
//     and AWS_ROLE_ARN for EKS IAM roles for service accounts,
//     AWS_CONTAINER_CREDENTIALS_FULL_URI for EKS Pod Identity);
//   - instanceRole: SHALE_S3_INSTANCE_ROLE=true (the node's or
//     container's role).
func storeAccessOf(store *shalev1.ObjectStore) storeAccess {
	a := storeAccess{env: []corev1.EnvVar{{Name: objstore.EnvEndpoint, Value: store.Spec.Endpoint}}}
	if store.Spec.Region != "" {
		a.env = append(a.env, corev1.EnvVar{Name: objstore.EnvRegion, Value: store.Spec.Region})
	}
	if store.Spec.Checksum != "" {
		a.env = append(a.env, corev1.EnvVar{Name: objstore.EnvChecksum, Value: store.Spec.Checksum})
	}
	switch {
	case store.Spec.Credentials != nil:
		a.env = append(a.env, corev1.EnvVar{Name: objstore.EnvCredentialsDir, Value: credentialsDir})
		a.volumes = []corev1.Volume{{
			Name: credentialsVolume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: store.Spec.Credentials.Name,
				Items: []corev1.KeyToPath{
					{Key: shalev1.SecretKeyAccessKeyID, Path: objstore.CredentialsFileAccessKeyID},
					{Key: shalev1.SecretKeySecretAccessKey, Path: objstore.CredentialsFileSecretAccessKey},
				},
				// Readable by Shale's group only (fsGroup).
				DefaultMode: ptr.To[int32](0o440),
			}},
		}}
		// Not a subPath mount: the kubelet does not update those.
		a.mounts = []corev1.VolumeMount{{Name: credentialsVolume, MountPath: credentialsDir, ReadOnly: true}}
	case store.Spec.ServiceAccountName != "":
		a.serviceAccount = store.Spec.ServiceAccountName
	case store.Spec.InstanceRole:
		a.env = append(a.env, corev1.EnvVar{Name: objstore.EnvInstanceRole, Value: "true"})
	}
	return a
}

// apply adds the access to a Pod spec and its Shale container. The
// ServiceAccount token is mounted only for workload identity: no other
// Shale Pod talks to the API server.
func (a storeAccess) apply(spec *corev1.PodSpec, c *corev1.Container) {
	c.Env = append(c.Env, a.env...)
	c.VolumeMounts = append(c.VolumeMounts, a.mounts...)
	spec.Volumes = append(spec.Volumes, a.volumes...)
	spec.ServiceAccountName = a.serviceAccount
	spec.AutomountServiceAccountToken = ptr.To(a.serviceAccount != "")
}

// credentialsOrigin names where an ObjectStore's credentials come from,
// for messages.
func credentialsOrigin(store *shalev1.ObjectStore) string {
	switch {
	case store.Spec.Credentials != nil:
		return "Secret " + store.Spec.Credentials.Name
	case store.Spec.ServiceAccountName != "":
		return "ServiceAccount " + store.Spec.ServiceAccountName
	}
	return "the instance role"
}
