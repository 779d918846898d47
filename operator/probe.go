package operator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/objstore"
)

var errStopListing = errors.New("stop listing")

// probeStore checks what Shale needs of a store: that it can be listed and
// that it honours create-only writes (If-None-Match: *), on which fencing
// rests. It writes a fresh probe key under .shale-operator/ twice with
// IfNoneMatch; the first must succeed and the second must fail with
// ErrPreconditionFailed. Then it deletes the probe. It returns "" when the
// store passes, else a condition reason and an error saying what failed.
//
// Cost: one LIST, two PUTs and one DELETE per check.
func probeStore(ctx context.Context, st objstore.Store) (string, error) {
	if err := listOne(ctx, st); err != nil {
		return shalev1.ReasonListFailed, fmt.Errorf("listing %s: %w", st.URL(), err)
	}
	var b [8]byte
	rand.Read(b[:])
	key := probeDir + "probe-" + hex.EncodeToString(b[:])
	body := []byte("shale-operator reachability probe; safe to delete\n")
	put := func() error {
		_, err := st.Put(ctx, key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{IfNoneMatch: true})
		return err
	}
	if err := put(); err != nil {
		return shalev1.ReasonConditionalWriteFails, fmt.Errorf("create-only write of %s in %s: %w", key, st.URL(), err)
	}
	second := put()
	// Delete the probe whatever happened (a detached context would be
	// kinder to a cancelled caller, but the probe is harmless if left).
	delErr := st.Delete(ctx, key)
	switch {
	case second == nil:
		return shalev1.ReasonNoConditionalWrites, fmt.Errorf("%s accepted a second create-only write (If-None-Match: *) of %s: it does not honour conditional writes, and Shale's fencing depends on them", st.URL(), key)
	case !errors.Is(second, objstore.ErrPreconditionFailed):
		return shalev1.ReasonConditionalWriteFails, fmt.Errorf("second create-only write of %s in %s: want a precondition failure, got: %w", key, st.URL(), second)
	case delErr != nil:
		return shalev1.ReasonConditionalWriteFails, fmt.Errorf("deleting the probe %s in %s: %w", key, st.URL(), delErr)
	}
	return "", nil
}

// listOne lists the store's root and stops at the first entry.
func listOne(ctx context.Context, st objstore.Store) error {
	err := st.ListDir(ctx, "", func(objstore.ObjectInfo) error { return errStopListing })
	if errors.Is(err, errStopListing) {
		return nil
	}
	return err
}
