package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

// Rolling updates of the primary (docs/operator.md, "Rolling updates"):
// every primary Pod carries a hash of what the operator built from the
// spec, its ObjectStore and its own options (AnnotationPodSpecHash). A
// primary whose hash differs from the one computed now (or that has none:
// an older operator's Pod) is outdated: condition PrimaryUpToDate False.
// With spec.primaryUpdateStrategy unsupervised, once the secondaries have
// rolled out, the operator starts a switchover with reason
// PrimaryOutdated through the same code path as the annotation
// (decideSwitchover), so everything RFC 0012 says holds; supervised, it
// only says so (the condition, an Event) and waits for one asked by hand.
// Nothing here decides safety: a switchover is fenced in the store.

const (
	eventPrimaryUpdateWaiting = "PrimaryUpdateWaiting"
	// Backoff after an abandoned update switchover: 1 min, doubling, at
	// most 30 min (status.primaryUpdate).
	updateBackoff    = time.Minute
	updateBackoffMax = 30 * time.Minute
	// updateSlotRecheck: how soon an update waiting for a free slot
	// (--max-concurrent-updates) looks again.
	updateSlotRecheck = 15 * time.Second
	// updateSlotHold: how long a slot taken by this process counts before
	// the switchover it started shows in the cache.
	updateSlotHold = time.Minute
)

// podSpecHash hashes what a primary Pod was built from, leaving out what
// depends on the epoch or on the database's history rather than on the
// spec: --epoch, --existing (the first primary has none), --standby, a
// clone's bootstrap flags and their Secret, and the annotations but
// AnnotationRestartedAt (kubectl shale restart). Nor
// --cold-after: the operator applies a change of it to the running
// primary (SetTiering, tiering.go), so it needs no switchover.
//
// Nor where the database is (--db, --cold-db, --cold-endpoint, the
// endpoint and region): an ObjectStore pointed elsewhere is not a spec
// to roll out but a database not found there (primary.go's failover
// refuses to start one), and a standby there would only fail.
func podSpecHash(pod *corev1.Pod) string {
	spec := pod.Spec.DeepCopy()
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.Args = specArgs(c.Args)
		mounts := c.VolumeMounts[:0]
		for _, m := range c.VolumeMounts {
			if m.Name != cloneCredentialsVolume {
				mounts = append(mounts, m)
			}
		}
		c.VolumeMounts = mounts
		env := c.Env[:0]
		for _, e := range c.Env {
			if e.Name != objstore.EnvEndpoint && e.Name != objstore.EnvRegion {
				env = append(env, e)
			}
		}
		c.Env = env
	}
	vols := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if v.Name != cloneCredentialsVolume {
			vols = append(vols, v)
		}
	}
	spec.Volumes = vols
	// A restart request (AnnotationRestartedAt) is the one annotation
	// that counts; omitempty keeps the hash of a Pod without one what it
	// was before it existed, so upgrading the operator rolls nothing.
	b, err := json.Marshal(struct {
		Labels      map[string]string
		Spec        *corev1.PodSpec
		RestartedAt string `json:",omitempty"`
	}{primaryLabelsSansEpoch(pod.Labels), spec, pod.Annotations[shalev1.AnnotationRestartedAt]})
	if err != nil {
		panic("marshalling a Pod spec: " + err.Error()) // plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// specArgs drops the flags that do not come from the spec.
func specArgs(args []string) []string {
	valued := map[string]bool{"--epoch": true, "--clone-from": true, "--clone-checkpoint": true, "--clone-id": true, "--clone-endpoint": true, "--clone-credentials-dir": true, "--cold-after": true}
	// Kept without their value: whether there is a cold tier counts.
	location := map[string]bool{"--db": true, "--cold-db": true, "--cold-endpoint": true}
	bare := map[string]bool{"--existing": true, "--standby": true, "--clone-copy": true}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		switch {
		case valued[args[i]]:
			i++
		case location[args[i]]:
			out = append(out, args[i])
			i++
		case bare[args[i]]:
		default:
			out = append(out, args[i])
		}
	}
	return out
}

func primaryLabelsSansEpoch(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		if k != shalev1.LabelEpoch {
			out[k] = v
		}
	}
	return out
}

