package operator

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// Ports and paths of the primary container.
const (
	portKV        = 7070
	portMetrics   = 9090
	portNameKV    = "grpc"
	portNameMet   = "metrics"
	cacheDir      = "/var/cache/shale"
	containerName = "shale"
	// terminationGrace: a primary stops gracefully within 10 s (requests
	// in flight finish) and records a clean release.
	terminationGrace = 15
	// runAsUser is the uid of Shale's images.
	runAsUser = 65532
)

// primaryPod is the Pod of the primary with an epoch: `shale primary` on
// the database's directory, started with --epoch so that the store fences
// every older owner (and refuses this one if a higher epoch was taken).
//
// RestartPolicy is Never. If the process exits (crash, OOM kill, fenced),
// the Pod becomes Failed and the operator fails over with a new epoch. A
// restarted container would run again with the epoch its first run already
// claimed in the store, be refused (ErrStaleEpoch), and crash-loop; the
// epoch must change on every start, and only the operator hands them out.
//
// Credentials reach the container as the ObjectStore says (storeAccessOf):
// its Secret mounted read-only (the operator never copies keys into the Pod
// spec, a ConfigMap or a log), workload identity or an instance role.
//
// Its shale.rocks/pod-spec-hash annotation (primaryPodHash) says what it
// was built from; a primary whose hash differs from the current one is
// outdated (rolling.go).
func primaryPod(db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64, defaultImage string) *corev1.Pod {
	pod := buildPrimaryPod(db, store, epoch, defaultImage)
	pod.Annotations[shalev1.AnnotationPodSpecHash] = podSpecHash(pod)
	return pod
}

func buildPrimaryPod(db *shalev1.RocksDB, store *shalev1.ObjectStore, epoch int64, defaultImage string) *corev1.Pod {
	p := db.Spec.Primary
	image := p.Image
	if image == "" {
		image = defaultImage
	}
	pull := p.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	args := []string{
		"primary",
		"--db", store.DatabaseURL(db.Status.StoragePath),
		"--epoch", strconv.FormatInt(epoch, 10),
		"--listen", ":" + strconv.Itoa(portKV),
		"--metrics-listen", ":" + strconv.Itoa(portMetrics),
		"--cache-dir", cacheDir,
	}
	dur := func(flag string, d *metav1.Duration) {
		if d != nil {
			args = append(args, flag, d.Duration.String())
		}
	}
	size := func(flag string, q *resource.Quantity) {
		if q != nil {
			args = append(args, flag, strconv.FormatInt(q.Value(), 10))
		}
	}
	size("--cache-size", p.CacheSize)
	size("--block-cache-size", p.BlockCacheSize)
	size("--max-key-size", p.MaxKeySize)
	size("--max-value-size", p.MaxValueSize)
	size("--max-batch-size", p.MaxBatchSize)
	dur("--lease", p.Lease)
	dur("--delete-grace", p.DeleteGrace)
	dur("--read-timeout", p.ReadTimeout)
	dur("--write-timeout", p.WriteTimeout)
	dur("--retry-for", p.RetryFor)
	if c := db.Spec.Compaction; db.EffectiveCompactionMode() == shalev1.CompactionRemote && c.CompactorPoolRef != nil {
		// The pool's scheduler Service; if the pool is missing or down, the
		// primary compacts locally (and counts it).
		args = append(args, "--compaction", "remote",
			"--compaction-scheduler", shalev1.SchedulerAddressOf(db.Namespace, c.CompactorPoolRef.Name))
		if c.Priority > 0 {
			args = append(args, "--compaction-priority", strconv.Itoa(int(c.Priority)))
		}
		dur("--compaction-queue-timeout", c.QueueTimeout)
	}
	args = append(args, tuningArgs(db.Spec.Tuning)...)
	if c := store.Spec.StorageClasses.WAL; c != "" {
		args = append(args, "--wal-storage-class", c)
	}
	if c := store.Spec.StorageClasses.SST; c != "" {
		args = append(args, "--sst-storage-class", c)
	}
	args = append(args, planTiering(db, store).args...)
	archArgs, archVols, archMounts := archivePodArgs(db)
	args = append(args, archArgs...)
	if db.Status.Created != nil || adopts(db) {
		// The database was ready once, or is an adopted directory: a
		// location without it is refused instead of becoming a new, empty
		// database (an ObjectStore pointed elsewhere must not fork the
		// database).
		args = append(args, "--existing")
	} else if c := db.Status.Clone; c != nil && clones(db) {
		// A clone's primaries until it was ready once: the first
		// bootstraps it from the parent's checkpoint (pins, the frozen
		// MANIFEST, CURRENT); a later one finds CURRENT and opens it. The
		// parent's directory is read with this ObjectStore's credentials,
		// which are the parent's (same ObjectStore: decideClone), or, for a
		// parent in another ObjectStore, copied from its endpoint with its
		// Secret (mounted below) or the Pod's own identity (RFC 0010 step
		// 20: decideCloneCopy).
		args = append(args, "--clone-from", c.URL, "--clone-checkpoint", c.Checkpoint, "--clone-id", string(db.UID))
		if c.ObjectStore != "" {
			args = append(args, "--clone-copy", "--clone-endpoint", c.Endpoint)
			if c.CredentialsSecret != "" {
				args = append(args, "--clone-credentials-dir", cloneCredentialsDir)
			}
		}
	}

	name := db.PrimaryPodName(epoch)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: db.Namespace,
			Labels:    primaryPodLabels(db, epoch),
			Annotations: map[string]string{
				shalev1.AnnotationSpecGeneration: strconv.FormatInt(db.Generation, 10),
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](terminationGrace),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext:               podSecurityContext(),
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           image,
				ImagePullPolicy: pull,
				Args:            args,
				Ports: []corev1.ContainerPort{
					{Name: portNameKV, ContainerPort: portKV, Protocol: corev1.ProtocolTCP},
					{Name: portNameMet, ContainerPort: portMetrics, Protocol: corev1.ProtocolTCP},
				},
				Resources: withDefaultRequests(p.Resources, primaryDefaultRequests),
				// SERVING once the takeover is done and the database is
				// open, and while ownership is confirmed within half the
				// lease (primary/readiness.go): NOT_SERVING when the store
				// does not answer.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: portKV}},
					PeriodSeconds:    1,
					TimeoutSeconds:   1,
					FailureThreshold: 3,
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "cache", MountPath: cacheDir}},
				SecurityContext:          containerSecurityContext(),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{{
				Name:         "cache",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: cacheSizeLimit(p.CacheSize)}},
			}},
		},
	}
	if v := db.Annotations[shalev1.AnnotationRestartedAt]; v != "" {
		// A restart asked for (kubectl shale restart): it enters the
		// pod-spec hash, so the running primary becomes outdated.
		pod.Annotations[shalev1.AnnotationRestartedAt] = v
	}
	applyScheduling(&pod.Spec, p.PodScheduling)
	applyTLS(&pod.Spec, podTLS{enabled: db.TLSEnabled(), certSecret: db.PrimaryTLSSecretName(), accessSecret: db.AccessSecretName(), server: true, probePort: portKV})
	storeAccessOf(store).apply(&pod.Spec, &pod.Spec.Containers[0])
	// The backup store's Secret for the archive (archive.go), as the
	// Backup Jobs mount it.
	pod.Spec.Volumes = append(pod.Spec.Volumes, archVols...)
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, archMounts...)
	if c := db.Status.Clone; c != nil && c.CredentialsSecret != "" && db.Status.Created == nil && !adopts(db) && clones(db) {
		// The parent ObjectStore's Secret, as storeAccessOf mounts the
		// clone's own: keys never go into the Pod spec.
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: cloneCredentialsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: c.CredentialsSecret,
			Items: []corev1.KeyToPath{
				{Key: shalev1.SecretKeyAccessKeyID, Path: objstore.CredentialsFileAccessKeyID},
				{Key: shalev1.SecretKeySecretAccessKey, Path: objstore.CredentialsFileSecretAccessKey},
			},
			DefaultMode: ptr.To[int32](0o440),
		}}})
		ct := &pod.Spec.Containers[0]
		ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: cloneCredentialsVolume, MountPath: cloneCredentialsDir, ReadOnly: true})
	}
	return pod
}

