package kvserver

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/auth"
	"github.com/shale-rocks/shale/internal/engine"
)

func setTiering(kv kvv1.KVClient, d time.Duration) (*kvv1.SetTieringResponse, error) {
	return kv.SetTiering(context.Background(), &kvv1.SetTieringRequest{ColdAfter: durationpb.New(d)})
}

func tieredPrimary(db *engine.DB) Info {
	return Info{Role: kvv1.Role_ROLE_PRIMARY, DB: "file:///db/orders", SetColdAfter: db.SetColdAfter, ColdTier: true}
}

// Who may change a primary's cold-after: an admin client and the operator
// (which applies spec.tiering.coldAfter), nobody else; and the change is
// what Status reports next.
func TestSetTieringRoles(t *testing.T) {
	p := newTestPKI(t)
	access := p.write("access.json", []byte(testAccess))
	sec, err := Secure(auth.ServerConfig{TLS: p.issue("primary", ordersPrimary), AccessFile: access}, "127.0.0.1:0", auth.KindPrimary, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	s := serveInfo(t, "127.0.0.1:0", sec, tieredPrimary)
	operator := auth.Identity{Namespace: "shale-system", Kind: auth.KindOperator}
	for _, tc := range []struct {
		name string
		id   auth.Identity
		code codes.Code
		msg  string
	}{
		{"reader", ordersReader, codes.PermissionDenied, "SetTiering needs role admin"},
		{"writer", ordersWriter, codes.PermissionDenied, "SetTiering needs role admin"},
		{"secondary of the database", ordersSecondary, codes.PermissionDenied, "SetTiering needs role admin"},
		{"writer of another database", usersWriter, codes.PermissionDenied, "has role none"},
		{"admin", ordersAdmin, codes.OK, ""},
		{"operator", operator, codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue(tc.name, tc.id)}))
			want := 2 * time.Hour
			if tc.id.Kind == auth.KindOperator {
				want = 3 * time.Hour
			}
			_, err := setTiering(kv, want)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v; want %s with %q", err, tc.code, tc.msg)
			}
			if tc.code != codes.OK {
				return
			}
			st, err := kv.Status(context.Background(), &kvv1.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetColdAfter().AsDuration(); got != want || !st.ColdTier {
				t.Fatalf("Status after SetTiering(%s): cold_after %s, cold_tier %v", want, got, st.ColdTier)
			}
		})
	}
	// The operator still reads no data.
	kv := kvv1.NewKVClient(connect(t, s.ep.Addr(), auth.ClientConfig{TLS: p.issue("operator", operator)}))
	if err := get(kv); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator's Get: %v, want PermissionDenied", err)
	}
}

// What SetTiering refuses, and why, in words that name the fix.
func TestSetTieringRefusals(t *testing.T) {
	tiered := kvv1.NewKVClient(connect(t, serveInfo(t, "127.0.0.1:0", nil, tieredPrimary).ep.Addr(), auth.ClientConfig{}))
	noCold := kvv1.NewKVClient(connect(t, serveInfo(t, "127.0.0.1:0", nil, func(db *engine.DB) Info {
		return Info{Role: kvv1.Role_ROLE_PRIMARY, SetColdAfter: db.SetColdAfter}
	}).ep.Addr(), auth.ClientConfig{}))
	secondary := kvv1.NewKVClient(connect(t, serveInfo(t, "127.0.0.1:0", nil, func(*engine.DB) Info {
		return Info{Role: kvv1.Role_ROLE_SECONDARY}
	}).ep.Addr(), auth.ClientConfig{}))
	for _, tc := range []struct {
		name string
		kv   kvv1.KVClient
		d    time.Duration
		code codes.Code
		msg  string
	}{
		{"under a second", tiered, 500 * time.Millisecond, codes.InvalidArgument, "under 1s"},
		{"negative", tiered, -time.Minute, codes.InvalidArgument, "negative"},
		{"on without a cold tier", noCold, time.Hour, codes.FailedPrecondition, "restart it with --cold-db"},
		{"off without a cold tier", noCold, 0, codes.OK, ""},
		{"a secondary", secondary, time.Hour, codes.FailedPrecondition, "call SetTiering on the primary"},
		{"on", tiered, time.Hour, codes.OK, ""},
		{"changed", tiered, 90 * time.Second, codes.OK, ""},
		{"off", tiered, 0, codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := setTiering(tc.kv, tc.d)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("got %v; want %s with %q", err, tc.code, tc.msg)
			}
		})
	}
	st, err := tiered.Status(context.Background(), &kvv1.StatusRequest{})
	if err != nil || st.ColdAfter != nil {
		t.Fatalf("Status after turning tiering off: cold_after %v, %v; want none", st.GetColdAfter(), err)
	}
}