// updateInput is what the operator knows about an outdated primary.
type updateInput struct {
	Outdated bool
	Strategy shalev1.PrimaryUpdateStrategy
	// SecondariesRolledOut: the secondaries' Deployment has the current
	// spec and all its replicas are updated and available (or none are
	// wanted); SecondariesWaiting says what it waits for otherwise.
	SecondariesRolledOut bool
	SecondariesWaiting   string
	PrimaryReady         bool
	Held                 bool // a fence or hibernation, wanted or in place
	SwitchoverRunning    bool
	FailoverRunning      bool
	// NotBefore: the backoff after abandoned update switchovers.
	NotBefore time.Time
	Now       time.Time
	// SlotFree: fewer than --max-concurrent-updates update switchovers run
	// in this operator (or this database holds a slot).
	SlotFree bool
}

type updateAction int

const (
	// updateNone: the primary is up to date.
	updateNone updateAction = iota
	// updateWait: outdated; something must happen first (Message).
	updateWait
	// updateAnnounce: outdated and supervised: say so, start nothing.
	updateAnnounce
	// updateStart: start a switchover with reason PrimaryOutdated.
	updateStart
)

func (a updateAction) String() string {
	return [...]string{"none", "wait", "announce", "start"}[a]
}

type updateDecision struct {
	Action       updateAction
	Message      string
	RecheckAfter time.Duration
}

// decideUpdate decides what to do about an outdated primary (a pure
// function, table-tested in TestDecideUpdate). A switchover for an update
// starts only when nothing else is going on: no hold (it blocks
// switchovers), no switchover or failover running (one at a time per
// database), the primary ready, the secondaries rolled out first (they
// take the new spec without any loss of writes), the backoff after an
// abandoned one over, and a slot free in this operator (an operator
// upgrade must not switch every database over at the same instant).
func decideUpdate(in updateInput) updateDecision {
	switch {
	case !in.Outdated:
		return updateDecision{Action: updateNone}
	case in.Strategy == shalev1.PrimaryUpdateSupervised:
		return updateDecision{Action: updateAnnounce, Message: "primaryUpdateStrategy is supervised: waiting for a switchover asked by hand"}
	case in.Held:
		return updateDecision{Action: updateWait, Message: "the database is fenced or hibernated"}
	case in.SwitchoverRunning:
		return updateDecision{Action: updateWait, Message: "a switchover runs"}
	case in.FailoverRunning:
		return updateDecision{Action: updateWait, Message: "a failover runs"}
	case !in.PrimaryReady:
		return updateDecision{Action: updateWait, Message: "waiting for the primary to be ready"}
	case !in.SecondariesRolledOut:
		msg := "waiting for the secondaries to roll out first"
		if in.SecondariesWaiting != "" {
			msg += " (" + in.SecondariesWaiting + ")"
		}
		return updateDecision{Action: updateWait, Message: msg}
	case in.Now.Before(in.NotBefore):
		left := in.NotBefore.Sub(in.Now)
		return updateDecision{Action: updateWait, Message: fmt.Sprintf("an update switchover was abandoned: the next starts in %s", left.Round(time.Second)), RecheckAfter: left}
	case !in.SlotFree:
		return updateDecision{Action: updateWait, Message: "waiting for other databases' update switchovers (--max-concurrent-updates)", RecheckAfter: updateSlotRecheck}
	}
	return updateDecision{Action: updateStart, Message: "switching the primary over to one built from the current spec"}
}

// nextUpdateBackoff is the status after an abandoned update switchover.
func nextUpdateBackoff(cur *shalev1.PrimaryUpdateStatus, now time.Time) *shalev1.PrimaryUpdateStatus {
	next := &shalev1.PrimaryUpdateStatus{}
	if cur != nil {
		next = cur.DeepCopy()
	}
	next.Failures++
	wait := updateBackoff
	for i := int32(1); i < next.Failures && wait < updateBackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, updateBackoffMax)
	next.NotBefore = ptr.To(metav1.NewTime(now.Add(wait)))
	return next
}

