package etcdanchor

import (
	"errors"
	"strings"
	"testing"
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
