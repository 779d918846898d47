//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Where a failover's time goes (issue 29): every stage from the
// disruption to the first write the new primary acknowledged, measured on
// the test's clock. The kind node is a container on this machine, so the
// container runtime's log timestamps share it. Pod timestamps in the API
// have whole seconds only, so Pods are watched instead: a transition is
// timed when the watch delivers it (a few ms after the kubelet's status
// update).

// The stages, in the order they happen.
const (
	stOldGone   = "old container exited or Pod terminating (API)"
	stCreated   = "new Pod created (operator)"
	stScheduled = "new Pod scheduled"
	// The container's running state reaches the API later than its
	// first log line: the log is what says the process runs.
	stFirstLog  = "new process's first log line"
	stWaitStart = "lease wait begins (claimed, sealed)"
	stWaitEnd   = "lease wait ends"
	stServing   = "primary serving (RocksDB open)"
	stReady     = "new Pod Ready (readiness probe)"
	stFirstAck  = "first write acknowledged by the new primary"
)

var stageOrder = []string{stOldGone, stCreated, stScheduled, stFirstLog, stWaitStart, stWaitEnd, stServing, stReady, stFirstAck}

// timeline collects the instants of one failover.
type timeline struct {
	t0     time.Time
	mu     sync.Mutex
	at     map[string]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

// watchFailover starts timing a failover: the old primary's Pod
// and the Pod the operator creates for the next epoch (newPod).
// Call start just before the disruption.
func (s *suite) watchFailover(t *testing.T, oldPod, newPod string) *timeline {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	tl := &timeline{at: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	w, err := s.cs.CoreV1().Pods(s.cfg.namespace).Watch(c, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("watch Pods: %v", err)
	}
	go func() {
		defer close(tl.done)
		defer w.Stop()
		for {
			select {
			case <-c.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				now := time.Now()
				switch p.Name {
				case oldPod:
					exited := false
					for _, cs := range p.Status.ContainerStatuses {
						exited = exited || cs.State.Terminated != nil
					}
					if exited || ev.Type == watch.Deleted || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
						tl.mark(stOldGone, now)
					}
				case newPod:
					tl.mark(stCreated, now)
					if p.Spec.NodeName != "" {
						tl.mark(stScheduled, now)
					}
					for _, cond := range p.Status.Conditions {
						if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
							tl.mark(stReady, now)
						}
					}
				}
			}
		}
	}()
	return tl
}

// start sets the instant of the disruption, and returns it.
func (tl *timeline) start() time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.t0 = time.Now()
	return tl.t0
}

// mark records the first time a stage was seen.
func (tl *timeline) mark(stage string, at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if _, ok := tl.at[stage]; !ok {
		tl.at[stage] = at
	}
}

// finish stops the watch and adds what the new primary's log says
// (timestamps of the container runtime) and the first acknowledged write.
func (tl *timeline) finish(t *testing.T, s *suite, newPod string, firstAck time.Time) {
	t.Helper()
	tl.cancel()
	<-tl.done
	tl.mark(stFirstAck, firstAck)
	req := s.cs.CoreV1().Pods(s.cfg.namespace).GetLogs(newPod, &corev1.PodLogOptions{Timestamps: true})
	b, err := req.DoRaw(ctx(t, time.Minute))
	if err != nil {
		t.Logf("timeline: no log of %s: %v", newPod, err)
		return
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ts, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		tl.mark(stFirstLog, at)
		switch {
		case strings.Contains(line, "waiting out the previous owner's read lease"):
			tl.mark(stWaitStart, at)
			if i := strings.Index(line, "wait="); i >= 0 {
				if f := strings.Fields(line[i+len("wait="):]); len(f) > 0 {
					if d, err := time.ParseDuration(f[0]); err == nil {
						tl.mark(stWaitEnd, at.Add(d))
					}
				}
			}
		case strings.Contains(line, "primary serving"):
			tl.mark(stServing, at)
		}
	}
}

// stages are the durations of each stage (from the previous one seen), in
// order; a stage not seen (no lease wait after a release) is left out.
func (tl *timeline) stages() []stage {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []stage
	prev := tl.t0
	for _, name := range stageOrder {
		at, ok := tl.at[name]
		if !ok {
			continue
		}
		out = append(out, stage{name: name, took: at.Sub(prev), offset: at.Sub(tl.t0)})
		prev = at
	}
	return out
}

type stage struct {
	name         string
	took, offset time.Duration
}

func (tl *timeline) String() string {
	var b strings.Builder
	for _, st := range tl.stages() {
		fmt.Fprintf(&b, "\n  %+8.3fs  %-48s +%.3fs", st.offset.Seconds(), st.name, st.took.Seconds())
	}
	return b.String()
}

// printStages prints, per stage, the p50 and max of its duration over the
// runs of one kind of failover.
func printStages(t *testing.T, kind failoverKind, runs []*timeline) {
	if len(runs) == 0 {
		return
	}
	by := map[string][]time.Duration{}
	for _, tl := range runs {
		for _, st := range tl.stages() {
			by[st.name] = append(by[st.name], st.took)
		}
	}
	var b strings.Builder
	for _, name := range stageOrder {
		d := by[name]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(&b, "\n  %-48s p50 %6.3fs  max %6.3fs  (%d runs)", name, p50(d).Seconds(), d[len(d)-1].Seconds(), len(d))
	}
	t.Logf("failover by %s, where the time goes (each stage from the one before):%s", kind, b.String())
}
