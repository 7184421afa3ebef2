package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jsonLogLines decodes serve's stderr as JSON lines, failing on any other
// line, and returns those with message msg.
func jsonLogLines(t *testing.T, stderr, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("--log-format json logged a line that is not JSON: %q", sc.Text())
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// metricValue returns the value of the one sample in text whose name and
// labels start with series, failing if there is none.
func metricValue(t *testing.T, text, series string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + `(?:\{[^}]*\})? (\S+)$`)
	if strings.HasSuffix(series, "}") || strings.Contains(series, "{") {
		re = regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	}
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no sample %s in:\n%s", series, text)
	}
	return m[1]
}

// Ensure that serve, with --log-format json and --log-decisions, logs
// JSON lines only, one per administrative change with its actor, scopes,
// epochs, reason and hold id, and one per decision; and that its metrics
// listener exports the build, the served requests by route and the
// certificate's expiry, which a SIGHUP reload moves.
func TestServe_LogsAndMetrics(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	c.clientCert("t", "a", spiffeWorker+"a")
	live := c.path("live-server")
	copyPair := func(from string) {
		for _, ext := range []string{".crt", ".key"} {
			b, err := os.ReadFile(c.path(from + ext))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(live+ext+".tmp", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(live+ext+".tmp", live+ext); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyPair("t-server")
	c.env["KVFENCE_LOG_DECISIONS"] = "true" // through the environment, as a unit file would
	rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", live+".crt", "--tls-key", live+".key",
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--metrics-listen", "127.0.0.1:0",
		"--log-format", "json")
	url := "https://" + rn.addrs.Listen
	as := func(who string, args ...string) []string {
		return append(args, "--server", url, "--tls-cert", c.path("t-"+who+".crt"), "--tls-key", c.path("t-"+who+".key"),
			"--tls-ca", c.path("t-ca.crt"))
	}
	g := c.json(0, as("operator", "activate", "--scope", fixtureScope, "--executor", spiffeWorker+"a", "--claim", "claim-a",
		"--request", c.path("req.cbor"))...)
	c.must(0, "envelope", "build", "--scope", fixtureScope, "--epoch", jsonNum(g["epoch"]), "--grant", g["grant"].(string),
		"--executor", spiffeWorker+"a", "--claim", "claim-a", "--request", c.path("req.cbor"), "--out", c.path("a.cbor"))
	c.json(0, as("a", "submit", "--envelope", c.path("a.cbor"))...)
	c.json(0, as("operator", "hold", "--scope", fixtureScope, "--reason", "worker-a stalled", "--hold-id", "inc-7")...)
	c.json(ExitDenied, as("a", "submit", "--envelope", c.path("a.cbor"))...)

	// The lines are written before the answers are sent.
	changes := jsonLogLines(t, rn.stderr.String(), "admin change")
	if len(changes) != 2 {
		t.Fatalf("%d admin change lines, want 2:\n%s", len(changes), rn.stderr.String())
	}
	hold := fmt.Sprint(changes[1]["change"], changes[1]["actor"], changes[1]["scopes"], changes[1]["epochs_before"],
		changes[1]["epochs_after"], changes[1]["reason"], changes[1]["hold_id"], changes[1]["listener"])
	if want := fmt.Sprint("hold", spiffeOperator, []any{fixtureScope}, []any{1.0}, []any{2.0}, "worker-a stalled", "inc-7", "tls"); hold != want {
		t.Errorf("hold line %s, want %s", hold, want)
	}
	if changes[0]["change"] != "activate" || changes[0]["grant"] != g["grant"] {
		t.Errorf("activate line %v", changes[0])
	}
	decisions := jsonLogLines(t, rn.stderr.String(), "decision")
	if len(decisions) != 2 || decisions[0]["outcome"] != "applied" || decisions[1]["reason"] != "receiver_held" ||
		decisions[1]["caller"] != spiffeWorker+"a" || decisions[1]["grant"] != g["grant"] {
		t.Errorf("decision lines %v", decisions)
	}

	metrics := "http://" + rn.addrs.MetricsListen + "/metrics"
	text := httpGet(t, metrics)
	if v := metricValue(t, text, `kvfence_http_requests_total{code="200",error="",route="/v1/submit"}`); v != "1" {
		t.Errorf("applied submits %s", v)
	}
	if v := metricValue(t, text, `kvfence_http_requests_total{code="403",error="",route="/v1/submit"}`); v != "1" {
		t.Errorf("denied submits %s", v)
	}
	if !strings.Contains(text, `engine="bbolt"`) || !strings.Contains(text, `goversion="`+runtime.Version()+`"`) {
		t.Errorf("build info: %s", metricValue(t, text, "kvfence_build_info"))
	}
	expiry := func() string {
		v := metricValue(t, httpGet(t, metrics), "kvfence_tls_certificate_expiry_timestamp_seconds")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(int64(f), 10)
	}
	certExpiry := func(prefix string) string {
		pair, err := tls.LoadX509KeyPair(c.path(prefix+".crt"), c.path(prefix+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return strconv.FormatInt(pair.Leaf.NotAfter.Unix(), 10)
	}
	if got, want := expiry(), certExpiry("t-server"); got != want {
		t.Fatalf("expiry %s, want %s", got, want)
	}
	// A certificate that lives longer, installed and reloaded.
	c.must(0, "cert", "server", "--ca", c.path("t-ca"), "--ip", "127.0.0.1", "--validity", "2000h", "--out", c.path("t-long"))
	copyPair("t-long")
	rn.hup <- os.Interrupt
	want := certExpiry("t-long")
	for deadline := time.Now().Add(10 * time.Second); expiry() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("expiry %s after the reload, want %s\n%s", expiry(), want, rn.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := rn.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// Ensure that --log-level warn leaves out the info lines (the admin
// changes), and that a text log is text.
func TestServe_LogLevel(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.pki("t")
	c.clientCert("t", "operator", spiffeOperator)
	for _, tc := range []struct {
		level    string
		wantHold bool
	}{{"info", true}, {"warn", false}} {
		rn := c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
			"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--log-level", tc.level)
		c.json(0, "hold", "--scope", fixtureScope, "--reason", "r-"+tc.level, "--server", "https://"+rn.addrs.Listen,
			"--tls-cert", c.path("t-operator.crt"), "--tls-key", c.path("t-operator.key"), "--tls-ca", c.path("t-ca.crt"))
		if code := rn.wait(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		logged := regexp.MustCompile(`level=INFO msg="admin change" listener=tls change=hold actor=` +
			regexp.QuoteMeta(spiffeOperator) + ` .* reason=r-` + tc.level).MatchString(rn.stderr.String())
		if logged != tc.wantHold {
			t.Errorf("--log-level %s: hold logged %v:\n%s", tc.level, logged, rn.stderr.String())
		}
		if strings.Contains(rn.stderr.String(), "level=INFO") != tc.wantHold {
			t.Errorf("--log-level %s: info lines %v", tc.level, !tc.wantHold)
		}
	}
}
