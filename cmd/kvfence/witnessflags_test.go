package main

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/keyfile"
)

// witnessed starts three witnesses on loopback, writes their public keys
// as kvfence witness init does (NAME.pub), has them trust c's receiver,
// and returns the set with the flags that name all three at quorum k.
func (c *cli) witnessed(k string) (*witnesstest.Set, []string) {
	c.t.Helper()
	set, err := witnesstest.Start(c.t.TempDir(), 3)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { set.Close() })
	pub, err := keyfile.LoadPublic(c.path("receiver.key.pub"))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := set.TrustReceiver("lab-receiver", pub); err != nil {
		c.t.Fatal(err)
	}
	var flags []string
	for _, w := range set.Witnesses {
		line, err := keyfile.MarshalPublic(w.Key.Public().(ed25519.PublicKey), w.Name)
		if err != nil {
			c.t.Fatal(err)
		}
		path := c.path(w.Name + ".pub")
		if err := os.WriteFile(path, line, 0o644); err != nil {
			c.t.Fatal(err)
		}
		flags = append(flags, "--witness", w.Name+"="+w.URL, "--witness-pub", w.Name+"="+path)
	}
	return set, append(flags, "--witness-quorum", k, "--witness-ca", set.CAFile)
}

// errorCodeOf decodes the --json error document of a failed run.
func errorCodeOf(t *testing.T, r result) string {
	t.Helper()
	var doc errorJSON
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("stdout is not a JSON error: %v\n%s", err, r)
	}
	return doc.Error.Code
}

