package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

const (
	spiffeOperator = "spiffe://example.org/ops/alice"
	spiffeWorker   = "spiffe://example.org/agent/worker-"
)

// lockedBuffer is a buffer that a running command writes and a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is a kvfence serve started in-process.
type running struct {
	addrs  serveJSON
	stop   context.CancelFunc
	hup    chan os.Signal
	done   chan int
	stderr *lockedBuffer
}

// pki makes a CA under prefix and a server certificate for 127.0.0.1, with
// the cert command.
func (c *cli) pki(prefix string) {
	c.t.Helper()
	c.must(0, "cert", "ca", "--out", c.path(prefix+"-ca"))
	c.must(0, "cert", "server", "--ca", c.path(prefix+"-ca"), "--ip", "127.0.0.1", "--out", c.path(prefix+"-server"))
}

// clientCert issues a client certificate for id under the CA prefix.
func (c *cli) clientCert(prefix, name, id string) {
	c.t.Helper()
	c.must(0, "cert", "client", "--ca", c.path(prefix+"-ca"), "--spiffe-id", id, "--out", c.path(prefix+"-"+name))
}

// tlsFor returns a client TLS configuration with the named certificate,
// trusting the CA prefix.
func (c *cli) tlsFor(prefix, name string) *tls.Config {
	c.t.Helper()
	cert, err := tls.LoadX509KeyPair(c.path(prefix+"-"+name+".crt"), c.path(prefix+"-"+name+".key"))
	if err != nil {
		c.t.Fatal(err)
	}
	pem, err := os.ReadFile(c.path(prefix + "-ca.crt"))
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
}

