package kvfence

import (
	"crypto/ed25519"
	"errors"
	"github.com/kvfence/kvfence/engine"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	bolt "go.etcd.io/bbolt"
)

// Ensure that a recovery admission admits the database the operator
// inspected, not whatever state sits beside the same chain when Recover
// runs: Recover signs a checkpoint over the records it finds, so records
// edited after the admission was signed (here a target value and a
// receipt, with no entry in the chain) must be refused, not signed.
func TestRecover_StateEditedAfterAdmission(t *testing.T) {
	f, path, anchor, clock := recoverableFixture(t)
	a := f.activate("worker-a", "claim-1", f.patchRequest("raise-retention"))
	if res := f.submit("worker-a", a.envelope); res.Outcome != Applied {
		t.Fatalf("%+v", res)
	}
	f.r.Close()
	backup := filepath.Join(t.TempDir(), "backup.db")
	copyFile(t, path, backup)
	f.reopen()
	f.hold("incident")
	f.r.Close()
	copyFile(t, backup, path) // a restored copy: a rollback, questioned

	// The operator inspects the copy and signs an admission for it.
	q, err := Inspect(path, anchor)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := audit.SignAdmission(recoveryKey, audit.Admission{Receiver: "rcv", SupersededAnchor: q.Anchor,
		AdmittedHead: q.Head, AdmittedState: q.State, At: clock.Now().UnixNano(), Expires: clock.Now().Add(time.Hour).UnixNano(), Reason: "restored from backup"})
	if err != nil {
		t.Fatal(err)
	}
	adm, _ := sa.Marshal()

	// Someone who can write the file, but holds no key, edits the state
	// before Recover runs: a target value nobody approved, and the receipt
	// that made the applied action idempotent removed. The chain is untouched.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(seam(func(tx engine.Tx) error {
		tg, err := getTarget(tx, fixTarget)
		if err != nil {
			return err
		}
		tg.Value = []byte(`{"retention_days":0,"planted":"by the file's writer"}`)
		raw, err := encodeCanonical(tg)
		if err != nil {
			return err
		}
		if err := tx.Put(bucketTargets, []byte(fixTarget), raw); err != nil {
			return err
		}
		return tx.Delete(bucketReceipts, receiptKey(fixScope, "raise-retention"))
	}))
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	_, rerr := Recover(path, adm, RecoverOptions{Key: testKey, Anchor: anchor,
		RecoveryKey: recoveryKey.Public().(ed25519.PublicKey), Now: clock.Now})
	if !errors.Is(rerr, audit.ErrAdmissionMismatch) {
		t.Fatalf("Recover of a state edited after the admission = %v, want ErrAdmissionMismatch", rerr)
	}
	if _, err := Open(path, f.opts()); err == nil {
		t.Fatal("the edited database opens after the refused recovery")
	}
}
