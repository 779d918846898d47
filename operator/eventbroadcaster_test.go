package operator

import (
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// eventSink keeps the reasons of the events that reach the API.
type eventSink struct {
	mu      sync.Mutex
	reasons []string
}

func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reasons = append(s.reasons, e.Reason)
	return e, nil
}
func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error)          { return s.Create(e) }
func (s *eventSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return s.Create(e) }

func (s *eventSink) has(reason string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.reasons, reason)
}

// After 40 switchover events on one RocksDB (a soak, a busy day), the next event of
// another reason still reaches the API. client-go's default broadcaster
// drops it (a burst of 25 per object); the check of that is below, so the
// test shows what it protects against.
func TestEventsNotDroppedAfterAnIncident(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := shalev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	db := &shalev1.RocksDB{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", UID: "u1"}}
	for _, c := range []struct {
		name      string
		b         record.EventBroadcaster
		delivered bool
	}{
		{"operator", NewEventBroadcaster(), true},
		{"client-go default", record.NewBroadcaster(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &eventSink{}
			w := c.b.StartRecordingToSink(sink)
			defer c.b.Shutdown()
			defer w.Stop()
			rec := c.b.NewRecorder(scheme, corev1.EventSource{Component: "shale-operator"})
			for i := range 40 {
				rec.Eventf(db, corev1.EventTypeNormal, "SwitchoverCompleted", "switchover %d", i)
			}
			rec.Event(db, corev1.EventTypeNormal, "Resumed", "resumed")
			// A Warning has a bucket of its own under both filters: once it
			// arrives (events are handled in order), Resumed's fate is known.
			rec.Event(db, corev1.EventTypeWarning, "Marker", "the last one")
			deadline := time.Now().Add(30 * time.Second)
			for !sink.has("Marker") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := sink.has("Resumed"); got != c.delivered {
				t.Fatalf("Resumed delivered: %v, want %v (%d events reached the API)", got, c.delivered, len(sink.reasons))
			}
		})
	}
}