// Ensure that with three witnesses at quorum 2 the command line catches a
// database restored together with its anchor: the next write exits 4
// (rollback_detected), verify-chain reports rollback_detected (while
// without the witnesses it says ok), status shows each witness's cosigned
// size, and with two witnesses down a command exits 1
// (witnesses_unavailable) while one down is still enough.
func TestWitnessFlagsRestoreWithAnchor(t *testing.T) {
	skipShort(t)
	c := newCLI(t)
	c.receiver()
	set, wf := c.witnessed("2")
	with := func(args ...string) []string { return append(args, wf...) }
	db, anchor, pub := c.env[envDB], c.env[envAnchor], c.path("receiver.key.pub")

	c.activate("worker-a", "claim-a", "a.cbor") // without witnesses: the first cosign starts from size 0 below
	c.must(0, with("scope", "create", "--scope", "other")...)
	copyFile(t, db, c.path("db.bak"))
	copyFile(t, anchor, c.path("anchor.bak"))
	c.must(0, with("hold", "--scope", fixtureScope, "--reason", "worker-a lost its lease")...)
	out := c.json(0, with("status")...)
	seq := out["audit_seq"].(float64)
	ws := out["witnesses"].([]any)
	if out["witness_quorum"].(float64) != 2 || len(ws) != 3 {
		t.Fatalf("status witnesses: %v", out)
	}
	// K = 2 cosigned the head; the third may have been left behind when
	// the quorum was reached.
	atHead := 0
	for i, w := range ws {
		m := w.(map[string]any)
		size, _ := m["cosigned_size"].(float64)
		if m["name"] != set.Witnesses[i].Name || size > seq || size == 0 {
			t.Errorf("status witness %d: %v, want %s with a size up to %v", i, m, set.Witnesses[i].Name, seq)
		}
		if size == seq {
			atHead++
		}
	}
	if atHead < 2 {
		t.Errorf("status: %d witnesses at the head %v, want at least K = 2: %v", atHead, seq, ws)
	}
	r := c.must(0, with("status")...)
	if !regexp.MustCompile(`witness quorum +2 of 3\n`).MatchString(r.stdout) ||
		!regexp.MustCompile(`witness witness1.test +cosigned size \d+\n`).MatchString(r.stdout) {
		t.Errorf("status text lacks the witnesses:\n%s", r.stdout)
	}
	copyFile(t, db, c.path("db.newer"))
	copyFile(t, anchor, c.path("anchor.newer"))

	// Restore both: the anchor alone cannot tell.
	copyFile(t, c.path("db.bak"), db)
	copyFile(t, c.path("anchor.bak"), anchor)
	c.json(0, "verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)
	r = c.must(ExitIntegrity, with("submit", "--as", "worker-a", "--envelope", c.path("a.cbor"), "--json")...)
	if code := errorCodeOf(t, r); code != "rollback_detected" {
		t.Errorf("submit on the restored pair: code %q, want rollback_detected\n%s", code, r)
	}
	out = c.json(ExitIntegrity, with("verify-chain", "--db", db, "--anchor", anchor, "--pub", pub)...)
	if out["ok"] != false || out["problem"] != "rollback_detected" {
		t.Errorf("verify-chain with the witnesses: %v", out)
	}
	c.must(ExitIntegrity, with("status")...)
	// One witness down: the other two still answer (N-K+1 = 2).
	if err := set.Witnesses[0].Down(); err != nil {
		t.Fatal(err)
	}
	c.must(ExitIntegrity, with("status")...)

	// The real state back; two witnesses down are too few to open it.
	copyFile(t, c.path("db.newer"), db)
	copyFile(t, c.path("anchor.newer"), anchor)
	out = c.json(0, with("status")...)
	if w := out["witnesses"].([]any)[0].(map[string]any); w["cosigned_size"] != nil {
		t.Errorf("a witness that is down shows a size: %v", w)
	}
	if err := set.Witnesses[1].Down(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status"},
		{"hold", "--scope", "other", "--reason", "r"},
		{"verify-chain", "--db", db, "--anchor", anchor, "--pub", pub},
	} {
		r := c.must(ExitError, with(append(args, "--json")...)...)
		if code := errorCodeOf(t, r); code != "witnesses_unavailable" {
			t.Errorf("%s with two witnesses down: code %q, want witnesses_unavailable\n%s", args[0], code, r)
		}
	}
	r = c.must(ExitError, with("status")...)
	if !strings.Contains(r.stderr, "Try: make N-K+1 witnesses answer") {
		t.Errorf("no hint for too few witnesses:\n%s", r.stderr)
	}
	if err := set.Witnesses[0].Up(); err != nil {
		t.Fatal(err)
	}
	c.must(0, with("hold", "--scope", "other", "--reason", "r")...)
	// K = 3 with one witness down: enough answers to open (N-K+1 = 1),
	// too few cosignatures to acknowledge the write.
	r = c.must(ExitError, append(with("hold", "--scope", "other", "--reason", "r", "--json"), "--witness-quorum", "3")...)
	if code := errorCodeOf(t, r); code != "not_acknowledged" {
		t.Errorf("a write two of three witnesses cosigned at K = 3: code %q, want not_acknowledged\n%s", code, r)
	}
}

// Ensure that malformed witness flags are usage errors (exit 2, code
// usage) naming what is wrong, before anything is opened.
func TestWitnessFlagsUsage(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	w1 := []string{"--witness", "w1.test=https://127.0.0.1:1", "--witness-pub", "w1.test=" + c.path("receiver.key.pub")}
	w1http := []string{"--witness", "w1.test=http://127.0.0.1:1", "--witness-pub", "w1.test=" + c.path("receiver.key.pub")}
	empty := c.path("empty.pem")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no =", []string{"status", "--witness", "w1.test"}, nil, `"w1.test": want NAME=URL`},
		{"pub no =", []string{"status", "--witness-pub", "w1.test"}, nil, `"w1.test": want NAME=FILE`},
		{"empty name", []string{"status", "--witness", "=http://x"}, nil, "both non-empty"},
		{"empty value", []string{"status", "--witness", "w1.test="}, nil, "both non-empty"},
		{"bad name", []string{"status", "--witness", "a+b=http://x"}, nil, "not a witness id"},
		{"duplicate", append([]string{"status", "--witness", "w1.test=http://127.0.0.1:2"}, w1...), nil, "witness w1.test given twice"},
		{"duplicate pub", append([]string{"status", "--witness-pub", "w1.test=x"}, w1...), nil, "witness w1.test given twice"},
		{"quorum without witnesses", []string{"status", "--witness-quorum", "1"}, nil, "--witness-quorum 1 without any --witness"},
		{"quorum above N", append([]string{"status", "--witness-quorum", "2"}, w1...), nil, "--witness-quorum 2: want 1 to the 1 witnesses"},
		{"quorum zero", append([]string{"status", "--witness-quorum", "0"}, w1...), nil, "--witness-quorum 0: want 1"},
		{"faults K", append([]string{"status", "--witness-faults", "1"}, w1...), nil, "--witness-faults 1: want 0 to K-1 = 0"},
		{"faults without witnesses", []string{"status", "--witness-faults", "1"}, nil, "--witness-faults 1 without any --witness"},
		{"env faults", append([]string{"status"}, w1...), map[string]string{envWitnessFaults: "x"}, `$KVFENCE_WITNESS_FAULTS "x" is not a number`},
		{"witness without pub", []string{"status", "--witness", "w1.test=http://127.0.0.1:1"}, nil, "--witness w1.test has no --witness-pub w1.test=FILE"},
		{"pub without witness", []string{"status", "--witness-pub", "w1.test=x"}, nil, "--witness-pub w1.test has no --witness w1.test=URL"},
		{"ca without witnesses", []string{"status", "--witness-ca", empty}, nil, "--witness-ca without any --witness"},
		{"http", append([]string{"status"}, w1http...), nil, "is plain http: use https"},
		{"http beside ca", append([]string{"status", "--witness-ca", empty}, w1http...), nil, "is plain http: use https"},
		{"empty ca", []string{"status", "--witness-ca", empty, "--witness", "w2.test=https://127.0.0.1:1",
			"--witness-pub", "w2.test=" + c.path("recovery.key.pub")}, nil, "holds no PEM certificate"},
		{"without anchor", append([]string{"status", "--anchor", ""}, w1...), nil, "--witness needs --anchor"},
		{"with server", append([]string{"status", "--server", "unix://" + c.path("s.sock")}, w1...), nil, "--witness does not go with --server"},
		{"env no =", []string{"status"}, map[string]string{envWitness: "w1.test"}, `$KVFENCE_WITNESS: "w1.test": want NAME=URL`},
		{"env quorum", []string{"status"}, map[string]string{envWitnessQuorum: "two"}, `$KVFENCE_WITNESS_QUORUM "two" is not a number`},
		{"verify-chain", append([]string{"verify-chain", "--pub", c.path("receiver.key.pub"), "--witness-quorum", "3"}, w1...), nil, "--witness-quorum 3"},
		{"writer", append([]string{"hold", "--scope", fixtureScope, "--reason", "r", "--witness-quorum", "3"}, w1...), nil, "--witness-quorum 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				c.env[k] = v
			}
			defer func() {
				for k := range tc.env {
					delete(c.env, k)
				}
			}()
			r := c.must(ExitUsage, append(tc.args, "--json")...)
			if code := errorCodeOf(t, r); code != codeUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("code %q, stderr lacks %q:\n%s", code, tc.want, r)
			}
		})
	}
	// The flags, given well, reach the witnesses (none listens here):
	// not a usage error but too few answers.
	r := c.must(ExitError, append([]string{"status", "--json"}, w1...)...)
	if code := errorCodeOf(t, r); code != "witnesses_unavailable" {
		t.Errorf("code %q, want witnesses_unavailable\n%s", code, r)
	}
	// init, admission new and recover do not take them.
	c.must(ExitUsage, append([]string{"init", "--id", "x", "--db", c.path("x.db")}, w1...)...)
}

