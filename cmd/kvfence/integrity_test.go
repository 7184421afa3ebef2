package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// rollbackHint is the hint every command prints for a database that is
// older than its anchor.
const rollbackHint = "Try: the database is older than its anchor: a backup may have been restored over it; " +
	"run kvfence verify-chain for the evidence; to re-admit this database deliberately, have the recovery key " +
	"holder run kvfence admission new and then kvfence recover"

// copyFile copies src over dst, keeping dst's mode if it exists.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the content of path, failing the test if it cannot.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rolledBack sets up the receiver of c, activates worker A (envelope
// a.cbor), keeps a copy of the database, holds the scope, lets worker B
// apply its request, and then puts the old copy back over the database, as
// a restored backup would; the database as it was before that is kept in
// receiver.db.newer. It returns A's grant id.
func (c *cli) rolledBack() string {
	c.t.Helper()
	c.receiver()
	grantA := c.activate("worker-a", "claim-a", "a.cbor")
	copyFile(c.t, c.env[envDB], c.path("receiver.db.bak"))
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "worker-a heartbeat expired")
	c.activate("worker-b", "claim-b", "b.cbor")
	out := c.json(0, "submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))
	if out["outcome"] != "applied" || out["revision"].(float64) != 2 {
		c.t.Fatalf("B's submit: %v", out)
	}
	copyFile(c.t, c.env[envDB], c.path("receiver.db.newer"))
	copyFile(c.t, c.path("receiver.db.bak"), c.env[envDB])
	return grantA
}

