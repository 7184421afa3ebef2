package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// line reports whether text has a line of the aligned table whose label is
// label and whose value begins with value.
func line(text, label, value string) bool {
	for l := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(l, label+" "); ok && strings.HasPrefix(strings.TrimLeft(v, " "), value) {
			return true
		}
	}
	return false
}

// Ensure that one byte changed in the newest slot of the anchor file, beside
// a database that holds the write it anchored, is never silent:
// verify-chain reports it in JSON and text and exits 6, status reports it,
// every command that opens the receiver warns on stderr, and the next write
// replaces the slot.
func TestAnchorSlotDamageReported(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")
	anchor := c.env[envAnchor]
	cur := currentSlot(t, anchor)
	flipAnchorByte(t, anchor, cur)
	want := fmt.Sprintf("anchor slot %d is damaged", cur)

	out := c.json(ExitWarning, "verify-chain", "--pub", pub)
	d, ok := out["anchor_damage"].(map[string]any)
	if out["ok"] != true || out["problem"] != "ok" || !ok {
		t.Fatalf("verify-chain: %v; want ok with anchor_damage", out)
	}
	if d["slot"] != float64(cur) || d["problem"] != "checksum mismatch" || d["newer"] != true ||
		d["claimed_generation"] != d["current_generation"].(float64)+1 || d["detail"] == "" {
		t.Fatalf("anchor_damage: %v", d)
	}
	r := c.must(ExitWarning, "verify-chain", "--pub", pub)
	if !line(r.stdout, "ok", "true") || !line(r.stdout, "anchor damage", want+": generation ") {
		t.Fatalf("verify-chain text:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "Warning: kvfence verify-chain: the chain verifies, but "+want) ||
		!strings.Contains(r.stderr, "Try: a crash during an anchor write") || strings.Contains(r.stderr, "Error:") {
		t.Fatalf("verify-chain stderr:\n%s", r.stderr)
	}

	out = c.json(0, "status")
	if d, ok := out["anchor_damage"].(map[string]any); !ok || d["slot"] != float64(cur) || d["newer"] != true {
		t.Fatalf("status: %v; want anchor_damage for slot %d", out, cur)
	}
	r = c.must(0, "status")
	if !line(r.stdout, "anchor damage", want) || !strings.Contains(r.stderr, "Warning: kvfence: ") ||
		!strings.Contains(r.stderr, want) {
		t.Fatalf("status:\n%s", r)
	}

	// A writer warns before its first write, which replaces the slot.
	r = c.must(0, "scope", "create", "--scope", "after-damage")
	if !strings.Contains(r.stderr, "Warning: ") || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "crash") {
		t.Fatalf("scope create stderr:\n%s", r.stderr)
	}
	r = c.must(0, "status", "--json")
	if strings.Contains(r.stdout, `"anchor_damage": {`) || r.stderr != "" {
		t.Fatalf("status after the next write:\n%s", r)
	}
	c.must(0, "verify-chain", "--pub", pub)
}

// Ensure that the attack the two-slot file once hid is refused: a database
// copied at write N, put back after write N+1 with the newest anchor slot
// damaged, makes every command that checks the anchor exit 4 with
// rollback_detected, and the old grant changes nothing.
func TestRestoredToPreviousWriteWithDamagedSlot(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")
	db, anchor := c.env[envDB], c.env[envAnchor]
	c.activate("worker-a", "claim-a", "a.cbor") // write N
	copyFile(t, db, c.path("write-n.db"))
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a lease expired") // write N+1
	flipAnchorByte(t, anchor, currentSlot(t, anchor))
	copyFile(t, c.path("write-n.db"), db)
	anchorBefore, dbBefore := readFile(t, anchor), readFile(t, db)

	out := c.json(ExitIntegrity, "verify-chain", "--pub", pub)
	d, _ := out["anchor_damage"].(map[string]any)
	if out["ok"] != false || out["problem"] != "rollback_detected" || d == nil || d["newer"] != true ||
		out["head_seq"] != out["anchor_seq"] || !strings.Contains(out["detail"].(string), "is damaged") {
		t.Fatalf("verify-chain: %v; want rollback_detected naming the damaged slot", out)
	}
	r := c.must(ExitIntegrity, "verify-chain", "--pub", pub)
	if !line(r.stdout, "problem", "rollback_detected") || !line(r.stdout, "anchor damage", "anchor slot") {
		t.Fatalf("verify-chain text:\n%s", r.stdout)
	}
	const hint = "Try: the anchor file's newest slot is damaged and the database ends exactly at the write before it"
	for _, args := range [][]string{
		{"status"},
		{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")},
		{"scope", "create", "--scope", "another"},
	} {
		r := c.must(ExitIntegrity, args...)
		if !strings.Contains(r.stderr, "rollback detected") || !strings.Contains(r.stderr, hint) {
			t.Fatalf("kvfence %s: stderr:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
	if string(readFile(t, anchor)) != string(anchorBefore) || string(readFile(t, db)) != string(dbBefore) {
		t.Fatal("a refused command changed the anchor or the database")
	}
	// Read without the anchor, the restored copy still has A's grant open:
	// only the refusal above kept A's request out.
	out = c.json(0, "status", "--anchor", "")
	if st := out["scopes"].([]any)[0].(map[string]any); st["mode"] != "open" || st["active_grant"] == "" {
		t.Fatalf("the restored copy: %v", out)
	}
	out = c.json(0, "observe", "target", fixtureScope, "--anchor", "")
	if out["revision"] != float64(1) {
		t.Fatalf("the target changed: %v", out)
	}
}

// Ensure that an anchor file whose two slots hold the same generation,
// which no write leaves, is anchor_damaged with a message that says so,
// and stops every command with exit 4.
func TestAnchorSameGenerationTwice(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")
	anchor := c.env[envAnchor]
	b := readFile(t, anchor)
	cur := currentSlot(t, anchor)
	copy(b[(1-cur)*audit.AnchorSlotSize:], b[cur*audit.AnchorSlotSize:(cur+1)*audit.AnchorSlotSize])
	if err := os.WriteFile(anchor, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out := c.json(ExitIntegrity, "verify-chain", "--pub", pub)
	detail, _ := out["detail"].(string)
	if out["ok"] != false || out["problem"] != "anchor_damaged" || !strings.Contains(detail, "the file is damaged") ||
		!strings.Contains(detail, "both hold generation") || out["anchor_damage"] != nil {
		t.Fatalf("verify-chain: %v", out)
	}
	r := c.must(ExitIntegrity, "verify-chain", "--pub", pub)
	if !line(r.stdout, "problem", "anchor_damaged") || !strings.Contains(r.stderr, "Try: the anchor file is damaged") {
		t.Fatalf("verify-chain:\n%s", r)
	}
	for _, args := range [][]string{{"status"}, {"scope", "create", "--scope", "s2"}} {
		r := c.must(ExitIntegrity, args...)
		if !strings.Contains(r.stderr, "the file is damaged: slots 0 and 1 both hold generation") {
			t.Fatalf("kvfence %s: stderr:\n%s", strings.Join(args, " "), r.stderr)
		}
	}
	if string(readFile(t, anchor)) != string(b) {
		t.Fatal("the damaged anchor file was changed")
	}
}
