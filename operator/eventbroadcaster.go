package operator

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// Events are a database's audit trail (kubectl describe, kubectl shale
// status and report), so the operator must not lose the one that says
// what happened last. client-go's default spam filter keys on the object
// alone with a burst of 25 and one more every 5 minutes: after an
// incident's failovers and switchovers it dropped the next Resumed or
// FailoverCompleted for minutes. Here each reason on each object has its
// own bucket, larger and refilled faster; the API server stays protected
// from a loop (one reason repeating) by that reason's bucket.
const (
	eventBurstPerReason = 50
	eventQPSPerReason   = 1. / 30.
)

// NewEventBroadcaster is the operator's event broadcaster (the manager's
// EventBroadcaster option).
func NewEventBroadcaster() record.EventBroadcaster {
	return record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{
		BurstSize:   eventBurstPerReason,
		QPS:         eventQPSPerReason,
		SpamKeyFunc: eventSpamKey,
	})
}

// eventSpamKey is client-go's spam key with the reason added.
func eventSpamKey(e *corev1.Event) string {
	o := e.InvolvedObject
	return strings.Join([]string{e.Source.Component, e.Source.Host, o.Kind, o.Namespace, o.Name, string(o.UID), o.APIVersion, e.Type, e.Reason}, "\x00")
}
