package shalefs

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Clock is what an FS measures elapsed time on: its read lease and
// AckFresh (since its last confirmation), a reader's lease (since its last
// renewal), and the waits of an owner (the delete grace, others' reader
// leases). Go's monotonic clock will not do: it stops while the machine is
// suspended, so an owner resumed after a long suspension would take a
// confirmation from before it for a recent one, serve stale reads, and
// acknowledge a write into a slot whose seal was deleted meanwhile.
// Config.Clock injects another one (a test's, which jumps as a suspended
// machine's clocks do on resume).
type Clock interface {
	// Now returns the time elapsed since the clock's origin, read two
	// ways, both counting time the machine was suspended.
	//
	// lease never runs slower than real time, as far as this machine can
	// tell: an owner's own leases run on it, so every second it may have
	// been stopped must count (counting too much only costs an early
	// confirmation). A forward step of the wall clock counts as elapsed
	// time: a hypervisor that resumes a paused VM may correct only the
	// wall clock.
	//
	// wait never runs faster than real time: an owner waits out others'
	// leases on it (the delete grace, a reader's lease TTL), and counting
	// a wall-clock step there (an operator setting the clock an hour
	// ahead) would end those waits early.
	Now() (lease, wait time.Duration)
}

// SystemClock is the machine's clock from now on: CLOCK_BOOTTIME, which
// unlike CLOCK_MONOTONIC (Go's monotonic clock) counts time the machine
// was suspended, and for leases forward steps of the wall clock too.
func SystemClock() Clock {
	c := &bootClock{boot0: bootTime()}
	c.ref.Store(time.Now().UnixNano() - c.boot0)
	return c
}

// bootClock is SystemClock. It is safe for concurrent use.
type bootClock struct {
	boot0 int64        // CLOCK_BOOTTIME at the origin (ns)
	ref   atomic.Int64 // wall clock minus boot clock at the last step (ns)
	steps atomic.Int64 // forward wall-clock steps counted so far (ns)
}

func (c *bootClock) Now() (lease, wait time.Duration) {
	boot := bootTime()
	off := time.Now().UnixNano() - boot
	for {
		ref := c.ref.Load()
		step, next := wallStep(ref, off)
		if next == ref || c.ref.CompareAndSwap(ref, next) {
			c.steps.Add(step) // only the goroutine that moved ref counts it
			break
		}
	}
	wait = time.Duration(boot - c.boot0)
	return wait + time.Duration(c.steps.Load()), wait
}

// bootTime reads CLOCK_BOOTTIME in nanoseconds.
func bootTime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Linux has had CLOCK_BOOTTIME since 2.6.39; without it no lease
		// could be trusted.
		panic(fmt.Sprintf("clock_gettime(CLOCK_BOOTTIME): %v (Shale needs Linux 2.6.39 or later)", err))
	}
	return ts.Nano()
}

// wallStepMin is the smallest forward wall-clock step counted as elapsed
// lease time: smaller ones are a goroutine preempted between reading the
// two clocks, or NTP slewing (at most 0.05%), not a pause.
const wallStepMin = int64(time.Millisecond)

// wallStep decides how much of a change of the wall clock's offset to the
// boot clock counts as elapsed lease time. ref is the offset when a step
// was last counted, off the offset now (ns). A forward step of at least
// wallStepMin counts whole and becomes the new reference; a step back
// counts nothing but also becomes the reference, so that a later forward
// correction of it counts (counting too much only shortens a lease).
func wallStep(ref, off int64) (step, next int64) {
	switch {
	case off < ref:
		return 0, off
	case off-ref >= wallStepMin:
		return off - ref, off
	}
	return 0, ref
}

// clock is this FS's Config.Clock (a hand-built FS in a test has none).
func (f *core) clock() Clock {
	if f.cfg.Clock == nil {
		return processClock
	}
	return f.cfg.Clock
}

var processClock = SystemClock()

// leaseNow is this FS's lease reading in nanoseconds, what lastConfirm and
// leaseRenewed hold.
func (f *core) leaseNow() int64 {
	l, _ := f.clock().Now()
	return int64(l)
}
