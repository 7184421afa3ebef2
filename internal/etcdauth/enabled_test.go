package etcdauth

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// statusAuth answers AuthStatus with enabled or err; any other call of
// clientv3.Auth panics (the embedded nil interface).
type statusAuth struct {
	clientv3.Auth
	enabled bool
	err     error
}

func (a statusAuth) AuthStatus(context.Context) (*clientv3.AuthStatusResponse, error) {
	if a.err != nil {
		return nil, a.err
	}
	return &clientv3.AuthStatusResponse{Enabled: a.enabled}, nil
}

// Ensure that RequireEnabled accepts only a cluster that says its auth is
// enabled: one that says it is off is ErrAuthOff, and a failed question is
// an error that keeps its cause and is not taken for either answer.
func TestRequireEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		auth statusAuth
		want error
	}{
		{"enabled", statusAuth{enabled: true}, nil},
		{"off", statusAuth{enabled: false}, ErrAuthOff},
		{"wrong password", statusAuth{err: rpctypes.ErrAuthFailed}, rpctypes.ErrAuthFailed},
		{"unreachable", statusAuth{err: context.DeadlineExceeded}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := RequireEnabled(context.Background(), tc.auth)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("RequireEnabled = %v, want %v", err, tc.want)
			}
			if tc.auth.err != nil && errors.Is(err, ErrAuthOff) {
				t.Fatalf("a failed question was taken for auth off: %v", err)
			}
		})
	}
}
