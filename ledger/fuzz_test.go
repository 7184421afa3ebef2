package ledger

import "testing"

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
