package operator

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// Failover loops. A primary that fails the same way every time (a memory
// limit below its block cache, revoked keys, a bad image, a database that
// is not where it was) would otherwise get a new epoch and a new Pod every
// few seconds. The operator records each failure with its cause in
// status.primaryFailures, waits out an exponential backoff before the next
// primary, starts none while the ObjectStore is not reachable, and keeps
// only the last few failed Pods. Like decideFailover, these decisions
// cost availability when wrong, never data: the store fences every
// primary that is replaced.

// keepFailedPods is how many failed primary Pods of older epochs are kept
// (for their logs and termination messages) while no primary is ready.
const keepFailedPods = 3

// maxRecentFailures is how many failures status.primaryFailures.recent
// keeps (its CRD says at most 5).
const maxRecentFailures = 5

// restartDecision is the verdict of decideRestart.
type restartDecision struct {
	// Start: create the next primary now.
	Start bool
	// NotBefore is when to look again (zero: when something changes,
	// such as the ObjectStore becoming reachable).
	NotBefore time.Time
	// Reason (a condition reason) and Message say why not.
	Reason, Message string
}

// decideRestart decides whether a new primary (a new epoch) starts now.
//
//   - The ObjectStore is not reachable (its Reachable condition for its
//     current spec): no. The new primary could not open the database, and
//     each attempt would leave a failed Pod and a used epoch. Its status
//     changing wakes the RocksDB up.
//   - At most one failure in a row (the first failover after a primary
//     that had been ready): at once; a failover is what it is for.
//   - The spec changed since the last failure (a raised memory limit, a
//     fixed image): at once, so a fix is tried without waiting.
//   - Otherwise the n-th failure in a row waits base·2^(n-2), at most
//     max, after the last one.
//
// generation is the RocksDB's current spec generation.
func decideRestart(f *shalev1.PrimaryFailures, generation int64, storeReachable bool, now time.Time, base, max time.Duration) restartDecision {
	if !storeReachable {
		return restartDecision{Reason: shalev1.ReasonObjectStoreUnreachable,
			Message: "not starting a new primary while the ObjectStore is not reachable (see its Reachable condition): it could not open the database"}
	}
	if f == nil || f.Count <= 1 || len(f.Recent) == 0 {
		return restartDecision{Start: true}
	}
	last := f.Recent[len(f.Recent)-1]
	if generation > last.Generation {
		return restartDecision{Start: true}
	}
	delay := backoffDelay(f.Count, base, max)
	at := last.Time.Add(delay)
	if !now.Before(at) {
		return restartDecision{Start: true}
	}
	msg := fmt.Sprintf("%d primaries failed in a row, the last (epoch %d) with %s", f.Count, last.Epoch, last.Reason)
	if last.Message != "" {
		msg += ": " + last.Message
	}
	msg += fmt.Sprintf("; the next primary starts at %s (backoff %s), or at once when the spec changes",
		at.UTC().Format(time.RFC3339), delay)
	return restartDecision{NotBefore: at, Reason: last.Reason, Message: msg}
}

