package shalefs

import (
	"sync/atomic"
	"testing"
	"time"
)

// jumpClock is the machine's clock plus jumps a test makes: what an FS
// sees of a suspension on resume (the boot clock leapt ahead).
type jumpClock struct {
	Clock
	skip atomic.Int64
}

func newJumpClock() *jumpClock { return &jumpClock{Clock: SystemClock()} }

func (c *jumpClock) Now() (lease, wait time.Duration) {
	l, w := c.Clock.Now()
	s := time.Duration(c.skip.Load())
	return l + s, w + s
}

// suspend makes d pass at once, as a suspension of d does.
func (c *jumpClock) suspend(d time.Duration) { c.skip.Add(int64(d)) }

func TestWallStep(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name       string
		ref, off   int64
		step, next int64
		why        string
	}{
		{"no change", 5 * ms, 5 * ms, 0, 5 * ms, ""},
		{"jitter below the minimum", 5 * ms, 5*ms + ms/2, 0, 5 * ms, "a preempted read or NTP slew is not a pause"},
		{"forward step: a paused VM's wall clock corrected", 5 * ms, 5*ms + int64(time.Hour), int64(time.Hour), 5*ms + int64(time.Hour), "the hour counts"},
		{"exactly the minimum", 0, ms, ms, ms, ""},
		{"step back: followed, never counted", 5 * ms, -int64(time.Hour), 0, -int64(time.Hour), "a lease never gets longer"},
		{"small step back: followed", 5 * ms, 5*ms - 1, 0, 5*ms - 1, ""},
	} {
		step, next := wallStep(tc.ref, tc.off)
		if step != tc.step || next != tc.next {
			t.Errorf("%s: wallStep(%d, %d) = %d, %d; want %d, %d (%s)", tc.name, tc.ref, tc.off, step, next, tc.step, tc.next, tc.why)
		}
	}
	// A step back then its correction forward counts the correction: an
	// early confirmation, never a stretched lease.
	s1, r := wallStep(0, -int64(time.Minute))
	s2, _ := wallStep(r, 0)
	if s1 != 0 || s2 != int64(time.Minute) {
		t.Errorf("back a minute then forward again counted %d then %d, want 0 then a minute", s1, s2)
	}
}

// The system clock starts at its origin, never goes back, and counts a
// forward step of the wall clock in its lease reading only.
func TestSystemClock(t *testing.T) {
	c := SystemClock().(*bootClock)
	l0, w0 := c.Now()
	if l0 < 0 || w0 < 0 || l0 > time.Minute || w0 > l0 {
		t.Fatalf("a new clock reads lease %v, wait %v", l0, w0)
	}
	for i := 0; i < 1000; i++ {
		l, w := c.Now()
		if l < l0 || w < w0 {
			t.Fatalf("the clock went back: lease %v -> %v, wait %v -> %v", l0, l, w0, w)
		}
		l0, w0 = l, w
	}
	// As if the wall clock had been stepped an hour ahead since the last
	// reading (the reference offset an hour behind).
	c.ref.Add(-int64(time.Hour))
	l, w := c.Now()
	if l-l0 < time.Hour {
		t.Errorf("a forward wall-clock step of an hour moved the lease reading by %v", l-l0)
	}
	if w-w0 >= time.Hour {
		t.Errorf("a wall-clock step moved the wait reading by %v: a wait would end early", w-w0)
	}
}
