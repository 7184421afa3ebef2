package witness_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/checkpoint"
	"github.com/kvfence/kvfence/witness"
	"golang.org/x/mod/sumdb/tlog"
)

// rtAdmission signs an ordinary admission of receiver r1 with the recovery
// key, admitting the head at admittedSeq of tr, signed at at and valid for
// one hour from then, naming named.
func rtAdmission(t *testing.T, at time.Time, tr *tree, admittedSeq uint64, named []audit.WitnessedCheckpoint) []byte {
	t.Helper()
	tr.grow(t, int64(admittedSeq))
	sa, err := audit.SignAdmission(recoveryKey, audit.Admission{Receiver: "r1", SupersededAnchor: audit.Head{Seq: 9, Hash: audit.Hash{9}},
		AdmittedHead: audit.Head{Seq: admittedSeq, Hash: audit.Hash{4}}, At: at.UnixNano(), Expires: at.Add(time.Hour).UnixNano(),
		Reason: "restored", Witnessed: named, AdmittedRoot: audit.Hash(tr.root(t, int64(admittedSeq)))})
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

// Scenario (the attacker holds the receiver's signing key, not the
// recovery key): the recovery key admitted the database whose head is
// seq 4, so the recovered chain holds that head and the recovery's own
// entry after it (size 5 at least). The kept admission is readable in the
// database's meta bucket, and it travels in clear to every witness. A
// witness that checks only that the checkpoint is signed by the
// receiver's key and names the admission moves to any tree the
// receiver's key signs, so where the witness goes is the receiver key's
// choice, not the recovery key's decision.
//
// Ensure that a witness refuses a recovered checkpoint that cannot hold
// the head the admission admits and the recovery entry after it, or is
// not proven to extend the tree the admission admits.
func TestRedteamR_RecoverCheckpointNotBoundToAdmittedHead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int64
		proof bool // a proof from the forged tree's own seq 4
	}{
		{"a tree of 1 entry, the admitted head is seq 4", 1, false},
		{"a tree ending at the admitted head, no recovery entry", 4, false},
		{"a tree of 6 entries that does not hold the admitted one", 6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRecFixture(t, true)
			adm := rtAdmission(t, f.now, newTree(t, "admitted", 0), 4, f.named)
			forgedTree := newTree(t, "forged", 0)
			forged := rtNote(t, f, forgedTree, tc.size, adm)
			var proof tlog.TreeProof
			if tc.proof {
				proof = forgedTree.proof(t, 4, tc.size)
			}
			_, err := f.w.RecoverCheckpoint(witness.RecoverCheckpointRequest{Admission: adm, Proof: proof, SignedNote: forged})
			st, _ := f.store.Log(f.origin)
			if err == nil || st.Size != 8 || len(st.Recoveries) != 0 {
				t.Fatalf("recovered checkpoint of size %d under an admission of head seq 4: err %v; the witness now holds size %d with %d recoveries",
					tc.size, err, st.Size, len(st.Recoveries))
			}
		})
	}
}
