package receiptproof

import (
	"crypto/ed25519"
	"errors"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
)

// Ensure that every receipt field the audit entry records is bound by the
// proof: a receipt whose rev_after or at was changed is not proven, since
// verify-receipt's "ok" is read as "this receipt, as printed, is the
// receiver's decision". The entry records RevAfter and At; Verify compares
// neither today.
func TestRedteamVerifyBindsEveryRecordedField(t *testing.T) {
	pub := testKey.Public().(ed25519.PublicKey)
	forged := "2001-01-01T00:00:00Z"
	for _, tc := range []struct {
		name string
		edit func(rc *api.Receipt)
	}{
		{"other rev_after", func(rc *api.Receipt) { rc.RevAfter = 99 }},
		{"other at", func(rc *api.Receipt) { rc.At = &forged }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testProof(t, 7, 3, testKey)
			tc.edit(&p.Receipt)
			if _, err := Verify(p, pub); !errors.Is(err, ErrNotTheDecision) {
				t.Fatalf("Verify of a receipt with %s = %v, want ErrNotTheDecision", tc.name, err)
			}
		})
	}
}
