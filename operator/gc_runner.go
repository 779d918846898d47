package operator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
	"github.com/shale-rocks/shale/internal/shalefs/layout"
)

// gcPassTimeout bounds one pass over one ObjectStore.
const gcPassTimeout = 30 * time.Minute

// gc is the garbage collector of orphaned database directories, a
// leader-elected Runnable: every interval it passes over each ObjectStore's
// hot tier. One pass:
//
//  1. lists NAMESPACE/ directories, then in each the NAME-UID/
//     directories and NAME-UID.owner.json records;
//  2. then, and only then, reads every RocksDB of the cluster from the API
//     server (a quorum read, never the informer cache): any RocksDB whose
//     directory was listed in step 1 existed before that listing, so it is
//     in this read unless it has been deleted since;
//  3. for each directory or record whose UID is not live, lists the
//     directory (object count, bytes, newest modification), reads the
//     record, and applies classifyDir;
//  4. deletes each orphan (unless dry run): checks once more that no
//     RocksDB with its name and UID exists, creates _shale/deleting, lists
//     the directory's pins, deletes the objects listed in step 3 (all
//     quiet for the grace period) but what a pin names (reclaimPlan), and,
//     with no pin left, the marker and then the owner record once the
//     directory is empty. A pinned orphan (keepPinned) goes through the
//     same steps every pass: what its pins keep stays, with the record.
type gc struct {
	apiReader client.Reader
	recorder  record.EventRecorder
	stores    *stores
	clusterID string
	interval  time.Duration
	grace     time.Duration
	dryRun    bool
	now       func() time.Time
	log       logr.Logger
	// scope: the namespaces whose directories the collector judges.
	scope namespaceScope

	// testHookBeforeDirList runs before a namespace directory is listed.
	testHookBeforeDirList func(ctx context.Context, namespace string)
}

// NeedLeaderElection: only the leader collects.
func (g *gc) NeedLeaderElection() bool { return true }

