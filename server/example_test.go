//go:build linux

package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// A service that embeds a receiver serves it on a local admin socket, so
// that an operator can hold a scope during an incident while the service
// keeps running. The caller's identity comes from the socket's peer
// credentials ("unix:uid:N"), and each change records it as its actor.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "server-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "receiver.db")
	anchor := audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // a real key comes from keyfile
	// Only the public half of the recovery key, held apart, is recorded.
	recovery := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "example", Key: key, Anchor: anchor,
		RecoveryKey: recovery}); err != nil {
		log.Fatal(err)
	}
	r, err := kvfence.Open(path, &kvfence.Options{Key: key, Anchor: anchor})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	operator := uint32(os.Getuid())
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{operator}},
		Admins: []string{server.UnixIdentity(operator)}})
	if err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(dir, "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ConnContext: server.ConnContext}
	go srv.Serve(l)
	defer srv.Close()

	// The operator's side: kvfence's CLI with --server unix://..., or client.
	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.CreateScope(ctx, "configmap/prod/backup-policy"); err != nil {
		log.Fatal(err)
	}
	held, err := c.Hold(ctx, kvfence.HoldRequest{Scopes: []string{"configmap/prod/backup-policy"}, Reason: "incident"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held at epoch", held.Scopes[0].Epoch)

	err = r.Events(held.AuditSeq, func(e kvfence.Event) bool {
		fmt.Println(e.Kind, "by the operator:", e.Actor == server.UnixIdentity(operator))
		return true
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// held at epoch 2
	// hold by the operator: true
}
