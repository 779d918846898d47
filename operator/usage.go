package operator

import (
	"context"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// An ObjectStore's status.usedBy lists the RocksDBs that keep data in it.
// The CRD's CEL rules read it (oldSelf.status.usedBy) to refuse edits of
// the fields that locate data while it is not empty: a CEL rule sees only
// the object it validates, so "in use" has to be written on the object
// itself, and a status field is one users do not write by accident (the
// status subresource ignores status in spec updates). A RocksDB adds
// itself before anything of it exists in the store (its storage path, its
// owner record, its first primary) and marks coldTier before its cold
// path is recorded; its finalizer removes it once the reclaim policy was
// applied; the ObjectStore controller removes entries of RocksDBs that the
// API server no longer has (a finalizer removed by hand). Each change is
// an optimistic-lock status patch, so two RocksDBs registering at once
// never lose each other's entry.

// registerUse adds the RocksDB to its ObjectStore's status.usedBy (with
// coldTier once it keeps, or is about to keep, cold tables there).
func (r *rocksDBReconciler) registerUse(ctx context.Context, db *shalev1.RocksDB, store *shalev1.ObjectStore) error {
	want := shalev1.StoreUser{Name: db.Name, ColdTier: db.Status.ColdStoragePath != "" || planTiering(db, store).setColdPath != ""}
	if hasUser(store.Status.UsedBy, want) {
		return nil
	}
	return patchStatus(ctx, r.Client, r.apiReader, store, func(cur *shalev1.ObjectStore) error {
		if hasUser(cur.Status.UsedBy, want) {
			return nil
		}
		cur.Status.UsedBy = slices.DeleteFunc(cur.Status.UsedBy, func(u shalev1.StoreUser) bool { return u.Name == want.Name })
		cur.Status.UsedBy = append(cur.Status.UsedBy, want)
		slices.SortFunc(cur.Status.UsedBy, func(a, b shalev1.StoreUser) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
}

// hasUser reports whether users holds want (a coldTier entry covers a
// hot-only one).
func hasUser(users []shalev1.StoreUser, want shalev1.StoreUser) bool {
	for _, u := range users {
		if u.Name == want.Name && (u.ColdTier || !want.ColdTier) {
			return true
		}
	}
	return false
}

// unregisterUse removes a RocksDB whose deletion is done from its
// ObjectStore's status.usedBy.
func (r *rocksDBReconciler) unregisterUse(ctx context.Context, db *shalev1.RocksDB) error {
	store := &shalev1.ObjectStore{}
	err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.ObjectStoreRef.Name}, store)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(patchStatus(ctx, r.Client, r.apiReader, store, func(cur *shalev1.ObjectStore) error {
		cur.Status.UsedBy = slices.DeleteFunc(cur.Status.UsedBy, func(u shalev1.StoreUser) bool { return u.Name == db.Name })
		if len(cur.Status.UsedBy) == 0 {
			cur.Status.UsedBy = nil
		}
		return nil
	}))
}

// staleUsers returns the entries of status.usedBy whose RocksDB the API
// server does not have (or that names another ObjectStore now: a RocksDB
// deleted and created again under the same name elsewhere). The cache
// answers for the RocksDBs it has; what it lacks is asked of the API
// server, so a RocksDB too new for the cache is never taken for gone.
func staleUsers(ctx context.Context, cache, api client.Reader, store *shalev1.ObjectStore) ([]string, error) {
	var stale []string
	for _, u := range store.Status.UsedBy {
		key := types.NamespacedName{Namespace: store.Namespace, Name: u.Name}
		db := &shalev1.RocksDB{}
		if err := cache.Get(ctx, key, db); err == nil && db.Spec.ObjectStoreRef.Name == store.Name {
			continue
		}
		err := api.Get(ctx, key, db)
		switch {
		case apierrors.IsNotFound(err):
			stale = append(stale, u.Name)
		case err != nil:
			return nil, err
		case db.Spec.ObjectStoreRef.Name != store.Name:
			stale = append(stale, u.Name)
		}
	}
	return stale, nil
}
