package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	deployetcd "github.com/kvfence/kvfence/deploy/etcd"
	"github.com/kvfence/kvfence/internal/etcdtest"
)

// attempt is one thing a worker may try around the fence.
type attempt struct {
	name string
	do   func(ctx context.Context, w *clientv3.Client) error
}

// workerAttempts are what a worker's own credentials try on the
// receiver's cluster beyond writing keys (which
// cmd/kvfence/etcdauth_test.go tries): widen its own rights, make a user,
// turn auth off, erase history, copy the whole keyspace, and read or
// watch the receiver's and the ledger's records. Auth is turned off last,
// so that a page that lets it do so does not hide the others.
var workerAttempts = []attempt{
	{"grant itself the receiver's role", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.UserGrantRole(ctx, "worker-a", "kvfence-receiver")
		return err
	}},
	{"grant itself root", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.UserGrantRole(ctx, "worker-a", "root")
		return err
	}},
	{"widen its role to write the targets", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.RoleGrantPermission(ctx, "kvfence-worker", "/app/", clientv3.GetPrefixRangeEnd("/app/"),
			clientv3.PermissionType(clientv3.PermReadWrite))
		return err
	}},
	{"add a user", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.UserAdd(ctx, "intruder", "intruder-pw")
		return err
	}},
	{"change the receiver's password", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.UserChangePassword(ctx, "kvfence-receiver", "taken-over")
		return err
	}},
	{"compact the history", func(ctx context.Context, w *clientv3.Client) error {
		resp, err := w.Get(ctx, "/app/config")
		if err != nil {
			return err
		}
		_, err = w.Compact(ctx, resp.Header.Revision)
		return err
	}},
	{"take a snapshot", func(ctx context.Context, w *clientv3.Client) error {
		rc, err := w.Snapshot(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(io.Discard, rc)
		return err
	}},
	{"read the receiver's prefix", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.Get(ctx, "/kvfence/", clientv3.WithPrefix())
		return err
	}},
	{"read the ledger's prefix", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.Get(ctx, "/kvfence-ledger/", clientv3.WithPrefix())
		return err
	}},
	{"watch the receiver's prefix", watch("/kvfence/")},
	{"watch the ledger's prefix", watch("/kvfence-ledger/")},
	{"disable auth", func(ctx context.Context, w *clientv3.Client) error {
		_, err := w.AuthDisable(ctx)
		return err
	}},
}

// watch returns an attempt to watch prefix: its first answer is the
// watch's creation, or etcd's refusal.
func watch(prefix string) func(ctx context.Context, w *clientv3.Client) error {
	return func(ctx context.Context, w *clientv3.Client) error {
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 5*time.Second)
		defer cancel()
		resp, ok := <-w.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		if !ok {
			return fmt.Errorf("the watch ended without an answer: %w", ctx.Err())
		}
		return resp.Err() // nil: the watch was created, admitted
	}
}

// denied reports whether err is etcd's refusal for lack of permission.
func denied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || strings.Contains(fmt.Sprint(err), "permission denied")
}

// seed writes, as root, a key under each prefix the page grants on.
func seed(t *testing.T, ctx context.Context, d *etcdtest.DeployedAuth) *clientv3.Client {
	t.Helper()
	root := d.ClientAs(t, d.Receiver, "root", "root.password")
	for _, k := range []string{"/kvfence/meta/x", "/kvfence-ledger/meta/x", "/app/config"} {
		if _, err := root.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Ensure that, on a cluster set up by deploy/etcd/README.md's own lines, a
// worker (read-only on the application's prefix) is refused with
// permission denied on every path around its keys (workerAttempts), that
// afterwards its roles, auth and every key are as before, that the
// receiver and the ledger each write only their own prefix, and that
// nobody without a user, and no worker on the anchor's cluster, gets in.
func TestRolesOnRealEtcd(t *testing.T) {
	d := etcdtest.StartDeployedAuth(t, deployetcd.README)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := seed(t, ctx, d)
	w := d.ClientAs(t, d.Receiver, "worker-a", "worker-a.password")
	if _, err := w.Get(ctx, "/app/config"); err != nil {
		t.Fatalf("the worker cannot read the application's keys: %v", err)
	}
	for _, a := range workerAttempts {
		if err := a.do(ctx, w); !denied(err) {
			t.Errorf("the worker may %s: %v; want permission denied", a.name, err)
		}
	}
	if st, err := root.AuthStatus(ctx); err != nil || !st.Enabled {
		t.Errorf("auth after the worker's attempts: %v, %v; want enabled", st, err)
	}
	if u, err := root.UserGet(ctx, "worker-a"); err != nil || strings.Join(u.Roles, ",") != "kvfence-worker" {
		t.Errorf("the worker's roles after its attempts: %v, %v; want kvfence-worker only", u, err)
	}
	if _, err := root.UserGet(ctx, "intruder"); err == nil {
		t.Error("the worker's user was added")
	}
	for _, k := range []string{"/kvfence/meta/x", "/kvfence-ledger/meta/x", "/app/config"} {
		if r, err := root.Get(ctx, k); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
			t.Errorf("%s after the worker's attempts: %v, %v", k, r, err)
		}
	}
	// Each of kvfence's users writes its own prefix and no other.
	receiver := d.ClientAs(t, d.Receiver, "kvfence-receiver", "receiver.password")
	ledger := d.ClientAs(t, d.Receiver, "kvfence-ledger", "ledger.password")
	for _, tc := range []struct {
		who  string
		cli  *clientv3.Client
		key  string
		deny bool
	}{
		{"receiver", receiver, "/kvfence/meta/y", false},
		{"receiver", receiver, "/kvfence-ledger/meta/y", true},
		{"ledger", ledger, "/kvfence-ledger/meta/y", false},
		{"ledger", ledger, "/kvfence/meta/y", true},
		{"ledger", ledger, "/app/config", true},
	} {
		_, err := tc.cli.Put(ctx, tc.key, "y")
		if tc.deny != denied(err) || (!tc.deny && err != nil) {
			t.Errorf("the %s's put of %s: %v; want denied %v", tc.who, tc.key, err, tc.deny)
		}
	}
	// No user at all: refused, not served as a guest.
	if _, err := d.Receiver.Client(t).Get(ctx, "/app/config"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Errorf("a read without a user: %v; want user name is empty", err)
	}
	// The anchor's cluster knows no worker.
	wa, err := clientv3.New(clientv3.Config{Endpoints: d.Anchor.Endpoints(), DialTimeout: 5 * time.Second,
		Username: "worker-a", Password: d.Passwords["worker-a.password"], Logger: zap.NewNop()})
	if err == nil {
		wa.Close()
	}
	if !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("the worker on the anchor's cluster: %v; want authentication failed", err)
	}
}

// Ensure that the test above sees a page that gives a worker more than
// reading: with the worker granted root in place of kvfence-worker, each
// of its attempts is accepted, so the refusals above come from the page's
// grants and not from the test.
func TestRolesDriftIsSeen(t *testing.T) {
	loose := strings.Replace(deployetcd.README, "user grant-role worker-a kvfence-worker", "user grant-role worker-a root", 1)
	if loose == deployetcd.README {
		t.Fatal("deploy/etcd/README.md no longer grants worker-a the kvfence-worker role")
	}
	d := etcdtest.StartDeployedAuth(t, loose)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed(t, ctx, d)
	w := d.ClientAs(t, d.Receiver, "worker-a", "worker-a.password")
	for _, a := range workerAttempts {
		if err := a.do(ctx, w); err != nil {
			t.Errorf("a worker granted root may not %s: %v; the test would not see the grant", a.name, err)
		}
	}
}