// Start runs a pass at once and then every interval, until ctx ends.
func (g *gc) Start(ctx context.Context) error {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		g.runOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// runOnce passes over every ObjectStore in scope (once per distinct
// location).
func (g *gc) runOnce(ctx context.Context) {
	var stores shalev1.ObjectStoreList
	if err := g.list(ctx, &stores, &shalev1.ObjectStoreList{}); err != nil {
		g.log.Error(err, "listing ObjectStores")
		return
	}
	seen := map[string]bool{}
	for i := range stores.Items {
		os := &stores.Items[i]
		loc := os.Spec.Endpoint + " " + os.Spec.Hot.URL()
		if seen[loc] || os.DeletionTimestamp != nil {
			continue
		}
		seen[loc] = true
		if _, err := g.pass(ctx, os); err != nil {
			g.log.Error(err, "garbage collection", "objectstore", client.ObjectKeyFromObject(os).String())
		}
	}
}

// gcReport is what one pass over one ObjectStore found and did.
type gcReport struct {
	// Verdicts, by directory (NAMESPACE/NAME-UID), of everything listed.
	Verdicts map[string]verdict
	// Deleted directories, and the bytes their objects held.
	Deleted []string
	Bytes   int64
}

// candidate is a directory or owner record found by the listing.
type candidate struct {
	namespace, name string
	uid             types.UID
	dir, record     bool
}

func (g *gc) pass(ctx context.Context, os *shalev1.ObjectStore) (rep gcReport, err error) {
	label := client.ObjectKeyFromObject(os).String()
	defer func() {
		result := "ok"
		if err != nil {
			result = "error"
			g.recorder.Eventf(os, corev1.EventTypeWarning, eventGCFailed, "garbage collection of %s: %v", os.Spec.Hot.URL(), err)
		}
		gcPasses.WithLabelValues(label, result).Inc()
	}()
	ctx, cancel := context.WithTimeout(ctx, gcPassTimeout)
	defer cancel()
	hot, err := g.stores.hot(ctx, os)
	if err != nil {
		return rep, err
	}
	// A database's cold tables (docs/tiering.md) live under the same
	// NAMESPACE/NAME-UID/ in the cold tier: judged with, and deleted
	// before, the hot directory.
	var cold objstore.Store
	if os.Spec.Cold != nil {
		if cold, err = g.stores.cold(ctx, os); err != nil {
			return rep, err
		}
	}

	// 1. List.
	cands := map[string]*candidate{}
	var namespaces []string
	if err := hot.ListDir(ctx, "", func(o objstore.ObjectInfo) error {
		if ns, ok := isNamespaceDir(o.Key); ok && g.scope.covers(ns) {
			namespaces = append(namespaces, ns)
		}
		return nil
	}); err != nil {
		return rep, fmt.Errorf("listing %s: %w", hot.URL(), err)
	}
	for _, ns := range namespaces {
		if g.testHookBeforeDirList != nil {
			g.testHookBeforeDirList(ctx, ns)
		}
		if err := hot.ListDir(ctx, ns+"/", func(o objstore.ObjectInfo) error {
			base := path.Base(o.Key)
			isDir := strings.HasSuffix(o.Key, "/")
			isRecord := !isDir && strings.HasSuffix(base, ownerRecordSuffix)
			if isRecord {
				base = strings.TrimSuffix(base, ownerRecordSuffix)
			}
			name, uid, ok := parseDirName(base)
			if !ok || !isDir && !isRecord {
				return nil
			}
			c := cands[ns+"/"+base]
			if c == nil {
				c = &candidate{namespace: ns, name: name, uid: uid}
				cands[ns+"/"+base] = c
			}
			c.dir = c.dir || isDir
			c.record = c.record || isRecord
			return nil
		}); err != nil {
			return rep, fmt.Errorf("listing %s/%s/: %w", hot.URL(), ns, err)
		}
	}

	// 2. Live RocksDBs, read from the API server after the listing (in
	// the namespaces in scope: the only ones with candidates).
	var dbs shalev1.RocksDBList
	if err := g.list(ctx, &dbs, &shalev1.RocksDBList{}); err != nil {
		return rep, fmt.Errorf("listing RocksDBs: %w", err)
	}
	live := make(map[types.UID]bool, len(dbs.Items))
	for _, db := range dbs.Items {
		live[db.UID] = true
	}

	// 3. Judge, 4. delete.
	rep.Verdicts = make(map[string]verdict, len(cands))
	keys := make([]string, 0, len(cands))
	for k := range cands {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	now := g.now()
	for _, k := range keys {
		c := cands[k]
		if live[c.uid] {
			rep.Verdicts[k] = keepLive
			continue
		}
		obs, seen, err := g.observe(ctx, hot, cold, c)
		if err != nil {
			return rep, err
		}
		v, why := classifyDir(obs, live, g.clusterID, now, g.grace)
		rep.Verdicts[k] = v
		g.log.V(1).Info("directory", "objectstore", label, "dir", k, "verdict", v.String(), "why", why)
		if v != orphan && v != keepPinned {
			continue
		}
		if v == orphan {
			gcOrphansFound.WithLabelValues(label).Inc()
		}
		url := os.Spec.Hot.URL() + "/" + k
		if g.dryRun {
			g.recorder.Eventf(os, corev1.EventTypeNormal, eventOrphanFound, "dry run: would delete %s (%d objects, %d bytes; what clones' pins name kept): %s", url, obs.Objects, obs.Bytes, why)
			continue
		}
		openOrigin := func(url string) (objstore.Store, error) { return g.stores.open(ctx, os, os.Spec.Endpoint, url) }
		deleted, done, err := g.deleteOrphan(ctx, hot, cold, c, obs.Record, seen, openOrigin)
		if done.Unreleased != "" {
			g.recorder.Eventf(os, corev1.EventTypeWarning, eventStoragePinned, "%s: %s", url, done.Unreleased)
		}
		if len(done.Released) > 0 {
			g.log.Info("released an orphaned clone's pins", "dir", k, "pins", done.Released)
		}
		if err != nil {
			g.recorder.Eventf(os, corev1.EventTypeWarning, eventOrphanDeleteFailed, "deleting %s: %v", url, err)
			if errors.Is(err, errPinRefused) {
				continue // this directory waits; the others are judged
			}
			return rep, err
		}
		if !deleted {
			continue
		}
		if len(done.Pinned) > 0 {
			rep.Verdicts[k] = keepPinned
			rep.Bytes += done.Bytes
			gcBytesReclaimed.WithLabelValues(label).Add(float64(done.Bytes))
			if done.Objects > 0 || v == orphan {
				g.recorder.Eventf(os, corev1.EventTypeNormal, eventStoragePinned, "deleted %s except what clones read: %d objects, %d bytes deleted; %d kept, pinned by %s",
					url, done.Objects, done.Bytes, len(done.Kept), strings.Join(done.Pinned, ", "))
			}
			continue
		}
		rep.Deleted = append(rep.Deleted, k)
		rep.Bytes += obs.Bytes
		gcDirsDeleted.WithLabelValues(label).Inc()
		gcBytesReclaimed.WithLabelValues(label).Add(float64(obs.Bytes))
		g.recorder.Eventf(os, corev1.EventTypeNormal, eventOrphanDeleted, "deleted %s (%d objects, %d bytes): %s", url, obs.Objects, obs.Bytes, why)
		g.log.Info("deleted an orphaned database directory", "objectstore", label, "dir", k, "objects", obs.Objects, "bytes", obs.Bytes)
	}
	return rep, nil
}

// observe lists a candidate's directory (in both tiers) and reads its
// owner record. The keys it returns are relative to the directory.
func (g *gc) observe(ctx context.Context, hot, cold objstore.Store, c *candidate) (dirObservation, *observedKeys, error) {
	obs := dirObservation{Namespace: c.namespace, Name: c.name, UID: c.uid}
	dirName := c.name + "-" + string(c.uid)
	prefix := dbDirKey(c.namespace, dirName)
	seen := &observedKeys{hot: map[string]bool{}, cold: map[string]bool{}}
	list := func(st objstore.Store, keys map[string]bool) error {
		if err := st.List(ctx, prefix, func(o objstore.ObjectInfo) error {
			rel := strings.TrimPrefix(o.Key, prefix)
			keys[rel] = true
			if id, ok := layout.ParsePinKey(rel); ok && st == hot {
				obs.Pins = append(obs.Pins, id)
			}
			obs.Objects++
			obs.Bytes += o.Size
			if o.ModTime.After(obs.Newest) {
				obs.Newest = o.ModTime
			}
			return nil
		}); err != nil {
			return fmt.Errorf("listing %s in %s: %w", dbDirKey(c.namespace, dirName), st.URL(), err)
		}
		return nil
	}
	if c.dir {
		if err := list(hot, seen.hot); err != nil {
			return obs, nil, err
		}
	}
	if cold != nil {
		if err := list(cold, seen.cold); err != nil {
			return obs, nil, err
		}
	}
	if c.record {
		rec, info, err := readOwnerRecord(ctx, hot, ownerRecordKey(c.namespace, dirName))
		switch {
		case err != nil && objstore.IsRetryable(err):
			return obs, nil, err
		case err != nil:
			obs.RecordErr = err
		default:
			obs.Record = rec
		}
		if info.ModTime.After(obs.Newest) {
			obs.Newest = info.ModTime
		}
	}
	return obs, seen, nil
}

// deleteOrphan deletes an orphaned directory as reclaimPlan says (the
// objects observed, but none a clone's pin names), and its owner record
// once nothing is left. It reports false when it found the directory's
// RocksDB, or the one its record says adopted it, after all; the pins
// left, when clones keep part of it.
func (g *gc) deleteOrphan(ctx context.Context, hot, cold objstore.Store, c *candidate, rec *dirOwnerRecord, seen *observedKeys, openOrigin func(string) (objstore.Store, error)) (bool, reclaimDone, error) {
	var done reclaimDone
	owners := []recordRef{{Name: c.name, UID: c.uid}}
	if rec != nil && rec.AdoptedBy != nil {
		owners = append(owners, *rec.AdoptedBy)
	}
	for _, o := range owners {
		var db shalev1.RocksDB
		err := g.apiReader.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: o.Name}, &db)
		switch {
		case err == nil && db.UID == o.UID:
			return false, done, nil
		case err != nil && !apierrors.IsNotFound(err):
			return false, done, err
		}
	}
	dirName := c.name + "-" + string(c.uid)
	prefix := dbDirKey(c.namespace, dirName)
	d := dirTiers{hot: hot, hotPrefix: prefix, cold: cold, coldPrefix: prefix, uid: string(c.uid), openOrigin: openOrigin}
	done, err := reclaimDir(ctx, d, "garbage collector", seen)
	if err != nil || len(done.Pinned) > 0 || done.Left > 0 {
		// Pinned: the record stays, saying Delete. Left: written after
		// the listing, the next pass finds it young.
		return err == nil, done, err
	}
	left := false
	for _, st := range []objstore.Store{hot, cold} {
		if st == nil {
			continue
		}
		if err := st.List(ctx, prefix, func(objstore.ObjectInfo) error {
			left = true
			return errStopListing
		}); err != nil && !errors.Is(err, errStopListing) {
			return false, done, err
		}
	}
	if left {
		return true, done, nil
	}
	if err := hot.Delete(ctx, ownerRecordKey(c.namespace, dirName)); err != nil {
		return false, done, err
	}
	return true, done, nil
}

// list reads every object of a kind in the namespaces in scope from the
// API server (not the cache) into all; empty is an empty list of the same
// type. With a scope, one List per namespace: the operator's RBAC may not
// allow listing the whole cluster.
func (g *gc) list(ctx context.Context, all, empty client.ObjectList) error {
	if len(g.scope) == 0 {
		return g.apiReader.List(ctx, all)
	}
	var items []runtime.Object
	for _, ns := range g.scope {
		page := empty.DeepCopyObject().(client.ObjectList) // a new one each time: items point into it
		if err := g.apiReader.List(ctx, page, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("in namespace %s: %w", ns, err)
		}
		objs, err := meta.ExtractList(page)
		if err != nil {
			return err
		}
		items = append(items, objs...)
	}
	return meta.SetList(all, items)
}
