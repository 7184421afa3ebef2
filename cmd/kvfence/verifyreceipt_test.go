package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Ensure that observe receipt --proof --json writes a proof that
// verify-receipt accepts with the receiver's public key, and that a
// tampered entry, proof, note or receipt, or another key, is refused with
// the integrity exit code, and a malformed file with the usage one.
func TestVerifyReceipt(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	// More writes after the receipt, so that the proof is not trivial.
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
	c.must(0, "keygen", "--out", c.path("other.key"))

	// Without the receiver's key there is no signed note to prove to.
	delete(c.env, envKey)
	c.must(ExitUsage, "observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof")
	c.env[envKey] = c.path("receiver.key")
	text := c.must(0, "observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof").stdout
	for _, want := range []string{"audit entry (base64)", "inclusion proof", "checkpoint\nkvfence/receiver/lab-receiver/", "\nkvfence-head "} {
		if !strings.Contains(text, want) {
			t.Fatalf("observe receipt --proof printed %q, want %q in it", text, want)
		}
	}
	good := c.must(0, "observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof", "--json").stdout
	var proof map[string]any
	if err := json.Unmarshal([]byte(good), &proof); err != nil {
		t.Fatal(err)
	}
	write := func(name string, mutate func(p map[string]any)) string {
		var p map[string]any
		if err := json.Unmarshal([]byte(good), &p); err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(p)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		path := c.path(name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	flip := func(b64 string, at int) string {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		b[at%len(b)] ^= 1
		return base64.StdEncoding.EncodeToString(b)
	}
	pub := c.path("receiver.key.pub")
	for _, tc := range []struct {
		name   string
		mutate func(p map[string]any)
		pub    string
		want   int
		code   string
	}{
		{"untouched", nil, pub, ExitOK, ""},
		{"entry byte flipped", func(p map[string]any) { p["entry_b64"] = flip(p["entry_b64"].(string), 7) }, pub, ExitIntegrity, "receipt_unproven"},
		{"proof hash flipped", func(p map[string]any) {
			inc := p["inclusion_b64"].([]any)
			inc[0] = flip(inc[0].(string), 0)
		}, pub, ExitIntegrity, "receipt_unproven"},
		{"proof hash dropped", func(p map[string]any) { p["inclusion_b64"] = p["inclusion_b64"].([]any)[1:] }, pub, ExitIntegrity, "receipt_unproven"},
		{"note root changed", func(p map[string]any) {
			lines := strings.SplitN(p["checkpoint"].(string), "\n", 4)
			lines[2] = flip(lines[2], 3)
			p["checkpoint"] = strings.Join(lines, "\n")
		}, pub, ExitIntegrity, "receipt_unproven"},
		{"note extension changed", func(p map[string]any) {
			p["checkpoint"] = strings.Replace(p["checkpoint"].(string), "kvfence-admission none", "kvfence-admission nonE", 1)
		}, pub, ExitIntegrity, "receipt_unproven"},
		{"receipt names another action", func(p map[string]any) { p["receipt"].(map[string]any)["action"] = "other" }, pub, ExitIntegrity, "receipt_unproven"},
		{"receipt names another seq", func(p map[string]any) {
			p["receipt"].(map[string]any)["audit_seq"] = p["receipt"].(map[string]any)["audit_seq"].(float64) + 1
		}, pub, ExitIntegrity, "receipt_unproven"},
		{"another receiver key", nil, c.path("other.key.pub"), ExitIntegrity, "receipt_unproven"},
		{"unknown key", func(p map[string]any) { p["extra"] = 1 }, pub, ExitUsage, "malformed_receipt_proof"},
		{"entry not base64", func(p map[string]any) { p["entry_b64"] = "!!" }, pub, ExitUsage, "malformed_receipt_proof"},
		{"no checkpoint", func(p map[string]any) { delete(p, "checkpoint") }, pub, ExitUsage, "malformed_receipt_proof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := write(strings.ReplaceAll(tc.name, " ", "-")+".json", tc.mutate)
			out := c.json(tc.want, "verify-receipt", "--pub", tc.pub, "--file", f, "--json")
			if tc.want == ExitOK {
				if out["ok"] != true || out["audit_seq"] != proof["receipt"].(map[string]any)["audit_seq"] {
					t.Fatalf("verify-receipt = %v", out)
				}
				return
			}
			if e, _ := out["error"].(map[string]any); e == nil || e["code"] != tc.code {
				t.Fatalf("verify-receipt = %v, want code %s", out, tc.code)
			}
		})
	}
	// --receiver: the note must be that receiver's.
	f := write("receiver.json", nil)
	if out := c.json(ExitOK, "verify-receipt", "--pub", pub, "--receiver", "lab-receiver", "--file", f, "--json"); out["receiver"] != "lab-receiver" {
		t.Fatalf("verify-receipt --receiver lab-receiver = %v", out)
	}
	out := c.json(ExitIntegrity, "verify-receipt", "--pub", pub, "--receiver", "other-receiver", "--file", f, "--json")
	if e, _ := out["error"].(map[string]any); e == nil || e["code"] != "receipt_unproven" {
		t.Fatalf("verify-receipt --receiver other-receiver = %v, want receipt_unproven", out)
	}
	// The proof read from stdin, as a worker pipes it.
	if r := c.runIn([]byte(good), "verify-receipt", "--pub", pub); r.code != ExitOK || !strings.HasPrefix(r.stdout, "ok: ") {
		t.Fatalf("verify-receipt from stdin: %s", r)
	}

	// Served: the receiver signs the note with its own key, and the
	// proof verifies as the local one does.
	on := c.onServer(true)
	served := c.must(0, on("observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof", "--json")...).stdout
	if r := c.runIn([]byte(served), "verify-receipt", "--pub", pub, "--json"); r.code != ExitOK {
		t.Fatalf("verify-receipt of the served proof: %s", r)
	}
	c.must(0, on("observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof")...)
}
