package main

import (
	"crypto/ed25519"
	"os"
	"testing"

	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/internal/witnesstest"
	"github.com/kvfence/kvfence/keyfile"
)

// Ensure that the ledger commands take the witness flags: a ledger file
// restored together with its anchor is refused by the next write (exit 4,
// rollback_detected) and reported by ledger verify-chain, and ledger init
// refuses them.
func TestLedgerWitnessFlags(t *testing.T) {
	skipShort(t)
	c := newCLI(t)
	c.must(ExitOK, "keygen", "--out", c.path("ledger.key"))
	c.env[envLedger] = c.path("ledger.db")
	c.env[envLedgerAnchor] = c.path("ledger.anchor")
	c.env[envLedgerKey] = c.path("ledger.key")
	set, err := witnesstest.Start(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	var wf []string
	for _, w := range set.Witnesses {
		line, err := keyfile.MarshalPublic(w.Key.Public().(ed25519.PublicKey), w.Name)
		if err != nil {
			t.Fatal(err)
		}
		path := c.path(w.Name + ".pub")
		if err := os.WriteFile(path, line, 0o644); err != nil {
			t.Fatal(err)
		}
		wf = append(wf, "--witness", w.Name+"="+w.URL, "--witness-pub", w.Name+"="+path)
	}
	wf = append(wf, "--witness-quorum", "2", "--witness-ca", set.CAFile)
	with := func(args ...string) []string { return append(args, wf...) }

	c.must(ExitUsage, with("ledger", "init", "--id", "ledger-1")...)
	c.json(ExitOK, "ledger", "init", "--id", "ledger-1")
	pub, err := keyfile.LoadPublic(c.path("ledger.key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	origin, err := checkpoint.LedgerOrigin("ledger-1", pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Trust(origin, pub); err != nil {
		t.Fatal(err)
	}
	c.must(ExitOK, "request", "build", "--action", "act", "--target", "cm/backup", "--set", "45", "--out", c.path("req.cbor"))
	c.json(ExitOK, with("ledger", "approve", "--action", "act", "--request", c.path("req.cbor"), "--approver", "alice")...)
	copyFile(t, c.env[envLedger], c.path("ledger.bak"))
	copyFile(t, c.env[envLedgerAnchor], c.path("anchor.bak"))
	c.json(ExitOK, with("ledger", "claim", "--action", "act", "--worker", "worker-a")...)
	copyFile(t, c.path("ledger.bak"), c.env[envLedger])
	copyFile(t, c.path("anchor.bak"), c.env[envLedgerAnchor])

	// Without witnesses the restored pair is taken for the present.
	c.json(ExitOK, "ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))
	r := c.must(ExitIntegrity, with("ledger", "claim", "--action", "act", "--worker", "worker-b", "--json")...)
	if code := errorCodeOf(t, r); code != "rollback_detected" {
		t.Errorf("claim on the restored ledger: code %q, want rollback_detected\n%s", code, r)
	}
	out := c.json(ExitIntegrity, with("ledger", "verify-chain", "--pub", c.path("ledger.key.pub"))...)
	if out["ok"] != false || out["problem"] != "rollback_detected" {
		t.Errorf("ledger verify-chain with the witnesses: %v", out)
	}
}