// reconcileUpdate reports PrimaryUpToDate for the primary pod (nil: not
// reported) and says whether a switchover with reason PrimaryOutdated
// should start now (decideSwitchover starts it).
func (r *rocksDBReconciler) reconcileUpdate(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, pod *corev1.Pod, in switchoverInput, rep *report) (start bool, recheck time.Duration) {
	if pod == nil || store == nil || gone(in.Primary) || in.Primary.Phase == corev1.PodSucceeded {
		return false, 0
	}
	want := primaryPod(db, store, db.Status.Epoch, r.opts.ShaleImage)
	wantHash := want.Annotations[shalev1.AnnotationPodSpecHash]
	have := pod.Annotations[shalev1.AnnotationPodSpecHash]
	if have == wantHash {
		rep.set(shalev1.ConditionPrimaryUpToDate, metav1.ConditionTrue, shalev1.ReasonPrimaryUpToDate,
			fmt.Sprintf("primary %s was built from the current spec", pod.Name))
		if pu := db.Status.PrimaryUpdate; pu != nil && db.Status.Switchover == nil {
			r.clearPrimaryUpdate(ctx, db)
		}
		return false, 0
	}
	ui := updateInput{
		Outdated:          true,
		Strategy:          db.Spec.PrimaryUpdateStrategy,
		PrimaryReady:      in.Created && in.Primary.Ready,
		Held:              db.Status.Hold != nil,
		SwitchoverRunning: in.Running != nil,
		FailoverRunning:   db.ConditionTrue(shalev1.ConditionFailover),
		Now:               in.Now,
		SlotFree:          true,
	}
	if pu := db.Status.PrimaryUpdate; pu != nil && pu.NotBefore != nil {
		ui.NotBefore = pu.NotBefore.Time
	}
	if ui.Strategy != shalev1.PrimaryUpdateSupervised && !ui.Held && !ui.SwitchoverRunning && !ui.FailoverRunning && ui.PrimaryReady {
		ui.SecondariesRolledOut, ui.SecondariesWaiting = r.secondariesRolledOut(ctx, db, store)
	}
	d := decideUpdate(ui)
	if d.Action == updateStart && !r.takeUpdateSlot(ctx, db) {
		ui.SlotFree = false
		d = decideUpdate(ui)
	}
	msg := outdatedMessage(db, pod, want, have, wantHash)
	if d.Action != updateStart && d.Message != "" && in.Running == nil {
		msg += "; " + d.Message
	}
	if in.Running != nil && in.Running.Reason == shalev1.ReasonPrimaryOutdated {
		msg += fmt.Sprintf("; standby %s (epoch %d) replaces it", db.PrimaryPodName(in.Running.ToEpoch), in.Running.ToEpoch)
	}
	rep.set(shalev1.ConditionPrimaryUpToDate, metav1.ConditionFalse, shalev1.ReasonPrimaryOutdated, msg)
	if d.Action == updateAnnounce {
		r.announceUpdate(ctx, db, wantHash, msg)
	}
	return d.Action == updateStart, d.RecheckAfter
}

// outdatedMessage says how the primary differs from what the operator
// would build now: the image and the spec generation when they differ
// (cheap), else the hashes.
func outdatedMessage(db *shalev1.RocksDB, pod, want *corev1.Pod, have, wantHash string) string {
	var diffs []string
	if len(pod.Spec.Containers) > 0 && pod.Spec.Containers[0].Image != want.Spec.Containers[0].Image {
		diffs = append(diffs, fmt.Sprintf("image %s, want %s", pod.Spec.Containers[0].Image, want.Spec.Containers[0].Image))
	}
	if g := pod.Annotations[shalev1.AnnotationSpecGeneration]; g != "" && g != fmt.Sprint(db.Generation) {
		diffs = append(diffs, fmt.Sprintf("built from spec generation %s, the spec is at %d", g, db.Generation))
	}
	if have == "" {
		diffs = append(diffs, "built by an operator that did not record its pod spec hash")
	} else {
		diffs = append(diffs, fmt.Sprintf("pod spec hash %s, want %s", have, wantHash))
	}
	return fmt.Sprintf("primary %s differs from the spec: %s", pod.Name, strings.Join(diffs, "; "))
}