// Ensure that a database restored from a backup is refused by every command
// that checks the anchor, that A's old envelope changes nothing, and that
// only an admission signed by the recovery key re-admits the database, with
// every scope held at an epoch A's grant never had.
func TestRollbackWalkthrough(t *testing.T) {
	c := newCLI(t)
	grantA := c.rolledBack()
	grants := map[string]string{grantA: "GRANT_A"}
	db, anchor := c.env[envDB], c.env[envAnchor]
	pub := c.path("receiver.key.pub")
	anchorBefore := readFile(t, anchor)

	// A resumes against the restored copy: refused before any decision,
	// exit 4, with what was found and what to do next.
	r := c.must(ExitIntegrity, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if r.stdout != "" {
		t.Errorf("a refused submit wrote to stdout: %q", r.stdout)
	}
	for _, want := range []string{"Error: ", "rollback detected", rollbackHint} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// The restored copy is unchanged: read without the anchor (--anchor ""
	// does not fall back to KVFENCE_ANCHOR), the target is still at
	// revision 1 and the scope still names A's grant, which is exactly why
	// it must not be written to.
	out := c.json(0, "observe", "target", fixtureScope, "--anchor", "")
	if out["revision"].(float64) != 1 || out["value"] != fixtureValue {
		t.Fatalf("target after A's refused submit: %v", out)
	}
	out = c.json(0, "status", "--anchor", "")
	st := out["scopes"].([]any)[0].(map[string]any)
	if out["anchor_checked"] != false || st["active_grant"] != grantA || st["mode"] != "open" {
		t.Fatalf("status of the restored copy: %v", out)
	}
	if !bytes.Equal(readFile(t, anchor), anchorBefore) {
		t.Fatal("a refused command changed the anchor")
	}

	// Observation with the anchor refuses too, and so does every writer.
	r = c.must(ExitIntegrity, "status")
	if !strings.Contains(r.stderr, rollbackHint) || r.stdout != "" {
		t.Errorf("status: %s", r)
	}
	c.must(ExitIntegrity, "observe", "events")
	c.must(ExitIntegrity, "hold", "--scope", fixtureScope, "--reason", "r")
	c.must(ExitIntegrity, "activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c",
		"--request", c.path("req.cbor"))

	// verify-chain shows the evidence.
	out = c.json(ExitIntegrity, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	golden(t, "verify-chain-rollback.json", c.maskAll(c.last, grants))
	if out["ok"] != false || out["problem"] != "rollback_detected" ||
		out["head_seq"].(float64) >= out["anchor_seq"].(float64) || out["detail"] == "" {
		t.Fatalf("verify-chain: %v", out)
	}
	headSeq, anchorSeq := out["head_seq"], out["anchor_seq"]
	r = c.must(ExitIntegrity, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	golden(t, "verify-chain-rollback.txt", c.maskAll(r.stdout, grants))
	if !strings.Contains(r.stderr, "rollback_detected") || !strings.Contains(r.stderr, "kvfence admission new") {
		t.Errorf("verify-chain stderr:\n%s", r.stderr)
	}

	// The recovery key holder signs an admission for exactly this state.
	adm := c.path("restore.adm")
	out = c.json(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--db", db, "--anchor", anchor,
		"--reason", "restored from backup after a disk failure", "--out", adm)
	golden(t, "admission-new.json", c.maskAll(c.last, grants))
	if out["head_seq"] != headSeq || out["anchor_seq"] != anchorSeq || out["receiver"] != "lab-receiver" ||
		out["epoch_high_water"].(float64) != 2 {
		t.Fatalf("admission new: %v, want head %v anchor %v", out, headSeq, anchorSeq)
	}
	if fi, err := os.Stat(adm); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admission file: %v; want mode 0600", err)
	}
	adm1 := readFile(t, adm)
	r = c.must(ExitError, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "again",
		"--out", adm)
	if !strings.Contains(r.stderr, "file exists") || !bytes.Equal(readFile(t, adm), adm1) {
		t.Fatalf("admission new overwrote its --out: %s", r)
	}
	if !bytes.Equal(readFile(t, anchor), anchorBefore) {
		t.Fatal("admission new changed the anchor")
	}

	// recover applies it: every scope held above the anchor's high-water.
	out = c.json(0, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	golden(t, "recover.json", c.maskAll(c.last, grants))
	scopes := out["scopes"].([]any)
	if len(scopes) != 1 {
		t.Fatalf("recover: %v", out)
	}
	s := scopes[0].(map[string]any)
	if s["scope"] != fixtureScope || s["previous_epoch"].(float64) != 1 || s["epoch"].(float64) != 3 || s["mode"] != "held" {
		t.Fatalf("recovered scope: %v", s)
	}
	// The recovered entry continues the admitted chain, and the anchor now
	// vouches for it: it moves to the admitted head's successor, below the
	// superseded anchor's seq, which only an admission may do.
	if out["audit_seq"].(float64) != headSeq.(float64)+1 || out["anchor_seq"] != out["audit_seq"] {
		t.Fatalf("recover: audit seq %v, new anchor %v; admitted head %v", out["audit_seq"], out["anchor_seq"], headSeq)
	}
	recoveredSeq := jsonNum(out["audit_seq"])

	// A's envelope is now refused by the fence, not by the integrity check.
	out = c.json(ExitDenied, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	if out["outcome"] != "denied" || out["reason"] != "receiver_held" {
		t.Fatalf("A after recovery: %v", out)
	}
	out = c.json(0, "observe", "target", fixtureScope)
	if out["revision"].(float64) != 1 {
		t.Fatalf("target after recovery: %v", out)
	}
	out = c.json(0, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	if out["ok"] != true || out["problem"] != "ok" || out["detail"] != "" {
		t.Fatalf("verify-chain after recovery: %v", out)
	}
	out = c.json(0, "status", "--scope", fixtureScope)
	st = out["scopes"].([]any)[0].(map[string]any)
	if st["epoch"].(float64) != 3 || st["mode"] != "held" || st["active_grant"] != "" || out["anchor_checked"] != true {
		t.Fatalf("status after recovery: %v", out)
	}
	r = c.must(0, "observe", "events", "--since", recoveredSeq)
	if !strings.Contains(r.stdout, " recovered ") || !strings.Contains(r.stdout, "restored from backup after a disk failure") {
		t.Errorf("the audit chain lacks the recovery:\n%s", r.stdout)
	}

	// The admission is spent: the anchor it superseded is gone, and the
	// database and the new anchor name it as applied.
	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "admission already consumed") {
		t.Errorf("replayed admission: %s", r)
	}
	// New grants work again at the new epoch.
	c.must(0, "activate", "--scope", fixtureScope, "--executor", "worker-c", "--claim", "claim-c",
		"--request", c.path("req.cbor"), "--epoch", "3")

	// The copy that was current before the restore is now the one that
	// disagrees with the anchor: putting it back is a fork.
	copyFile(t, c.path("receiver.db.newer"), db)
	r = c.must(ExitIntegrity, "submit", "--as", "worker-b", "--envelope", c.path("b.cbor"))
	if !strings.Contains(r.stderr, "fork detected") || !strings.Contains(r.stderr, "Try: the database's history differs") {
		t.Errorf("submit against the superseded copy: %s", r)
	}
	out = c.json(ExitIntegrity, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	if out["problem"] != "fork_detected" {
		t.Fatalf("verify-chain of the superseded copy: %v", out)
	}
}

// Ensure that admission new and recover print what they found and did for
// humans too: both heads, and every scope's previous and new epoch, held.
func TestRecoverText(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "scope", "create", "--scope", "second")
	copyFile(t, c.env[envDB], c.path("receiver.db.bak"))
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "r")
	copyFile(t, c.path("receiver.db.bak"), c.env[envDB])

	r := c.must(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "restored",
		"--out", c.path("adm"))
	golden(t, "admission-new.txt", c.maskAll(r.stdout, nil))
	if !strings.Contains(r.stdout, "the database is older than its anchor (rollback)") {
		t.Errorf("admission new:\n%s", r.stdout)
	}
	r = c.must(0, "recover", "--admission", c.path("adm"), "--recovery-pub", c.path("recovery.key.pub"))
	golden(t, "recover.txt", c.maskAll(r.stdout, nil))
	out := c.json(0, "status")
	for _, s := range out["scopes"].([]any) {
		s := s.(map[string]any)
		if s["epoch"].(float64) != 3 || s["mode"] != "held" {
			t.Errorf("after recovery: %v", s)
		}
	}
}

// Ensure that verify-chain checks the anchor with the operator's --pub, not
// with the key the database records: another key is bad_signature, exit 4.
func TestVerifyChainWrongPub(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.must(0, "keygen", "--out", c.path("other.key"))
	out := c.json(ExitIntegrity, "verify-chain", "--pub", c.path("other.key.pub"))
	if out["ok"] != false || out["problem"] != "bad_signature" || out["detail"] == "" {
		t.Fatalf("verify-chain with another key: %v", out)
	}
	r := c.must(ExitIntegrity, "verify-chain", "--pub", c.path("other.key.pub"))
	if !strings.Contains(r.stderr, "bad signature") || !strings.Contains(r.stderr, "Try: the anchor is not signed by this receiver's key") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "run kvfence verify-chain") {
		t.Errorf("verify-chain suggests running itself:\n%s", r.stderr)
	}
	c.json(ExitOK, "verify-chain", "--pub", c.path("receiver.key.pub"))
	// A negative --max-age is a usage error; a tiny one reports the stale
	// anchor.
	c.must(ExitUsage, "verify-chain", "--pub", c.path("receiver.key.pub"), "--max-age", "-1s")
	time.Sleep(2 * time.Millisecond)
	out = c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"), "--max-age", "1ms")
	if out["problem"] != "anchor_stale" {
		t.Fatalf("verify-chain --max-age 1ms: %v", out)
	}
}

// Ensure that a deleted anchor stops every command that checks it, with
// exit 4, and is never recreated.
func TestAnchorMissing(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	anchor := c.env[envAnchor]
	if err := os.Remove(anchor); err != nil {
		t.Fatal(err)
	}
	out := c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["ok"] != false || out["problem"] != "anchor_missing" || out["anchor_seq"].(float64) != 0 ||
		out["anchor_head"] != "" || out["entries"].(float64) == 0 {
		t.Fatalf("verify-chain without an anchor: %v", out)
	}
	for _, args := range [][]string{
		{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")},
		{"hold", "--scope", fixtureScope, "--reason", "r"},
		{"scope", "create", "--scope", "other"},
		{"status"},
		{"observe", "target", fixtureScope},
		{"admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r", "--out", c.path("adm")},
	} {
		r := c.must(ExitIntegrity, args...)
		if !strings.Contains(r.stderr, "anchor missing") || !strings.Contains(r.stderr, "never recreates") {
			t.Errorf("%s: stderr:\n%s", args[0], r.stderr)
		}
	}
	if _, err := os.Stat(anchor); !os.IsNotExist(err) {
		t.Fatalf("the anchor was recreated: %v", err)
	}
	if _, err := os.Stat(c.path("adm")); !os.IsNotExist(err) {
		t.Fatalf("admission new wrote an admission without an anchor: %v", err)
	}
	// Nothing was applied: the target is untouched.
	out = c.json(0, "observe", "target", fixtureScope, "--anchor", "")
	if out["revision"].(float64) != 1 {
		t.Fatalf("target: %v", out)
	}
}

// Ensure that an admission signed by any key but the recovery key recorded
// at init is refused with exit 4 and changes nothing: neither when the
// operator gives the right recovery public key (the signature does not
// verify) nor when they give the signer's (it is not the recorded one).
// admission new itself refuses such a key earlier, with exit 1.
func TestRecoverWrongKey(t *testing.T) {
	c := newCLI(t)
	c.rolledBack()
	db, anchor := c.env[envDB], c.env[envAnchor]
	c.must(0, "keygen", "--out", c.path("mallory.key"))

	r := c.must(ExitError, "admission", "new", "--recovery-key", c.path("mallory.key"), "--reason", "r",
		"--out", c.path("m.adm"))
	if !strings.Contains(r.stderr, "is not the recovery key recorded at init") {
		t.Errorf("admission new with another key: %s", r)
	}
	r = c.must(ExitDenied, "admission", "new", "--recovery-key", c.path("receiver.key"), "--reason", "r",
		"--out", c.path("m.adm"))
	if !strings.Contains(r.stderr, "the receiver's own key") {
		t.Errorf("admission new with the receiver key: %s", r)
	}
	if _, err := os.Stat(c.path("m.adm")); !os.IsNotExist(err) {
		t.Fatalf("a refused admission new wrote its --out: %v", err)
	}

	// Sign one anyway, as admission new would, with the wrong key.
	q, err := kvfence.Inspect(db, audit.FileAnchor{Path: anchor})
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := keyfile.LoadPrivate(c.path("mallory.key"))
	if err != nil {
		t.Fatal(err)
	}
	sa, err := audit.SignAdmission(mallory, audit.Admission{Receiver: q.Receiver, SupersededAnchor: q.Anchor,
		AdmittedHead: q.Head, At: time.Now().UnixNano(), Expires: time.Now().Add(time.Hour).UnixNano(), Reason: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	adm := c.write("m.adm", string(b))
	anchorBefore, dbBefore := readFile(t, anchor), readFile(t, db)

	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "bad signature") || !strings.Contains(r.stderr, "Try: only an admission signed by the recovery key") {
		t.Errorf("recover with a forged admission: %s", r)
	}
	r = c.must(ExitIntegrity, "recover", "--admission", adm, "--recovery-pub", c.path("mallory.key.pub"))
	if !strings.Contains(r.stderr, "not the one recorded at init") {
		t.Errorf("recover with the forger's public key: %s", r)
	}
	// A file that is not an admission at all.
	c.must(ExitIntegrity, "recover", "--admission", c.write("junk.adm", "junk"), "--recovery-pub",
		c.path("recovery.key.pub"))
	if !bytes.Equal(readFile(t, anchor), anchorBefore) || !bytes.Equal(readFile(t, db), dbBefore) {
		t.Fatal("a refused recover changed the database or the anchor")
	}
	out := c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["problem"] != "rollback_detected" {
		t.Fatalf("verify-chain after refused recoveries: %v", out)
	}
}

// Ensure that every command that writes requires --anchor (or
// KVFENCE_ANCHOR) as a usage error, before it touches anything.
func TestWritersRequireAnchor(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	delete(c.env, envAnchor)
	dbBefore := readFile(t, c.env[envDB])
	for _, args := range [][]string{
		{"init", "--id", "r2", "--db", c.path("r2.db")},
		{"scope", "create", "--scope", "s"},
		{"target", "create", "--scope", fixtureScope, "--target", "t", "--value", "v"},
		{"activate", "--scope", fixtureScope, "--executor", "w", "--claim", "c", "--request", c.path("req.cbor")},
		{"hold", "--scope", fixtureScope, "--reason", "r"},
		{"submit", "--as", "worker-a", "--envelope", c.path("a.cbor")},
		{"recover", "--admission", c.path("adm"), "--recovery-pub", c.path("recovery.key.pub")},
		{"admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "r", "--out", c.path("adm")},
		{"verify-chain", "--pub", c.path("receiver.key.pub")},
	} {
		name := strings.Join(args[:1], " ")
		if args[0] == "scope" || args[0] == "target" || args[0] == "admission" {
			name = strings.Join(args[:2], " ")
		}
		r := c.must(ExitUsage, args...)
		if !strings.Contains(r.stderr, "Error: kvfence "+name+": --anchor is required") ||
			!strings.Contains(r.stderr, "Try: pass --anchor or set KVFENCE_ANCHOR") || r.stdout != "" {
			t.Errorf("%s without --anchor: %s", name, r)
		}
	}
	if _, err := os.Stat(c.path("r2.db")); !os.IsNotExist(err) {
		t.Fatalf("init without --anchor created a database: %v", err)
	}
	if !bytes.Equal(readFile(t, c.env[envDB]), dbBefore) {
		t.Fatal("a refused writer changed the database")
	}
}

// flipAnchorByte changes one byte of the anchor file's slot (0 or 1) in
// the middle of the checkpoint it holds.
func flipAnchorByte(t *testing.T, anchor string, slot int) {
	t.Helper()
	b := readFile(t, anchor)
	b[slot*audit.AnchorSlotSize+200] ^= 0x01
	if err := os.WriteFile(anchor, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// currentSlot returns the anchor file's slot with the higher generation.
func currentSlot(t *testing.T, anchor string) int {
	t.Helper()
	b := readFile(t, anchor)
	gen := func(slot int) string { return string(b[slot*audit.AnchorSlotSize+27 : slot*audit.AnchorSlotSize+47]) }
	if gen(1) > gen(0) {
		return 1
	}
	return 0
}

// Ensure that a damaged anchor is handled as the crash it may be, and no
// further: with one generation in the file, a change to it stops every
// command with exit 4 and is left as evidence; with two, a change to the
// newer slot falls back to the older anchor, which the receiver accepts as
// the crash window, with a warning, and moves up on its next write; damage
// to both slots is refused again as anchor_damaged.
func TestAnchorDamaged(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")

	// A fresh receiver's anchor holds one generation.
	fresh := c.path("fresh.anchor")
	c.must(0, "init", "--db", c.path("fresh.db"), "--anchor", fresh, "--id", "fresh",
		"--recovery-pub", c.path("recovery.key.pub"))
	flipAnchorByte(t, fresh, 0)
	before := readFile(t, fresh)
	out := c.json(ExitIntegrity, "verify-chain", "--db", c.path("fresh.db"), "--anchor", fresh, "--pub", pub)
	if out["ok"] != false || out["problem"] != "anchor_damaged" {
		t.Fatalf("verify-chain with the only slot damaged: %v", out)
	}
	r := c.must(ExitIntegrity, "scope", "create", "--db", c.path("fresh.db"), "--anchor", fresh, "--scope", "s")
	if !strings.Contains(r.stderr, "bad anchor file") {
		t.Fatalf("scope create with the only slot damaged: stderr:\n%s", r.stderr)
	}
	if !bytes.Equal(readFile(t, fresh), before) {
		t.Fatal("a damaged anchor was overwritten")
	}

	// The fixture receiver's anchor has seen several writes.
	anchor := c.env[envAnchor]
	out = c.json(0, "verify-chain", "--pub", pub)
	head := out["head_seq"].(float64)
	if out["anchor_seq"].(float64) != head {
		t.Fatalf("verify-chain: %v", out)
	}
	cur := currentSlot(t, anchor)
	flipAnchorByte(t, anchor, cur)
	out = c.json(ExitWarning, "verify-chain", "--pub", pub)
	if out["ok"] != true || out["anchor_seq"].(float64) >= head || out["head_seq"].(float64) != head ||
		out["anchor_damage"] == nil {
		t.Fatalf("verify-chain with the newer slot damaged: %v, want the older anchor below head %v", out, head)
	}
	r = c.must(0, "scope", "create", "--scope", "after-damage")
	if !strings.Contains(r.stderr, "Warning: ") || !strings.Contains(r.stderr, "is damaged") {
		t.Fatalf("scope create over a damaged slot did not warn: stderr:\n%s", r.stderr)
	}
	out = c.json(0, "verify-chain", "--pub", pub)
	if out["anchor_seq"].(float64) != out["head_seq"].(float64) || out["head_seq"].(float64) <= head ||
		out["anchor_damage"] != nil {
		t.Fatalf("verify-chain after the next write: %v", out)
	}
	if _, err := (audit.FileAnchor{Path: anchor}).Load(); err != nil {
		t.Fatal(err)
	}
	flipAnchorByte(t, anchor, 0)
	flipAnchorByte(t, anchor, 1)
	if out := c.json(ExitIntegrity, "verify-chain", "--pub", pub); out["problem"] != "anchor_damaged" {
		t.Fatalf("verify-chain with both slots damaged: %v", out)
	}
	c.must(ExitIntegrity, "scope", "create", "--scope", "after-both")
}
