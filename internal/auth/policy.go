package auth

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KVRole is the role id has on the KV servers (primary and secondaries)
// of database self (the server's own identity): the database's
// secondaries read (they follow the primary's Watch), the operator reads
// (Status), and a client of this database has the role its access list
// gives it. Everyone else has none: a certificate from the same CA for
// another database or namespace is worth nothing here.
func KVRole(self, id Identity, access *AccessList) Role {
	if id.Kind == KindOperator {
		return RoleRead
	}
	if id.Namespace != self.Namespace || id.Name != self.Name {
		return RoleNone
	}
	switch id.Kind {
	case KindSecondary:
		return RoleRead
	case KindClient:
		return access.Role(id.Client)
	}
	return RoleNone
}

// operatorKV are the KV methods the operator may call, whatever their
// role: Status (secondaries' lag, tiers), SetTiering (it applies
// spec.tiering.coldAfter to the running primary) and the checkpoint
// methods (it keeps Checkpoint resources and bootstraps clones), and
// StepDown (a switchover, RFC 0012). None reads or changes data: a stolen
// operator certificate can at most move data between the tiers, keep and
// release old states, or make the primary step down (a failover when no
// standby waits; it can delete the Pod anyway), losing nothing written. Admin, the role
// these need otherwise, would give it Flush, Compact and Ingest too.
var operatorKV = map[string]bool{
	"/shale.kv.v1.KV/Status": true, "/shale.kv.v1.KV/SetTiering": true,
	"/shale.kv.v1.KV/Checkpoint": true, "/shale.kv.v1.KV/ListCheckpoints": true, "/shale.kv.v1.KV/DeleteCheckpoint": true,
	"/shale.kv.v1.KV/StepDown": true,
}

// RequireKV refuses method unless role grants it, naming the role needed.
// The operator, whose identity every database trusts, gets operatorKV and
// health checks only: it never needs the data, so a stolen operator
// certificate reads none.
func RequireKV(id Identity, role Role, method string) error {
	need := MethodRole(method)
	if id.Kind == KindOperator && need > RoleNone {
		if operatorKV[method] {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "%s may call Status, SetTiering, StepDown and the checkpoint methods only; %s is not for the operator", id, shortMethod(method))
	}
	if role >= need {
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s has role %s; %s needs role %s", id, role, shortMethod(method), need)
}

// Scheduler methods, by who may call them.
var (
	schedulerPrimary = map[string]bool{"Compact": true}
	schedulerWorker  = map[string]bool{"Lease": true, "Heartbeat": true, "Complete": true, "Fail": true}
)

// RequireScheduler decides who may call a compactor scheduler (self):
// Compact only a primary of the scheduler's namespace (which database it
// may submit for is CheckSubmission's), the job methods only a worker of
// the same pool, Stats the operator and the namespace's components,
// health anyone. Everything else (reflection included) is refused.
func RequireScheduler(self, id Identity, method string) error {
	svc, m, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if svc == "grpc.health.v1.Health" {
		return nil
	}
	if svc == "shale.compactor.v1.Compactor" {
		switch {
		case schedulerPrimary[m]:
			if id.Kind == KindPrimary && id.Namespace == self.Namespace {
				return nil
			}
			return status.Errorf(codes.PermissionDenied, "%s may not submit compactions: only a primary of namespace %s may", id, self.Namespace)
		case schedulerWorker[m]:
			if id.Kind == KindWorker && id.Namespace == self.Namespace && id.Name == self.Name {
				return nil
			}
			return status.Errorf(codes.PermissionDenied, "%s may not %s jobs: only a worker of compactor pool %s/%s may", id, m, self.Namespace, self.Name)
		case m == "Stats":
			if id.Kind == KindOperator || id.Namespace == self.Namespace && id.Kind != KindClient {
				return nil
			}
			return status.Errorf(codes.PermissionDenied, "%s may not read compactor stats: only the operator and Shale components of namespace %s may", id, self.Namespace)
		}
	}
	return status.Errorf(codes.PermissionDenied, "%s: %s is not served to anyone", id, shortMethod(method))
}

// CheckSubmission refuses a compaction for any database but the one the
// submitting primary's certificate names: a primary cannot make workers
// open another database with the store's credentials.
func CheckSubmission(id Identity, db string) error {
	if id.Kind != KindPrimary {
		return status.Errorf(codes.PermissionDenied, "%s is not a primary", id)
	}
	if id.Database == "" || id.Database != db {
		return status.Errorf(codes.PermissionDenied, "%s may submit compactions only for %s, not %s", id, id.Database, db)
	}
	return nil
}

func shortMethod(m string) string {
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		return m[i+1:]
	}
	return m
}
