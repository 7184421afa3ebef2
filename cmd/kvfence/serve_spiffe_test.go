package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/internal/spiffetest"
)

const spiffeReceiver = "spiffe://example.org/kvfence/receiver"

// agentFor starts a Workload API handing out an SVID for id from ca, with
// ca as its trust domain's bundle.
func agentFor(t *testing.T, ca pki.Pair, id string) *spiffetest.WorkloadAPI {
	t.Helper()
	a := spiffetest.Start(t)
	a.Set(t, spiffetest.Issue(t, ca, id), ca.Cert)
	return a
}

// runBounded runs the program as run does, but stops it, as SIGTERM
// would, after d: a serve that should have refused to start then fails
// its test instead of hanging it.
func (c *cli) runBounded(d time.Duration, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stdout, stderr bytes.Buffer
	m := Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return c.env[k] }}
	code := m.Run(ctx, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// Ensure that serve refuses, before it opens anything, a Workload API
// together with any of the file credentials (as flags or variables), a
// --spiffe-timeout without --spiffe-socket or not positive, and an
// address that is not unix:///PATH; and that a socket with no agent
// behind it makes serve fail within --spiffe-timeout with an error naming
// the socket, rather than wait forever.
func TestServe_SPIFFEFlags(t *testing.T) {
	missing := "unix://" + filepath.Join(socketDir(t), "none.sock")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"with --tls-cert", nil, []string{"--spiffe-socket", missing, "--tls-cert", "s.crt"}, 2,
			"--spiffe-socket and --tls-cert (or KVFENCE_TLS_CERT) are two sources of the server's credentials"},
		{"with --tls-key", nil, []string{"--spiffe-socket", missing, "--tls-key", "s.key"}, 2, "--spiffe-socket and --tls-key"},
		{"with KVFENCE_CLIENT_CA", map[string]string{"KVFENCE_CLIENT_CA": "ca.crt"}, []string{"--spiffe-socket", missing}, 2,
			"--spiffe-socket and --client-ca (or KVFENCE_CLIENT_CA)"},
		{"KVFENCE_SPIFFE_SOCKET with --tls-cert", map[string]string{"KVFENCE_SPIFFE_SOCKET": missing},
			[]string{"--tls-cert", "s.crt", "--tls-key", "s.key", "--client-ca", "ca.crt"}, 2, "--spiffe-socket and --tls-cert"},
		{"timeout alone", nil, []string{"--tls-cert", "s.crt", "--tls-key", "s.key", "--client-ca", "ca.crt", "--spiffe-timeout", "5s"}, 2,
			"--spiffe-timeout goes with --spiffe-socket"},
		{"zero timeout", nil, []string{"--spiffe-socket", missing, "--spiffe-timeout", "0s"}, 2, "--spiffe-timeout 0s: must be positive"},
		{"tcp address", nil, []string{"--spiffe-socket", "tcp://127.0.0.1:8081"}, 1, "must be unix:///ABSOLUTE/PATH"},
		{"no agent", nil, []string{"--spiffe-socket", missing, "--spiffe-timeout", "300ms"}, 1,
			"no X.509-SVID from the Workload API at " + missing + " within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			c.receiver()
			for k, v := range tc.env {
				c.env[k] = v
			}
			start := time.Now()
			r := c.runBounded(10*time.Second, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin", spiffeOperator}, tc.args...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("got %s\nwant exit %d and %q", r, tc.code, tc.want)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("serve took %s to give up", d)
			}
		})
	}
}

// Ensure that serve takes its SVID and bundle from --spiffe-socket and
// that the CLI's --spiffe-socket and --server-id talk to it: the
// operator's SVID from its own agent is admitted, a --server-id other than
// the receiver's SVID is refused by the client before anything is sent,
// and an --admin outside the SVID's trust domain is refused at start.
func TestServe_SPIFFEWorkloadAPI(t *testing.T) {
	ca, err := pki.NewCA("trust domain CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	c.receiver()
	serverAgent := agentFor(t, ca, spiffeReceiver)
	opAgent := agentFor(t, ca, spiffeOperator)

	if r := c.runBounded(10*time.Second, "serve", "--listen", "127.0.0.1:0", "--spiffe-socket", serverAgent.Addr, "--admin", "spiffe://other.org/ops/bob"); r.code != 2 ||
		!strings.Contains(r.stderr, `--admin "spiffe://other.org/ops/bob" is not in trust domain "example.org"`) {
		t.Fatalf("an --admin of another trust domain: %s", r)
	}

	rn := c.serve("--listen", "127.0.0.1:0", "--spiffe-socket", serverAgent.Addr, "--spiffe-timeout", "10s", "--admin", spiffeOperator)
	remote := []string{"--server", "https://" + rn.addrs.Listen, "--spiffe-socket", opAgent.Addr}
	if r := c.run(append([]string{"status", "--json"}, append(remote, "--server-id", spiffeReceiver)...)...); r.code != 0 ||
		!strings.Contains(r.stdout, fixtureScope) {
		t.Fatalf("status over the Workload API: %s", r)
	}
	if r := c.run(append([]string{"status"}, append(remote, "--server-id", "spiffe://example.org/kvfence/impostor")...)...); r.code == 0 ||
		!strings.Contains(r.stderr, "unexpected ID") {
		t.Fatalf("a receiver with another SPIFFE ID: %s", r)
	}
}

// Ensure that the commands that talk to --server refuse the Workload API
// flags where they do not fit: with the --tls-* files, one without the
// other, with a unix socket, and without --server.
func TestRemote_SPIFFEFlags(t *testing.T) {
	sock := "unix:///run/spire/agent.sock"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"with --tls-cert", []string{"--server", "https://127.0.0.1:1", "--spiffe-socket", sock, "--server-id", spiffeReceiver,
			"--tls-cert", "c.crt"}, "--spiffe-socket and --tls-cert, --tls-key, --tls-ca are two sources of your credentials"},
		{"no --server-id", []string{"--server", "https://127.0.0.1:1", "--spiffe-socket", sock}, "--spiffe-socket and --server-id go together"},
		{"no --spiffe-socket", []string{"--server", "https://127.0.0.1:1", "--server-id", spiffeReceiver}, "--spiffe-socket and --server-id go together"},
		{"bad --server-id", []string{"--server", "https://127.0.0.1:1", "--spiffe-socket", sock, "--server-id", "spiffe://Example.org/r"},
			`--server-id "spiffe://Example.org/r" is not a SPIFFE ID`},
		{"unix server", []string{"--server", "unix:///tmp/k.sock", "--spiffe-socket", sock, "--server-id", spiffeReceiver},
			"takes no TLS or SPIFFE flags"},
		{"no server", []string{"--spiffe-socket", sock}, "--spiffe-socket goes with --server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			r := c.run(append([]string{"status"}, tc.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("got %s\nwant exit 2 and %q", r, tc.want)
			}
		})
	}
}
