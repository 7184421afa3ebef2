package main

import (
	"strings"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/keyfile"
	"github.com/kvfence/kvfence/witness"
)

// Ensure that witness trust --recovery-pub records the receiver's recovery
// key once (the same key again is fine, another or the receiver's own is
// refused), and that without it the witness holds none.
func TestWitnessTrustRecoveryKey(t *testing.T) {
	c := newCLI(t)
	c.must(0, "witness", "init", "--id", "witness.test/w1", "--key", c.path("w.key"), "--db", c.path("w.db"))
	c.must(0, "keygen", "--out", c.path("r.key"))
	c.must(0, "keygen", "--out", c.path("rec.key"))
	c.must(0, "keygen", "--out", c.path("other.key"))
	rpub, _ := keyfile.LoadPublic(c.path("r.key.pub"))
	recPub, _ := keyfile.LoadPublic(c.path("rec.key.pub"))
	origin, _ := checkpoint.ReceiverOrigin("r1", rpub)
	trust := []string{"witness", "trust", "--db", c.path("w.db"), "--name", "r1", "--receiver-pub", c.path("r.key.pub")}
	c.must(0, trust...)
	if st := logState(t, c.path("w.db"), origin); len(st.RecoveryKey) != 0 {
		t.Fatalf("a recovery key without --recovery-pub")
	}
	out := c.json(0, append(trust, "--recovery-pub", c.path("rec.key.pub"))...)
	if out["recovery_fingerprint"] != audit.KeyFingerprint(recPub).String() {
		t.Errorf("recovery_fingerprint %v", out["recovery_fingerprint"])
	}
	c.must(0, append(trust, "--recovery-pub", c.path("rec.key.pub"))...)
	for _, bad := range []string{"other.key.pub", "r.key.pub"} {
		if r := c.run(append(trust, "--recovery-pub", c.path(bad))...); r.code == 0 {
			t.Errorf("--recovery-pub %s accepted", bad)
		}
	}
	if st := logState(t, c.path("w.db"), origin); !st.RecoveryKey.Equal(recPub) {
		t.Fatalf("stored recovery key %x", st.RecoveryKey)
	}
}

func logState(t *testing.T, path, origin string) witness.LogState {
	t.Helper()
	st, err := witness.OpenStore(path, witness.StoreOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.Log(origin)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Ensure that --witnessed values that are not NAME=SIZE:ROOT, or name one
// witness twice, are usage errors, and that parseWitnessed sorts by name.
func TestAdmissionWitnessedFlag(t *testing.T) {
	root := strings.Repeat("A", 43) + "="
	got, err := parseWitnessed([]string{"w2=5:" + root, "w1=7:" + root})
	if err != nil || len(got) != 2 || got[0].Witness != "w1" || got[0].Size != 7 || got[1].Witness != "w2" {
		t.Fatalf("parseWitnessed: %+v, %v", got, err)
	}
	for _, bad := range [][]string{
		{"w1"}, {"w1=5"}, {"w1=05:" + root}, {"w1=5:short"}, {"w 1=5:" + root}, {"=5:" + root},
		{"w1=5:" + root, "w1=6:" + root},
	} {
		if _, err := parseWitnessed(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	c := newCLI(t)
	c.must(2, "admission", "new", "--recovery-key", c.path("x"), "--db", c.path("db"), "--anchor", c.path("a"),
		"--reason", "r", "--out", c.path("adm"), "--witnessed", "nonsense")
}

// Ensure that the command line recovers a receiver restored together with
// its anchor through its witnesses: refused at open (exit 4), recover
// refused for an admission that does not name the witnesses' checkpoints,
// accepted for one that does, and the next write acknowledged by them.
func TestRecoverWithWitnessFlags(t *testing.T) {
	skipShort(t)
	c := newCLI(t)
	c.receiver()
	set, wf := c.witnessed("2")
	with := func(args ...string) []string { return append(args, wf...) }
	pub, _ := keyfile.LoadPublic(c.path("receiver.key.pub"))
	recPub, _ := keyfile.LoadPublic(c.path("recovery.key.pub"))
	if err := set.TrustRecovery("lab-receiver", pub, recPub); err != nil {
		t.Fatal(err)
	}
	db, anchor := c.env[envDB], c.env[envAnchor]
	c.activate("worker-a", "claim-a", "a.cbor")
	c.must(0, with("scope", "create", "--scope", "other")...)
	copyFile(t, db, c.path("db.bak"))
	copyFile(t, anchor, c.path("anchor.bak"))
	c.must(0, with("hold", "--scope", fixtureScope, "--reason", "worker-a lost its lease")...)
	copyFile(t, c.path("db.bak"), db)
	copyFile(t, c.path("anchor.bak"), anchor)
	c.must(ExitIntegrity, with("hold", "--scope", "other", "--reason", "r")...)

	origin, _ := checkpoint.ReceiverOrigin("lab-receiver", pub)
	var named []string
	for _, w := range set.Witnesses {
		st, err := w.Log(origin)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size > 0 {
			named = append(named, "--witnessed", w.Name+"="+jsonNum(st.Size)+":"+st.Root.String())
		}
	}
	if len(named) < 4 {
		t.Fatalf("witnesses that cosigned: %v, want at least 2", named)
	}
	adm := func(out string, witnessed ...string) {
		c.must(0, append([]string{"admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "restored with its anchor",
			"--out", c.path(out)}, witnessed...)...)
	}
	recover := func(code int, file string) result {
		return c.must(code, with("recover", "--admission", c.path(file), "--recovery-pub", c.path("recovery.key.pub"))...)
	}
	adm("short.adm", named[:2]...) // one witness that answered left out
	recover(ExitIntegrity, "short.adm")
	adm("full.adm", named...)
	recover(0, "full.adm")
	// Before the receiver shows the witnesses the admission, verify-chain
	// judges it only with the operator's recovery key.
	verify := func(code int, args ...string) map[string]any {
		return c.json(code, with(append([]string{"verify-chain", "--pub", c.path("receiver.key.pub")}, args...)...)...)
	}
	if v := verify(ExitIntegrity); v["ok"] != false {
		t.Fatalf("verify-chain after the recovery, witnesses not yet shown the admission: %v", v)
	}
	if v := verify(0, "--recovery-pub", c.path("recovery.key.pub")); v["ok"] != true {
		t.Fatalf("verify-chain --recovery-pub after the recovery: %v", v)
	}
	c.must(0, with("hold", "--scope", "other", "--reason", "after the recovery")...)
	if v := c.json(0, with("verify-chain", "--pub", c.path("receiver.key.pub"))...); v["ok"] != true {
		t.Fatalf("verify-chain after the recovery: %v", v)
	}
}