// backoffDelay is the wait after the n-th failure in a row (n >= 2):
// base, 2·base, 4·base, ... at most max.
func backoffDelay(n int32, base, max time.Duration) time.Duration {
	d := base
	for i := int32(2); i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// countsAsFailure: a failover reason that says the primary itself failed.
// A Pod deleted or gone (kubectl delete, a drain, an eviction that removed
// it) says nothing about the next primary.
func countsAsFailure(reason string) bool {
	switch reason {
	case shalev1.ReasonPrimaryFailed, shalev1.ReasonPrimaryExited, shalev1.ReasonPrimaryNotReady, shalev1.ReasonStartTimeout,
		// Counted so that a partial partition (the operator cut off from
		// a primary that is fine) costs one failover, then backoff.
		shalev1.ReasonPrimaryUnreachable:
		return true
	}
	return false
}

// Phrases of `shale primary`'s errors that name a cause (the end of its
// log is the Pod's termination message: TerminationMessageFallbackToLogsOnError).
var (
	credentialErrors = []string{"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "HTTP 403", "ExpiredToken", "InvalidToken"}
	noDatabaseError  = "no database at the location"
	coldTierError    = "--cold-db"
)

// imagePullReasons are the waiting reasons of a container whose image
// cannot be pulled.
var imagePullReasons = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true}

// classifyFailure says why a primary Pod failed, from what the kubelet
// reported: a reason for conditions and status.primaryFailures, and a
// message. d is the failover decision (its reason when the Pod says
// nothing more).
func classifyFailure(pod *corev1.Pod, d failoverDecision) (reason, message string) {
	reason, message = d.Reason, d.Message
	if pod == nil {
		return reason, message
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		// The restore of a bootstrap.recovery (recovery.go) refused or
		// failed: its last line names why (a target outside the window
		// names the window, RFC 0011 step 31 (b)).
		if t := cs.State.Terminated; cs.Name == restoreContainerName && t != nil && t.ExitCode != 0 {
			msg := fmt.Sprintf("the restore (init container %s) exited with status %d", cs.Name, t.ExitCode)
			if last := lastLine(t.Message); last != "" {
				msg += ": " + last
			}
			return shalev1.ReasonBootstrapRefused, msg
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if w := cs.State.Waiting; w != nil {
			if r, m, ok := waitingCause(w); ok {
				return r, m
			}
		}
		t := cs.State.Terminated
		if t == nil {
			continue
		}
		// The kernel killed it for its memory: while running, or (a limit
		// too low to start a process at all) runc's container init, which
		// the runtime reports as a StartError saying so.
		if t.Reason == "OOMKilled" || (t.Reason == "StartError" && strings.Contains(t.Message, "OOM-killed")) {
			return shalev1.ReasonOOMKilled, oomMessage(pod)
		}
		last := lastLine(t.Message)
		switch {
		case strings.Contains(t.Message, noDatabaseError):
			return shalev1.ReasonDatabaseNotFound, last
		case containsAny(t.Message, credentialErrors):
			return shalev1.ReasonBadCredentials, "the store refused the ObjectStore's credentials: " + last
		case strings.Contains(t.Message, coldTierError):
			return shalev1.ReasonColdTierRefused, last
		case t.ExitCode != 0:
			msg := fmt.Sprintf("the primary exited with status %d", t.ExitCode)
			if t.Reason != "" && t.Reason != "Error" {
				msg += " (" + t.Reason + ")"
			}
			if last != "" {
				msg += ": " + last
			}
			return shalev1.ReasonPrimaryCrashed, msg
		}
	}
	if pod.Status.Reason != "" && pod.Status.Phase == corev1.PodFailed {
		// Evicted, NodeLost, ... (the Pod failed without its container
		// reporting an exit).
		return reason, fmt.Sprintf("%s: %s", pod.Status.Reason, pod.Status.Message)
	}
	return reason, message
}

// waitingCause is the cause of a container that cannot start, if it is
// one that retrying will not fix.
func waitingCause(w *corev1.ContainerStateWaiting) (reason, message string, ok bool) {
	switch {
	case imagePullReasons[w.Reason]:
		return shalev1.ReasonImagePullFailed, fmt.Sprintf("%s: %s", w.Reason, w.Message), true
	case w.Reason == "CreateContainerConfigError" && strings.Contains(strings.ToLower(w.Message), "secret"):
		return shalev1.ReasonBadCredentials, fmt.Sprintf("the ObjectStore's Secret cannot be used: %s", w.Message), true
	}
	return "", "", false
}

// startingCause reports why a primary that is starting cannot start, if
// its container says so (an image that cannot be pulled, a Secret without
// its keys); ok is false while it is simply starting.
func startingCause(pod *corev1.Pod) (reason, message string, ok bool) {
	if pod == nil {
		return "", "", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Waiting != nil {
			return waitingCause(cs.State.Waiting)
		}
	}
	return "", "", false
}

func oomMessage(pod *corev1.Pod) string {
	msg := "the primary was killed for using more memory than its limit"
	for _, c := range pod.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		if l, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			msg += " (" + l.String() + ")"
		}
		for i, a := range c.Args {
			if a == "--block-cache-size" && i+1 < len(c.Args) {
				msg += "; its block cache is " + c.Args[i+1] + " bytes"
			}
		}
	}
	return msg + ": raise spec.primary.resources.limits.memory or lower spec.primary.blockCacheSize"
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// lastLine is the last non-empty line of a termination message, cut to a
// length that fits a condition.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 700 {
		l = "..." + l[len(l)-700:]
	}
	return l
}

