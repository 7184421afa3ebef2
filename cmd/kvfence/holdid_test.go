package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
)

// onServer returns a function that appends the flags of a served receiver
// to a command line: the receiver of c served on an admin socket, or the
// file itself when served is false.
func (c *cli) onServer(served bool) func(args ...string) []string {
	c.t.Helper()
	if !served {
		return func(args ...string) []string { return args }
	}
	c.pki("t")
	sock := filepath.Join(socketDir(c.t), "admin.sock")
	c.serve("--listen", "127.0.0.1:0", "--tls-cert", c.path("t-server.crt"), "--tls-key", c.path("t-server.key"),
		"--client-ca", c.path("t-ca.crt"), "--admin", spiffeOperator, "--admin-socket", sock,
		"--admin-uid", fmt.Sprint(os.Getuid()))
	return func(args ...string) []string { return append(args, "--server", "unix://"+sock) }
}

// scopeEpoch returns the fixture scope's epoch and mode.
func (c *cli) scopeEpoch(on func(...string) []string) (string, string) {
	c.t.Helper()
	st := c.json(0, on("status", "--scope", fixtureScope)...)["scopes"].([]any)[0].(map[string]any)
	return jsonNum(st["epoch"]), st["mode"].(string)
}

// Ensure, on the file and over a served receiver, that hold --hold-id is
// idempotent: a repeat prints the first result, says it was repeated and
// leaves the epoch where the first hold and the activation after it put
// it; that its JSON carries a checkpoint and an acknowledgment signed by
// the receiver's key; that the id with another reason, and a stale
// --expect-epoch, exit 3 with their codes and change nothing; and that a
// hold at the expected epoch advances it.
func TestHoldID_Repeat(t *testing.T) {
	for _, served := range []bool{false, true} {
		t.Run(fmt.Sprintf("served=%v", served), func(t *testing.T) {
			c := newCLI(t)
			c.receiver()
			on := c.onServer(served)
			pub, err := keyfile.LoadPublic(c.path("receiver.key.pub"))
			if err != nil {
				t.Fatal(err)
			}
			hold := on("hold", "--scope", fixtureScope, "--reason", "worker-a stalled", "--hold-id", "inc-1")
			out := c.json(0, hold...)
			sc := out["scopes"].([]any)[0].(map[string]any)
			if out["repeated"] != false || jsonNum(sc["previous_epoch"]) != "1" || jsonNum(sc["epoch"]) != "2" {
				t.Fatalf("first hold: %v", out)
			}
			cp := out["checkpoint"].(map[string]any)
			raw, _ := base64.StdEncoding.DecodeString(cp["signed_b64"].(string))
			signed, err := audit.ParseSignedCheckpoint(raw)
			if err != nil || signed.Verify(pub) != nil || cp["key_fingerprint"] != audit.KeyFingerprint(pub).String() {
				t.Fatalf("checkpoint %v does not verify under the receiver's key: %v", cp, err)
			}
			ack := sc["ack"].(map[string]any)
			raw, _ = base64.StdEncoding.DecodeString(ack["signed_b64"].(string))
			sa, err := audit.ParseSignedHoldAck(raw)
			if err != nil || sa.Verify(pub) != nil || sa.HoldID != "inc-1" || sa.Scope != fixtureScope || sa.CoveredBy(signed.Checkpoint) != nil {
				t.Fatalf("ack %v is not this hold's, signed: %v", ack, err)
			}
			c.must(0, on("activate", "--scope", fixtureScope, "--executor", "worker-b", "--claim", "claim-b",
				"--request", c.path("req.cbor"), "--epoch", "2")...)

			r := c.must(0, hold...)
			if !strings.Contains(r.stdout, "repeated: no new generation") || !strings.Contains(r.stdout, "key fingerprint") ||
				!strings.Contains(r.stdout, audit.KeyFingerprint(pub).String()) || !strings.Contains(r.stdout, "checkpoint seq") {
				t.Fatalf("repeat's text: %s", r.stdout)
			}
			if again := c.json(0, hold...); again["repeated"] != true ||
				jsonNum(again["scopes"].([]any)[0].(map[string]any)["epoch"]) != "2" {
				t.Fatalf("repeat: %v", again)
			}
			if epoch, mode := c.scopeEpoch(on); epoch != "2" || mode != "open" {
				t.Fatalf("after repeats: epoch %s, %s; want 2, open (the activation stands)", epoch, mode)
			}

			for _, bad := range []struct {
				args []string
				code string
			}{
				{on("hold", "--scope", fixtureScope, "--reason", "another", "--hold-id", "inc-1"), "hold_id_conflict"},
				{on("hold", "--scope", fixtureScope, "--reason", "r", "--hold-id", "inc-2", "--expect-epoch", "1"), "epoch_mismatch"},
			} {
				out := c.json(ExitDenied, bad.args...)
				if code := out["error"].(map[string]any)["code"]; code != bad.code {
					t.Errorf("%v: code %v, want %s", bad.args, code, bad.code)
				}
			}
			if epoch, mode := c.scopeEpoch(on); epoch != "2" || mode != "open" {
				t.Fatalf("after refusals: epoch %s, %s; want 2, open", epoch, mode)
			}
			out = c.json(0, on("hold", "--scope", fixtureScope, "--reason", "r", "--hold-id", "inc-3", "--expect-epoch", "2")...)
			if sc := out["scopes"].([]any)[0].(map[string]any); jsonNum(sc["epoch"]) != "3" || out["repeated"] != false {
				t.Fatalf("hold at the expected epoch: %v", out)
			}
		})
	}
}

