package storetest

import (
	"context"
	"io"

	"github.com/shale-rocks/shale/internal/objstore"
)

// Hooked wraps a real store so a test can stand between a client and the
// store: hold a request before it is sent, or hold its reply after the
// store applied it (a slow or lost reply), to force the interleavings a
// protocol must survive. Nil hooks pass through.
type Hooked struct {
	objstore.Store
	// BeforePut runs before a Put reaches the store; an error fails the
	// put without sending it.
	BeforePut func(key string, size int64, opts objstore.PutOptions) error
	// AfterPut runs after the store answered a Put and may replace its
	// result (err is the store's answer; the put may have been applied).
	AfterPut func(key string, size int64, opts objstore.PutOptions, err error) error
	// BeforeGet runs before a Get; an error fails it without sending it.
	BeforeGet func(key string) error
}

func (h *Hooked) Put(ctx context.Context, key string, r io.Reader, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if h.BeforePut != nil {
		if err := h.BeforePut(key, size, opts); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	info, err := h.Store.Put(ctx, key, r, size, opts)
	if h.AfterPut != nil {
		err = h.AfterPut(key, size, opts, err)
	}
	return info, err
}

func (h *Hooked) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.ObjectInfo, error) {
	if h.BeforeGet != nil {
		if err := h.BeforeGet(key); err != nil {
			return nil, objstore.ObjectInfo{}, err
		}
	}
	return h.Store.Get(ctx, key, offset, length)
}
