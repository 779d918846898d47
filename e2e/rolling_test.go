//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Rolling updates of the primary (docs/operator.md, "Rolling updates";
// issue 28): a spec change, or an operator upgrade that changes what a
// primary Pod is built from, replaces the primary by a switchover, after
// the secondaries, without a failover; supervised, only once asked.

// stepRollingUpdate: a change of the primary's (and the secondaries')
// resource requests while a client writes. Unsupervised (the default), the
// secondaries roll first, then the primary by a switchover: the epoch goes
// up by one, status.failovers does not move, PrimaryUpToDate is True
// again, the new primary Pod has the new requests, the client saw only
// retryable errors and every acknowledged write is there. Then
// supervised: another change makes the primary outdated (condition False,
// Event PrimaryUpdateWaiting) and nothing rolls until `kubectl shale
// switchover` asks.
func stepRollingUpdate(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	w := s.startWriter(t, addr, "rolling")
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	w.waitAcks(t, time.Now(), uint64(db.Status.Epoch), 10, 2*time.Minute)

	// Unsupervised.
	cpu := fmt.Sprintf("%dm", 20+time.Now().Unix()%30)
	s.editRocksDB(t, func(db *shalev1.RocksDB) {
		db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateUnsupervised
		setCPURequest(&db.Spec.Primary.Resources, cpu)
		if db.Spec.Secondaries.Replicas > 0 {
			setCPURequest(&db.Spec.Secondaries.Resources, cpu)
		}
	})
	t0 := time.Now()
	after, gap := s.waitUpdateSwitchover(t, w, db, "spec change (cpu request "+cpu+")", func(p *corev1.Pod) string {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != cpu {
			return fmt.Sprintf("requests cpu %s, want %s", got, cpu)
		}
		return ""
	})
	t.Logf("unsupervised rolling update: epoch %d -> %d in %s; no write acknowledged for %s", db.Status.Epoch, after.Status.Epoch,
		time.Since(t0).Round(time.Millisecond), gap.Round(time.Millisecond))

	// Supervised: outdated, and waiting.
	db = after
	cpu2 := fmt.Sprintf("%dm", 60+time.Now().Unix()%30)
	s.editRocksDB(t, func(db *shalev1.RocksDB) {
		db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateSupervised
		setCPURequest(&db.Spec.Primary.Resources, cpu2)
	})
	eventually(t, 2*time.Minute, "the primary to be reported outdated and waiting (supervised)", func() (bool, string) {
		cur := s.rocksDB(t, s.db)
		c := meta.FindStatusCondition(cur.Status.Conditions, shalev1.ConditionPrimaryUpToDate)
		waiting := len(eventsWith(s.events(t, "RocksDB", s.db), "PrimaryUpdateWaiting", cur.UID)) > 0
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == shalev1.ReasonPrimaryOutdated && waiting &&
			cur.Status.ObservedGeneration == cur.Generation, describe(cur)
	})
	// The operator has decided (the Event says it waits): nothing rolled.
	cur := s.rocksDB(t, s.db)
	if cur.Status.Epoch != db.Status.Epoch || cur.Status.CurrentPrimary != db.Status.CurrentPrimary || cur.Status.Switchover != nil {
		t.Fatalf("supervised: the primary rolled without being asked: %s", describe(cur))
	}
	if p := s.pod(t, db.PrimaryPodName(db.Status.Epoch+1)); p != nil {
		t.Fatalf("supervised: a standby %s was started without being asked", p.Name)
	}
	t.Logf("supervised: the primary is outdated and waits: %s", describe(cur))
	t0 = time.Now()
	plugin(t, s, "switchover", s.db, "--wait", "5m")
	after, gap = s.waitUpdateSwitchover(t, w, db, "supervised update asked with kubectl shale switchover", func(p *corev1.Pod) string {
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().String(); got != cpu2 {
			return fmt.Sprintf("requests cpu %s, want %s", got, cpu2)
		}
		return ""
	})
	t.Logf("supervised rolling update: epoch %d -> %d in %s from the request; no write acknowledged for %s", db.Status.Epoch, after.Status.Epoch,
		time.Since(t0).Round(time.Millisecond), gap.Round(time.Millisecond))
	s.editRocksDB(t, func(db *shalev1.RocksDB) { db.Spec.PrimaryUpdateStrategy = shalev1.PrimaryUpdateUnsupervised })

	w.halt()
	s.checkRetryableOnly(t, w)
	s.verifyLedger(t, addr)
}

// stepUpgradePrimaries: an operator upgrade that changes the image
// primaries run (the chart's operator.shaleImage.tag) rolls the primary by
// a switchover, secondaries first, with only retryable errors for a
// client writing all along and nothing acknowledged lost. (The upgrade
// step checks the other half: a new operator image alone restarts no
// primary.)
func stepUpgradePrimaries(t *testing.T, s *suite) {
	addr := s.rwAddr(t)
	w := s.startWriter(t, addr, "upgrade-primaries")
	db := s.waitReady(t, s.db, 1, 3*time.Minute)
	w.waitAcks(t, time.Now(), uint64(db.Status.Epoch), 10, 2*time.Minute)
	image := s.cfg.imagePrefix + "/shale:" + s.cfg.upgradeTag
	t0 := time.Now()
	s.helm(t, "upgrade", s.cfg.release, s.chartDir(), "--namespace", s.cfg.namespace, "--reuse-values",
		"--set-string", "operator.shaleImage.tag="+s.cfg.upgradeTag, "--wait", "--timeout", "5m")
	after, gap := s.waitUpdateSwitchover(t, w, db, "operator upgrade to "+image, func(p *corev1.Pod) string {
		if got := p.Spec.Containers[0].Image; got != image {
			return "image " + got + ", want " + image
		}
		return ""
	})
	if n := after.Spec.Secondaries.Replicas; n > 0 {
		var d appsv1.Deployment
		if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: after.SecondaryDeploymentName()}, &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
			t.Errorf("the secondaries run %s after the upgrade, want %s", got, image)
		}
	}
	t.Logf("operator upgrade (shale image %s): the primary rolled by switchover, epoch %d -> %d, %s after helm upgrade began; no write acknowledged for %s",
		image, db.Status.Epoch, after.Status.Epoch, time.Since(t0).Round(time.Millisecond), gap.Round(time.Millisecond))
	w.halt()
	s.checkRetryableOnly(t, w)
	s.verifyLedger(t, addr)
}