// secondariesRolledOut reports whether the secondaries' Deployment has
// the spec the operator builds now and all its replicas are updated and
// available (none wanted: true).
func (r *rocksDBReconciler) secondariesRolledOut(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) (bool, string) {
	dep, err := r.secondaries(ctx, db)
	if err != nil {
		return false, err.Error()
	}
	if db.Spec.Secondaries.Replicas == 0 && (dep == nil || ptr.Deref(dep.Spec.Replicas, 1) == 0) {
		return true, ""
	}
	if dep == nil {
		return false, "Deployment " + db.SecondaryDeploymentName() + " does not exist yet"
	}
	want := secondaryDeploymentOn(db, store, r.opts.ShaleImage, r.eligibleNodes(ctx, db))
	return deploymentRolledOut(dep, want.Annotations[shalev1.AnnotationSpecHash], *want.Spec.Replicas)
}

// deploymentRolledOut: written with the wanted spec hash, observed by the
// Deployment controller, and every replica updated and available.
func deploymentRolledOut(d *appsv1.Deployment, wantHash string, desired int32) (bool, string) {
	s := d.Status
	switch {
	case d.Annotations[shalev1.AnnotationSpecHash] != wantHash:
		return false, "its Deployment is not yet rewritten with the current spec"
	case s.ObservedGeneration < d.Generation:
		return false, "its Deployment's change is not yet observed"
	case s.UpdatedReplicas != desired || s.AvailableReplicas != desired || s.Replicas != desired:
		return false, fmt.Sprintf("%d of %d updated, %d available, %d in all", s.UpdatedReplicas, desired, s.AvailableReplicas, s.Replicas)
	}
	return true, ""
}

// takeUpdateSlot reports whether db may start an update switchover now:
// fewer than MaxConcurrentUpdates run in this operator (in the cache, or
// started by this process and not yet seen there), or db already holds a
// slot. It holds one for db when it says yes.
func (r *rocksDBReconciler) takeUpdateSlot(ctx context.Context, db *shalev1.RocksDB) bool {
	limit := r.opts.MaxConcurrentUpdates
	if limit <= 0 {
		return true
	}
	var list shalev1.RocksDBList
	if err := r.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "listing databases for the update limit")
		return false
	}
	key := client.ObjectKeyFromObject(db)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	running := map[types.NamespacedName]bool{}
	for i := range list.Items {
		o := &list.Items[i]
		if sw := o.Status.Switchover; sw != nil && sw.Reason == shalev1.ReasonPrimaryOutdated {
			running[client.ObjectKeyFromObject(o)] = true
		}
	}
	for k, at := range r.updateSlots {
		if now.Sub(at) < updateSlotHold {
			running[k] = true
		} else {
			delete(r.updateSlots, k)
		}
	}
	if !running[key] && len(running) >= limit {
		return false
	}
	r.updateSlots[key] = now
	return true
}

// releaseUpdateSlot forgets this process's slot for db (its update
// switchover completed or was abandoned).
func (r *rocksDBReconciler) releaseUpdateSlot(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.updateSlots, key)
	r.mu.Unlock()
}

// announceUpdate emits PrimaryUpdateWaiting once per wanted hash.
func (r *rocksDBReconciler) announceUpdate(ctx context.Context, db *shalev1.RocksDB, wantHash, msg string) {
	if pu := db.Status.PrimaryUpdate; pu != nil && pu.Announced == wantHash {
		return
	}
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.PrimaryUpdate == nil {
			cur.Status.PrimaryUpdate = &shalev1.PrimaryUpdateStatus{}
		}
		cur.Status.PrimaryUpdate.Announced = wantHash
		return nil
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "recording the announced update")
		return
	}
	r.recorder.Eventf(db, corev1.EventTypeNormal, eventPrimaryUpdateWaiting,
		"%s; primaryUpdateStrategy is supervised: run `kubectl shale switchover %s` (or set the %s annotation to a new value) to replace it",
		msg, db.Name, shalev1.AnnotationSwitchover)
}

// clearPrimaryUpdate forgets the update's backoff once the primary is up
// to date.
func (r *rocksDBReconciler) clearPrimaryUpdate(ctx context.Context, db *shalev1.RocksDB) {
	err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
		if cur.Status.Switchover != nil || cur.Status.PrimaryUpdate == nil {
			return errNoChange
		}
		cur.Status.PrimaryUpdate = nil
		return nil
	})
	if err != nil && err != errNoChange {
		log.FromContext(ctx).Error(err, "clearing status.primaryUpdate")
	}
}
