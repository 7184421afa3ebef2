package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// applyTimeout bounds running a page's etcdctl lines: each user add
// hashes a password, slow on a loaded machine.
const applyTimeout = 2 * time.Minute

// passwordFileRef finds the password files a page's etcdctl lines read
// ("--interactive=false < FILE").
var passwordFileRef = regexp.MustCompile(`--interactive=false < (\S+)`)

// DeployedAuth is a receiver's cluster and an anchor's cluster with etcd
// auth set up by a page's etcdctl lines (deploy/etcd/README.md), each
// password in a file of its own.
type DeployedAuth struct {
	// Receiver is the cluster of the page's $RECEIVER_ETCD.
	Receiver *Cluster
	// Anchor is the cluster of the page's $ANCHOR_ETCD.
	Anchor *Cluster
	// Commands is how many etcdctl lines ran.
	Commands int
	// Dir holds the password files, mode 0600, under the names the page
	// gives them.
	Dir string
	// Passwords maps each password file's name to the password in it.
	Passwords map[string]string
}

// StartDeployedAuth starts two single-member clusters and runs page's
// etcdctl lines on them through etcd's auth API (ApplyEtcdctl), with a new
// random password for every password file the page names. It fails t if
// any line fails, so a page with a command the tests cannot run fails.
func StartDeployedAuth(t testing.TB, page string) *DeployedAuth {
	t.Helper()
	d := &DeployedAuth{Receiver: Start(t), Anchor: Start(t), Dir: t.TempDir(), Passwords: map[string]string{}}
	for _, m := range passwordFileRef.FindAllStringSubmatch(page, -1) {
		if _, ok := d.Passwords[m[1]]; ok {
			continue
		}
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		pw := hex.EncodeToString(b)
		d.Passwords[m[1]] = pw
		if err := os.WriteFile(d.PasswordFile(m[1]), []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	n, err := ApplyEtcdctl(ctx, page, map[string]*clientv3.Client{
		"RECEIVER_ETCD": d.Receiver.Client(t), "ANCHOR_ETCD": d.Anchor.Client(t)}, d.Passwords)
	if err != nil {
		t.Fatalf("etcdtest: the page's etcdctl lines: %v", err)
	}
	d.Commands = n
	return d
}

// PasswordFile returns the path of the password file the page calls name.
func (d *DeployedAuth) PasswordFile(name string) string { return filepath.Join(d.Dir, name) }

// ClientAs returns a client of cluster c that authenticates as user with
// the password in the page's file passwordFile, closed when the test
// ends. It fails t if the user cannot authenticate.
func (d *DeployedAuth) ClientAs(t testing.TB, c *Cluster, user, passwordFile string) *clientv3.Client {
	t.Helper()
	pw, ok := d.Passwords[passwordFile]
	if !ok {
		t.Fatalf("etcdtest: the page names no password file %q", passwordFile)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Username: user, Password: pw, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: %s on %v: %v", user, c.Endpoints(), err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