// Ensure that the hold flags that cannot go together are usage errors
// that change nothing.
func TestHoldID_Usage(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	for _, args := range [][]string{
		{"hold", "--all", "--reason", "r", "--hold-id", "x"},
		{"hold", "--all", "--reason", "r", "--expect-epoch", "1"},
		{"hold", "--scope", fixtureScope, "--scope", "other", "--reason", "r", "--expect-epoch", "1"},
		{"hold", "--scope", fixtureScope, "--reason", "r", "--expect-epoch", "0"},
		{"hold", "--scope", fixtureScope, "--reason", "r", "--hold-id", ""},
	} {
		c.must(ExitUsage, args...)
	}
	if epoch, _ := c.scopeEpoch(func(a ...string) []string { return a }); epoch != "1" {
		t.Fatalf("epoch %s after usage errors, want 1", epoch)
	}
}

// Ensure, on the file and over a served receiver, that observe receipts
// lists what a claim's grant applied, nothing for another claim, and
// wants both flags.
func TestObserveReceipts(t *testing.T) {
	for _, served := range []bool{false, true} {
		t.Run(fmt.Sprintf("served=%v", served), func(t *testing.T) {
			c := newCLI(t)
			c.receiver()
			c.activate("worker-a", "claim-a", "a.cbor")
			applied := c.json(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
			on := c.onServer(served)
			out := c.json(0, on("observe", "receipts", "--scope", fixtureScope, "--claim", "claim-a")...)
			rcs := out["receipts"].([]any)
			if len(rcs) != 1 || rcs[0].(map[string]any)["action"] != "raise-retention" ||
				jsonNum(rcs[0].(map[string]any)["audit_seq"]) != jsonNum(applied["audit_seq"]) {
				t.Fatalf("receipts of claim-a: %v, want the applied one at seq %v", out, applied["audit_seq"])
			}
			r := c.must(0, on("observe", "receipts", "--scope", fixtureScope, "--claim", "claim-a")...)
			if !strings.Contains(r.stdout, "raise-retention") || !strings.Contains(r.stdout, "1 -> 2") {
				t.Fatalf("text: %s", r.stdout)
			}
			if out := c.json(0, on("observe", "receipts", "--scope", fixtureScope, "--claim", "claim-b")...); len(out["receipts"].([]any)) != 0 {
				t.Fatalf("receipts of claim-b: %v, want none", out)
			}
			r = c.must(0, on("observe", "receipts", "--scope", fixtureScope, "--claim", "claim-b")...)
			if !strings.Contains(r.stdout, "no receipt") {
				t.Fatalf("text for none: %s", r.stdout)
			}
			c.must(ExitUsage, on("observe", "receipts", "--scope", fixtureScope)...)
			c.must(ExitUsage, on("observe", "receipts", "--claim", "claim-a")...)
		})
	}
}

// Ensure that the executor's stale retry of its applied request, denied
// after a hold, names the applied decision's seq: receipt_seq with
// --json, "receipt seq" in text.
func TestSubmit_StaleRetryReceiptSeq(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	applied := c.json(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
	denied := c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if denied["outcome"] != "denied" || jsonNum(denied["receipt_seq"]) != jsonNum(applied["audit_seq"]) {
		t.Fatalf("stale retry: %v, want receipt_seq %v", denied, applied["audit_seq"])
	}
	r := c.must(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if !strings.Contains(r.stdout, "receipt seq") || !strings.Contains(r.stdout, jsonNum(applied["audit_seq"])) {
		t.Fatalf("text: %s", r.stdout)
	}
}
