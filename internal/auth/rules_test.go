package auth

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want Identity
		err  string
	}{
		{"shale://ns/primary/db", Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, ""},
		{"shale://ns/secondary/db", Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"}, ""},
		{"shale://ns/client/db/app", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, ""},
		{"shale://ns/scheduler/pool", Identity{Namespace: "ns", Kind: KindScheduler, Name: "pool"}, ""},
		{"shale://ns/worker/pool", Identity{Namespace: "ns", Kind: KindWorker, Name: "pool"}, ""},
		{"shale://shale-system/operator", Identity{Namespace: "shale-system", Kind: KindOperator}, ""},
		{"spiffe://ns/primary/db", Identity{}, "scheme"},
		{"shale:///primary/db", Identity{}, "want shale://"},
		{"shale://ns/root/db", Identity{}, "unknown kind"},
		{"shale://ns/client/db", Identity{}, "3 path segments"},
		{"shale://ns/primary/db/extra", Identity{}, "2 path segments"},
		{"shale://ns/primary/", Identity{}, "empty path segment"},
		{"shale://ns/operator/x", Identity{}, "1 path segments"},
		{"shale://ns/primary/db?role=admin", Identity{}, "want shale://"},
	} {
		got, err := ParseURI(mustURL(tc.uri))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one containing %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.uri, got, err, tc.want)
		}
		if back := got.URI().String(); back != tc.uri {
			t.Errorf("%s: URI() round-trips to %s", tc.uri, back)
		}
	}
}

func TestFromCertificate(t *testing.T) {
	for _, tc := range []struct {
		name string
		uris []string
		want Identity
		err  string
	}{
		{"client", []string{"shale://ns/client/db/app"}, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app", Via: "certificate"}, ""},
		{"primary with its database", []string{"shale://ns/primary/db", "s3://bucket/p/ns/db"}, Identity{Namespace: "ns", Kind: KindPrimary, Name: "db", Database: "s3://bucket/p/ns/db", Via: "certificate"}, ""},
		{"primary without a database", []string{"shale://ns/primary/db"}, Identity{}, "exactly one database URL"},
		{"primary with two databases", []string{"shale://ns/primary/db", "s3://b/x", "s3://b/y"}, Identity{}, "exactly one database URL"},
		{"no identity", []string{"s3://b/x"}, Identity{}, "names no shale://"},
		{"two identities", []string{"shale://ns/client/db/a", "shale://ns/client/db/b"}, Identity{}, "more than one"},
	} {
		c := &x509.Certificate{}
		for _, u := range tc.uris {
			c.URIs = append(c.URIs, mustURL(u))
		}
		got, err := FromCertificate(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestMethodRole(t *testing.T) {
	for m, want := range map[string]Role{
		"/grpc.health.v1.Health/Check":                              RoleNone,
		"/grpc.health.v1.Health/Watch":                              RoleNone,
		"/shale.kv.v1.KV/Get":                                       RoleRead,
		"/shale.kv.v1.KV/MultiGet":                                  RoleRead,
		"/shale.kv.v1.KV/Scan":                                      RoleRead,
		"/shale.kv.v1.KV/Status":                                    RoleRead,
		"/shale.kv.v1.KV/Watch":                                     RoleRead,
		"/shale.kv.v1.KV/Put":                                       RoleWrite,
		"/shale.kv.v1.KV/Delete":                                    RoleWrite,
		"/shale.kv.v1.KV/Write":                                     RoleWrite,
		"/shale.kv.v1.KV/Load":                                      RoleWrite,
		"/shale.kv.v1.KV/Flush":                                     RoleAdmin,
		"/shale.kv.v1.KV/Compact":                                   RoleAdmin,
		"/shale.kv.v1.KV/Ingest":                                    RoleAdmin,
		"/shale.kv.v1.KV/SetTiering":                                RoleAdmin,
		"/shale.kv.v1.KV/ListCheckpoints":                           RoleRead,
		"/shale.kv.v1.KV/Checkpoint":                                RoleAdmin,
		"/shale.kv.v1.KV/DeleteCheckpoint":                          RoleAdmin,
		"/shale.kv.v1.KV/StepDown":                                  RoleAdmin,
		"/shale.kv.v1.KV/NewMethod":                                 RoleAdmin, // closed until decided
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": RoleAdmin,
	} {
		if got := MethodRole(m); got != want {
			t.Errorf("%s: %s, want %s", m, got, want)
		}
	}
}

func TestKVRole(t *testing.T) {
	self := Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}
	access := &AccessList{Clients: []ClientAccess{{Name: "reader", Role: "read"}, {Name: "app", Role: "write"}, {Name: "ops", Role: "admin"}}}
	for _, tc := range []struct {
		id   Identity
		want Role
	}{
		{Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "reader"}, RoleRead},
		{Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, RoleWrite},
		{Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "ops"}, RoleAdmin},
		{Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "unlisted"}, RoleNone},
		{Identity{Namespace: "ns", Kind: KindClient, Name: "other-db", Client: "app"}, RoleNone},
		{Identity{Namespace: "other-ns", Kind: KindClient, Name: "db", Client: "app"}, RoleNone},
		{Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"}, RoleRead},
		{Identity{Namespace: "ns", Kind: KindSecondary, Name: "other-db"}, RoleNone},
		{Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, RoleNone},
		{Identity{Namespace: "ns", Kind: KindWorker, Name: "db"}, RoleNone},
		{Identity{Namespace: "shale-system", Kind: KindOperator}, RoleRead},
	} {
		if got := KVRole(self, tc.id, access); got != tc.want {
			t.Errorf("%s: role %s, want %s", tc.id, got, tc.want)
		}
	}
	if got := KVRole(self, Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, nil); got != RoleNone {
		t.Errorf("no access list: role %s, want none", got)
	}
}

func TestRequireKV(t *testing.T) {
	id := Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}
	if err := RequireKV(id, RoleWrite, "/shale.kv.v1.KV/Put"); err != nil {
		t.Errorf("write role refused Put: %v", err)
	}
	err := RequireKV(id, RoleRead, "/shale.kv.v1.KV/Put")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role write") {
		t.Errorf("read role on Put: %v, want PermissionDenied naming write", err)
	}
	op := Identity{Namespace: "shale-system", Kind: KindOperator}
	if err := RequireKV(op, KVRole(Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, op, nil), "/shale.kv.v1.KV/Status"); err != nil {
		t.Errorf("the operator's Status: %v", err)
	}
	// SetTiering: the operator applies spec.tiering.coldAfter live, with
	// no other admin method.
	// The checkpoint methods: it keeps Checkpoint resources.
	// StepDown: it runs switchovers (RFC 0012).
	for _, m := range []string{"SetTiering", "Checkpoint", "ListCheckpoints", "DeleteCheckpoint", "StepDown"} {
		if err := RequireKV(op, KVRole(Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, op, nil), "/shale.kv.v1.KV/"+m); err != nil {
			t.Errorf("the operator's %s: %v", m, err)
		}
	}
	for _, m := range []string{"/shale.kv.v1.KV/Get", "/shale.kv.v1.KV/Scan", "/shale.kv.v1.KV/MultiGet", "/shale.kv.v1.KV/Watch", "/shale.kv.v1.KV/Put",
		"/shale.kv.v1.KV/Flush", "/shale.kv.v1.KV/Compact", "/shale.kv.v1.KV/Ingest", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"} {
		if err := RequireKV(op, RoleRead, m); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Status, SetTiering, StepDown and the checkpoint methods only") {
			t.Errorf("the operator's %s: %v, want PermissionDenied (Status, SetTiering, StepDown and the checkpoint methods only)", m, err)
		}
	}
	// Everyone else needs admin for SetTiering: a writer or a secondary
	// may not move the database's data between tiers.
	for _, tc := range []struct {
		role Role
		ok   bool
	}{{RoleRead, false}, {RoleWrite, false}, {RoleAdmin, true}} {
		err := RequireKV(id, tc.role, "/shale.kv.v1.KV/SetTiering")
		if tc.ok && err != nil || !tc.ok && (status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "SetTiering needs role admin")) {
			t.Errorf("role %s on SetTiering: %v, want allowed=%v (else PermissionDenied naming admin)", tc.role, err, tc.ok)
		}
	}
	sec := Identity{Namespace: "ns", Kind: KindSecondary, Name: "db"}
	if err := RequireKV(sec, KVRole(Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, sec, nil), "/shale.kv.v1.KV/SetTiering"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a secondary's SetTiering: %v, want PermissionDenied", err)
	}
	err = RequireKV(id, RoleWrite, "/shale.kv.v1.KV/Ingest")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role admin") {
		t.Errorf("write role on Ingest: %v, want PermissionDenied naming admin", err)
	}
}

