package witness_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
)

// rtAdmission signs an ordinary admission of receiver r1 with the recovery
// key, admitting the head at admittedSeq, signed at at and valid for one
// hour from then, naming named.
func rtAdmission(t *testing.T, at time.Time, admittedSeq uint64, named []audit.WitnessedCheckpoint) []byte {
	t.Helper()
	sa, err := audit.SignAdmission(recoveryKey, audit.Admission{Receiver: "r1", SupersededAnchor: audit.Head{Seq: 9, Hash: audit.Hash{9}},
		AdmittedHead: audit.Head{Seq: admittedSeq, Hash: audit.Hash{4}}, At: at.UnixNano(), Expires: at.Add(time.Hour).UnixNano(),
		Reason: "restored", Witnessed: named})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sa.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// rtNote is the receiver's signed note of size n of tr, naming adm as the
// admission its recovery consumed.
func rtNote(t *testing.T, f *recFixture, tr *tree, n int64, adm []byte) []byte {
	t.Helper()
	tr.grow(t, n)
	sa, err := audit.ParseSignedAdmission(adm)
	if err != nil {
		t.Fatal(err)
	}
	st := checkpoint.ReceiverState{At: 1, Admission: audit.AdmissionRecord{SHA256: sha256.Sum256(adm), At: sa.At}}
	msg, err := checkpoint.Sign(checkpoint.Checkpoint{Origin: f.origin, Size: uint64(n), Root: tr.root(t, n), Extensions: st.Extensions()}, f.signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}
