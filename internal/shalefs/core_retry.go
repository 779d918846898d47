package shalefs

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

// retryable reports whether an object-store error is worth retrying:
// transient network trouble and timeouts of one attempt, never a failed
// condition, a missing object or a fence.
func retryable(err error) bool {
	var fenced *ErrFenced
	switch {
	case err == nil, errors.As(err, &fenced),
		errors.Is(err, objstore.ErrPreconditionFailed), errors.Is(err, objstore.ErrNotFound),
		errors.Is(err, objstore.ErrInvalidKey), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// policy bounds one remote operation: each attempt gets Attempt, and
// retryable failures are retried with exponential backoff until Total.
type policy struct {
	Attempt time.Duration
	Total   time.Duration
}

// do runs op under p. op gets a context bounded by one attempt.
func (p policy) do(ctx context.Context, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(p.Total)
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, p.Attempt)
		err := op(actx)
		attemptTimedOut := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		// An attempt that ran out of its own time is worth another one,
		// whatever the store layer made of the cancelled request.
		if !attemptTimedOut && !retryable(err) {
			return err
		}
		if time.Now().Add(backoff).After(deadline) {
			return &ioError{err: err, retry: true}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// ioError marks an error RocksDB may retry later (its auto-resume of
// background errors picks it up once the store is back).
type ioError struct {
	err   error
	retry bool
}

func (e *ioError) Error() string   { return e.err.Error() }
func (e *ioError) Unwrap() error   { return e.err }
func (e *ioError) Retryable() bool { return e.retry }

// retryLater marks err as worth another attempt under the current policy.
func retryLater(err error) error { return &ioError{err: err, retry: true} }

// parallel runs fn for 0..n-1, at most limit at a time, and returns the
// first error (the others' context is cancelled then).
func parallel(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	sem := make(chan struct{}, limit)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { firstErr = err; cancel() })
			}
		}(i)
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}
