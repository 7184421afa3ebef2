package etcdanchor

import (
	"errors"
	"testing"

	"github.com/kvfence/kvfence/audit"
)

// Ensure that the etcd anchor keeps the consumed admission a checkpoint
// names, as every anchor store does: an ordinary write must carry it, and
// a supersession may not drop it or name an earlier one.
func TestCheckSwap_KeepsAdmission(t *testing.T) {
	r1 := audit.AdmissionRecord{SHA256: audit.Hash{1}, At: 10}
	r2 := audit.AdmissionRecord{SHA256: audit.Hash{2}, At: 20}
	with := func(seq uint64, rec audit.AdmissionRecord) *audit.SignedCheckpoint {
		sc := checkpoint(t, testReceiver, seq, 0, 1)
		sc.Admission = rec
		return &sc
	}
	for _, tc := range []struct {
		name      string
		cur, next *audit.SignedCheckpoint
		supersede bool
		want      error
	}{
		{"carried", with(5, r1), with(6, r1), false, nil},
		{"dropped by a write", with(5, r1), with(6, audit.AdmissionRecord{}), false, audit.ErrAnchorRegression},
		{"replaced by a write", with(5, r1), with(6, r2), false, audit.ErrAnchorRegression},
		{"superseded by a later one", with(5, r1), with(3, r2), true, nil},
		{"superseded, dropped", with(5, r1), with(3, audit.AdmissionRecord{}), true, audit.ErrAnchorRegression},
		{"superseded by an earlier one", with(5, r2), with(3, r1), true, audit.ErrAnchorRegression},
		{"superseded for another receiver", with(5, r1), func() *audit.SignedCheckpoint {
			sc := checkpoint(t, "other", 3, 0, 1)
			sc.Admission = r2
			return &sc
		}(), true, audit.ErrReceiverMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSwap(tc.cur, tc.cur, tc.next, tc.supersede)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("checkSwap: %v, want %v", err, tc.want)
			}
		})
	}
}