// serve starts kvfence serve in-process with args and waits until it
// listens.
func (c *cli) serve(args ...string) *running {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{stop: cancel, hup: make(chan os.Signal, 1), done: make(chan int, 1), stderr: &lockedBuffer{}}
	stdout := &lockedBuffer{}
	m := Main{Stdout: stdout, Stderr: rn.stderr, Getenv: func(k string) string { return c.env[k] }, Hangup: rn.hup}
	go func() { rn.done <- m.Run(ctx, append([]string{"serve", "--json"}, args...)) }()
	c.t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(40 * time.Second):
			c.t.Error("serve did not stop")
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := json.Unmarshal([]byte(stdout.String()), &rn.addrs); err == nil {
			return rn
		}
		select {
		case code := <-rn.done:
			c.t.Fatalf("serve exited %d before listening:\n%s", code, rn.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("serve did not start:\n%s", rn.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait stops serve as SIGTERM would and returns its exit code.
func (rn *running) wait(t *testing.T) int {
	t.Helper()
	rn.stop()
	select {
	case code := <-rn.done:
		rn.done <- code // for the cleanup
		return code
	case <-time.After(40 * time.Second):
		t.Fatal("serve did not stop")
		return -1
	}
}

// socketDir returns a short directory for a unix socket (108 bytes at most).
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Ensure that SIGTERM during a flood of submits stops serve cleanly (exit
// 0), that every decision a worker was answered is in the chain with the
// same outcome, that nothing is half-applied (each applied entry has its
// receipt and its revision, and nothing else moved a target), that the
// chain verifies against the anchor, and that the metrics counted the
// decisions the chain holds.
func TestServe_SIGTERMDuringFlood(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	const workers = 6
	for i := range workers {
		c.clientCert("t", fmt.Sprintf("w%d", i), fmt.Sprintf("%s%d", spiffeWorker, i))
	}
	sock := filepath.Join(socketDir(t), "admin.sock")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--admin-socket", sock,
		"--admin-uid", fmt.Sprint(os.Getuid()), "--metrics-listen", "127.0.0.1:0")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket: %v %v, want mode 0600", err, fi.Mode())
	}
	ctx := context.Background()
	op, err := client.New("https://"+rn.addrs.Listen, c.tlsFor("t", "operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	// Each worker gets a scope of its own and an assignment in it.
	assignments := make([]client.Assignment, workers)
	for i := range workers {
		s := fmt.Sprintf("flood/%d", i)
		if _, err := op.CreateScope(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := op.CreateTarget(ctx, s, s, []byte("0")); err != nil {
			t.Fatal(err)
		}
		req, err := kvfence.EncodeRequest(&kvfence.Request{V: 1, Action: "bump", Target: s, Set: ptr([]byte("1"))})
		if err != nil {
			t.Fatal(err)
		}
		act, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: s, Executor: fmt.Sprintf("%s%d", spiffeWorker, i),
			Claim: "c", Request: req})
		if err != nil {
			t.Fatal(err)
		}
		assignments[i] = act.Assignment()
	}
	type answer struct {
		seq     uint64
		outcome kvfence.Outcome
	}
	answers := make([][]answer, workers)
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		w, err := client.New("https://"+rn.addrs.Listen, c.tlsFor("t", fmt.Sprintf("w%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		wg.Go(func() {
			stale := assignments[i]
			stale.Epoch++ // denied: stale_or_unknown_epoch
			for n := 0; ; n++ {
				a := assignments[i]
				if n%3 == 2 {
					a = stale
				}
				res, err := w.SubmitAssignment(ctx, a)
				if err != nil {
					return // the server stopped answering
				}
				answers[i] = append(answers[i], answer{res.AuditSeq, res.Outcome})
				answered.Add(1)
			}
		})
	}
	// Let the flood run, then terminate in the middle of it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if answered.Load() > 60 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	metricsBody := httpGet(t, "http://"+rn.addrs.MetricsListen+"/metrics")
	// The probes answer on the metrics listener, without a certificate.
	for _, p := range []string{"/healthz", "/readyz"} {
		if b := httpGet(t, "http://"+rn.addrs.MetricsListen+p); b != "ok\n" {
			t.Errorf("GET %s = %q", p, b)
		}
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, rn.stderr.String())
	}
	wg.Wait()
	if !strings.Contains(rn.stderr.String(), "shutting down") || !strings.Contains(rn.stderr.String(), "stopped") {
		t.Errorf("stderr lacks the shutdown log:\n%s", rn.stderr.String())
	}
	if !strings.Contains(metricsBody, `kvfence_receiver_decisions_total{outcome="denied",reason="stale_or_unknown_epoch"}`) {
		t.Errorf("metrics:\n%s", metricsBody)
	}

	// The evidence, read from the file serve left behind.
	c.must(0, "verify-chain", "--db", c.env[envDB], "--anchor", c.env[envAnchor], "--pub", c.path("receiver.key.pub"))
	r, err := kvfence.Open(c.env[envDB], &kvfence.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	bySeq := map[uint64]kvfence.Event{}
	applied := map[string]int{}
	r.Events(0, func(ev kvfence.Event) bool {
		bySeq[ev.Seq] = ev
		if ev.Kind == kvfence.KindSubmit && ev.Outcome == string(kvfence.Applied) {
			applied[ev.Scope]++
		}
		return true
	})
	total := 0
	for i, as := range answers {
		total += len(as)
		for _, a := range as {
			ev, ok := bySeq[a.seq]
			if !ok || ev.Outcome != string(a.outcome) || ev.Executor != fmt.Sprintf("%s%d", spiffeWorker, i) {
				t.Fatalf("worker %d was answered %s at seq %d; the chain has %+v", i, a.outcome, a.seq, ev.Entry)
			}
		}
	}
	if total < 10 {
		t.Fatalf("only %d answers: the flood did not run", total)
	}
	for i := range workers {
		s := fmt.Sprintf("flood/%d", i)
		tg, err := r.Target(s)
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := r.Receipt(s, "bump")
		want := uint64(1 + applied[s])
		if applied[s] > 1 || tg.Revision != want || (applied[s] == 1) != (rerr == nil) {
			t.Fatalf("%s: %d applied entries, revision %d, receipt %v", s, applied[s], tg.Revision, rerr)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// Ensure that SIGHUP reloads the server certificate and the client CA:
// afterwards clients of the new CA are admitted and clients of the old one
// are refused at the handshake, and a reload of unusable files keeps the
// certificates that were serving.
func TestServe_CertificateReload(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("old")
	c.pki("new")
	c.clientCert("old", "operator", spiffeOperator)
	c.clientCert("new", "operator", spiffeOperator)
	live := func(name string) string { return c.path("live-" + name) }
	install := func(prefix string) {
		for _, f := range []string{"server.crt", "server.key", "ca.crt"} {
			b, err := os.ReadFile(c.path(prefix + "-" + f))
			if err != nil {
				t.Fatal(err)
			}
			// Written aside and renamed, as a careful operator would, so
			// that a reload never reads half a file.
			if err := os.WriteFile(live(f)+".tmp", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(live(f)+".tmp", live(f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	install("old")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", live("server.crt"), "--tls-key", live("server.key"),
		"--client-ca", live("ca.crt"), "--admin", spiffeOperator)
	status := func(prefix string) error {
		cl, err := client.New("https://"+rn.addrs.Listen, c.tlsFor(prefix, "operator"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		_, err = cl.Status(context.Background(), "")
		return err
	}
	reload := func() {
		before := strings.Count(rn.stderr.String(), "reload")
		rn.hup <- os.Interrupt
		for deadline := time.Now().Add(10 * time.Second); strings.Count(rn.stderr.String(), "reload") == before; {
			if time.Now().After(deadline) {
				t.Fatal("no reload logged")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := status("old"); err != nil {
		t.Fatalf("old CA before the reload: %v", err)
	}
	if err := status("new"); err == nil {
		t.Fatal("new CA admitted before the reload")
	}
	install("new")
	reload()
	if err := status("new"); err != nil {
		t.Fatalf("new CA after the reload: %v\n%s", err, rn.stderr.String())
	}
	if err := status("old"); err == nil || errors.Is(err, client.ErrForbidden) {
		t.Fatalf("old CA after the reload: %v, want a refused handshake", err)
	}
	// An unusable file is reported and changes nothing.
	if err := os.WriteFile(live("ca.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	reload()
	if !strings.Contains(rn.stderr.String(), "still serving the previous ones") {
		t.Fatalf("stderr:\n%s", rn.stderr.String())
	}
	if err := status("new"); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func ptr[T any](v T) *T { return &v }

// Ensure that cert writes keys 0600, never overwrites, and refuses a
// client identity the server would refuse.
func TestCert(t *testing.T) {
	c := newCLI(t)
	c.pki("t")
	out := c.json(0, "cert", "client", "--ca", c.path("t-ca"), "--spiffe-id", spiffeOperator, "--out", c.path("op"))
	if uris := out["uris"].([]any); len(uris) != 1 || uris[0] != spiffeOperator {
		t.Fatalf("client cert: %v", out)
	}
	for _, f := range []string{"t-ca.key", "t-server.key", "op.key"} {
		if fi, err := os.Stat(c.path(f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, want mode 0600", f, err)
		}
	}
	c.must(1, "cert", "client", "--ca", c.path("t-ca"), "--spiffe-id", spiffeOperator, "--out", c.path("op"))
	for _, id := range []string{"https://example.org/x", "spiffe://Example.org/x", "spiffe://example.org/a//b"} {
		c.must(2, "cert", "client", "--ca", c.path("t-ca"), "--spiffe-id", id, "--out", c.path("bad"))
	}
	c.must(2, "cert", "server", "--ca", c.path("t-ca"), "--out", c.path("s2"))
	for _, tc := range []struct {
		args    []string
		subject string
	}{
		{[]string{"--dns", "localhost", "--ip", "127.0.0.1"}, "localhost"},
		{[]string{"--ip", "::1"}, "::1"},
		{[]string{"--dns", "localhost", "--name", "receiver-1"}, "receiver-1"},
	} {
		out := c.json(0, append([]string{"cert", "server", "--ca", c.path("t-ca"), "--out", c.path("s-" + tc.subject)}, tc.args...)...)
		if out["subject"] != tc.subject {
			t.Errorf("cert server %v: subject %v, want %q", tc.args, out["subject"], tc.subject)
		}
	}
	if err := os.Chmod(c.path("t-ca.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.must(1, "cert", "client", "--ca", c.path("t-ca"), "--spiffe-id", spiffeOperator, "--out", c.path("op2"))
}

// Ensure that the CLI operates a running kvfence serve with --server, with
// the outputs and exit codes of the local mode: while serving, the file is
// locked (a local status exits 5) and the operator holds live over the
// socket; a worker submits over mTLS without --as; its stale envelope is
// denied with exit 3; a worker's certificate cannot hold; and after the
// server stops, the local status prints what the remote one printed.
func TestServe_CLIWalkthrough(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	c.clientCert("t", "a", spiffeWorker+"a")
	c.clientCert("t", "b", spiffeWorker+"b")
	sock := filepath.Join(socketDir(t), "admin.sock")
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--admin-socket", sock,
		"--admin-uid", fmt.Sprint(os.Getuid()))
	url := "https://" + rn.addrs.Listen
	as := func(who string, args ...string) []string {
		return append(args, "--server", url, "--tls-cert", c.path("t-"+who+".crt"), "--tls-key", c.path("t-"+who+".key"),
			"--tls-ca", c.path("t-ca.crt"))
	}
	local := func(args ...string) []string { return args } // KVFENCE_DB and friends are set
	sockArgs := func(args ...string) []string { return append(args, "--server", "unix://"+sock) }

	// The file is the server's while it serves.
	c.must(ExitBusy, local("status", "--lock-timeout", "50ms")...)

	c.json(0, as("operator", "scope", "create", "--scope", "other")...)
	c.json(0, as("operator", "target", "create", "--scope", "other", "--target", "other", "--value", "v")...)
	g := c.json(0, as("operator", "activate", "--scope", fixtureScope, "--executor", spiffeWorker+"a", "--claim", "claim-a",
		"--request", c.path("req.cbor"))...)
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", spiffeWorker+"a", "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	// --as has no place with --server.
	c.must(ExitUsage, as("a", "submit", "--as", spiffeWorker+"a", "--envelope", c.path("a.cbor"))...)
	c.must(ExitUsage, as("a", "status", "--db", c.env[envDB])...)
	// B's certificate with A's envelope: denied by identity.
	out := c.json(ExitDenied, as("b", "submit", "--envelope", c.path("a.cbor"))...)
	if out["reason"] != "executor_mismatch" {
		t.Fatalf("B with A's envelope: %v", out)
	}
	// A worker cannot hold; the operator holds over the socket, live.
	c.must(ExitError, as("a", "hold", "--scope", fixtureScope, "--reason", "mine now")...)
	out = c.json(0, sockArgs("hold", "--scope", fixtureScope, "--reason", "worker-a stalled")...)
	if out["scopes"].([]any)[0].(map[string]any)["epoch"].(float64) != 2 {
		t.Fatalf("hold: %v", out)
	}
	out = c.json(ExitDenied, as("a", "submit", "--envelope", c.path("a.cbor"))...)
	if out["reason"] != "receiver_held" {
		t.Fatalf("A after the hold: %v", out)
	}
	c.must(ExitDenied, as("operator", "status", "--scope", "nope")...)
	remoteStatus := c.must(0, as("operator", "status", "--json")...).stdout
	remoteTarget := c.must(0, as("operator", "observe", "target", fixtureScope, "--json")...).stdout
	remoteEvents := c.must(0, sockArgs("observe", "events", "--json")...).stdout
	if !strings.Contains(remoteEvents, `"actor": "`+spiffeOperator+`"`) ||
		!strings.Contains(remoteEvents, fmt.Sprintf(`"actor": "unix:uid:%d"`, os.Getuid())) {
		t.Fatalf("events lack the actors:\n%s", remoteEvents)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	// The anchor file's separation facts are the local command's own: a
	// served status leaves them null.
	if got := c.must(0, local("status", "--json")...).stdout; !sameStatus(t, got, remoteStatus) {
		t.Fatalf("local status differs from the served one:\n%s\n---\n%s", got, remoteStatus)
	}
	if got := c.must(0, local("observe", "target", fixtureScope, "--json")...).stdout; got != remoteTarget {
		t.Fatalf("local target differs:\n%s\n---\n%s", got, remoteTarget)
	}
	if got := c.must(0, local("observe", "events", "--json")...).stdout; got != remoteEvents {
		t.Fatalf("local events differ from the served ones")
	}
}

// sameStatus compares two status --json documents but for the file
// anchor's separation facts and the witnesses.
func sameStatus(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y map[string]any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	// The separation facts and the witnesses are the local command's own:
	// the served status leaves them null.
	for _, k := range []string{"anchor_same_device", "anchor_same_owner", "witnesses", "witness_quorum"} {
		delete(x, k)
		delete(y, k)
	}
	return reflect.DeepEqual(x, y)
}
