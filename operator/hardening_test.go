package operator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// shalePodSpecs are the Pod specs of every container the operator runs:
// primary, secondaries, compactor scheduler and workers.
func shalePodSpecs() map[string]corev1.PodSpec {
	db, store := secondaryFixture()
	pool := &shalev1.CompactorPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "prod"},
		Spec:       shalev1.CompactorPoolSpec{ObjectStoreRef: shalev1.ObjectStoreReference{Name: "store"}},
	}
	return map[string]corev1.PodSpec{
		"primary":   primaryPod(db, store, 3, "default:image").Spec,
		"secondary": secondaryDeployment(db, store, "default:image").Spec.Template.Spec,
		"scheduler": schedulerDeployment(pool, "default:image").Spec.Template.Spec,
		"worker":    workerDeployment(pool, store, "default:image", 2).Spec.Template.Spec,
	}
}

// Every Shale container runs as non-root with a read-only root file
// system, no privilege escalation and no capabilities; whatever it writes
// (the directory --cache-dir names) is a writable emptyDir mounted there.
func TestContainersHardened(t *testing.T) {
	for name, spec := range shalePodSpecs() {
		t.Run(name, func(t *testing.T) {
			if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Errorf("pod security context %+v: want runAsNonRoot", sc)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken %v: Shale's Pods never talk to the API server", spec.AutomountServiceAccountToken)
			}
			emptyDirs := map[string]bool{}
			for _, v := range spec.Volumes {
				emptyDirs[v.Name] = v.EmptyDir != nil
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				sc := c.SecurityContext
				if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("container %s: readOnlyRootFilesystem not set (%+v)", c.Name, sc)
				}
				if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("container %s: allowPrivilegeEscalation not false", c.Name)
				}
				if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
					t.Errorf("container %s: capabilities %+v, want all dropped", c.Name, sc.Capabilities)
				}
				for i, a := range c.Args {
					if a != "--cache-dir" || i+1 == len(c.Args) {
						continue
					}
					dir, ok := "", false
					for _, m := range c.VolumeMounts {
						if m.MountPath == c.Args[i+1] && !m.ReadOnly && emptyDirs[m.Name] {
							dir, ok = m.Name, true
						}
					}
					if !ok {
						t.Errorf("container %s writes to --cache-dir %s, which is no writable emptyDir mount (mounts %+v)", c.Name, c.Args[i+1], c.VolumeMounts)
					} else {
						t.Logf("container %s: --cache-dir %s is volume %s", c.Name, c.Args[i+1], dir)
					}
				}
			}
		})
	}
}