// startsNewRow says whether a failure ends the row of failures before it
// and counts as the first of a new one: a primary that had been ready and
// then died (killed, crashed, its node lost) is what failover is for, and
// is replaced at once however recently the one before it failed. Not when
// it was killed for its memory: a limit the workload exceeds is exceeded
// again by the next primary, typically once it is ready and serving. Nor
// when the operator's own probes found it unreachable (RFC 0015): every
// such primary was ready, and a partition between the operator and the
// primaries' nodes that keeps coming back would otherwise fail over at
// once each time; in a row, the second waits the backoff.
func startsNewRow(wasReady bool, reason string) bool {
	return wasReady && reason != shalev1.ReasonOOMKilled && reason != shalev1.ReasonPrimaryUnreachable
}

// addFailure returns the failures with f added (once per epoch); newRow
// restarts the count (startsNewRow).
func addFailure(cur *shalev1.PrimaryFailures, f shalev1.PrimaryFailure, newRow bool) (*shalev1.PrimaryFailures, bool) {
	out := &shalev1.PrimaryFailures{}
	if cur != nil {
		if n := len(cur.Recent); n > 0 && cur.Recent[n-1].Epoch >= f.Epoch {
			return cur, false
		}
		out = cur.DeepCopy()
	}
	if len(f.Message) > 1024 {
		f.Message = f.Message[:1021] + "..."
	}
	out.Count++
	if newRow {
		out.Count = 1
	}
	out.Recent = append(out.Recent, f)
	if n := len(out.Recent); n > maxRecentFailures {
		out.Recent = out.Recent[n-maxRecentFailures:]
	}
	return out, true
}

// failureReasons are the PrimaryAvailable reasons that say the primary
// cannot run (the phase is Degraded while one is set).
var failureReasons = map[string]bool{
	shalev1.ReasonOOMKilled: true, shalev1.ReasonImagePullFailed: true, shalev1.ReasonBadCredentials: true,
	shalev1.ReasonDatabaseNotFound: true, shalev1.ReasonColdTierRefused: true, shalev1.ReasonPrimaryCrashed: true,
	shalev1.ReasonObjectStoreUnreachable: true,
}

// describeLocationChange says what changed between where a database was
// created and where its ObjectStore points now, and how to recover: for
// the condition and event of a database not found.
func describeLocationChange(db *shalev1.RocksDB, store *shalev1.ObjectStore) string {
	now := shalev1.DatabaseLocation{Endpoint: store.Spec.Endpoint, Region: store.Spec.Region, Bucket: store.Spec.Hot.Bucket}
	where := store.DatabaseURL(db.Status.StoragePath) + " at " + now.Endpoint
	c := db.Status.Created
	if c == nil {
		return fmt.Sprintf("the database is not at %s", where)
	}
	var changes []string
	if c.Endpoint != now.Endpoint {
		changes = append(changes, fmt.Sprintf("endpoint %s (was %s)", now.Endpoint, c.Endpoint))
	}
	if c.Region != now.Region {
		changes = append(changes, fmt.Sprintf("region %q (was %q)", now.Region, c.Region))
	}
	if c.Bucket != now.Bucket {
		changes = append(changes, fmt.Sprintf("bucket %s (was %s)", now.Bucket, c.Bucket))
	}
	since := c.Time.UTC().Format(time.RFC3339)
	var msg string
	if len(changes) > 0 {
		msg = fmt.Sprintf("the database, created %s, is not at %s: ObjectStore %s now has %s. Point it back (delete the ObjectStore and create it again with the old values: they cannot be edited while databases use it); the next primary then finds the database",
			since, where, store.Name, strings.Join(changes, ", "))
	} else {
		msg = fmt.Sprintf("the database, created %s, is not at %s although ObjectStore %s points where it was created: its data there was deleted, or the credentials of %s reach another account",
			since, where, store.Name, credentialsOrigin(store))
	}
	return msg + ". No primary is started meanwhile (a primary still running on the old location keeps serving); to give the data up and start empty, delete this RocksDB and create it again"
}

// isFailureReason reports whether a PrimaryAvailable condition says the
// primary cannot run.
func isFailureReason(c *metav1.Condition) bool {
	return c != nil && c.Status != metav1.ConditionTrue && failureReasons[c.Reason]
}
