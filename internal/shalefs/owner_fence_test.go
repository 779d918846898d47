package shalefs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shale-rocks/shale/internal/shalefs/protocol"
)

func TestFenceErrors(t *testing.T) {
	if got := (&ErrFenced{Epoch: 1, By: 2}).Error(); got != "fenced: epoch 1 superseded by 2" {
		t.Errorf("fence message %q", got)
	}
	want := "epoch 1 is not above epoch 2 already taken in storage; refusing to open (a newer owner exists: pass --epoch greater than 2 to take over)"
	if got := (&protocol.ErrStaleEpoch{Requested: 1, Highest: 2}).Error(); got != want {
		t.Errorf("stale message %q", got)
	}
}

func TestDefinitelyNotStored(t *testing.T) {
	fe := &ErrFenced{Epoch: 1, By: 2}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fe, true},
		{fmt.Errorf("sync: %w", fe), true},
		{&ErrOutcomeUnknown{Fence: fe}, false},
		{ErrReleased, true}, // refused before any byte was stored
		{fmt.Errorf("sync: %v, after part of it was stored", ErrReleased), false},
		{retryLater(errors.New("timeout")), false},
		{errors.New("segment holds bytes this owner did not write"), false},
	} {
		if got := definitelyNotStored(c.err); got != c.want {
			t.Errorf("definitelyNotStored(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
