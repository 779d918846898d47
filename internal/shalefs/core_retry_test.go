package shalefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/objstore"
)

func TestPolicyRetries(t *testing.T) {
	p := policy{Attempt: 20 * time.Millisecond, Total: time.Second}
	// An attempt that times out is retried even if the error it returns
	// does not say it is retryable.
	calls := 0
	err := p.do(context.Background(), func(ctx context.Context) error {
		calls++
		if calls < 3 {
			<-ctx.Done()
			return errors.New("list: context deadline exceeded (as some clients report it)")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("timed-out attempts: %v after %d calls", err, calls)
	}
	// A failed condition is final at once.
	calls = 0
	err = p.do(context.Background(), func(ctx context.Context) error {
		calls++
		return fmt.Errorf("put: %w", objstore.ErrPreconditionFailed)
	})
	if !errors.Is(err, objstore.ErrPreconditionFailed) || calls != 1 {
		t.Fatalf("precondition: %v after %d calls", err, calls)
	}
	// A retryable error past the budget comes back marked retryable, so
	// RocksDB's error handler resumes later.
	calls = 0
	err = (policy{Attempt: 10 * time.Millisecond, Total: 200 * time.Millisecond}).do(context.Background(), func(ctx context.Context) error {
		calls++
		return &ioError{err: errors.New("connection refused"), retry: true}
	})
	var r interface{ Retryable() bool }
	if !errors.As(err, &r) || !r.Retryable() || calls < 2 {
		t.Fatalf("budget exhausted: %v (retryable %v) after %d calls", err, r != nil && r.Retryable(), calls)
	}
}