// Ensure that the witness variables fill only the flags not given, that a
// ledger command reads the KVFENCE_LEDGER_ ones (and not the receiver's).
func TestWitnessFlagsEnv(t *testing.T) {
	env := map[string]string{
		envWitness: "r1.test=http://r1,r2.test=http://r2", envWitnessPub: "r1.test=r1.pub,r2.test=r2.pub",
		envWitnessQuorum: "1", envWitnessCA: "r-ca.pem",
		"KVFENCE_LEDGER_WITNESS": "l1.test=https://l1", "KVFENCE_LEDGER_WITNESS_PUB": "l1.test=l1.pub",
	}
	for _, tc := range []struct {
		name           string
		ledger         bool
		args           []string
		urls, pubs, ca string
		quorum         int
		quorumSet      bool
	}{
		{"receiver from env", false, nil, "r1.test=http://r1,r2.test=http://r2", "r1.test=r1.pub,r2.test=r2.pub", "r-ca.pem", 1, true},
		{"flags win", false, []string{"--witness", "f.test=http://f", "--witness-pub", "f.test=f.pub", "--witness-quorum", "1", "--witness-ca", ""},
			"f.test=http://f", "f.test=f.pub", "", 1, true},
		{"ledger from its own env", true, nil, "l1.test=https://l1", "l1.test=l1.pub", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("t")
			wf := witnessFlags{ledger: tc.ledger}
			wf.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := wf.resolve(fs, "t", func(k string) string { return env[k] }); err != nil {
				t.Fatal(err)
			}
			if wf.urls.String() != tc.urls || wf.pubs.String() != tc.pubs || wf.ca != tc.ca || wf.quorum != tc.quorum || wf.quorumSet != tc.quorumSet {
				t.Errorf("got urls %q pubs %q ca %q quorum %d (set %v)", wf.urls.String(), wf.pubs.String(), wf.ca, wf.quorum, wf.quorumSet)
			}
		})
	}
}

