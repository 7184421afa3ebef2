//go:build linux

package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
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

// An operator activates a grant on a running receiver and hands the worker
// its assignment, as JSON: everything the worker's envelope must carry.
// Here the receiver is served on a local admin socket in a temporary
// directory; workers reach it over mTLS ("https://receiver:8443").
func ExampleClient_Activate() {
	dir, err := os.MkdirTemp("", "client-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock, stop := serveExample(dir)
	defer stop()

	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const scope = "configmap/prod/backup-policy"
	if _, err := c.CreateScope(ctx, scope); err != nil {
		log.Fatal(err)
	}
	if _, err := c.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`)); err != nil {
		log.Fatal(err)
	}
	request, err := kvfence.EncodeRequest(&kvfence.Request{V: kvfence.WireVersion, Action: "raise-retention",
		Target: scope, Patch: []byte(`[{"op":"replace","path":"/data/retention_days","value":"45"}]`)})
	if err != nil {
		log.Fatal(err)
	}
	a, err := c.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: "spiffe://example.org/agent/worker-a",
		Claim: "claim-1", Request: request})
	if err != nil {
		log.Fatal(err)
	}
	handover, err := json.Marshal(a.Assignment())
	if err != nil {
		log.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(handover, &fields); err != nil {
		log.Fatal(err)
	}
	fmt.Println(fields["scope"], fields["epoch"], fields["executor"], fields["claim"])

	st, err := c.Status(ctx, scope)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Scopes[0].Mode, "under the assignment's grant:", st.Scopes[0].ActiveGrant == fields["grant"])
	// Output:
	// configmap/prod/backup-policy 1 spiffe://example.org/agent/worker-a claim-1
	// open under the assignment's grant: true
}

// An operator holds a scope with a hold id, so that the call can be
// repeated when its answer is lost, and checks the receiver's signed
// acknowledgment with the receiver's public key, pinned beforehand. The
// repeat issues no new epoch: it answers the first hold, marked repeated.
func ExampleClient_Hold() {
	dir, err := os.MkdirTemp("", "client-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock, stop := serveExample(dir)
	defer stop()
	// The pinned key: the receiver's public key, obtained out of band.
	pinned := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)

	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const scope = "configmap/prod/backup-policy"
	if _, err := c.CreateScope(ctx, scope); err != nil {
		log.Fatal(err)
	}
	req := kvfence.HoldRequest{Scopes: []string{scope}, Reason: "worker-a stalled", ID: "incident-42"}
	for range 2 {
		res, err := c.Hold(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		ack := res.Scopes[0].Ack
		verified := ack.Verify(pinned) == nil && res.Checkpoint.Verify(pinned) == nil &&
			ack.CoveredBy(res.Checkpoint.Checkpoint) == nil
		fmt.Println(ack.Scope, ack.PreviousEpoch, "->", ack.Epoch, "verified:", verified, "repeated:", res.Repeated)
	}
	// Output:
	// configmap/prod/backup-policy 1 -> 2 verified: true repeated: false
	// configmap/prod/backup-policy 1 -> 2 verified: true repeated: true
}

// serveExample initialises a receiver in dir and serves it on an admin
// socket there, admitting this process's user. It returns the socket's
// path and a function that stops the server and closes the receiver.
func serveExample(dir string) (string, func()) {
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
	uid := uint32(os.Getuid())
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{uid}},
		Admins: []string{server.UnixIdentity(uid)}})
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
	return sock, func() {
		srv.Close()
		r.Close()
	}
}