func TestAccessList(t *testing.T) {
	good := `{"clients":[{"name":"app","role":"write","tokenSHA256s":["` + TokenDigest("s3cret") + `"]},{"name":"ro","role":"read"}]}`
	a, err := ParseAccessList([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := a.TokenClient("s3cret"); !ok || name != "app" {
		t.Errorf("token of app: %q %v", name, ok)
	}
	for _, tok := range []string{"", "s3cre", "s3cret ", "other"} {
		if _, ok := a.TokenClient(tok); ok {
			t.Errorf("token %q accepted", tok)
		}
	}
	if a.Role("ro") != RoleRead || a.Role("app") != RoleWrite || a.Role("nobody") != RoleNone {
		t.Error("roles wrong")
	}
	for _, bad := range []struct{ json, err string }{
		{`{"clients":[{"name":"","role":"read"}]}`, "no name"},
		{`{"clients":[{"name":"a","role":"root"}]}`, "want read, write or admin"},
		{`{"clients":[{"name":"a","role":"read"},{"name":"a","role":"write"}]}`, "listed twice"},
		{`{"clients":[{"name":"a","role":"read","tokenSHA256s":["abc"]}]}`, "not a hex SHA-256"},
		{`{"clients":`, "access file"},
	} {
		if _, err := ParseAccessList([]byte(bad.json)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: err %v, want %q", bad.json, err, bad.err)
		}
	}
}

func TestServerConfigCheck(t *testing.T) {
	tlsFiles := TLSFiles{Cert: "c", Key: "k", CA: "ca"}
	for _, tc := range []struct {
		name   string
		cfg    ServerConfig
		listen string
		err    string
	}{
		{"loopback plaintext", ServerConfig{}, "127.0.0.1:7070", ""},
		{"localhost plaintext", ServerConfig{}, "localhost:7070", ""},
		{"ipv6 loopback plaintext", ServerConfig{}, "[::1]:7070", ""},
		{"all interfaces plaintext", ServerConfig{}, ":7070", "has no TLS"},
		{"public plaintext", ServerConfig{}, "10.0.0.1:7070", "has no TLS"},
		{"insecure by choice", ServerConfig{Insecure: true}, ":7070", ""},
		{"tls", ServerConfig{TLS: tlsFiles}, ":7070", ""},
		{"tls and insecure", ServerConfig{TLS: tlsFiles, Insecure: true}, ":7070", "drop it"},
		{"access file without tls", ServerConfig{AccessFile: "a", Insecure: true}, ":7070", "needs TLS"},
	} {
		err := tc.cfg.Check(tc.listen)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}
