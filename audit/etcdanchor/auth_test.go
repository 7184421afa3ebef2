package etcdanchor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	deployetcd "github.com/kvfence/kvfence/deploy/etcd"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// Ensure that a user name without its password, or the reverse, is refused
// before anything connects, and that the refusal does not quote the
// password.
func TestOpen_AuthTogether(t *testing.T) {
	a, err := ParseAddress("etcd://127.0.0.1:2379/kvfence/anchor")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Username: "kvfence-receiver"}, {Password: "hunter2-secret"}} {
		s, err := Open(a, &o)
		if !errors.Is(err, ErrBadAuth) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open(%+v): %v, want ErrBadAuth", o.Username, err)
		}
		if strings.Contains(err.Error(), "hunter2-secret") {
			t.Fatalf("the error quotes the password: %v", err)
		}
	}
}

// Ensure that Open with a user refuses a cluster whose auth is off
// (ErrAuthOff), where etcd's client would drop the user and go on, so
// that every client could write the anchor key, and writes nothing
// there; and that on a cluster set up as deploy/etcd/README.md says the
// receiver's anchor user opens the anchor and writes it.
func TestOpen_UserForClusterWithoutAuth(t *testing.T) {
	d := etcdtest.StartDeployedAuth(t, deployetcd.README)
	plain := etcdtest.Start(t)
	for _, tc := range []struct {
		name    string
		cluster *etcdtest.Cluster
		want    error
	}{
		{"auth off", plain, ErrAuthOff},
		{"auth on", d.Anchor, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAddress("etcd://" + strings.TrimPrefix(tc.cluster.Endpoints()[0], "http://") + "/kvfence/anchor")
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(a, &Options{Username: "kvfence-receiver", Password: d.Passwords["anchor.password"]})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if err != nil {
				if strings.Contains(err.Error(), d.Passwords["anchor.password"]) {
					t.Fatalf("the error quotes the password: %v", err)
				}
				return
			}
			defer s.Close()
			if err := s.StoreContext(context.Background(), nil, at(t, 1)); err != nil {
				t.Fatalf("Store as the anchor's user: %v", err)
			}
		})
	}
	// New, on a client of the caller's that authenticates as a user.
	userCli, err := clientv3.New(clientv3.Config{Endpoints: plain.Endpoints(), DialTimeout: 5 * time.Second,
		Username: "kvfence-receiver", Password: "any-password", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer userCli.Close()
	if _, err := New(userCli, "/kvfence/anchor", nil); !errors.Is(err, ErrAuthOff) {
		t.Fatalf("New with a user on a cluster without auth: %v, want ErrAuthOff", err)
	}
	resp, err := plain.Client(t).Get(context.Background(), "/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the refused Open left %v keys (%v)", resp.Kvs, err)
	}
}
