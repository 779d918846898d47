package auth

import (
	"fmt"
	"strings"
)

// Role is what a client may do. Each role includes the ones below it.
type Role int

// The roles, weakest first.
const (
	RoleNone  Role = iota // health checks only
	RoleRead              // Get, MultiGet, Scan, Status, Watch
	RoleWrite             // + Put, Delete, Write, Load
	RoleAdmin             // + Flush, Compact, Ingest, SetTiering, reflection
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses read, write or admin.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(s) {
	case "read":
		return RoleRead, nil
	case "write":
		return RoleWrite, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("role %q: want read, write or admin", s)
}

// kvRoles is the role each KV method needs.
var kvRoles = map[string]Role{
	"Get": RoleRead, "MultiGet": RoleRead, "Scan": RoleRead, "Status": RoleRead, "Watch": RoleRead,
	"Put": RoleWrite, "Delete": RoleWrite, "Write": RoleWrite, "Load": RoleWrite,
	"Flush": RoleAdmin, "Compact": RoleAdmin, "Ingest": RoleAdmin, "SetTiering": RoleAdmin,
	"ListCheckpoints": RoleRead, "Checkpoint": RoleAdmin, "DeleteCheckpoint": RoleAdmin,
	"StepDown": RoleAdmin,
}

// MethodRole is the role a gRPC method of a KV server needs. Health
// checks need none (probes and load balancers carry no identity);
// reflection and anything not listed need admin, so a method added
// later is closed until someone decides otherwise.
func MethodRole(fullMethod string) Role {
	svc, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	switch svc {
	case "grpc.health.v1.Health":
		return RoleNone
	case "shale.kv.v1.KV":
		if r, ok := kvRoles[method]; ok {
			return r
		}
	}
	return RoleAdmin
}
