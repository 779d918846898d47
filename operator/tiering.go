package operator

import (
	"context"
	"fmt"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Tiered SST placement (docs/tiering.md, docs/operator.md). A database with
// spec.tiering keeps its cold tables in the ObjectStore's cold tier, under
// COLDPREFIX/NAMESPACE/NAME-UID (status.coldStoragePath, set once). Its
// store records that cold tier, and a primary or secondary started without
// it refuses to open; so from then on every primary and secondary is given
// --cold-db, whether spec.tiering is still set or not (without it, no new
// data goes cold: --cold-after is left out). A change of coldAfter (or
// turning tiering off) reaches the running primary through its SetTiering
// call, without a new Pod (applyColdAfter); the next primary gets it as
// --cold-after.

// tieringPlan is what a database's tiering settings mean right now.
type tieringPlan struct {
	// setColdPath: record this status.coldStoragePath (first enable).
	setColdPath string
	// args for `shale primary` (secondaries take them minus --cold-after).
	args []string
	// cond is the Tiering condition (nil: tiering never asked for).
	cond *metav1.Condition
	// refuse: no primary or secondary can open the database as things are
	// (it has cold tables and the ObjectStore lost its cold tier).
	refuse string
}

// planTiering decides, from the RocksDB and its ObjectStore, a pure
// function (table-tested).
func planTiering(db *shalev1.RocksDB, store *shalev1.ObjectStore) tieringPlan {
	var p tieringPlan
	want := db.Spec.Tiering != nil
	coldPath := db.Status.ColdStoragePath
	haveCold := store != nil && store.Spec.Cold != nil
	cond := func(s metav1.ConditionStatus, reason, msg string) {
		p.cond = &metav1.Condition{Type: shalev1.ConditionTiering, Status: s, Reason: reason, Message: msg}
	}
	switch {
	case !want && coldPath == "":
		return p
	case store == nil:
		return p // the ObjectStore conditions say why nothing starts
	case !haveCold && coldPath != "":
		p.refuse = fmt.Sprintf("the database keeps cold tables under %s in the cold tier of ObjectStore %s, which has no spec.cold any more: restore it (no primary or secondary can open the database without its cold tables)", coldPath, store.Name)
		cond(metav1.ConditionFalse, shalev1.ReasonColdTierMissing, p.refuse)
		return p
	case !haveCold:
		cond(metav1.ConditionFalse, shalev1.ReasonNoColdTier, fmt.Sprintf("spec.tiering needs a cold tier, and ObjectStore %s has no spec.cold: all data stays in the hot tier", store.Name))
		return p
	}
	if coldPath == "" {
		// Beside the hot directory's NAME-UID (an adopted directory's
		// cold tables are its creator's).
		dir := db.DirName()
		if db.Status.StoragePath != "" {
			dir = path.Base(db.Status.StoragePath)
		}
		coldPath = path.Join(store.Spec.Cold.Prefix, db.Namespace, dir)
		p.setColdPath = coldPath
	}
	p.args = []string{"--cold-db", store.ColdDatabaseURL(coldPath)}
	if store.Spec.Cold.Endpoint != "" {
		p.args = append(p.args, "--cold-endpoint", store.Spec.Cold.Endpoint)
	}
	if want {
		p.args = append(p.args, "--cold-after", db.Spec.Tiering.ColdAfter.Duration.String())
		cond(metav1.ConditionTrue, shalev1.ReasonColdTierInUse, fmt.Sprintf("data older than %s moves to %s", db.Spec.Tiering.ColdAfter.Duration, store.ColdDatabaseURL(coldPath)))
	} else {
		cond(metav1.ConditionFalse, shalev1.ReasonTieringOff, fmt.Sprintf("spec.tiering is not set: no new data goes cold; the cold tables in %s are still read", store.ColdDatabaseURL(coldPath)))
	}
	return p
}

// secondaryColdArgs are the tiering flags of `shale secondary`: the cold
// tier, never --cold-after.
func secondaryColdArgs(args []string) []string {
	var out []string
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] != "--cold-after" {
			out = append(out, args[i], args[i+1])
		}
	}
	return out
}