// waitUpdateSwitchover waits for the switchover that replaces the outdated
// primary of before: the next epoch, served by a Pod that newPodOK accepts
// (""), no failover counted, PrimaryUpToDate True, and (with secondaries)
// the standby started only once the secondaries' Deployment had rolled
// out. It returns the RocksDB after and the longest time without an
// acknowledged write around the handover.
func (s *suite) waitUpdateSwitchover(t *testing.T, w *writer, before *shalev1.RocksDB, what string, newPodOK func(*corev1.Pod) string) (*shalev1.RocksDB, time.Duration) {
	t.Helper()
	epoch, failovers := before.Status.Epoch, before.Status.Failovers
	standby := before.PrimaryPodName(epoch + 1)
	checkedOrder := false
	var after *shalev1.RocksDB
	eventually(t, 6*time.Minute, what+": the primary replaced by a switchover and up to date", func() (bool, string) {
		cur := s.rocksDB(t, s.db)
		if !checkedOrder && cur.Spec.Secondaries.Replicas > 0 {
			if p := s.pod(t, standby); p != nil {
				checkedOrder = true
				var d appsv1.Deployment
				if err := s.kube.Get(ctx(t, time.Minute), client.ObjectKey{Namespace: s.cfg.namespace, Name: cur.SecondaryDeploymentName()}, &d); err != nil {
					t.Fatal(err)
				}
				st, want := d.Status, cur.Spec.Secondaries.Replicas
				if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
					t.Errorf("%s: the standby %s started before the secondaries rolled out (Deployment generation %d observed %d, %d updated, %d available, %d in all, want %d)",
						what, standby, d.Generation, st.ObservedGeneration, st.UpdatedReplicas, st.AvailableReplicas, st.Replicas, want)
				}
			}
		}
		if !isReady(cur) || cur.Status.Epoch <= epoch || !cur.ConditionTrue(shalev1.ConditionPrimaryUpToDate) {
			return false, describe(cur)
		}
		after = cur
		return true, ""
	})
	if after.Status.Epoch != epoch+1 {
		t.Errorf("%s: the epoch went from %d to %d, want exactly one more", what, epoch, after.Status.Epoch)
	}
	if after.Status.Failovers != failovers {
		t.Errorf("%s: status.failovers went from %d to %d: the update became a failover", what, failovers, after.Status.Failovers)
	}
	p := s.pod(t, after.Status.CurrentPrimary)
	if p == nil {
		t.Fatalf("%s: the new primary %s does not exist", what, after.Status.CurrentPrimary)
	}
	if bad := newPodOK(p); bad != "" {
		t.Errorf("%s: the new primary %s does not run the update: %s", what, p.Name, bad)
	}
	if !slices.ContainsFunc(s.events(t, "RocksDB", s.db), func(e corev1.Event) bool {
		return e.Reason == "SwitchoverCompleted" && e.InvolvedObject.UID == after.UID && e.LastTimestamp.Time.After(time.Now().Add(-10*time.Minute))
	}) {
		t.Errorf("%s: no SwitchoverCompleted Event", what)
	}
	firstNew := w.waitAcks(t, time.Now().Add(-6*time.Minute), uint64(after.Status.Epoch), 5, 3*time.Minute)
	var lastOld time.Time
	for _, a := range w.since(firstNew.at.Add(-6 * time.Minute)) {
		if a.epoch == uint64(epoch) && a.at.Before(firstNew.at) {
			lastOld = a.at
		}
	}
	gap := time.Duration(0)
	if !lastOld.IsZero() {
		gap = firstNew.at.Sub(lastOld)
	}
	return after, gap
}

// checkRetryableOnly fails t if the writer saw an error a client cannot
// simply retry (anything but UNAVAILABLE and DEADLINE_EXCEEDED).
func (s *suite) checkRetryableOnly(t *testing.T, w *writer) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var bad []string
	for c, n := range w.codes {
		if c != codes.Unavailable && c != codes.DeadlineExceeded {
			bad = append(bad, fmt.Sprintf("%s x%d", c, n))
		}
	}
	if len(bad) > 0 {
		t.Errorf("the writer saw errors a client cannot simply retry: %s (all: %v)", strings.Join(bad, ", "), w.codes)
	}
	t.Logf("writer: %d acknowledged, %d failed, by code %v", len(w.acks), w.errs, w.codes)
}

// editRocksDB patches the main RocksDB's spec.
func (s *suite) editRocksDB(t *testing.T, edit func(*shalev1.RocksDB)) {
	t.Helper()
	db := s.rocksDB(t, s.db)
	patch := client.MergeFrom(db.DeepCopy())
	edit(db)
	if err := s.kube.Patch(ctx(t, time.Minute), db, patch); err != nil {
		t.Fatalf("patching RocksDB %s: %v", s.db, err)
	}
}

func setCPURequest(r *corev1.ResourceRequirements, cpu string) {
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	r.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
}
