package main

import (
	"context"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that observe target shows the kind and effect of an embedder's
// func target, and nothing new for an internal one, whose output stays as
// it was.
func TestObserveTargetShowsKind(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	key, err := keyfile.LoadPrivate(c.path("receiver.key"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := kvfence.Open(c.env[envDB], &kvfence.Options{Key: key, Anchor: audit.FileAnchor{Path: c.env[envAnchor]},
		Effects: map[string]kvfence.Effect{"ledger": {Buckets: []string{"app_ledger"},
			Apply: func(kvfence.EffectTx, kvfence.EffectInput) error { return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Admin().CreateTargetSpec(context.Background(), kvfence.TargetSpec{Scope: fixtureScope, Name: "ledger-head",
		Value: []byte("{}"), Kind: kvfence.TargetFunc, Effect: "ledger"})
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := c.json(0, "observe", "target", "ledger-head")
	if out["kind"] != "func" || out["effect"] != "ledger" {
		t.Errorf("func target: %v", out)
	}
	if res := c.must(0, "observe", "target", "ledger-head"); !line(res.stdout, "kind", "func (effect ledger)") {
		t.Errorf("func target text:\n%s", res.stdout)
	}
	out = c.json(0, "observe", "target", fixtureScope)
	if _, ok := out["kind"]; ok {
		t.Errorf("internal target: %v", out)
	}
}
