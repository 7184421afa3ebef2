package ledger

import (
	"crypto/ed25519"
	"testing"
)

// FuzzRecords feeds arbitrary bytes to the decoders of the ledger's stored
// records: a damaged record must give an error, never a panic, and one that
// decodes must encode again.
func FuzzRecords(f *testing.F) {
	for _, v := range []any{
		&approvalRecord{Action: "a", RequestSHA256: make([]byte, 32), Approver: "p", ApprovedAt: 1, ExpiresAt: 2, AuditSeq: 2},
		&claimRecord{Ref: "c-X", Action: "a", Worker: "w", Generation: 1, State: StateClaimed, ClaimedAt: 1, HeartbeatAt: 1, LeaseExpiresAt: 2},
		&actionRecord{Live: "c-X", Claims: []string{"c-X"}},
	} {
		raw, err := recordEnc.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{})
	f.Add([]byte{0xbf, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, v := range []any{&approvalRecord{}, &claimRecord{}, &actionRecord{}} {
			err := recordDec.Unmarshal(raw, v)
			if err != nil {
				continue
			}
			if _, err := recordEnc.Marshal(v); err != nil {
				t.Fatalf("decoded %T does not encode: %v", v, err)
			}
		}
	})
}

// FuzzContainmentRecords feeds arbitrary bytes to the decoders of stored
// receivers and containments: damage must give an error, never a panic,
// and a containment that decodes must say what its own bytes can show.
func FuzzContainmentRecords(f *testing.F) {
	id := ContainmentID("l", "a", "c-X")
	c := containmentRecord{ID: id, Action: "a", SupersededClaim: "c-X", Reason: "r", State: ContainmentPartial, StartedAt: 1,
		Boundaries: []boundaryContainmentRecord{
			{Receiver: "r1", Scope: "s", HoldID: HoldID(id, "r1", "s"), Result: BoundaryAlternate, Attempts: 1,
				Alternate:   &alternateRecord{Operator: "op", Reason: "fw", At: 2},
				Outstanding: []effectRecord{{Receiver: "r1", Scope: "s", Action: "a", AuditSeq: 3, Target: "t", Revision: 4}}},
			{Receiver: "r2", Scope: "s", HoldID: HoldID(id, "r2", "s"), Result: BoundaryTimeout},
		},
		Successor: []successorRecord{{Receiver: "r1", Scope: "s", Grant: "g", Epoch: 2, Executor: "w", Claim: "c", Decision: "d"}}}
	for _, v := range []any{&c, &receiverRecord{Name: id, ReceiverID: "rid", PublicKey: make([]byte, 32), AddedBy: "op", AuditSeq: 2}} {
		raw, err := recordEnc.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, err := decodeContainment(id, raw); err == nil {
			if got.State != deriveState(got.Boundaries) || len(got.Boundaries) == 0 {
				t.Fatalf("decoded containment %+v is not consistent", got)
			}
			for _, b := range got.Boundaries {
				if b.HoldID != HoldID(id, b.Receiver, b.Scope) {
					t.Fatalf("boundary %+v has a foreign hold id", b)
				}
			}
			if _, err := recordEnc.Marshal(&got); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := decodeReceiver([]byte(id), raw); err == nil && (len(r.PublicKey) != ed25519.PublicKeySize || r.Name != id) {
			t.Fatalf("decoded receiver %+v", r)
		}
	})
}
