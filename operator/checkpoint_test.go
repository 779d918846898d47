package operator

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	shalev1 "github.com/shale-rocks/shale/api/v1alpha1"
)

// TestDecideCheckpoint: what a Checkpoint does before a request, with each
// answer of the primary, and when it is deleted.
func TestDecideCheckpoint(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ck := func(phase shalev1.CheckpointPhase, requested bool, expiresIn time.Duration) *shalev1.Checkpoint {
		c := &shalev1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "before-migration", UID: "0a1b2c3d-0000-4000-8000-00000000abcd"},
			Spec: shalev1.CheckpointSpec{Database: "orders"}}
		c.Status.Phase = phase
		if requested {
			c.Status.RequestedAt = &metav1.Time{Time: now.Add(-time.Minute)}
		}
		if expiresIn != 0 {
			c.Status.ExpiresAt = &metav1.Time{Time: now.Add(expiresIn)}
		}
		return c
	}
	ready := primaryView{Exists: true, Ready: true, Pod: "orders-primary-3", Epoch: 3}
	notReady := primaryView{Exists: true, Pod: "orders-primary-3", Epoch: 3, Why: "primary orders-primary-3 (epoch 3) is starting"}
	deleting := primaryView{Exists: true, Deleting: true}

	t.Run("plan", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			ck    *shalev1.Checkpoint
			db    primaryView
			call  bool
			phase shalev1.CheckpointPhase
			msg   string
			retry bool
		}{
			{"new, primary ready: ask", ck("", false, 0), ready, true, "", "", false},
			{"pending, asked before (outcome unknown): ask again", ck(shalev1.CheckpointPending, true, time.Hour), ready, true, "", "", false},
			{"no database", ck("", false, 0), primaryView{}, false, shalev1.CheckpointPending, "RocksDB orders does not exist in namespace ns", true},
			{"database being deleted", ck("", false, 0), deleting, false, shalev1.CheckpointFailed, "is being deleted", false},
			{"no ready primary", ck("", false, 0), notReady, false, shalev1.CheckpointPending, "waiting for a ready primary of RocksDB orders: primary orders-primary-3 (epoch 3) is starting", true},
			{"pending past its expiry", ck(shalev1.CheckpointPending, true, -time.Second), ready, false, shalev1.CheckpointExpired, "before the primary reported it created", false},
			{"ready, not expired: wake at expiry", ck(shalev1.CheckpointReady, true, time.Hour), ready, false, "", "", true},
			{"ready, no expiry", ck(shalev1.CheckpointReady, true, 0), notReady, false, "", "", false},
			{"ready, expired", ck(shalev1.CheckpointReady, true, 0*time.Second-time.Nanosecond), ready, false, shalev1.CheckpointExpired, "expired at", false},
			{"failed stays failed", ck(shalev1.CheckpointFailed, true, 0), ready, false, "", "", false},
			{"expired stays expired", ck(shalev1.CheckpointExpired, true, -time.Hour), ready, false, "", "", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := planCheckpoint(tc.ck, tc.db, now)
				if s.Call != tc.call || s.Phase != tc.phase || !strings.Contains(s.Message, tc.msg) || (s.Retry > 0) != tc.retry {
					t.Errorf("planCheckpoint = %+v; want call %v, phase %q, message with %q, retry %v", s, tc.call, tc.phase, tc.msg, tc.retry)
				}
			})
		}
	})

	t.Run("outcome", func(t *testing.T) {
		info := &kvv1.CheckpointInfo{Name: "before-migration", Id: "3-abc", RequestId: "0a1b2c3d-0000-4000-8000-00000000abcd", Epoch: 3, Sequence: 1234, Tables: 7, Bytes: 7000}
		for _, tc := range []struct {
			name  string
			info  *kvv1.CheckpointInfo
			err   error
			phase shalev1.CheckpointPhase
			msg   string
			retry bool
		}{
			{"created", info, nil, shalev1.CheckpointReady, "created by primary orders-primary-3 (epoch 3) at sequence 1234", false},
			{"deposed primary: the next one", nil, status.Error(codes.FailedPrecondition, "fenced by epoch 4"), shalev1.CheckpointPending, "no longer owns the database (fenced by epoch 4): nothing was created; asking the next primary", true},
			{"outcome unknown: same request id", nil, status.Error(codes.Unavailable, "outcome unknown"), shalev1.CheckpointPending, "may or may not have been created; asking again with the same request id", true},
			{"deadline: same request id", nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), shalev1.CheckpointPending, "asking again with the same request id", true},
			{"connection lost", nil, errors.New("connection reset"), shalev1.CheckpointPending, "asking again with the same request id", true},
			{"name taken by another", nil, status.Error(codes.AlreadyExists, "checkpoint before-migration exists"), shalev1.CheckpointFailed, "already has a checkpoint named before-migration, not made for this Checkpoint", false},
			{"invalid", nil, status.Error(codes.InvalidArgument, "expires is in the past"), shalev1.CheckpointFailed, "refused it: expires is in the past", false},
			{"old primary image", nil, status.Error(codes.Unimplemented, "unknown method"), shalev1.CheckpointPending, "does not implement Checkpoint", true},
			{"operator not allowed", nil, status.Error(codes.PermissionDenied, "role"), shalev1.CheckpointPending, "does not let the operator create checkpoints", true},
			{"empty answer", nil, nil, shalev1.CheckpointPending, "answered without a checkpoint", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := checkpointOutcome(ck(shalev1.CheckpointPending, true, 0), ready, tc.info, tc.err)
				if s.Phase != tc.phase || !strings.Contains(s.Message, tc.msg) || (s.Retry > 0) != tc.retry || s.Call {
					t.Errorf("checkpointOutcome = %+v; want phase %q, message with %q, retry %v", s, tc.phase, tc.msg, tc.retry)
				}
			})
		}
	})

	t.Run("delete", func(t *testing.T) {
		for _, tc := range []struct {
			name         string
			ck           *shalev1.Checkpoint
			db           primaryView
			release, ask bool
			msg          string
		}{
			{"never asked", ck("", false, 0), ready, true, false, "never requested"},
			{"refused: the name is someone else's", ck(shalev1.CheckpointFailed, true, 0), ready, true, false, "nothing to delete"},
			{"ready: ask the primary", ck(shalev1.CheckpointReady, true, 0), ready, false, true, ""},
			{"outcome unknown: ask the primary", ck(shalev1.CheckpointPending, true, 0), ready, false, true, ""},
			{"expired: ask the primary (it may not have run the expiry)", ck(shalev1.CheckpointExpired, true, -time.Hour), ready, false, true, ""},
			{"database gone", ck(shalev1.CheckpointReady, true, 0), primaryView{}, true, false, "RocksDB orders is gone"},
			{"database being deleted", ck(shalev1.CheckpointReady, true, 0), deleting, true, false, "is being deleted"},
			{"no ready primary: wait", ck(shalev1.CheckpointReady, true, 0), notReady, false, false, "remove the finalizer shale.rocks/checkpoint to leave it"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := planCheckpointDelete(tc.ck, tc.db)
				if s.Release != tc.release || s.Ask != tc.ask || !strings.Contains(s.Message, tc.msg) || (!s.Release && !s.Ask && s.Retry == 0) {
					t.Errorf("planCheckpointDelete = %+v; want release %v, ask %v, message with %q", s, tc.release, tc.ask, tc.msg)
				}
			})
		}
	})
}
