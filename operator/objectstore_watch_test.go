package operator

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
	"github.com/shale-rocks/shale/internal/testenv"
)

// requestCounter counts the operator's API requests by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		c.total.Add(1)
		k := requestKind(req)
		c.mu.Lock()
		c.counts[k]++
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// reset returns the counts so far and starts again.
func (c *requestCounter) reset() (map[string]int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.counts
	c.counts = map[string]int{}
	return m, c.total.Swap(0)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// requestKind names a request "VERB resource[/subresource]" (watches as
// WATCH), from its path: /api/v1/namespaces/NS/pods/NAME/status.
func requestKind(req *http.Request) string {
	verb := req.Method
	if req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// Drop the group and version prefix.
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	res := "?"
	if len(parts) > 0 {
		res = parts[0]
	}
	if verb == http.MethodGet && len(parts) == 1 {
		verb = "LIST"
	}
	if len(parts) > 2 {
		res += "/" + parts[2]
	}
	return verb + " " + res
}

func TestObjectStoreChange(t *testing.T) {
	reachable := func(status metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
		return metav1.Condition{Type: shalev1.ConditionReachable, Status: status, Reason: reason, ObservedGeneration: gen,
			LastTransitionTime: metav1.NewTime(time.Unix(100, 0))}
	}
	base := func() *shalev1.ObjectStore {
		s := &shalev1.ObjectStore{}
		s.Generation = 1
		s.Status.ObservedGeneration = 1
		s.Status.LastCheckTime = &metav1.Time{Time: time.Unix(200, 0)}
		s.Status.Conditions = []metav1.Condition{reachable(metav1.ConditionTrue, shalev1.ReasonReachable, 1)}
		s.Status.UsedBy = []shalev1.StoreUser{{Name: "a"}, {Name: "b", ColdTier: true}}
		return s
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name  string
		edit  func(*shalev1.ObjectStore)
		all   bool
		users []string
	}{
		{"nothing", func(*shalev1.ObjectStore) {}, false, nil},
		{"a check at rest: only lastCheckTime", func(s *shalev1.ObjectStore) { s.Status.LastCheckTime = &metav1.Time{Time: time.Unix(260, 0)} }, false, nil},
		{"a database registers", func(s *shalev1.ObjectStore) { s.Status.UsedBy = append(s.Status.UsedBy, shalev1.StoreUser{Name: "c"}) }, false, nil},
		{"a database gains the cold tier", func(s *shalev1.ObjectStore) { s.Status.UsedBy[0].ColdTier = true }, false, []string{"a"}},
		{"an entry removed", func(s *shalev1.ObjectStore) { s.Status.UsedBy = s.Status.UsedBy[1:] }, false, []string{"a"}},
		{"the cold tier mark removed", func(s *shalev1.ObjectStore) { s.Status.UsedBy[1].ColdTier = false }, false, []string{"b"}},
		{"all entries removed", func(s *shalev1.ObjectStore) { s.Status.UsedBy = nil }, false, []string{"a", "b"}},
		{"spec changed", func(s *shalev1.ObjectStore) { s.Generation = 2 }, true, nil},
		{"unreachable", func(s *shalev1.ObjectStore) {
			s.Status.Conditions = []metav1.Condition{reachable(metav1.ConditionFalse, shalev1.ReasonListFailed, 1)}
		}, true, nil},
		{"checked for a new generation", func(s *shalev1.ObjectStore) {
			s.Status.Conditions = []metav1.Condition{reachable(metav1.ConditionTrue, shalev1.ReasonReachable, 2)}
		}, true, nil},
		{"message changed", func(s *shalev1.ObjectStore) { s.Status.Conditions[0].Message = "other" }, true, nil},
		{"condition gone", func(s *shalev1.ObjectStore) { s.Status.Conditions = nil }, true, nil},
		{"being deleted", func(s *shalev1.ObjectStore) { s.DeletionTimestamp = &now }, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.edit(cur)
			ch := objectStoreChange(old, cur)
			if ch.all != tc.all || !slices.Equal(ch.users, tc.users) {
				t.Errorf("got all=%v users=%v, want all=%v users=%v", ch.all, ch.users, tc.all, tc.users)
			}
		})
	}
}

