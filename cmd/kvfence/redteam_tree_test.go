package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Ensure that verify-receipt does not print ok for a receipt whose
// rev_after or at was changed: both are recorded in the proven audit
// entry, and a worker or auditor reads "ok" as "this receipt, as shown,
// is the receiver's decision".
func TestRedteamVerifyReceipt_UnboundFields(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	good := c.must(0, "observe", "receipt", "--scope", fixtureScope, "--action", "raise-retention", "--proof", "--json").stdout
	pub := c.path("receiver.key.pub")
	for _, tc := range []struct {
		name  string
		field string
		value any
	}{
		{"rev_after", "rev_after", 999},
		{"at", "at", "2001-01-01T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p map[string]any
			if err := json.Unmarshal([]byte(good), &p); err != nil {
				t.Fatal(err)
			}
			p["receipt"].(map[string]any)[tc.field] = tc.value
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			path := c.path(tc.name + ".json")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if r := c.run("verify-receipt", "--pub", pub, "--file", path); r.code != ExitIntegrity {
				t.Fatalf("verify-receipt of a receipt with %s changed: %s", tc.field, r)
			}
		})
	}
}

// Ensure that verify-chain reports a stored tree that disagrees with the
// entries as tree_mismatch and exits 4, and that a command that opens the
// receiver with its anchor refuses it with the same code.
func TestVerifyChain_TreeMismatch(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, "submit", "--as", "worker-a", "--envelope", c.path("a.cbor"))
	db, err := bolt.Open(c.path("receiver.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("tree"))
		k, v := b.Cursor().First() // leaf 0, which no root at the head reads
		v = bytes.Clone(v)
		v[0] ^= 1
		return b.Put(k, v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := c.json(ExitIntegrity, "verify-chain", "--pub", c.path("receiver.key.pub"))
	if out["ok"] != false || out["problem"] != "tree_mismatch" {
		t.Fatalf("verify-chain of a damaged tree: %v", out)
	}
	if r := c.run("status", "--json"); r.code != ExitIntegrity || !strings.Contains(r.stdout, `"tree_mismatch"`) {
		t.Fatalf("status with the anchor over a damaged tree: %s", r)
	}
}