// reconcileTiering records status.coldStoragePath when tiering is first
// enabled and reports the Tiering condition. It runs before the primary is
// reconciled, so that the first primary created with tiering has its cold
// tier.
func (r *rocksDBReconciler) reconcileTiering(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore, rep *report) error {
	p := planTiering(db, store)
	if p.setColdPath != "" {
		if err := patchStatus(ctx, r.Client, r.apiReader, db, func(cur *shalev1.RocksDB) error {
			if cur.Status.ColdStoragePath == "" {
				cur.Status.ColdStoragePath = p.setColdPath
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if p.cond != nil {
		rep.set(p.cond.Type, p.cond.Status, p.cond.Reason, p.cond.Message)
	}
	return nil
}

// tieringRefusal is the refusal to start a primary or secondary, if any.
func tieringRefusal(db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	if msg := planTiering(db, store).refuse; msg != "" {
		return &refusal{eventColdTierMissing, msg}
	}
	return nil
}

// tierStatusDue reports whether the primary is to be asked for its tiers
// now, and if so records the poll: at the secondaries' interval, and at
// once when the wanted cold-after is not the one last seen.
func (r *rocksDBReconciler) tierStatusDue(key types.NamespacedName, want time.Duration, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen, known := r.coldAfterSeen[key]
	if last, ok := r.tiersPolled[key]; ok && now.Sub(last) < r.opts.SecondaryStatusInterval && (!known || seen == want) {
		return false
	}
	r.tiersPolled[key] = now
	return true
}

// wantColdAfter is the cold-after spec.tiering asks for (0: off).
func wantColdAfter(db *shalev1.RocksDB) time.Duration {
	if db.Spec.Tiering == nil {
		return 0
	}
	return db.Spec.Tiering.ColdAfter.Duration
}

// coldAfterAction is what applyColdAfter does about a running primary.
type coldAfterAction int

const (
	coldAfterKeep   coldAfterAction = iota // it has the wanted setting
	coldAfterSet                           // call SetTiering
	coldAfterNoTier                        // it cannot: started without a cold tier
)

// decideColdAfter compares the cold-after wanted with the one the primary
// reports in its Status (a pure function, table-tested).
func decideColdAfter(want time.Duration, st *kvv1.StatusResponse) coldAfterAction {
	if st == nil || st.Role != kvv1.Role_ROLE_PRIMARY {
		return coldAfterKeep
	}
	if st.GetColdAfter().AsDuration() == want {
		return coldAfterKeep
	}
	if want > 0 && !st.ColdTier {
		return coldAfterNoTier
	}
	return coldAfterSet
}

// setTieringFunc calls SetTiering on the server at addr.
type setTieringFunc func(ctx context.Context, addr string, dial grpc.DialOption, coldAfter time.Duration) error

// grpcSetTiering dials addr and calls SetTiering.
func grpcSetTiering(ctx context.Context, addr string, dial grpc.DialOption, coldAfter time.Duration) error {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = kvv1.NewKVClient(conn).SetTiering(ctx, &kvv1.SetTieringRequest{ColdAfter: durationpb.New(coldAfter)})
	return err
}

// applyColdAfter brings the running primary's cold-after to the spec's,
// live (the operator's identity may call SetTiering and Status only), and
// says in an event when it cannot.
func (r *rocksDBReconciler) applyColdAfter(ctx context.Context, db *shalev1.RocksDB, addr string, dial grpc.DialOption, st *kvv1.StatusResponse) {
	key := client.ObjectKeyFromObject(db)
	want := wantColdAfter(db)
	seen := st.GetColdAfter().AsDuration()
	switch decideColdAfter(want, st) {
	case coldAfterSet:
		c, cancel := context.WithTimeout(ctx, secondaryStatusTimeout)
		err := r.setTiering(c, addr, dial, want)
		cancel()
		// Either way the next try is at the next poll, not at every
		// reconcile: that poll's Status says whether it took.
		seen = want
		if err != nil {
			r.recorder.Eventf(db, corev1.EventTypeWarning, eventColdAfterFailed, "could not change the cold-after of primary %s from %s to %s: %v (tried again at the next poll)", db.Status.CurrentPrimary, coldAfterText(st.GetColdAfter().AsDuration()), coldAfterText(want), err)
			break
		}
		r.recorder.Eventf(db, corev1.EventTypeNormal, eventColdAfterApplied, "primary %s: cold-after %s (was %s), applied live", db.Status.CurrentPrimary, coldAfterText(want), coldAfterText(st.GetColdAfter().AsDuration()))
	case coldAfterNoTier:
		// Asked again at the next poll, not at every reconcile.
		seen = want
		r.recorder.Eventf(db, corev1.EventTypeWarning, eventColdAfterFailed, "primary %s was started without a cold tier and cannot turn tiering on live: cold-after %s applies from the next primary on", db.Status.CurrentPrimary, coldAfterText(want))
	}
	r.mu.Lock()
	r.coldAfterSeen[key] = seen
	r.mu.Unlock()
}

func coldAfterText(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return d.String()
}

// pollTiers asks the current primary for its Status, applies the spec's
// cold-after to it (applyColdAfter), and returns its live tables per tier
// (nil when it cannot be asked: the status keeps its last report).
func (r *rocksDBReconciler) pollTiers(ctx context.Context, db *shalev1.RocksDB) []shalev1.TierStatus {
	if db.Status.CurrentPrimary == "" || !db.ConditionTrue(shalev1.ConditionPrimaryAvailable) {
		return nil
	}
	if !r.tierStatusDue(client.ObjectKeyFromObject(db), wantColdAfter(db), r.now()) {
		return nil
	}
	pod, err := r.primaryPod(ctx, db, db.Status.Epoch, false)
	if err != nil || pod == nil {
		return nil
	}
	addr, reason := secondaryAddr(pod)
	if reason != "" {
		return nil
	}
	dial, err := r.kvDial(ctx, db, db.ServiceName())
	if err != nil {
		return nil
	}
	c, cancel := context.WithTimeout(ctx, secondaryStatusTimeout)
	defer cancel()
	st, err := r.secondaryStatus(c, addr, dial)
	if err != nil {
		return nil
	}
	r.applyColdAfter(ctx, db, addr, dial, st)
	return tierStatus(st)
}

// tierStatus turns a Status answer into status.tiers.
func tierStatus(st *kvv1.StatusResponse) []shalev1.TierStatus {
	if st == nil || len(st.Tiers) == 0 {
		return nil
	}
	out := make([]shalev1.TierStatus, 0, len(st.Tiers))
	for _, t := range st.Tiers {
		out = append(out, shalev1.TierStatus{Tier: t.Tier, Files: int64(min(t.Files, 1<<62)), Bytes: int64(min(t.Bytes, 1<<62))})
	}
	return out
}
