package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that after SIGHUP replaces the client CA with one that did not
// issue worker B's certificate, a request on B's connection made before
// the reload, over HTTP/2 and over HTTP/1.1, is refused with 401 and
// nothing recorded, and the connection is closed: the next request needs
// a new handshake, which the new CA refuses.
func TestServe_HupRefusesRevokedConnections(t *testing.T) {
	for _, proto := range []string{"h2", "http/1.1"} {
		t.Run(proto, func(t *testing.T) {
			h := startHupServe(t)
			rn, admin, env := h.rn, h.admin, h.env
			ctx := context.Background()
			var dials atomic.Int32
			cfg := h.c.tlsFor("old", "b")
			cfg.NextProtos = []string{proto}
			tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: proto == "h2",
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			submit := func() (*http.Response, string, error) {
				resp, err := hc.Post("https://"+rn.addrs.Listen+api.PathSubmit, api.ContentCBOR, bytes.NewReader(env))
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b), nil
			}
			resp, body, err := submit()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(body, `"applied"`) {
				t.Fatalf("before the reload: %v %v %s", err, resp, body)
			}
			if want := map[string]int{"h2": 2, "http/1.1": 1}[proto]; resp.ProtoMajor != want {
				t.Fatalf("the connection speaks HTTP/%d, want %d", resp.ProtoMajor, want)
			}
			seq, err := admin.Status(ctx, "")
			if err != nil {
				t.Fatal(err)
			}

			h.reload(t, "new")

			resp, body, err = submit()
			if err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("on the connection made before the reload: %v %v %s, want 401", err, resp, body)
			}
			var e api.Error
			if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != api.CodeUnauthenticated {
				t.Fatalf("401 body %s", body)
			}
			if dials.Load() != 1 {
				t.Fatalf("%d dials: the refused request did not use the old connection", dials.Load())
			}
			// The connection is closed: the next request dials again, and
			// the new CA refuses the handshake.
			time.Sleep(500 * time.Millisecond)
			if resp, body, err := submit(); err == nil {
				t.Fatalf("after the refusal: %d %s, want a refused handshake", resp.StatusCode, body)
			}
			if dials.Load() < 2 {
				t.Fatal("the old connection was used again: it was not closed")
			}
			after, err := admin.Status(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if after.AuditSeq != seq.AuditSeq {
				t.Fatalf("audit seq moved from %d to %d: a refused request was recorded", seq.AuditSeq, after.AuditSeq)
			}
			if code := rn.wait(t); code != 0 {
				t.Fatalf("serve exited %d", code)
			}
		})
	}
}

// Ensure that a submit whose headers arrived before SIGHUP revoked the
// connection's CA, and whose body arrives after, is refused with 401 and
// not decided: the connection is checked again once the body is in.
func TestServe_HupRefusesBodySentAfterReload(t *testing.T) {
	h := startHupServe(t)
	rn, admin, env := h.rn, h.admin, h.env
	ctx := context.Background()
	cfg := h.c.tlsFor("old", "b")
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", rn.addrs.Listen, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A first request, so that the connection has its verdict.
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: kvfence\r\n\r\n", api.PathHealthz)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", err, resp)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	seq, err := admin.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: kvfence\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n",
		api.PathSubmit, api.ContentCBOR, len(env))
	time.Sleep(200 * time.Millisecond) // the handler has authenticated and waits for the body
	h.reload(t, "new")
	conn.Write(env)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("body sent after the reload: %d %s (close %v), want 401 and the connection closed", resp.StatusCode, body, resp.Close)
	}
	after, err := admin.Status(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if after.AuditSeq != seq.AuditSeq {
		t.Fatalf("audit seq moved from %d to %d: the submit was decided", seq.AuditSeq, after.AuditSeq)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
}

// hupServe is a running serve whose client CA file can be replaced and
// reloaded, with an administrator on its socket and worker B's envelope
// for a grant activated on the old CA's watch.
type hupServe struct {
	c     *cli
	live  string // the client CA file serve reads
	rn    *running
	admin *client.Client
	env   []byte
}

// startHupServe starts serve with the "old" PKI's CA as its client CA,
// activates a grant for worker B and builds B's envelope.
func startHupServe(t *testing.T) *hupServe {
	t.Helper()
	c := newCLI(t)
	c.receiver()
	c.pki("old")
	c.pki("new")
	c.clientCert("old", "b", spiffeWorker+"b")
	h := &hupServe{c: c, live: c.path("live-ca.crt")}
	h.installCA(t, "old")
	sock := filepath.Join(socketDir(t), "admin.sock")
	h.rn = c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("old-server.crt"), "--tls-key", c.path("old-server.key"),
		"--client-ca", h.live, "--admin-socket", sock, "--admin-uid", fmt.Sprint(os.Getuid()))
	var err error
	if h.admin, err = client.New("unix://"+sock, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.admin.Close() })
	req, err := os.ReadFile(c.path("req.cbor"))
	if err != nil {
		t.Fatal(err)
	}
	act, err := h.admin.Activate(context.Background(), kvfence.ActivateRequest{Scope: fixtureScope, Executor: spiffeWorker + "b",
		Claim: "claim-b", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	h.env, err = kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: fixtureScope, Epoch: act.Epoch, Grant: act.ID,
		Executor: spiffeWorker + "b", Claim: "claim-b", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// installCA replaces the client CA file, by rename, with the CA of PKI
// prefix.
func (h *hupServe) installCA(t *testing.T, prefix string) {
	t.Helper()
	b, err := os.ReadFile(h.c.path(prefix + "-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.live+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(h.live+".tmp", h.live); err != nil {
		t.Fatal(err)
	}
}

// reload installs the CA of PKI prefix, sends serve SIGHUP and waits until
// it logs the reload.
func (h *hupServe) reload(t *testing.T, prefix string) {
	t.Helper()
	h.installCA(t, prefix)
	before := strings.Count(h.rn.stderr.String(), "reloaded")
	h.rn.hup <- os.Interrupt
	for deadline := time.Now().Add(10 * time.Second); strings.Count(h.rn.stderr.String(), "reloaded") == before; {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", h.rn.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
