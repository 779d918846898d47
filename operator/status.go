package operator

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errNoChange aborts a status transaction without writing: the state it
// was meant to change has moved on (another writer got there first).
var errNoChange = errors.New("status transaction aborted: precondition no longer holds")

// patchStatus is the one way the operator writes status. It re-reads the
// object from the API server (not the cache), applies the transactions to
// the fresh copy, skips the write when nothing changed, and patches the
// status subresource with an optimistic lock (the patch carries the
// resourceVersion it was computed from, so it fails with a conflict if
// anything wrote the object meanwhile). On a conflict it starts over from
// a fresh read: a transaction must therefore decide from the object it is
// given, and return errNoChange (or another error) when its precondition
// no longer holds; the epoch bump does exactly that, which is what makes
// it happen at most once per observed epoch.
//
// On success obj holds the object as written (or as read, when nothing
// changed). A transaction's errNoChange is returned to the caller.
func patchStatus[T any, P interface {
	*T
	client.Object
}](ctx context.Context, c client.Client, reader client.Reader, obj P, txs ...func(P) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := P(new(T))
		if err := reader.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		orig := cur.DeepCopyObject().(P)
		for _, tx := range txs {
			if err := tx(cur); err != nil {
				return err
			}
		}
		if equality.Semantic.DeepEqual(orig, cur) {
			*obj = *cur
			return nil
		}
		if err := c.Status().Patch(ctx, cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		*obj = *cur
		return nil
	})
}
