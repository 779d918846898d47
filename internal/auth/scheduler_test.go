package auth

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRequireScheduler: who may call which method of a compactor
// scheduler (docs/compaction.md, "Security").
func TestRequireScheduler(t *testing.T) {
	self := Identity{Namespace: "ns", Kind: KindScheduler, Name: "pool"}
	primary := Identity{Namespace: "ns", Kind: KindPrimary, Name: "db", Database: "s3://b/ns/db"}
	worker := Identity{Namespace: "ns", Kind: KindWorker, Name: "pool"}
	const svc = "/shale.compactor.v1.Compactor/"
	for _, tc := range []struct {
		name   string
		id     Identity
		method string
		ok     bool
		says   string // in the refusal
	}{
		{"a primary of the namespace submits", primary, svc + "Compact", true, ""},
		{"a primary of another namespace", Identity{Namespace: "other", Kind: KindPrimary, Name: "db", Database: "s3://b/ns/db"}, svc + "Compact", false, "only a primary of namespace ns"},
		{"a worker does not submit", worker, svc + "Compact", false, "may not submit compactions"},
		{"a client does not submit", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, svc + "Compact", false, "may not submit"},
		{"the operator does not submit", Identity{Kind: KindOperator, Namespace: "shale-system"}, svc + "Compact", false, "may not submit"},
		{"a worker of the pool leases", worker, svc + "Lease", true, ""},
		{"a worker of the pool completes", worker, svc + "Complete", true, ""},
		{"a worker of the pool fails", worker, svc + "Fail", true, ""},
		{"a worker of the pool heartbeats", worker, svc + "Heartbeat", true, ""},
		{"a worker of another pool", Identity{Namespace: "ns", Kind: KindWorker, Name: "other"}, svc + "Complete", false, "only a worker of compactor pool ns/pool"},
		{"a worker of the pool's name in another namespace", Identity{Namespace: "other", Kind: KindWorker, Name: "pool"}, svc + "Lease", false, "only a worker of compactor pool ns/pool"},
		{"a primary does not lease", primary, svc + "Lease", false, "may not Lease jobs"},
		{"a primary does not fail jobs", primary, svc + "Fail", false, "may not Fail jobs"},
		{"a scheduler does not lease", self, svc + "Lease", false, "only a worker"},
		{"the operator reads stats", Identity{Kind: KindOperator, Namespace: "shale-system"}, svc + "Stats", true, ""},
		{"a primary of the namespace reads stats", primary, svc + "Stats", true, ""},
		{"a worker of another pool of the namespace reads stats", Identity{Namespace: "ns", Kind: KindWorker, Name: "other"}, svc + "Stats", true, ""},
		{"a client does not read stats", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, svc + "Stats", false, "only the operator and Shale components"},
		{"another namespace does not read stats", Identity{Namespace: "other", Kind: KindPrimary, Name: "db"}, svc + "Stats", false, "may not read compactor stats"},
		{"health is open", Identity{}, "/grpc.health.v1.Health/Check", true, ""},
		{"reflection is served to nobody", Identity{Kind: KindOperator, Namespace: "shale-system"}, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", false, "is not served to anyone"},
		{"a method added later is closed", worker, svc + "Drain", false, "is not served to anyone"},
	} {
		err := RequireScheduler(self, tc.id, tc.method)
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want PERMISSION_DENIED saying %q", tc.name, err, tc.says)
		}
	}
}

// TestCheckSubmission: a primary submits compactions only for the
// database its certificate names, exactly.
func TestCheckSubmission(t *testing.T) {
	primary := Identity{Namespace: "ns", Kind: KindPrimary, Name: "db", Database: "s3://b/ns/db"}
	for _, tc := range []struct {
		name string
		id   Identity
		db   string
		ok   bool
	}{
		{"its own database", primary, "s3://b/ns/db", true},
		{"another database", primary, "s3://b/ns/victim", false},
		{"a prefix of its own", primary, "s3://b/ns", false},
		{"below its own", primary, "s3://b/ns/db/x", false},
		{"a primary whose certificate names none", Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, "", false},
		{"a worker", Identity{Namespace: "ns", Kind: KindWorker, Name: "pool"}, "s3://b/ns/db", false},
	} {
		err := CheckSubmission(tc.id, tc.db)
		if tc.ok != (err == nil) || err != nil && status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
