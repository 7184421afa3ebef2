package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/engine/etcdengine"
	"github.com/kvfence/kvfence/internal/etcdtest"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// Ensure that a served receiver kept in etcd verifies itself over the API
// while it takes writes, and answers a backup with 501
// snapshot_unsupported, leaving no file.
func TestOnline_Etcd(t *testing.T) {
	c := etcdtest.Start(t)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	anchor := audit.FileAnchor{Path: filepath.Join(t.TempDir(), "receiver.anchor")}
	e, err := etcdengine.New(c.Client(t), &etcdengine.Options{Prefix: "/online/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := kvfence.InitEngine(e, &kvfence.InitOptions{ReceiverID: "etcd-receiver", Key: key, Anchor: anchor}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if e, err = etcdengine.New(c.Client(t), &etcdengine.Options{Prefix: "/online/"}); err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.OpenEngine(e, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	me := uint32(os.Getuid())
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{me}},
		Admins: []string{server.UnixIdentity(me)}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = server.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	cl, err := client.New("unix://"+filepath.Join(dir, "admin.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := cl.CreateScope(ctx, "s"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
		rep, err := cl.VerifyChain(ctx)
		if err != nil || !rep.OK || rep.Head != r.Head() {
			t.Fatalf("VerifyChain %d: %+v %v, head %v", i, rep, err, r.Head())
		}
	}
	out := t.TempDir()
	_, err = cl.Backup(ctx, backup.SaveOptions{Out: filepath.Join(out, "b"), PublicKey: r.PublicKey()})
	if !errors.Is(err, kvfence.ErrSnapshotUnsupported) {
		t.Fatalf("Backup of an etcd receiver: %v, want ErrSnapshotUnsupported", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("a file was left: %v", ents[0].Name())
	}
}
