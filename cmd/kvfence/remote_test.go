package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/engine"
	"github.com/kvfence/kvfence/engine/boltengine"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// lostAnswerEngine commits every transaction while lose is set and then
// reports its outcome unknown, as a timed-out etcd Txn that the cluster
// applied does.
type lostAnswerEngine struct {
	engine.Engine
	lose atomic.Bool
}

func (l *lostAnswerEngine) Update(ctx context.Context, fn func(engine.Tx) error) error {
	if err := l.Engine.Update(ctx, fn); err != nil {
		return err
	}
	if l.lose.Load() {
		return fmt.Errorf("%w: the commit's answer was lost (injected after the commit)", engine.ErrOutcomeUnknown)
	}
	return nil
}

// serveLostAnswers serves the CLI fixture's receiver over a
// lostAnswerEngine on a unix socket admitting the test's uid, and returns
// the socket's URL.
func (c *cli) serveLostAnswers() (string, *lostAnswerEngine) {
	c.t.Helper()
	e, err := boltengine.OpenFile(c.env[envDB], boltengine.FileOptions{Timeout: time.Second, CheckPages: true})
	if err != nil {
		c.t.Fatal(err)
	}
	le := &lostAnswerEngine{Engine: e}
	return c.serveEngine(le), le
}

// serveEngine serves the CLI fixture's receiver, kept in e, on a unix
// socket admitting the test's uid, and returns the socket's URL.
func (c *cli) serveEngine(e engine.Engine) string {
	c.t.Helper()
	return c.serveEngineWith(e, nil)
}

// serveEngineWith is serveEngine with the receiver's dispatchers ds.
func (c *cli) serveEngineWith(e engine.Engine, ds map[kvfence.TargetKind]kvfence.Dispatcher) string {
	c.t.Helper()
	priv, err := keyfile.LoadPrivate(c.env[envKey])
	if err != nil {
		c.t.Fatal(err)
	}
	r, err := kvfence.OpenEngine(e, &kvfence.Options{Key: priv, Anchor: audit.FileAnchor{Path: c.env[envAnchor]}, Dispatchers: ds})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { r.Close() })
	h, err := server.New(server.Options{Receiver: r, Authenticator: server.UnixPeer{UIDs: []uint32{uint32(os.Getuid())}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admins: []string{server.UnixIdentity(uint32(os.Getuid()))}})
	if err != nil {
		c.t.Fatal(err)
	}
	sock := filepath.Join(socketDir(c.t), "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		c.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = server.ConnContext
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	c.t.Cleanup(srv.Close)
	return "unix://" + sock
}

// Ensure that with --server, a change whose commit answer the receiver's
// store lost exits 1 with outcome_unknown, as the same change on an etcd
// store does without --server, for submit and every administrative
// change, and that the repeated submit exits 0 with already_applied.
func TestRemote_OutcomeUnknown(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	uid := server.UnixIdentity(uint32(os.Getuid()))
	// The grant and the envelope are made before the server takes the file.
	g := c.json(0, "activate", "--scope", fixtureScope, "--executor", uid, "--claim", "claim-a", "--request", c.path("req.cbor"))
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", uid, "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	url, le := c.serveLostAnswers()
	env := map[string]string{}
	for k, v := range c.env {
		env[k] = v
	}
	// The file flags' environment is ignored with --server; clear it anyway.
	c.env = map[string]string{}
	defer func() { c.env = env }()

	wantUnknown := func(args ...string) {
		t.Helper()
		le.lose.Store(true)
		defer le.lose.Store(false)
		out := c.json(ExitError, append(args, "--server", url)...)
		if e, _ := out["error"].(map[string]any); e["code"] != "outcome_unknown" {
			t.Errorf("kvfence %v over --server with a lost commit answer: %v, want outcome_unknown", args, out)
		}
	}
	wantUnknown("submit", "--envelope", c.path("a.cbor"))
	out := c.json(ExitOK, "submit", "--envelope", c.path("a.cbor"), "--server", url)
	if out["outcome"] != "already_applied" {
		t.Fatalf("the same envelope again: %v, want already_applied", out)
	}
	wantUnknown("hold", "--scope", fixtureScope, "--reason", "incident")
	wantUnknown("scope", "create", "--scope", "other")
	wantUnknown("target", "create", "--scope", "other", "--target", "other", "--value", "v")
	wantUnknown("activate", "--scope", fixtureScope, "--executor", uid, "--claim", "claim-b", "--request", c.path("req.cbor"))
	wantUnknown("hold", "--all", "--reason", "incident")
}

// Ensure that --server unix:// refuses a socket not served by --server-uid
// (exit 1, untrusted_server, with a hint), accepts one served by it and,
// without the flag, one served by the caller's own uid; and that
// --server-uid goes only with a unix socket and takes a numeric uid.
func TestRemote_ServerUID(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	url, _ := c.serveLostAnswers()
	c.env = map[string]string{}
	me := uint32(os.Getuid())

	out := c.json(ExitError, "status", "--server", url, "--server-uid", fmt.Sprint(me+1))
	if e, _ := out["error"].(map[string]any); e["code"] != "untrusted_server" ||
		!strings.Contains(fmt.Sprint(e["message"]), fmt.Sprintf("served by a process of uid %d", me)) ||
		!strings.Contains(fmt.Sprint(e["hint"]), "--server-uid") {
		t.Fatalf("status over a socket served by uid %d with --server-uid %d: %v", me, me+1, out)
	}
	c.must(ExitError, "hold", "--scope", fixtureScope, "--reason", "r", "--server", url, "--server-uid", "65534")
	if st := c.json(ExitOK, "status", "--server", url, "--scope", fixtureScope); jsonNum(st["scopes"].([]any)[0].(map[string]any)["epoch"]) != "1" {
		t.Fatalf("the refused hold reached the receiver: %v", st)
	}
	c.must(ExitOK, "status", "--server", url, "--server-uid", fmt.Sprint(me))
	c.must(ExitUsage, "status", "--server", url, "--server-uid", "root")
	c.must(ExitUsage, "status", "--server", url, "--server-uid", "-1")
	c.must(ExitUsage, "status", "--server", "https://127.0.0.1:1", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "a",
		"--server-uid", "0")
	c.must(ExitUsage, "status", "--db", "x", "--server-uid", "0")
}
