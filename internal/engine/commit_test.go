package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/shale-rocks/shale/internal/rocksshim"
)

// groupLog is an apply function for committer tests: it records how many
// mutations each group carried. (The real apply is RocksDB's write;
// TestConcurrentWritesMerged and primary's TestDurableWritesShareUploads
// run the committers against it.)
type groupLog struct {
	mu     sync.Mutex
	groups []int
	upload time.Duration // how long a group's write takes, as an upload does
}

func (g *groupLog) apply(b *rocksshim.Batch) error {
	time.Sleep(g.upload)
	g.mu.Lock()
	g.groups = append(g.groups, b.Count())
	g.mu.Unlock()
	return nil
}

func putVia(c *committer, g *groupLog, key string) error {
	p := &pendingWrite{key: []byte(key), value: []byte("v"), done: make(chan commitResult, 1)}
	return c.write(p, func(b *rocksshim.Batch) (func() error, error) { return nil, g.apply(b) })
}

// A writer alone never waits for the window: with an hour-long window
// this test would time out if it did.
func TestGroupCommitLoneWriterDoesNotWait(t *testing.T) {
	c := &committer{window: time.Hour}
	var g groupLog
	for i := 0; i < 20; i++ {
		if err := putVia(c, &g, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.groups) != 20 {
		t.Fatalf("groups = %v, want 20 groups of one", g.groups)
	}
}

// A leader waits for as many writers as the previous group expected, then
// writes them all as one group, without waiting out the window.
func TestGroupCommitWaitsForExpectedWriters(t *testing.T) {
	c := &committer{window: time.Hour, last: 3}
	var g groupLog
	errs := make(chan error, 3)
	go func() { errs <- putVia(c, &g, "a") }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.waiting })
	go func() { errs <- putVia(c, &g, "b") }()
	go func() { errs <- putVia(c, &g, "c") }()
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(g.groups) != 1 || g.groups[0] != 3 {
		t.Fatalf("groups = %v, want one group of 3", g.groups)
	}
}

// When the expected writers do not come, the window ends the wait.
func TestGroupCommitWindowEnds(t *testing.T) {
	c := &committer{window: 5 * time.Millisecond, last: 8}
	var g groupLog
	if err := putVia(c, &g, "a"); err != nil {
		t.Fatal(err)
	}
	if len(g.groups) != 1 || g.groups[0] != 1 || c.last != 1 {
		t.Fatalf("groups = %v, last = %d; want one group of 1 and last 1", g.groups, c.last)
	}
	// The next write expects one writer: itself.
	if err := putVia(c, &g, "b"); err != nil {
		t.Fatal(err)
	}
}

// Writers that do not come back (independent clients) make a wait fail;
// the groups after it do not wait: with an hour-long window this test
// would time out if they did.
func TestGroupCommitStopsWaitingAfterMiss(t *testing.T) {
	c := &committer{window: 5 * time.Millisecond, last: 8}
	var g groupLog
	if err := putVia(c, &g, "a"); err != nil { // waits 5ms for 7 more that never come
		t.Fatal(err)
	}
	c.window = time.Hour
	for i := 0; i < skipAfterMiss; i++ {
		c.last = 8 // as if a group of 8 had just ended
		if err := putVia(c, &g, "b"); err != nil {
			t.Fatal(err)
		}
	}
	if c.skip != 0 {
		t.Fatalf("skip = %d after %d groups, want 0: the next group waits again", c.skip, skipAfterMiss)
	}
}

// Writers in a closed loop (each writes again after the round trip that
// brought its acknowledgement back, as a remote client does) settle into
// groups of all of them. Without the window the groups split: the writers
// of one group come back after the next leader has started its upload.
func TestGroupCommitClosedLoopFillsGroups(t *testing.T) {
	const writers, rounds = 8, 30
	c := &committer{window: 50 * time.Millisecond}
	g := groupLog{upload: 2 * time.Millisecond}
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if err := putVia(c, &g, "k"); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // the client's round trip
			}
		}()
	}
	wg.Wait()
	total, full := 0, 0
	for _, n := range g.groups {
		total += n
		if n == writers {
			full++
		}
	}
	if total != writers*rounds {
		t.Fatalf("groups carried %d writes, want %d", total, writers*rounds)
	}
	// Scheduling may split a few groups; most must hold every writer.
	if full < rounds/2 {
		t.Fatalf("only %d of %d groups held all %d writers: %v", full, len(g.groups), writers, g.groups)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

// A pipelined committer (RFC 0013, "When a group starts") holds a new
// leader while a group is in flight for the spacing it learned (here an
// hour: half of two hours), so the writers that queue meanwhile join its
// group instead of splitting into groups of their own; the group in
// flight becoming durable releases it at once.
func TestGroupCommitPipelinedPacing(t *testing.T) {
	c := &committer{pipelined: true, window: time.Millisecond, recent: 2 * time.Hour}
	var mu sync.Mutex
	var groups []int
	held := make(chan struct{}) // the first group's upload
	put := func(key string) error {
		p := &pendingWrite{key: []byte(key), value: []byte("v"), done: make(chan commitResult, 1)}
		return c.write(p, func(b *rocksshim.Batch) (func() error, error) {
			mu.Lock()
			groups = append(groups, b.Count())
			first := len(groups) == 1
			mu.Unlock()
			if first {
				return func() error { <-held; return nil }, nil
			}
			return func() error { return nil }, nil
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(groups) }
	errs := make(chan error, 4)
	go func() { errs <- put("a") }()
	waitFor(t, func() bool { return count() == 1 })
	go func() { errs <- put("b") }() // leads the next group: waits in pace
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.paced || count() > 1 })
	go func() { errs <- put("c") }()
	go func() { errs <- put("d") }()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 3 || count() > 1 })
	if n := count(); n != 1 {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("groups = %v while the first was in flight, want only [1]: the next leader did not wait for the spacing", groups)
	}
	close(held)
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(groups) != 2 || groups[0] != 1 || groups[1] != 3 {
		t.Fatalf("groups = %v, want [1 3]: b, c and d in one group started when the first became durable", groups)
	}
}

// The spacing is the window, or half the recent time to durability when
// that is longer; recent is a mean over about 8 groups.
func TestGroupCommitPacingSpacing(t *testing.T) {
	c := &committer{window: 2 * time.Millisecond}
	if got := c.spacing(); got != 2*time.Millisecond {
		t.Fatalf("spacing with nothing learned = %s, want the window (2ms)", got)
	}
	c.learn(20 * time.Millisecond)
	if c.recent != 20*time.Millisecond || c.spacing() != 10*time.Millisecond {
		t.Fatalf("after one group of 20ms: recent %s, spacing %s; want 20ms and 10ms", c.recent, c.spacing())
	}
	c.learn(4 * time.Millisecond) // 20 + (4-20)/8 = 18
	if c.recent != 18*time.Millisecond || c.spacing() != 9*time.Millisecond {
		t.Fatalf("after 20ms and 4ms: recent %s, spacing %s; want 18ms and 9ms", c.recent, c.spacing())
	}
	c.recent = time.Millisecond
	if got := c.spacing(); got != 2*time.Millisecond {
		t.Fatalf("spacing with fast uploads = %s, want the window (2ms)", got)
	}
}
