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
	err = RequireKV(id, RoleWrite, "/shale.kv.v1.KV/Ingest")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role admin") {
		t.Errorf("write role on Ingest: %v, want PermissionDenied naming admin", err)
	}
}

func TestRequireScheduler(t *testing.T) {
	self := Identity{Namespace: "ns", Kind: KindScheduler, Name: "pool"}
	primary := Identity{Namespace: "ns", Kind: KindPrimary, Name: "db", Database: "s3://b/ns/db"}
	worker := Identity{Namespace: "ns", Kind: KindWorker, Name: "pool"}
	for _, tc := range []struct {
		name   string
		id     Identity
		method string
		ok     bool
	}{
		{"primary submits", primary, "/shale.compactor.v1.Compactor/Compact", true},
		{"primary of another namespace submits", Identity{Namespace: "x", Kind: KindPrimary, Name: "db"}, "/shale.compactor.v1.Compactor/Compact", false},
		{"client submits", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "ops"}, "/shale.compactor.v1.Compactor/Compact", false},
		{"worker submits", worker, "/shale.compactor.v1.Compactor/Compact", false},
		{"worker leases", worker, "/shale.compactor.v1.Compactor/Lease", true},
		{"worker completes", worker, "/shale.compactor.v1.Compactor/Complete", true},
		{"worker fails a job", worker, "/shale.compactor.v1.Compactor/Fail", true},
		{"worker heartbeats", worker, "/shale.compactor.v1.Compactor/Heartbeat", true},
		{"worker of another pool leases", Identity{Namespace: "ns", Kind: KindWorker, Name: "other"}, "/shale.compactor.v1.Compactor/Lease", false},
		{"worker of another namespace completes", Identity{Namespace: "x", Kind: KindWorker, Name: "pool"}, "/shale.compactor.v1.Compactor/Complete", false},
		{"primary poses as a worker", primary, "/shale.compactor.v1.Compactor/Fail", false},
		{"client poses as a worker", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, "/shale.compactor.v1.Compactor/Complete", false},
		{"operator reads stats", Identity{Namespace: "shale-system", Kind: KindOperator}, "/shale.compactor.v1.Compactor/Stats", true},
		{"worker reads stats", worker, "/shale.compactor.v1.Compactor/Stats", true},
		{"client reads stats", Identity{Namespace: "ns", Kind: KindClient, Name: "db", Client: "app"}, "/shale.compactor.v1.Compactor/Stats", false},
		{"operator submits", Identity{Namespace: "shale-system", Kind: KindOperator}, "/shale.compactor.v1.Compactor/Compact", false},
		{"reflection", worker, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", false},
		{"health", Identity{}, "/grpc.health.v1.Health/Check", true},
	} {
		err := RequireScheduler(self, tc.id, tc.method)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: code %s, want PermissionDenied", tc.name, status.Code(err))
		}
	}
}

func TestCheckSubmission(t *testing.T) {
	primary := Identity{Namespace: "ns", Kind: KindPrimary, Name: "db", Database: "s3://b/ns/db"}
	if err := CheckSubmission(primary, "s3://b/ns/db"); err != nil {
		t.Errorf("own database refused: %v", err)
	}
	for _, db := range []string{"s3://b/ns/victim", "s3://b/ns/db/../victim", "s3://b/ns/db2", ""} {
		if err := CheckSubmission(primary, db); status.Code(err) != codes.PermissionDenied {
			t.Errorf("submission for %q: %v, want PermissionDenied", db, err)
		}
	}
	if err := CheckSubmission(Identity{Namespace: "ns", Kind: KindWorker, Name: "p"}, "s3://b/ns/db"); err == nil {
		t.Error("a worker submitted")
	}
	if err := CheckSubmission(Identity{Namespace: "ns", Kind: KindPrimary, Name: "db"}, ""); err == nil {
		t.Error("a primary certificate naming no database submitted for the empty URL")
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
