package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that the replay of a lost-anchor admission against a database put
// back from before its recovery is refused, exit 4, changing nothing: with
// the anchor the recovery created kept (it names the admission as
// applied), and with that anchor deleted too once the admission has
// expired by this machine's clock. Within the admission's validity a
// deleted anchor lets the copy back in, held, as SECURITY.md says.
func TestLostAnchorReplayPutBack(t *testing.T) {
	c := newCLI(t)
	c.anchorLost()
	db, anchor := c.env[envDB], c.env[envAnchor]
	before := c.path("before.db")
	copyFile(t, db, before)
	adm := c.path("lost.adm")
	c.must(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
		"--reason", "anchor volume lost", "--epoch-floor", "10", "--out", adm)
	out := c.json(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	for _, s := range out["scopes"].([]any) {
		if s := s.(map[string]any); s["epoch"].(float64) != 11 {
			t.Fatalf("recovered scope: %v", s)
		}
	}
	c.activate("worker-b", "claim-b", "b.cbor")

	// (a) The anchor kept, the database put back.
	copyFile(t, before, db)
	anchorBefore := readFile(t, anchor)
	r := c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	for _, want := range []string{"admission already consumed", "Try: this admission was applied already"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("replay with the anchor kept lacks %q: %s", want, r)
		}
	}
	if !bytes.Equal(readFile(t, anchor), anchorBefore) || !bytes.Equal(readFile(t, db), readFile(t, before)) {
		t.Fatal("a refused replay changed the anchor or the database")
	}
	out = c.json(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if e := out["error"].(map[string]any); e["code"] != "admission_replayed" {
		t.Errorf("--json code: %v", e)
	}

	// (b) The anchor deleted as well, the admission expired.
	if err := os.Remove(anchor); err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return time.Now().Add(61 * time.Minute) }
	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	for _, want := range []string{"admission expired", "Try: an admission can be applied only until it expires"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("replay of an expired admission lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(anchor); !os.IsNotExist(err) {
		t.Fatalf("a refused replay created the anchor: %v", err)
	}
	if !bytes.Equal(readFile(t, db), readFile(t, before)) {
		t.Fatal("a refused replay changed the database")
	}

	// What remains within the validity: the copy is re-admitted, held.
	c.now = nil
	out = c.json(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	for _, s := range out["scopes"].([]any) {
		if s := s.(map[string]any); s["epoch"].(float64) != 11 || s["mode"] != "held" {
			t.Errorf("re-admitted scope: %v", s)
		}
	}
}

// Ensure that admission new signs the expiry --valid-for asks for, and
// refuses a zero, negative, unparsable or over-long one as a usage error.
func TestAdmissionValidFor(t *testing.T) {
	c := newCLI(t)
	c.anchorLost()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return at }
	for _, bad := range []string{"0s", "-1h", "24h0m1s", "1y", ""} {
		r := c.must(ExitUsage, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
			"--reason", "r", "--valid-for", bad, "--out", c.path("bad.adm"))
		if _, err := os.Stat(c.path("bad.adm")); !os.IsNotExist(err) {
			t.Fatalf("--valid-for %q: wrote the admission: %s", bad, r)
		}
	}
	for _, tc := range []struct {
		flag []string
		want time.Duration
	}{{nil, time.Hour}, {[]string{"--valid-for", "24h"}, 24 * time.Hour}, {[]string{"--valid-for", "90s"}, 90 * time.Second}} {
		out := c.path("adm" + strings.Join(tc.flag, ""))
		res := c.json(0, append([]string{"admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"),
			"--reason", "r", "--out", out}, tc.flag...)...)
		sa, err := audit.ParseSignedAdmission(readFile(t, out))
		if err != nil {
			t.Fatal(err)
		}
		if sa.At != at.UnixNano() || sa.Expires != at.Add(tc.want).UnixNano() ||
			res["expires"] != at.Add(tc.want).Format(time.RFC3339Nano) {
			t.Errorf("%v: at %d, expires %d (JSON %v), want %v later", tc.flag, sa.At, sa.Expires, res["expires"], tc.want)
		}
	}
}

// Ensure that recover refuses an admission whose signed expiry was
// changed, and one of the previous format, which had none, each exit 4
// with a clear error, changing nothing.
func TestRecoverRefusesAlteredAndOldAdmissions(t *testing.T) {
	c := newCLI(t)
	c.anchorLost()
	adm := c.path("lost.adm")
	c.must(0, "admission", "new", "--lost-anchor", "--recovery-key", c.path("recovery.key"), "--reason", "r", "--out", adm)
	sa, err := audit.ParseSignedAdmission(readFile(t, adm))
	if err != nil {
		t.Fatal(err)
	}
	sa.Expires += int64(time.Hour)
	longer, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.path("longer.adm"), longer, 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.must(ExitIntegrity, "recover", "--admission", c.path("longer.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "bad signature") {
		t.Errorf("an admission with a later expiry: %s", r)
	}
	r = c.must(ExitIntegrity, "recover", "--admission", "../../audit/testdata/format/admission-lost-anchor-v2.cbor",
		"--recovery-pub", c.path("recovery.key.pub"))
	for _, want := range []string{"admission format v2 has no expiry", "Try: admissions of the previous format"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("a v2 admission lacks %q: %s", want, r)
		}
	}
	if _, err := os.Stat(c.env[envAnchor]); !os.IsNotExist(err) {
		t.Fatalf("a refused recover created the anchor: %v", err)
	}
	c.must(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
}
