package operator

import (
	"testing"
	"time"
)

func TestDesiredWorkers(t *testing.T) {
	t0 := time.Unix(10000, 0)
	base := scaleInput{min: 1, max: 5, concurrency: 1, known: true, current: 1, lastScale: t0, scaleDownDelay: 2 * time.Minute, now: t0.Add(time.Hour)}
	for _, tc := range []struct {
		name string
		mod  func(*scaleInput)
		want int32
	}{
		{"idle: the minimum", func(in *scaleInput) {}, 1},
		{"one slot per queued or running job", func(in *scaleInput) { in.queued, in.running = 2, 1 }, 3},
		{"capped at the maximum", func(in *scaleInput) { in.queued = 50 }, 5},
		{"concurrency 2: half the workers, rounded up", func(in *scaleInput) { in.concurrency, in.queued, in.running = 2, 2, 1 }, 2},
		{"up at once, even just after a change", func(in *scaleInput) { in.queued, in.lastScale = 4, in.now }, 4},
		{"down after the delay", func(in *scaleInput) { in.current, in.running = 4, 1 }, 1},
		{"not down within the delay", func(in *scaleInput) { in.current, in.running, in.lastScale = 4, 1, in.now.Add(-time.Minute) }, 4},
		{"down to what running jobs need, not below", func(in *scaleInput) { in.current, in.running = 4, 3 }, 3},
		{"scheduler unknown: keep", func(in *scaleInput) { in.known, in.current = false, 3 }, 3},
		{"scheduler unknown: still within bounds", func(in *scaleInput) { in.known, in.current = false, 9 }, 5},
		{"scheduler unknown, none yet: the minimum", func(in *scaleInput) { in.known, in.current = false, 0 }, 1},
		{"pinned by min = max", func(in *scaleInput) { in.min, in.max, in.queued = 2, 2, 40 }, 2},
		{"raised minimum (the scale subresource): up at once", func(in *scaleInput) { in.min, in.lastScale = 3, in.now }, 3},
		{"minimum 0, idle: none", func(in *scaleInput) { in.min, in.current = 0, 0 }, 0},
		{"minimum 0, a job queued: one", func(in *scaleInput) { in.min, in.current, in.queued = 0, 0, 1 }, 1},
		{"current above the maximum (spec lowered): down now", func(in *scaleInput) { in.current, in.queued, in.lastScale = 8, 20, in.now }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.mod(&in)
			if got := desiredWorkers(in); got != tc.want {
				t.Fatalf("desiredWorkers = %d, want %d (%+v)", got, tc.want, in)
			}
		})
	}
}