// Ensure that a receipt's proof printed by a receiver with witnesses is to
// the note they cosigned, and that verify-receipt checks their
// cosignatures: ok with their keys and quorum 2, exit 4 with a key that
// did not cosign, and a usage error for a quorum without keys.
func TestWitnessFlagsVerifyReceipt(t *testing.T) {
	skipShort(t)
	c := newCLI(t)
	c.receiver()
	set, wf := c.witnessed("2")
	with := func(args ...string) []string { return append(args, wf...) }
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, with("submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))...)
	proof := c.must(0, with("observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof", "--json")...).stdout
	if err := os.WriteFile(c.path("proof.json"), []byte(proof), 0o600); err != nil {
		t.Fatal(err)
	}
	var pubs []string
	for _, w := range set.Witnesses {
		pubs = append(pubs, "--witness-pub", w.Name+"="+c.path(w.Name+".pub"))
	}
	verify := func(args ...string) []string {
		return append([]string{"verify-receipt", "--pub", c.path("receiver.key.pub"), "--file", c.path("proof.json")}, args...)
	}
	out := c.json(0, verify(append(pubs, "--witness-quorum", "2", "--json")...)...)
	if ws, _ := out["witnesses"].([]any); len(ws) < 2 {
		t.Fatalf("verify-receipt with the witnesses: %v, want at least 2 witnesses", out)
	}
	c.must(0, "keygen", "--out", c.path("stranger.key"))
	r := c.must(ExitIntegrity, verify("--witness-pub", set.Witnesses[0].Name+"="+c.path("stranger.key.pub"), "--json")...)
	if code := errorCodeOf(t, r); code != "receipt_unproven" {
		t.Fatalf("a key that did not cosign: code %q\n%s", code, r)
	}
	c.must(ExitUsage, verify("--witness-quorum", "1")...)
	c.must(ExitUsage, verify(append(pubs, "--witness-quorum", "4")...)...)
}