// TestStoreChecksAtRest: with databases ready and nothing changing, the
// periodic checks of their ObjectStore (each writes its lastCheckTime)
// reconcile none of them; a change of reachability still reaches every
// one, and a usedBy entry removed by hand is written back.
func TestStoreChecksAtRest(t *testing.T) {
	counter := &requestCounter{counts: map[string]int{}}
	h := startOperatorAs(t, testOptions(), func(env *testenv.Env) *rest.Config {
		cfg := rest.CopyConfig(env.Config)
		cfg.Wrap(counter.wrap)
		return cfg
	})
	ns := h.namespace("at-rest")
	sec, store, sample := h.samples(ns)
	h.create(sec, store)
	names := []string{"one", "two", "three"}
	for _, name := range names {
		db := sample.DeepCopy()
		db.Name = name
		h.create(db)
	}
	for _, name := range names {
		db := h.waitDB(ns, name, "primary created", func(db *shalev1.RocksDB) (bool, string) {
			return db.Status.CurrentPrimary != "", "no primary yet"
		})
		h.setPod(ns, db.Status.CurrentPrimary, corev1.PodRunning, true, time.Now())
	}
	for _, name := range names {
		h.waitDB(ns, name, "Ready", func(db *shalev1.RocksDB) (bool, string) {
			return condIs(db, shalev1.ConditionReady, metav1.ConditionTrue, ""), "not Ready"
		})
	}

	// checks waits for n more checks of the store (testOptions: every 2 s).
	checks := func(n int) {
		t.Helper()
		var last time.Time
		seen := -1
		eventually(t, fmt.Sprintf("%d checks of the store", n), func() (bool, string) {
			var os shalev1.ObjectStore
			if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
				return false, err.Error()
			}
			if at := os.Status.LastCheckTime; at != nil && !at.Time.Equal(last) {
				last = at.Time
				seen++
			}
			return seen >= n, fmt.Sprintf("%d checks", seen)
		})
	}
	// One check for the reconciles that followed Ready to settle, then
	// the requests of three.
	checks(1)
	counter.reset()
	checks(3)
	reqs, _ := counter.reset()
	// Every reconcile reads its RocksDB from the API server (patchStatus).
	if n := reqs["GET rocksdbs"]; n > 0 {
		t.Errorf("3 checks of the store at rest made the operator read its RocksDBs %d times (reconciled them); requests: %v", n, reqs)
	}

	// Reachability still reaches every database.
	h.minio.Stop()
	for _, name := range names {
		h.waitDB(ns, name, "store unreachable", func(db *shalev1.RocksDB) (bool, string) {
			return condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionFalse, ""), "still reachable"
		})
	}
	h.minio.Restart(t)
	for _, name := range names {
		h.waitDB(ns, name, "store reachable again", func(db *shalev1.RocksDB) (bool, string) {
			return condIs(db, shalev1.ConditionObjectStoreReachable, metav1.ConditionTrue, ""), "still unreachable"
		})
	}

	// An entry removed by hand: its database writes it back.
	if err := patchStatus(h.ctx, h.c, h.c, store, func(cur *shalev1.ObjectStore) error {
		cur.Status.UsedBy = slices.DeleteFunc(cur.Status.UsedBy, func(u shalev1.StoreUser) bool { return u.Name == "two" })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two back in usedBy", func() (bool, string) {
		var os shalev1.ObjectStore
		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(store), &os); err != nil {
			return false, err.Error()
		}
		return hasUser(os.Status.UsedBy, shalev1.StoreUser{Name: "two"}), fmt.Sprintf("usedBy %v", os.Status.UsedBy)
	})
}
