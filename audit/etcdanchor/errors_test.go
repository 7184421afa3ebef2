package etcdanchor

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Ensure that only failures that prove a write was refused before it could
// take effect count as not applied; every failure that may follow an
// applied write leaves the outcome unknown.
func TestNotApplied(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false},
		{errors.New("connection reset"), false},
		{rpctypes.ErrGRPCTimeout, false},
		{rpctypes.ErrTimeout, false},
		{rpctypes.ErrGRPCLeaderChanged, false},
		{rpctypes.ErrLeaderChanged, false},
		{rpctypes.ErrGRPCNoLeader, false},
		{rpctypes.ErrNoLeader, false},
		{rpctypes.ErrGRPCTimeoutDueToConnectionLost, false},
		{rpctypes.ErrGRPCStopped, false},
		{status.Error(codes.Unavailable, "transport is closing"), false},
		{status.Error(codes.Unknown, "raft: stopped"), false},
		{rpctypes.ErrGRPCRequestTooLarge, true},
		{rpctypes.ErrRequestTooLarge, true},
		{rpctypes.ErrGRPCTooManyOps, true},
		{rpctypes.ErrGRPCPermissionDenied, true},
		{rpctypes.ErrPermissionDenied, true},
		{rpctypes.ErrGRPCInvalidAuthToken, true},
		{rpctypes.ErrGRPCNoSpace, true},
		{fmt.Errorf("wrapped: %w", rpctypes.ErrPermissionDenied), true},
	} {
		if got := notApplied(tc.err); got != tc.want {
			t.Errorf("notApplied(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