// Where a clone's primary finds the keys of a parent in another
// ObjectStore (--clone-credentials-dir).
const (
	cloneCredentialsVolume = "clone-credentials"
	cloneCredentialsDir    = "/etc/shale/clone-credentials"
)

// primaryPodLabels: the primary's labels, and with remote compaction the
// pool it submits to (its NetworkPolicy admits those primaries to the
// scheduler).
func primaryPodLabels(db *shalev1.RocksDB, epoch int64) map[string]string {
	l := db.PrimaryLabels(epoch)
	if c := db.Spec.Compaction; db.EffectiveCompactionMode() == shalev1.CompactionRemote && c.CompactorPoolRef != nil {
		l[shalev1.LabelCompactorPoolClient] = c.CompactorPoolRef.Name
	}
	return l
}

// podSecurityContext: Shale's non-root uid, the runtime's seccomp profile.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](runAsUser),
		RunAsGroup:     ptr.To[int64](runAsUser),
		FSGroup:        ptr.To[int64](runAsUser),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurityContext: no privilege escalation, no capabilities, and
// a read-only root file system. Every Shale container writes only under
// the directory it is given with --cache-dir (RocksDB's LOG files, the
// local cache, ingest staging, a worker's job directories), which is an
// emptyDir; the scheduler writes nothing. Nothing uses os.TempDir when
// --cache-dir is set, and the operator always sets it.
func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// tuningArgs are the `shale primary` flags of spec.tuning.
func tuningArgs(t *shalev1.TuningSpec) []string {
	if t == nil {
		return nil
	}
	var args []string
	if t.DataBlockIndexType == "BinaryAndHash" {
		args = append(args, "--data-block-index", "binary-and-hash")
	}
	if t.DataBlockHashTableUtilRatio != "" {
		args = append(args, "--data-block-hash-ratio", t.DataBlockHashTableUtilRatio)
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{{t.UnorderedWrite, "--unordered-write"}, {t.PipelinedWrite, "--pipelined-write"}, {t.AsyncIO, "--async-io"}, {t.OptimizeMultigetForIO, "--optimize-multiget-for-io"}, {t.RocksDBHistograms, "--rocksdb-histograms"}} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	if t.GroupCommitWindow != nil {
		args = append(args, "--group-commit-window", t.GroupCommitWindow.Duration.String())
	}
	return args
}
