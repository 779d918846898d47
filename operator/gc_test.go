package operator

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

func TestClassifyDir(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	const (
		grace   = 24 * time.Hour
		cluster = "c0ffee00-0000-4000-8000-000000000000"
		uid     = types.UID("0a1b2c3d-0000-4000-8000-00000000abcd")
		other   = types.UID("99999999-0000-4000-8000-000000000000")
	)
	rec := func(mod func(*dirOwnerRecord)) *dirOwnerRecord {
		r := &dirOwnerRecord{Cluster: cluster, Namespace: "ns", Name: "orders", UID: uid, ReclaimPolicy: shalev1.ReclaimDelete}
		if mod != nil {
			mod(r)
		}
		return r
	}
	dir := func(r *dirOwnerRecord, age time.Duration) dirObservation {
		return dirObservation{Namespace: "ns", Name: "orders", UID: uid, Objects: 3, Bytes: 100, Newest: now.Add(-age), Record: r}
	}
	live := map[types.UID]bool{other: true}
	for _, tc := range []struct {
		name string
		d    dirObservation
		live map[types.UID]bool
		want verdict
	}{
		{"orphan", dir(rec(nil), 25*time.Hour), live, orphan},
		{"orphan-at-grace", dir(rec(nil), grace), live, orphan},
		{"orphan-record-only", dirObservation{Namespace: "ns", Name: "orders", UID: uid, Newest: now.Add(-48 * time.Hour), Record: rec(nil)}, live, orphan},
		{"live", dir(rec(nil), 48*time.Hour), map[types.UID]bool{uid: true}, keepLive},
		// Live wins over everything, even a record naming another cluster.
		{"live-foreign-record", dir(rec(func(r *dirOwnerRecord) { r.Cluster = "elsewhere" }), 48*time.Hour), map[types.UID]bool{uid: true}, keepLive},
		{"young", dir(rec(nil), time.Hour), live, keepYoung},
		{"young-just", dir(rec(nil), grace-time.Second), live, keepYoung},
		{"no-newest", dirObservation{Namespace: "ns", Name: "orders", UID: uid, Record: rec(nil)}, live, keepYoung},
		{"future-mtime", dir(rec(nil), -time.Hour), live, keepYoung},
		{"retain", dir(rec(func(r *dirOwnerRecord) { r.ReclaimPolicy = shalev1.ReclaimRetain }), 48*time.Hour), live, keepRetained},
		{"policy-unknown", dir(rec(func(r *dirOwnerRecord) { r.ReclaimPolicy = "" }), 48*time.Hour), live, keepRetained},
		{"no-record", dir(nil, 48*time.Hour), live, keepUnclaimed},
		{"unreadable-record", dirObservation{Namespace: "ns", Name: "orders", UID: uid, Newest: now.Add(-48 * time.Hour), RecordErr: errors.New("bad JSON")}, live, keepUnclaimed},
		{"foreign-cluster", dir(rec(func(r *dirOwnerRecord) { r.Cluster = "elsewhere" }), 48*time.Hour), live, keepUnclaimed},
		{"record-other-uid", dir(rec(func(r *dirOwnerRecord) { r.UID = other }), 48*time.Hour), nil, keepUnclaimed},
		{"record-other-name", dir(rec(func(r *dirOwnerRecord) { r.Name = "invoices" }), 48*time.Hour), nil, keepUnclaimed},
		{"record-other-namespace", dir(rec(func(r *dirOwnerRecord) { r.Namespace = "prod" }), 48*time.Hour), nil, keepUnclaimed},
		{"no-live-list", dir(rec(nil), 48*time.Hour), nil, orphan},
		// Adopted (bootstrap.fromExistingPath): live while the adopter
		// exists, whatever the record's policy; an orphan again after.
		{"adopted-live", dir(rec(func(r *dirOwnerRecord) { r.AdoptedBy = &recordRef{Name: "orders2", UID: other} }), 48*time.Hour), live, keepLive},
		{"adopted-retain-live", dir(rec(func(r *dirOwnerRecord) {
			r.ReclaimPolicy, r.AdoptedBy = shalev1.ReclaimRetain, &recordRef{Name: "orders2", UID: other}
		}), 48*time.Hour), live, keepLive},
		{"adopter-gone", dir(rec(func(r *dirOwnerRecord) { r.AdoptedBy = &recordRef{Name: "orders2", UID: other} }), 48*time.Hour), nil, orphan},
		{"adopter-gone-retain", dir(rec(func(r *dirOwnerRecord) {
			r.ReclaimPolicy, r.AdoptedBy = shalev1.ReclaimRetain, &recordRef{Name: "orders2", UID: other}
		}), 48*time.Hour), nil, keepRetained},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := classifyDir(tc.d, tc.live, cluster, now, grace)
			if got != tc.want {
				t.Errorf("classifyDir = %v (%s), want %v", got, why, tc.want)
			}
			if why == "" {
				t.Errorf("no reason given")
			}
		})
	}
}

func TestParseDirName(t *testing.T) {
	const uid = "0a1b2c3d-0000-4000-8000-00000000abcd"
	for _, tc := range []struct {
		in   string
		name string
		ok   bool
	}{
		{"orders-" + uid, "orders", true},
		{"a-b-c-" + uid, "a-b-c", true},
		{"x-" + uid, "x", true},
		{uid, "", false},
		{"-" + uid, "", false},
		{"orders_" + uid, "", false},
		{"Orders-" + uid, "", false},
		{"orders-" + uid[:35], "", false},
		{"orders-0A1B2C3D-0000-4000-8000-00000000ABCD", "", false},
		{"orders-" + uid + "x", "", false},
		{"orders-" + uid + ".owner.json", "", false},
		{"", "", false},
	} {
		name, u, ok := parseDirName(tc.in)
		if ok != tc.ok || name != tc.name || (ok && string(u) != uid) {
			t.Errorf("parseDirName(%q) = %q, %q, %v; want %q, %v", tc.in, name, u, ok, tc.name, tc.ok)
		}
	}
	for in, want := range map[string]bool{
		"default/": true, "kube-system/": true, ".shale-operator/": false, "_backups/": false, // backups live there (backup_job.go)
		"default": false, "Default/": false, "a_b/": false,
	} {
		if _, ok := isNamespaceDir(in); ok != want {
			t.Errorf("isNamespaceDir(%q) = %v, want %v", in, ok, want)
		}
	}
	// The epoch claims inside a database are read with the storage
	// layer's layout (internal/shalefs/layout, TestEpochKeyOfOperator).
}

// The collector judges only the namespaces its operator watches: a
// database of another namespace is invisible to it, so its directory would
// look orphaned.
func TestNamespaceScopeCovers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope namespaceScope
		ns    string
		want  bool
	}{
		{"all-namespaces", nil, "prod", true},
		{"all-namespaces-empty-list", namespaceScope{}, "kube-system", true},
		{"watched", namespaceScope{"a", "b"}, "b", true},
		{"not-watched", namespaceScope{"a", "b"}, "c", false},
		{"prefix-is-not-a-match", namespaceScope{"team"}, "team-a", false},
		{"case-matters", namespaceScope{"a"}, "A", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.scope.covers(tc.ns); got != tc.want {
				t.Errorf("%v.covers(%q) = %v, want %v", tc.scope, tc.ns, got, tc.want)
			}
		})
	}
}

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"a", []string{"a"}, ""},
		{"team-a, team-b", []string{"team-a", "team-b"}, ""},
		{"a,,b", nil, `"" is not a namespace name`},
		{"Team", nil, `"Team" is not a namespace name`},
		{"a,a", nil, "names a twice"},
	} {
		got, err := ParseNamespaces(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseNamespaces(%q): %v", tc.in, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseNamespaces(%q): error %v, want one with %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && !slices.Equal(got, tc.want):
			t.Errorf("ParseNamespaces(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
